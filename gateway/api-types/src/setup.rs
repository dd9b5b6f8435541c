//! The setup wizard and the safety acknowledgement: `/api/setup/*`, `/api/safety/acknowledge`.
//! The wizard's rules and state live in `svcos-setup`, which builds these bodies.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where a wizard step stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum StepState {
    /// Not done yet.
    Pending,
    /// Entered.
    Done,
    /// Skipped on purpose.
    Skipped,
}

/// One step as the dashboard lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SetupStep {
    /// Step name (`safety`, `circuit`, `password`, `economics`, `quiet_hours`, `mode`, `pool`).
    pub step: &'static str,
    /// Where it stands.
    pub status: StepState,
    /// Not pending.
    pub done: bool,
    /// Needed before the wizard can be completed.
    pub required: bool,
    /// The call that does it.
    pub how: &'static str,
    /// When it was recorded, Unix ms; `null` while pending or for steps kept elsewhere.
    pub at_ms: Option<i64>,
    /// What was entered (never a secret); `null` while pending.
    pub values: Option<Value>,
}

/// `GET /api/setup/status` (`svcos.api.setup.status.v1`): the wizard as the dashboard needs it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SetupStatusBody {
    /// `svcos.api.setup.status.v1`.
    pub schema: &'static str,
    /// A password exists; `null` while the auth service is unreachable.
    pub password_set: Option<bool>,
    /// The auth service answered.
    pub auth_reachable: bool,
    /// No password exists yet (the first-boot window).
    pub first_boot: bool,
    /// At least one enabled pool is configured.
    pub pools_configured: bool,
    /// `[system].mode`.
    pub mode: &'static str,
    /// The wizard was completed.
    pub complete: bool,
    /// When it was completed, Unix ms.
    pub completed_at_ms: Option<i64>,
    /// `POST /api/setup/complete` would succeed.
    pub can_complete: bool,
    /// Required steps still open.
    pub missing: Vec<&'static str>,
    /// The first pending step.
    pub next_step: Option<&'static str>,
    /// Every step in display order.
    pub steps: Vec<SetupStep>,
    /// `[power].circuit_limit_watt` when a cap is set, W.
    pub circuit_limit_watt: Option<f64>,
    /// The conservative cap hw-agent holds the miner to until the wizard is finished
    /// (`[power].setup_hold`), W; `null` when the miner is not held.
    pub setup_hold_watt: Option<f64>,
    /// The latest safety acknowledgement, Unix ms.
    pub safety_acknowledged_at_ms: Option<i64>,
}

/// Cost estimate answered by the economics step.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CostEstimate {
    /// Current input power, W (1 decimal).
    pub power_watt: f64,
    /// Power x 24 h x the entered price (2 decimals).
    pub cost_per_day: f64,
    /// How it was computed.
    pub basis: &'static str,
}

/// The answer to a wizard write: the status after it, and which step was saved.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SetupStepBody {
    /// The wizard after the write.
    #[serde(flatten)]
    pub status: SetupStatusBody,
    /// The step this call saved.
    pub saved_step: &'static str,
    /// What to do next (after the password step: log in).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<&'static str>,
    /// Daily cost at the entered price (economics step only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimate: Option<CostEstimate>,
}

/// A recorded safety acknowledgement (also its persisted form).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Acknowledgement {
    /// When, Unix ms.
    pub at_ms: i64,
    /// Ids of the warnings acknowledged.
    pub warning_ids: Vec<String>,
    /// Where it was given (`wizard` or `api`).
    pub via: String,
}

/// `POST /api/safety/acknowledge` (`svcos.api.safety.acknowledge.v1`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AcknowledgeBody {
    /// `svcos.api.safety.acknowledge.v1`.
    pub schema: &'static str,
    /// Always true.
    pub acknowledged: bool,
    /// The acknowledgement just recorded.
    pub acknowledgement: Option<Acknowledgement>,
    /// Acknowledgements kept (at most 20).
    pub count: usize,
}
