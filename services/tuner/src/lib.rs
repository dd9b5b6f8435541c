//! tuner: will choose frequencies and voltages toward a power or hashrate target.
//!
//! Autotuning itself is not built yet (the REST autotuner routes answer 501). What the tuner
//! already owns is the measurement it will tune against: it follows hw-agent's telemetry stream
//! and reports the board's measured efficiency (J/TH) and the configured power target, so other
//! services never compute efficiency on their own.

use std::ffi::OsString;
use std::process::ExitCode;

use svcos_common::entry::{Flavor, ServiceContext, run_service};
use svcos_common::{ServiceName, Shutdown, ipc};
use svcos_proto::hwagent::v1::hw_agent_service_client::HwAgentServiceClient;
use svcos_proto::hwagent::v1::{StreamTelemetryRequest, Telemetry};
use svcos_proto::tuner::v1::tuner_service_server::{TunerService, TunerServiceServer};
use svcos_proto::tuner::v1::{GetStateRequest, GetStateResponse};
use tokio::net::UnixListener;
use tokio::sync::watch;
use tonic::{Request, Response, Status};

/// Joules per terahash from a power draw and a hashrate; `None` when either is unknown.
pub fn efficiency_j_per_th(power_watt: f64, ghs: f64) -> Option<f64> {
    (power_watt > 0.0 && ghs > 0.0).then(|| power_watt / (ghs / 1000.0))
}

/// The tuner's gRPC face: answers from the latest telemetry it follows.
#[derive(Debug)]
pub struct Tuner {
    telemetry: watch::Receiver<Option<Telemetry>>,
    power_target_watt: f64,
}

impl Tuner {
    /// A tuner reading telemetry from `telemetry`.
    pub fn new(telemetry: watch::Receiver<Option<Telemetry>>, power_target_watt: f64) -> Self {
        Tuner {
            telemetry,
            power_target_watt,
        }
    }

    fn state(&self) -> GetStateResponse {
        let t = self.telemetry.borrow();
        let (efficiency, power_target) = match t.as_ref() {
            Some(t) => {
                let ghs = t.hashrate.as_ref().map(|h| h.ghs_1m).unwrap_or(0.0);
                let target = if t.power_target_watt > 0.0 {
                    t.power_target_watt
                } else {
                    self.power_target_watt
                };
                (
                    efficiency_j_per_th(t.power_watt, ghs).unwrap_or(0.0),
                    target,
                )
            }
            None => (0.0, self.power_target_watt),
        };
        GetStateResponse {
            state: "disabled".into(),
            profile: "stock".into(),
            power_target_watt: power_target,
            hashrate_target_ghs: 0.0,
            efficiency_j_per_th: efficiency,
        }
    }
}

#[tonic::async_trait]
impl TunerService for Tuner {
    async fn get_state(
        &self,
        _request: Request<GetStateRequest>,
    ) -> Result<Response<GetStateResponse>, Status> {
        Ok(Response::new(self.state()))
    }
}

/// Run the tuner until `shutdown`, serving gRPC (with health) on `listener`.
pub async fn run(
    ctx: ServiceContext,
    listener: UnixListener,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let channel = ipc::channel(&ctx.layout, ServiceName::HwAgent);
    let telemetry = ipc::follow("hw-agent", shutdown.clone(), move || {
        let mut client = HwAgentServiceClient::new(channel.clone());
        async move {
            client
                .stream_telemetry(StreamTelemetryRequest {
                    include_chips: false,
                })
                .await
                .map(|r| r.into_inner())
        }
    });
    let tuner = Tuner::new(telemetry, ctx.config.hardware.power_target_watt);
    let (_reporter, health) = ipc::health().await;
    let router = ipc::server()
        .add_service(health)
        .add_service(TunerServiceServer::new(tuner));
    ipc::serve(router, listener, shutdown).await?;
    Ok(())
}

/// `svcos tuner`: the process entry.
pub fn entry(args: Vec<OsString>) -> ExitCode {
    let args = match svcos_common::entry::parse_args(ServiceName::Tuner, args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    run_service(ServiceName::Tuner, args, Flavor::CurrentThread, run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use svcos_proto::hwagent::v1::Hashrate;

    #[test]
    fn efficiency_table() {
        let cases = [
            (1350.0, 13_500.0, Some(100.0)),
            (3250.0, 95_000.0, Some(3250.0 / 95.0)),
            (0.0, 13_500.0, None),
            (1350.0, 0.0, None),
        ];
        for (w, ghs, want) in cases {
            assert_eq!(efficiency_j_per_th(w, ghs), want, "{w} W at {ghs} GH/s");
        }
    }

    #[test]
    fn state_follows_latest_telemetry() {
        let (tx, rx) = watch::channel(None);
        let tuner = Tuner::new(rx, 1200.0);
        assert_eq!(tuner.state().efficiency_j_per_th, 0.0);
        assert_eq!(tuner.state().power_target_watt, 1200.0);
        tx.send_replace(Some(Telemetry {
            power_watt: 1323.0,
            hashrate: Some(Hashrate {
                ghs_1m: 13_230.0,
                ..Default::default()
            }),
            ..Default::default()
        }));
        let s = tuner.state();
        assert!((s.efficiency_j_per_th - 100.0).abs() < 1e-9, "{s:?}");
        assert_eq!(s.state, "disabled");
    }
}
