//! The names of the svcOS processes, in boot order.

use std::fmt;
use std::str::FromStr;

/// One svcOS process. The order of [`ServiceName::ALL`] is the boot order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ServiceName {
    /// The simulated board (sim only): chips on pseudo-terminals, PSU, fans, sensors.
    HwSim,
    /// The Stratum V1 test pool (sim only).
    TestPool,
    /// Chains, PSU, fans and the real-time mining loop.
    HwAgent,
    /// The pool client.
    StratumAgent,
    /// Password hash and sessions.
    Auth,
    /// Frequency/voltage tuning.
    Tuner,
    /// cgminer-compatible API on TCP 4028.
    LegacyTcp,
    /// REST, /ws, /mcp and /metrics on TCP 8080.
    Gateway,
    /// Dashboard and /api/* reverse proxy on TCP 80.
    Proxy,
    /// The supervisor itself (its control socket).
    Supervisor,
}

impl ServiceName {
    /// Every process, in boot order.
    pub const ALL: [ServiceName; 10] = [
        ServiceName::HwSim,
        ServiceName::TestPool,
        ServiceName::HwAgent,
        ServiceName::StratumAgent,
        ServiceName::Auth,
        ServiceName::Tuner,
        ServiceName::LegacyTcp,
        ServiceName::Gateway,
        ServiceName::Proxy,
        ServiceName::Supervisor,
    ];

    /// The name used on the command line (`svcos <name>`), in `ps`, in logs and on D-Bus.
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceName::HwSim => "hw-sim",
            ServiceName::TestPool => "test-pool",
            ServiceName::HwAgent => "hw-agent",
            ServiceName::StratumAgent => "stratum-agent",
            ServiceName::Auth => "auth",
            ServiceName::Tuner => "tuner",
            ServiceName::LegacyTcp => "legacy-tcp",
            ServiceName::Gateway => "gateway",
            ServiceName::Proxy => "proxy",
            ServiceName::Supervisor => "supervisor",
        }
    }

    /// The gRPC services (package-qualified) this process serves on its socket besides health and
    /// reflection: what server reflection lists there.
    pub fn grpc_services(self) -> &'static [&'static str] {
        match self {
            ServiceName::HwSim => &["svcos.hwsim.v1.HwSimService"],
            ServiceName::TestPool => &["svcos.testpool.v1.TestPoolService"],
            ServiceName::HwAgent => &[
                "svcos.hwagent.v1.HwAgentService",
                "svcos.hwagent.v1.HwDiagnosticsService",
            ],
            ServiceName::StratumAgent => &["svcos.stratum.v1.StratumService"],
            ServiceName::Auth => &["svcos.auth.v1.AuthService"],
            ServiceName::Tuner => &[
                "svcos.tuner.v1.TunerService",
                "svcos.tuner.v1.PowerService",
                "svcos.tuner.v1.HistoryService",
            ],
            ServiceName::Supervisor => &[
                "svcos.supervisor.v1.SupervisorService",
                "svcos.supervisor.v1.UpdateService",
            ],
            ServiceName::Gateway => &["svcos.config.v1.ConfigService"],
            ServiceName::LegacyTcp | ServiceName::Proxy => &[],
        }
    }

    /// File name of the service's gRPC socket in the runtime directory.
    pub fn socket_file(self) -> String {
        format!("{}.sock", self.as_str())
    }
}

impl fmt::Display for ServiceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unknown service name.
#[derive(Debug, thiserror::Error)]
#[error("unknown service {0:?}")]
pub struct UnknownService(pub String);

impl FromStr for ServiceName {
    type Err = UnknownService;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ServiceName::ALL
            .into_iter()
            .find(|n| n.as_str() == s)
            .ok_or_else(|| UnknownService(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for n in ServiceName::ALL {
            assert_eq!(n.as_str().parse::<ServiceName>().unwrap(), n);
        }
        assert!("nope".parse::<ServiceName>().is_err());
    }
}
