//! The first-boot setup wizard as a persisted state machine, without HTTP and without peers.
//!
//! Design:
//! - **Steps and order**: `safety` (accepted or skipped) comes first; `circuit`, `password`,
//!   `economics` and `quiet_hours` follow in any order; completion needs safety, circuit and a
//!   password. A step may be re-posted to change what was entered, also after completion, and
//!   completing again keeps the first completion time.
//! - **Inputs are checked here** (the `*Input` types and the [`Wizard`] methods that take them),
//!   so every surface that drives the wizard applies the same rules. Failures are
//!   [`WizardError`]s, which the gateway maps to its HTTP envelope in one function.
//! - **Facts from elsewhere come in as arguments**: whether a password exists (auth service),
//!   the config's mode, pools and circuit cap ([`Facts`]), the current safety warnings, the
//!   clock. The crate calls nobody; the password itself never passes through it.
//! - **State** is [`Wizard`], kept by a [`WizardStore`] in one JSON file written atomically
//!   (temp file, fsync, rename: [`svcos_common::fsutil::atomic_write`]). A damaged file is moved
//!   aside and listed as a recovered state file ([`svcos_common::statefile`]); the wizard then
//!   starts over instead of failing.
//! - **Answers** are the API's types ([`svcos_api_types::setup`]), built here from the state.
//! - **Schemas** of the input types only with feature `schema`; the gateway's route rows name
//!   them (`req: svcos_setup::SafetyInput`), so the OpenAPI description derives them.

#[cfg(all(test, feature = "schema"))]
mod schema_tests;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
pub use svcos_api_types::setup::Acknowledgement;
use svcos_api_types::setup::{
    AcknowledgeBody, CostEstimate, SetupStatusBody, SetupStep, SetupStepBody, StepState,
};

/// Fraction of a breaker's rating a continuous load may use (NEC 210.19/210.20 practice).
pub const CONTINUOUS_LOAD_FACTOR: f64 = 0.8;

/// Acknowledgements kept, oldest dropped first.
pub const MAX_ACKNOWLEDGEMENTS: usize = 20;

/// Longest skip reason, characters.
pub const MAX_REASON_CHARS: usize = 200;

/// The wizard's own steps, in display order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Safety warnings read (or skipped).
    Safety,
    /// Circuit voltage and breaker.
    Circuit,
    /// The first password (or keeping one already set).
    Password,
    /// Electricity price and currency.
    Economics,
    /// Night mode window.
    QuietHours,
}

impl Step {
    /// Every step, in display order.
    pub const ALL: [Step; 5] = [
        Step::Safety,
        Step::Circuit,
        Step::Password,
        Step::Economics,
        Step::QuietHours,
    ];

    /// The API's name of the step.
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Safety => "safety",
            Step::Circuit => "circuit",
            Step::Password => "password",
            Step::Economics => "economics",
            Step::QuietHours => "quiet_hours",
        }
    }

    /// The call that does the step.
    pub fn how(self) -> &'static str {
        match self {
            Step::Safety => "POST /api/setup/step1-safety (or skip-safety)",
            Step::Circuit => "POST /api/setup/step2-circuit",
            Step::Password => "POST /api/setup/step3-password (or skip-password when one is set)",
            Step::Economics => "POST /api/setup/step-economics",
            Step::QuietHours => "POST /api/setup/quiet-hours",
        }
    }

    /// Needed before the wizard can be completed.
    pub fn required(self) -> bool {
        matches!(self, Step::Safety | Step::Circuit | Step::Password)
    }
}

/// How a step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Entered.
    Done,
    /// Skipped on purpose.
    Skipped,
}

/// One finished step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// Done or skipped.
    pub status: StepStatus,
    /// When, Unix ms.
    pub at_ms: i64,
    /// What was entered (never a secret).
    #[serde(default)]
    pub values: Value,
}

/// Why a wizard call was refused, or its state could not be kept.
#[derive(Debug, thiserror::Error)]
pub enum WizardError {
    /// A step that must come first has not been done.
    #[error("the {} step must be finished first", step.as_str())]
    Order {
        /// The first step missing.
        step: Step,
        /// The call that does it.
        how: &'static str,
        /// Every required step missing (completion only).
        missing: Option<Vec<&'static str>>,
    },
    /// An input is out of its range or malformed.
    #[error("invalid value for {field}: {message}")]
    Invalid {
        /// The input field.
        field: &'static str,
        /// The accepted range or form.
        message: String,
    },
    /// `skip-password` while no password exists.
    #[error("no password is set; it cannot be skipped")]
    NoPasswordToKeep,
    /// The state file could not be written.
    #[error("cannot save the setup wizard to {}: {source}", path.display())]
    Save {
        /// The state file.
        path: PathBuf,
        /// The write's failure.
        source: std::io::Error,
    },
}

/// Result of wizard calls.
pub type Result<T, E = WizardError> = std::result::Result<T, E>;

fn invalid(field: &'static str, message: impl Into<String>) -> WizardError {
    WizardError::Invalid {
        field,
        message: message.into(),
    }
}

/// `POST /api/setup/step1-safety`.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SafetyInput {
    /// Must be `true`.
    pub accept: Option<bool>,
}

/// `POST /api/setup/skip-safety` and `skip-password`.
#[derive(Debug, Default, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SkipInput {
    /// Free text, at most [`MAX_REASON_CHARS`].
    #[serde(default)]
    pub reason: Option<String>,
}

impl SkipInput {
    fn checked_reason(self) -> Result<Option<String>> {
        match self.reason {
            Some(r) if r.chars().count() > MAX_REASON_CHARS => Err(invalid(
                "reason",
                format!("at most {MAX_REASON_CHARS} characters"),
            )),
            r => Ok(r),
        }
    }
}

/// `POST /api/setup/step2-circuit`.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CircuitInput {
    /// Circuit voltage, V (90-480).
    pub voltage_v: f64,
    /// Breaker rating, A (5-100).
    pub breaker_a: f64,
    /// Use the derived limit as the power cap. Default true.
    #[serde(default)]
    pub apply_cap: Option<bool>,
}

/// A checked circuit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Circuit {
    /// Circuit voltage, V.
    pub voltage_v: f64,
    /// Breaker rating, A.
    pub breaker_a: f64,
    /// The derived limit becomes `[power].circuit_limit_watt`.
    pub apply_cap: bool,
}

/// Continuous watts a circuit may carry: 80 % of volts x breaker amps, whole watts down.
pub fn circuit_limit_watt(voltage_v: f64, breaker_a: f64) -> f64 {
    (voltage_v * breaker_a * CONTINUOUS_LOAD_FACTOR).floor()
}

impl CircuitInput {
    /// Check the ranges (NaN is outside every range).
    pub fn check(self) -> Result<Circuit> {
        if !(90.0..=480.0).contains(&self.voltage_v) {
            return Err(invalid("voltage_v", "90-480 V (e.g. 120, 230, 240)"));
        }
        if !(5.0..=100.0).contains(&self.breaker_a) {
            return Err(invalid("breaker_a", "5-100 A (the breaker's rating)"));
        }
        Ok(Circuit {
            voltage_v: self.voltage_v,
            breaker_a: self.breaker_a,
            apply_cap: self.apply_cap.unwrap_or(true),
        })
    }
}

impl Circuit {
    /// Continuous watts the circuit may carry.
    pub fn limit_watt(&self) -> f64 {
        circuit_limit_watt(self.voltage_v, self.breaker_a)
    }

    /// The `[power]` patch of the config: the circuit and, when applied, its cap (0 = none).
    pub fn config_patch(&self) -> Value {
        json!({"power": {
            "circuit_voltage_v": self.voltage_v,
            "circuit_breaker_a": self.breaker_a,
            "circuit_limit_watt": if self.apply_cap { self.limit_watt() } else { 0.0 },
        }})
    }
}

/// `POST /api/setup/step-economics`.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct EconomicsInput {
    /// Price per kWh in `currency` (0-10).
    pub electricity_price_per_kwh: f64,
    /// ISO 4217 code, any case.
    pub currency: String,
}

/// A checked price.
#[derive(Debug, Clone, PartialEq)]
pub struct Economics {
    /// Price per kWh.
    pub price_per_kwh: f64,
    /// ISO 4217 code, upper case.
    pub currency: String,
}

impl EconomicsInput {
    /// Check the price's range and the currency's form (normalised to upper case).
    pub fn check(self) -> Result<Economics> {
        let price = self.electricity_price_per_kwh;
        if !price.is_finite() || !(0.0..=10.0).contains(&price) {
            return Err(invalid(
                "electricity_price_per_kwh",
                "0-10 (currency units per kWh)",
            ));
        }
        let currency = self.currency.trim().to_ascii_uppercase();
        if currency.len() != 3 || !currency.chars().all(|c| c.is_ascii_uppercase()) {
            return Err(invalid(
                "currency",
                "an ISO 4217 code such as USD, EUR, CHF",
            ));
        }
        Ok(Economics {
            price_per_kwh: price,
            currency,
        })
    }
}

impl Economics {
    /// The `[tuner]` patch of the config: the price's one home, which the tuner's profitability
    /// figures, the Settings screen and the heater's cost all read. The wizard's record keeps a
    /// copy only as the answer it gave.
    pub fn config_patch(&self) -> Value {
        json!({"tuner": {
            "electricity_price_per_kwh": self.price_per_kwh,
            "currency": self.currency,
        }})
    }

    /// What a day costs at `power_watt`.
    pub fn estimate(&self, power_watt: f64) -> CostEstimate {
        CostEstimate {
            power_watt: svcos_api_types::round(power_watt, 1),
            cost_per_day: svcos_api_types::round(
                power_watt / 1000.0 * 24.0 * self.price_per_kwh,
                2,
            ),
            basis: "current input power x 24 h x the entered price",
        }
    }
}

/// `POST /api/setup/quiet-hours`: the night-mode window (checked by the config's validation).
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct QuietHoursInput {
    /// On (default true).
    pub enabled: Option<bool>,
    /// Start, `HH:MM` local time.
    pub start: String,
    /// End, `HH:MM` local time.
    pub end: String,
    /// Fixed offset from UTC, minutes.
    pub utc_offset_min: Option<i32>,
    /// IANA zone name, written to `[system].timezone`.
    pub timezone: Option<String>,
    /// Power cap during the window, W.
    pub power_cap_watt: Option<f64>,
    /// Fan cap during the window, %.
    pub fan_max_percent: Option<u32>,
}

impl QuietHoursInput {
    /// The config patch: `current` (`[home.night_mode]` as JSON) with the given members
    /// replaced, and the zone into `[system]` when given.
    pub fn config_patch(&self, mut current: Value) -> Value {
        current["enabled"] = json!(self.enabled.unwrap_or(true));
        current["start"] = json!(self.start);
        current["end"] = json!(self.end);
        let given = [
            ("utc_offset_min", json!(self.utc_offset_min)),
            ("power_cap_watt", json!(self.power_cap_watt)),
            ("fan_max_percent", json!(self.fan_max_percent)),
        ];
        for (name, v) in given.into_iter().filter(|(_, v)| !v.is_null()) {
            current[name] = v;
        }
        let system = self
            .timezone
            .as_ref()
            .map_or(json!({}), |tz| json!({ "timezone": tz }));
        json!({"home": {"night_mode": current}, "system": system})
    }
}

/// `POST /api/safety/acknowledge`.
#[derive(Debug, Default, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct AcknowledgeInput {
    /// The warnings read; default all current ones.
    #[serde(default)]
    pub warning_ids: Option<Vec<String>>,
}

/// What the wizard's answers need from outside it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Facts {
    /// A password exists; `None` while the auth service is unreachable.
    pub password_set: Option<bool>,
    /// An enabled pool is configured.
    pub pools_configured: bool,
    /// `[system].mode`.
    pub mode: &'static str,
    /// `[power].circuit_limit_watt` (0 = no cap).
    pub circuit_limit_watt: f64,
    /// `[power].setup_hold`: hw-agent holds the miner at the setup cap.
    pub setup_hold: bool,
}

/// The persisted wizard.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Wizard {
    /// Finished steps.
    pub steps: BTreeMap<Step, StepRecord>,
    /// Safety acknowledgements, newest last (at most [`MAX_ACKNOWLEDGEMENTS`]).
    pub acknowledgements: Vec<Acknowledgement>,
    /// When the wizard was completed, Unix ms.
    pub completed_at_ms: Option<i64>,
}

impl Wizard {
    fn done(&self, step: Step) -> bool {
        self.steps.contains_key(&step)
    }

    fn record(&mut self, step: Step, status: StepStatus, at_ms: i64, values: Value) {
        self.steps.insert(
            step,
            StepRecord {
                status,
                at_ms,
                values,
            },
        );
    }

    fn push_ack(&mut self, at_ms: i64, warning_ids: Vec<String>, via: &str) {
        self.acknowledgements.push(Acknowledgement {
            at_ms,
            warning_ids,
            via: via.into(),
        });
        let excess = self
            .acknowledgements
            .len()
            .saturating_sub(MAX_ACKNOWLEDGEMENTS);
        self.acknowledgements.drain(..excess);
    }

    /// Every step but safety needs safety first.
    pub fn require_safety(&self) -> Result<()> {
        if self.done(Step::Safety) {
            return Ok(());
        }
        Err(WizardError::Order {
            step: Step::Safety,
            how: "POST /api/setup/step1-safety with {\"accept\": true} (or /api/setup/skip-safety)",
            missing: None,
        })
    }

    /// Accept the safety warnings shown now (`warning_ids`); also recorded as an acknowledgement.
    pub fn accept_safety(
        &mut self,
        input: SafetyInput,
        warning_ids: Vec<String>,
        now_ms: i64,
    ) -> Result<()> {
        if input.accept != Some(true) {
            return Err(invalid(
                "accept",
                "the safety warnings must be accepted with \"accept\": true (or use /api/setup/skip-safety)",
            ));
        }
        let values = json!({"accepted": true, "warning_ids": warning_ids.clone()});
        self.record(Step::Safety, StepStatus::Done, now_ms, values);
        self.push_ack(now_ms, warning_ids, "wizard");
        Ok(())
    }

    /// Skip the safety step; after an acceptance this changes nothing.
    pub fn skip_safety(&mut self, input: SkipInput, now_ms: i64) -> Result<()> {
        let reason = input.checked_reason()?;
        if self
            .steps
            .get(&Step::Safety)
            .is_some_and(|s| s.status == StepStatus::Done)
        {
            return Ok(());
        }
        let values = json!({ "reason": reason });
        self.record(Step::Safety, StepStatus::Skipped, now_ms, values);
        Ok(())
    }

    /// Record the circuit (its config patch has been written by the caller).
    pub fn set_circuit(&mut self, circuit: &Circuit, now_ms: i64) -> Result<()> {
        self.require_safety()?;
        let values = json!({"voltage_v": circuit.voltage_v, "breaker_a": circuit.breaker_a,
            "max_continuous_watt": circuit.limit_watt(), "applied_as_cap": circuit.apply_cap});
        self.record(Step::Circuit, StepStatus::Done, now_ms, values);
        Ok(())
    }

    /// Record that the first password was set (by the auth service).
    pub fn password_set(&mut self, now_ms: i64) -> Result<()> {
        self.require_safety()?;
        let values = json!({"set_via": "step3-password"});
        self.record(Step::Password, StepStatus::Done, now_ms, values);
        Ok(())
    }

    /// Keep the password that already exists (`password_set` from the auth service).
    pub fn keep_password(
        &mut self,
        input: SkipInput,
        password_set: Option<bool>,
        now_ms: i64,
    ) -> Result<()> {
        let reason = input.checked_reason()?;
        self.require_safety()?;
        if password_set != Some(true) {
            return Err(WizardError::NoPasswordToKeep);
        }
        if !self.done(Step::Password) {
            let values = json!({"reason": reason, "kept": "the existing password"});
            self.record(Step::Password, StepStatus::Skipped, now_ms, values);
        }
        Ok(())
    }

    /// Record the electricity price.
    pub fn set_economics(&mut self, economics: &Economics, now_ms: i64) -> Result<()> {
        self.require_safety()?;
        let values = json!({"electricity_price_per_kwh": economics.price_per_kwh,
            "currency": economics.currency});
        self.record(Step::Economics, StepStatus::Done, now_ms, values);
        Ok(())
    }

    /// Record the quiet hours as written to the config (`night_mode`, with its zone).
    pub fn set_quiet_hours(&mut self, night_mode: Value, now_ms: i64) -> Result<()> {
        self.require_safety()?;
        self.record(Step::QuietHours, StepStatus::Done, now_ms, night_mode);
        Ok(())
    }

    /// Required steps still open; the password counts as set when the auth service says so.
    pub fn missing(&self, password_set: Option<bool>) -> Vec<&'static str> {
        let mut missing: Vec<&'static str> = [Step::Safety, Step::Circuit]
            .into_iter()
            .filter(|s| !self.done(*s))
            .map(Step::as_str)
            .collect();
        if password_set != Some(true) {
            missing.push(Step::Password.as_str());
        }
        missing
    }

    /// Complete the wizard; a second completion keeps the first time.
    pub fn complete(&mut self, password_set: Option<bool>, now_ms: i64) -> Result<()> {
        let missing = self.missing(password_set);
        if let Some(first) = Step::ALL
            .into_iter()
            .find(|s| missing.contains(&s.as_str()))
        {
            return Err(WizardError::Order {
                step: first,
                how: first.how(),
                missing: Some(missing),
            });
        }
        self.completed_at_ms.get_or_insert(now_ms);
        Ok(())
    }

    /// Record an acknowledgement of `given` warnings (default: all of `current`); every id
    /// given must be a current warning.
    pub fn acknowledge(
        &mut self,
        input: AcknowledgeInput,
        current: Vec<String>,
        now_ms: i64,
    ) -> Result<()> {
        if let Some(unknown) = input
            .warning_ids
            .iter()
            .flatten()
            .find(|id| !current.contains(id))
        {
            return Err(invalid(
                "warning_ids",
                format!("{unknown} is not a current warning (see GET /api/safety/warnings)"),
            ));
        }
        self.push_ack(now_ms, input.warning_ids.unwrap_or(current), "api");
        Ok(())
    }

    /// `GET /api/setup/status`.
    pub fn status(&self, facts: &Facts) -> SetupStatusBody {
        let password = facts.password_set;
        let mut steps: Vec<SetupStep> = Step::ALL
            .into_iter()
            .map(|step| {
                let rec = self.steps.get(&step);
                let status = match rec.map(|r| r.status) {
                    Some(StepStatus::Done) => StepState::Done,
                    Some(StepStatus::Skipped) => StepState::Skipped,
                    // A password set through POST /api/auth/setup counts as done.
                    None if step == Step::Password && password == Some(true) => StepState::Done,
                    None => StepState::Pending,
                };
                SetupStep {
                    step: step.as_str(),
                    status,
                    done: status != StepState::Pending,
                    required: step.required(),
                    how: step.how(),
                    at_ms: rec.map(|r| r.at_ms),
                    values: rec.map(|r| r.values.clone()),
                }
            })
            .collect();
        // Mode and pool are kept by the config, not by the wizard.
        steps.push(SetupStep {
            step: "mode",
            status: StepState::Done,
            done: true,
            required: false,
            how: "POST /api/setup/step4-mode",
            at_ms: None,
            values: Some(json!({ "mode": facts.mode })),
        });
        steps.push(SetupStep {
            step: "pool",
            status: if facts.pools_configured {
                StepState::Done
            } else {
                StepState::Pending
            },
            done: facts.pools_configured,
            required: false,
            how: "POST /api/setup/step5-pool",
            at_ms: None,
            values: None,
        });
        let missing = self.missing(password);
        SetupStatusBody {
            schema: "svcos.api.setup.status.v1",
            password_set: password,
            auth_reachable: password.is_some(),
            first_boot: password == Some(false),
            pools_configured: facts.pools_configured,
            mode: facts.mode,
            complete: self.completed_at_ms.is_some(),
            completed_at_ms: self.completed_at_ms,
            can_complete: missing.is_empty(),
            missing,
            next_step: steps
                .iter()
                .find(|s| s.status == StepState::Pending)
                .map(|s| s.step),
            steps,
            circuit_limit_watt: (facts.circuit_limit_watt > 0.0)
                .then_some(facts.circuit_limit_watt),
            setup_hold_watt: facts
                .setup_hold
                .then_some(svcos_common::config::SETUP_HOLD_WATT),
            safety_acknowledged_at_ms: self.acknowledgements.last().map(|a| a.at_ms),
        }
    }

    /// The answer to a write that saved `step` (a step's name, or `complete`).
    pub fn saved(&self, facts: &Facts, step: &'static str) -> SetupStepBody {
        SetupStepBody {
            status: self.status(facts),
            saved_step: step,
            next: None,
            estimate: None,
        }
    }

    /// The answer to `POST /api/safety/acknowledge`.
    pub fn acknowledge_body(&self) -> AcknowledgeBody {
        AcknowledgeBody {
            schema: "svcos.api.safety.acknowledge.v1",
            acknowledged: true,
            acknowledgement: self.acknowledgements.last().cloned(),
            count: self.acknowledgements.len(),
        }
    }
}

/// Where the wizard is kept.
#[derive(Debug, Clone)]
pub struct WizardStore {
    path: PathBuf,
}

impl WizardStore {
    /// The state file's name in its service's state directory.
    pub const FILE_NAME: &str = "setup-wizard.json";

    /// The store in `state_dir`.
    pub fn in_dir(state_dir: &Path) -> Self {
        WizardStore {
            path: state_dir.join(Self::FILE_NAME),
        }
    }

    /// The state file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The wizard; empty when the file is missing, unreadable or damaged (then moved aside).
    pub fn load(&self) -> Wizard {
        svcos_common::statefile::load_json(&self.path).unwrap_or_default()
    }

    /// Write the wizard atomically (mode 0600, directory 0700).
    pub fn save(&self, wizard: &Wizard) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(wizard).map_err(std::io::Error::other);
        self.path
            .parent()
            .map_or(Ok(()), |dir| svcos_common::fsutil::ensure_dir(dir, 0o700))
            .and_then(|()| svcos_common::fsutil::atomic_write(&self.path, &bytes?, 0o600))
            .map_err(|source| WizardError::Save {
                path: self.path.clone(),
                source,
            })
    }
}

#[cfg(test)]
mod tests;
