//! Stratum V2 job declaration: its config, live status and connection test.

use serde::{Deserialize, Serialize};
use svcos_common::config::JdConfig;
use svcos_proto::stratum::v1::{
    GetJdStatusResponse, JdRoleCheck, TestJdConnectionRequest, TestJdConnectionResponse,
};

use crate::config::ConfigWriteBody;

/// `POST /api/jd/config`: `[stratum.jd]`; an absent member keeps its current value.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct JdConfigRequest {
    /// Declare jobs (needs `[stratum].sv2_enabled` and a `stratum2+tcp://` pool).
    #[serde(default)]
    pub enabled: Option<bool>,
    /// The job-declaration server, `stratum2+tcp://host:port/<authority key>`.
    #[serde(default)]
    pub server: Option<String>,
    /// The template provider, `stratum2+tcp://host:port/<authority key>`.
    #[serde(default)]
    pub template_provider: Option<String>,
}

impl JdConfigRequest {
    /// Apply the members present to the current section.
    pub fn apply(self, jd: &mut JdConfig) {
        if let Some(enabled) = self.enabled {
            jd.enabled = enabled;
        }
        if let Some(server) = self.server {
            jd.server = server;
        }
        if let Some(template_provider) = self.template_provider {
            jd.template_provider = template_provider;
        }
    }
}

/// `[stratum.jd]` as saved.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct JdConfigView {
    /// Job declaration on.
    pub enabled: bool,
    /// The job-declaration server URL.
    pub server: String,
    /// The template provider URL.
    pub template_provider: String,
}

/// `POST /api/jd/config` (`svcos.api.jd.config.v1`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct JdConfigBody {
    /// `svcos.api.jd.config.v1`.
    pub schema: &'static str,
    /// The section as saved.
    pub config: JdConfigView,
    /// The write report.
    pub write: ConfigWriteBody,
}

impl JdConfigBody {
    /// The answer to a write that saved `jd`.
    pub fn new(jd: &JdConfig, write: ConfigWriteBody) -> Self {
        JdConfigBody {
            schema: "svcos.api.jd.config.v1",
            config: JdConfigView {
                enabled: jd.enabled,
                server: jd.server.clone(),
                template_provider: jd.template_provider.clone(),
            },
            write,
        }
    }
}

/// The job the job-declaration server accepted last.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct JdDeclaredJob {
    /// The template provider's template id.
    pub template_id: u64,
    /// Previous block hash, hex, display byte order.
    pub prev_hash: String,
    /// Transactions besides the coinbase.
    pub tx_count: u32,
    /// When the server accepted it, unix ms.
    pub declared_at_ms: i64,
    /// DeclareMiningJob.Success's token, hex (not a secret).
    pub token: String,
    /// The job id the pool gave it; `null` until the pool accepted it for mining.
    pub pool_job_id: Option<u32>,
    /// Coinbase value, satoshis.
    pub coinbase_value_sat: u64,
}

/// Share answers on declared jobs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct JdShares {
    /// Answered Success.
    pub accepted: u64,
    /// Answered Error.
    pub rejected: u64,
}

/// `GET /api/jd/status` (`svcos.api.jd.status.v1`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct JdStatusBody {
    /// `svcos.api.jd.status.v1`.
    pub schema: &'static str,
    /// `[stratum].sv2_enabled`, the gate job declaration sits behind.
    pub sv2_enabled: bool,
    /// `[stratum.jd].enabled`.
    pub enabled: bool,
    /// The job-declaration server URL as configured.
    pub server: String,
    /// The template provider URL as configured.
    pub template_provider: String,
    /// SetupConnection done with both the server and the template provider.
    pub connected: bool,
    /// What is mined: `jd` (a declared job), `pool` (the pool's templates) or `none`.
    pub template_source: String,
    /// Why the pool's templates are mined while job declaration is on; `null` otherwise.
    pub fallback_reason: Option<String>,
    /// The last declared job; `null` before the first.
    pub last_declared_job: Option<JdDeclaredJob>,
    /// Jobs the server accepted since stratum-agent started.
    pub jobs_declared: u64,
    /// JD sessions ended by a refusal or a lost connection.
    pub failures: u64,
    /// Share answers on declared jobs.
    pub shares: JdShares,
    /// Index of the SV2 pool declared jobs are mined on; `null` when none.
    pub pool_index: Option<i32>,
}

impl From<&GetJdStatusResponse> for JdStatusBody {
    fn from(r: &GetJdStatusResponse) -> Self {
        JdStatusBody {
            schema: "svcos.api.jd.status.v1",
            sv2_enabled: r.sv2_enabled,
            enabled: r.enabled,
            server: r.server.clone(),
            template_provider: r.template_provider.clone(),
            connected: r.connected,
            template_source: r.template_source.clone(),
            fallback_reason: (!r.fallback_reason.is_empty()).then(|| r.fallback_reason.clone()),
            last_declared_job: r.last_declared_job.as_ref().map(|j| JdDeclaredJob {
                template_id: j.template_id,
                prev_hash: j.prev_hash.clone(),
                tx_count: j.tx_count,
                declared_at_ms: j.declared_at_ms,
                token: j.token.clone(),
                pool_job_id: (j.pool_job_id != 0).then_some(j.pool_job_id),
                coinbase_value_sat: j.coinbase_value_sat,
            }),
            jobs_declared: r.jobs_declared,
            failures: r.failures,
            shares: JdShares {
                accepted: r.shares_accepted,
                rejected: r.shares_rejected,
            },
            pool_index: (r.pool_index >= 0).then_some(r.pool_index),
        }
    }
}

/// `POST /api/jd/test-connection`: absent URLs mean the configured ones.
#[derive(Debug, Default, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct JdTestRequest {
    /// A job-declaration server URL to try instead of the configured one.
    #[serde(default)]
    pub server: Option<String>,
    /// A template provider URL to try instead of the configured one.
    #[serde(default)]
    pub template_provider: Option<String>,
    /// How long to wait for each role, ms (default 10 000, at most 60 000).
    #[serde(default)]
    pub timeout_ms: Option<u32>,
}

impl JdTestRequest {
    /// The stratum-agent request (empty URLs and a zero timeout mean its defaults).
    pub fn into_request(self) -> TestJdConnectionRequest {
        TestJdConnectionRequest {
            server: self.server.unwrap_or_default(),
            template_provider: self.template_provider.unwrap_or_default(),
            timeout_ms: self.timeout_ms.unwrap_or(0),
        }
    }
}

/// One role's result in a connection test.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct JdRoleResult {
    /// The role answered as it should.
    pub ok: bool,
    /// Connect to the proving answer, ms.
    pub latency_ms: u32,
    /// What happened (why it failed).
    pub detail: String,
}

/// `POST /api/jd/test-connection` (`svcos.api.jd.test_connection.v1`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct JdTestBody {
    /// `svcos.api.jd.test_connection.v1`.
    pub schema: &'static str,
    /// Both roles answered.
    pub ok: bool,
    /// The job-declaration server: handshake, SetupConnection, AllocateMiningJobToken.
    pub server: JdRoleResult,
    /// The template provider: handshake, SetupConnection, a NewTemplate.
    pub template_provider: JdRoleResult,
}

impl From<&TestJdConnectionResponse> for JdTestBody {
    fn from(r: &TestJdConnectionResponse) -> Self {
        let role = |c: Option<&JdRoleCheck>| JdRoleResult {
            ok: c.is_some_and(|c| c.ok),
            latency_ms: c.map_or(0, |c| c.latency_ms),
            detail: c.map(|c| c.detail.clone()).unwrap_or_default(),
        };
        JdTestBody {
            schema: "svcos.api.jd.test_connection.v1",
            ok: r.ok,
            server: role(r.server.as_ref()),
            template_provider: role(r.template_provider.as_ref()),
        }
    }
}
