//! The tuner's answers: its run state after every change (`/api/autotuner/*` writes,
//! `/api/profiles*`), tuned and saved profiles, the stored silicon data, chip health, the
//! silicon report, profitability, dynamic power scaling and time-of-use schedules.

use serde::Serialize;
use svcos_common::timewin::hhmm;
use svcos_proto::tuner::v1 as pb;

use crate::{enum_word, round};

/// A tune mode's API word (`TUNE_MODE_POWER` → `power`).
pub fn mode_word(mode: i32) -> String {
    enum_word(
        pb::TuneMode::try_from(mode)
            .unwrap_or(pb::TuneMode::Unspecified)
            .as_str_name(),
        "TUNE_MODE_",
    )
}

/// One chip's tuned frequency.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ChipPoint {
    /// Chip index on its chain.
    pub chip: u32,
    /// Its frequency, MHz (2 decimals).
    pub frequency_mhz: f64,
}

/// One chain's tuned point.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ChainPoint {
    /// Chain number.
    pub chain_id: u32,
    /// The chain's base frequency, MHz (2 decimals).
    pub frequency_mhz: f64,
    /// Chips run at their own frequency, away from the base (each chip tuned to its silicon).
    pub chips: Vec<ChipPoint>,
    /// The tuner switched this hashboard off: the power target buys more hashrate without it.
    pub switched_off: bool,
}

impl From<&pb::ChainPoint> for ChainPoint {
    fn from(c: &pb::ChainPoint) -> Self {
        ChainPoint {
            chain_id: c.chain_id,
            frequency_mhz: round(c.frequency_mhz, 2),
            chips: c
                .chips
                .iter()
                .map(|t| ChipPoint {
                    chip: t.chip,
                    frequency_mhz: round(t.frequency_mhz, 2),
                })
                .collect(),
            switched_off: c.switched_off,
        }
    }
}

fn chains(chains: &[pb::ChainPoint]) -> Vec<ChainPoint> {
    chains.iter().map(ChainPoint::from).collect()
}

/// What a point measured (zeros before the first measurement).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Measured {
    /// PSU power, W (1 decimal).
    pub power_watt: f64,
    /// Hashrate, TH/s (3 decimals).
    pub hashrate_ths: f64,
    /// J/TH (2 decimals).
    pub efficiency_j_per_th: f64,
    /// Hardware errors per nonce (6 decimals).
    pub hw_error_rate: f64,
    /// Hottest chip, °C (1 decimal).
    pub temp_max_c: f64,
}

impl From<Option<&pb::Measured>> for Measured {
    fn from(m: Option<&pb::Measured>) -> Self {
        let m = m.copied().unwrap_or_default();
        Measured {
            power_watt: round(m.power_watt, 1),
            hashrate_ths: round(m.hashrate_ths, 3),
            efficiency_j_per_th: round(m.efficiency_j_per_th, 2),
            hw_error_rate: round(m.hw_error_rate, 6),
            temp_max_c: round(m.temp_max_c, 1),
        }
    }
}

/// A tuned or saved operating point.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Profile {
    /// The point's id (mode and target, or the saved name).
    pub id: String,
    /// power, hashrate, efficiency or fixed.
    pub mode: String,
    /// The target it was tuned for (W or TH/s by mode).
    pub target: f64,
    /// Supply voltage, mV.
    pub voltage_mv: f64,
    /// Per-chain frequencies.
    pub chains: Vec<ChainPoint>,
    /// What it measured when tuned.
    pub measured: Measured,
    /// When it was tuned, ms since the epoch.
    pub tuned_at_ms: i64,
    /// The board it belongs to.
    pub board_serial: String,
}

impl From<&pb::Profile> for Profile {
    fn from(p: &pb::Profile) -> Self {
        Profile {
            id: p.id.clone(),
            mode: mode_word(p.mode),
            target: p.target,
            voltage_mv: p.voltage_mv,
            chains: chains(&p.chains),
            measured: Measured::from(p.measured.as_ref()),
            tuned_at_ms: p.tuned_at_ms,
            board_serial: p.board_serial.clone(),
        }
    }
}

fn profiles(ps: &[pb::Profile]) -> Vec<Profile> {
    ps.iter().map(Profile::from).collect()
}

/// One change of the tuner's state.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Transition {
    /// When, ms since the epoch.
    pub at_ms: i64,
    /// The state left.
    pub from: String,
    /// The state entered.
    pub to: String,
    /// Why.
    pub reason: String,
}

/// The tuner's full state, the answer of every tuner write
/// (`svcos.api.autotuner.run_state.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RunStateBody {
    /// `svcos.api.autotuner.run_state.v1`.
    pub schema: &'static str,
    /// The tuner's state (stock, searching, tuned, ...).
    pub state: String,
    /// Why it is in that state.
    pub reason: String,
    /// Since when, ms since the epoch.
    pub since_ms: i64,
    /// The autotuner is on.
    pub active: bool,
    /// power, hashrate, efficiency or fixed.
    pub mode: String,
    /// The profile in force.
    pub profile: String,
    /// The point in force was resumed from a saved one.
    pub resumed: bool,
    /// This board's serial.
    pub board_serial: String,
    /// Effective power target, W.
    pub power_target_watt: f64,
    /// Configured power target, W.
    pub configured_power_target_watt: f64,
    /// Hashrate target, TH/s.
    pub hashrate_target_ths: f64,
    /// Dynamic power scaling's reduction in force, W.
    pub dps_reduction_watt: f64,
    /// The time-of-use window in force ("" outside any).
    pub tou_window: String,
    /// Supply voltage, mV.
    pub voltage_mv: f64,
    /// Per-chain frequencies in force.
    pub chains: Vec<ChainPoint>,
    /// What the point in force measures.
    pub measured: Measured,
    /// J/TH (2 decimals).
    pub efficiency_j_per_th: f64,
    /// Search steps taken.
    pub steps: u32,
    /// The latest state changes.
    pub transitions: Vec<Transition>,
}

impl From<&pb::GetStateResponse> for RunStateBody {
    fn from(s: &pb::GetStateResponse) -> Self {
        RunStateBody {
            schema: "svcos.api.autotuner.run_state.v1",
            state: s.state.clone(),
            reason: s.reason.clone(),
            since_ms: s.since_ms,
            active: s.active,
            mode: mode_word(s.mode),
            profile: s.profile.clone(),
            resumed: s.resumed,
            board_serial: s.board_serial.clone(),
            power_target_watt: s.power_target_watt,
            configured_power_target_watt: s.configured_power_target_watt,
            hashrate_target_ths: s.hashrate_target_ths,
            dps_reduction_watt: s.dps_reduction_watt,
            tou_window: s.tou_window.clone(),
            voltage_mv: s.voltage_mv,
            chains: chains(&s.chains),
            measured: Measured::from(s.measured.as_ref()),
            efficiency_j_per_th: round(s.efficiency_j_per_th, 2),
            steps: s.steps,
            transitions: s
                .transitions
                .iter()
                .map(|t| Transition {
                    at_ms: t.at_ms,
                    from: t.from.clone(),
                    to: t.to.clone(),
                    reason: t.reason.clone(),
                })
                .collect(),
        }
    }
}

/// `GET /api/autotuner/saved-status` (`svcos.api.autotuner.saved_status.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SavedStatusBody {
    /// `svcos.api.autotuner.saved_status.v1`.
    pub schema: &'static str,
    /// This board's serial.
    pub board_serial: String,
    /// The tuned points are on disk.
    pub saved: bool,
    /// Tuned points of this board.
    pub tuned_profiles: usize,
    /// Saved named profiles.
    pub saved_profiles: usize,
    /// When they were last written, ms since the epoch.
    pub saved_at_ms: i64,
    /// The profile in force.
    pub active_profile: String,
    /// The tuner's state.
    pub state: String,
    /// The point in force was resumed from a saved one.
    pub resumed: bool,
}

impl SavedStatusBody {
    /// From the tuner's profile list and state.
    pub fn new(l: &pb::ListProfilesResponse, s: &pb::GetStateResponse) -> Self {
        SavedStatusBody {
            schema: "svcos.api.autotuner.saved_status.v1",
            board_serial: l.board_serial.clone(),
            saved: l.persisted,
            tuned_profiles: l.tuned.len(),
            saved_profiles: l.saved.len(),
            saved_at_ms: l.saved_at_ms,
            active_profile: l.active_profile.clone(),
            state: s.state.clone(),
            resumed: s.resumed,
        }
    }
}

/// `GET /api/autotuner/tuned_profiles` (`svcos.api.autotuner.tuned_profiles.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TunedProfilesBody {
    /// `svcos.api.autotuner.tuned_profiles.v1`.
    pub schema: &'static str,
    /// This board's serial.
    pub board_serial: String,
    /// The profile in force.
    pub active_profile: String,
    /// Tuned points of this board.
    pub profiles: Vec<Profile>,
}

impl From<&pb::ListProfilesResponse> for TunedProfilesBody {
    fn from(l: &pb::ListProfilesResponse) -> Self {
        TunedProfilesBody {
            schema: "svcos.api.autotuner.tuned_profiles.v1",
            board_serial: l.board_serial.clone(),
            active_profile: l.active_profile.clone(),
            profiles: profiles(&l.tuned),
        }
    }
}

/// `GET /api/profiles` (`svcos.api.profiles.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ProfilesBody {
    /// `svcos.api.profiles.v1`.
    pub schema: &'static str,
    /// This board's serial.
    pub board_serial: String,
    /// The profile in force.
    pub active_profile: String,
    /// Tuned points of this board.
    pub tuned: Vec<Profile>,
    /// Saved named profiles.
    pub saved: Vec<Profile>,
}

impl From<&pb::ListProfilesResponse> for ProfilesBody {
    fn from(l: &pb::ListProfilesResponse) -> Self {
        ProfilesBody {
            schema: "svcos.api.profiles.v1",
            board_serial: l.board_serial.clone(),
            active_profile: l.active_profile.clone(),
            tuned: profiles(&l.tuned),
            saved: profiles(&l.saved),
        }
    }
}

/// `POST /api/profiles` with `action: save` (`svcos.api.profiles.saved.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ProfileSavedBody {
    /// `svcos.api.profiles.saved.v1`.
    pub schema: &'static str,
    /// The saved profile.
    pub profile: Option<Profile>,
}

impl From<&pb::SaveProfileResponse> for ProfileSavedBody {
    fn from(r: &pb::SaveProfileResponse) -> Self {
        ProfileSavedBody {
            schema: "svcos.api.profiles.saved.v1",
            profile: r.profile.as_ref().map(Profile::from),
        }
    }
}

/// `POST /api/profiles`: the saved profile, or the tuner's state after applying one.
#[derive(Debug, Clone, Serialize)]
// Both answers are objects; saying so keeps the route's schema an object like every other.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema), schemars(extend("type" = "object")))]
#[serde(untagged)]
pub enum PostProfilesBody {
    /// `action: save`.
    Saved(ProfileSavedBody),
    /// `action: apply`.
    Applied(Box<RunStateBody>),
}

/// A profile document imported (`svcos.api.profiles.import.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ImportBody {
    /// `svcos.api.profiles.import.v1`.
    pub schema: &'static str,
    /// Boards the document held.
    pub boards: u32,
    /// Profiles it held.
    pub profiles: u32,
}

impl From<&pb::ImportResponse> for ImportBody {
    fn from(r: &pb::ImportResponse) -> Self {
        ImportBody {
            schema: "svcos.api.profiles.import.v1",
            boards: r.boards,
            profiles: r.profiles,
        }
    }
}

/// One board with stored tuned data.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SiliconBoard {
    /// The board serial (the id of `/api/profiles/silicon/:id`).
    pub id: String,
    /// The board serial.
    pub board_serial: String,
    /// Stored tuned points.
    pub profiles: u32,
    /// Last written, ms since the epoch.
    pub updated_at_ms: i64,
    /// The board in this miner.
    pub current_board: bool,
}

/// `GET /api/profiles/silicon` (`svcos.api.profiles.silicon.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SiliconListBody {
    /// `svcos.api.profiles.silicon.v1`.
    pub schema: &'static str,
    /// Boards with stored tuned data.
    pub boards: Vec<SiliconBoard>,
}

impl From<&pb::ListSiliconResponse> for SiliconListBody {
    fn from(r: &pb::ListSiliconResponse) -> Self {
        SiliconListBody {
            schema: "svcos.api.profiles.silicon.v1",
            boards: r
                .boards
                .iter()
                .map(|b| SiliconBoard {
                    id: b.board_serial.clone(),
                    board_serial: b.board_serial.clone(),
                    profiles: b.profiles,
                    updated_at_ms: b.updated_at_ms,
                    current_board: b.current_board,
                })
                .collect(),
        }
    }
}

/// One stored tuned point as a table row.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SiliconRow {
    /// The board.
    pub board_serial: String,
    /// The point's id.
    pub profile: String,
    /// power, hashrate, efficiency or fixed.
    pub mode: String,
    /// The target it was tuned for.
    pub target: f64,
    /// Supply voltage, mV.
    pub voltage_mv: f64,
    /// Mean chain frequency, MHz (2 decimals).
    pub mean_frequency_mhz: f64,
    /// Chips trimmed away from their chain's frequency.
    pub trimmed_chips: usize,
    /// Measured power, W (1 decimal).
    pub power_watt: f64,
    /// Measured hashrate, TH/s (3 decimals).
    pub hashrate_ths: f64,
    /// Measured J/TH (2 decimals).
    pub efficiency_j_per_th: f64,
    /// When tuned, ms since the epoch.
    pub tuned_at_ms: i64,
}

impl SiliconRow {
    /// Board `board_serial`'s point `p`.
    pub fn new(board_serial: &str, p: &pb::Profile) -> Self {
        let m = p.measured.unwrap_or_default();
        let mean =
            p.chains.iter().map(|c| c.frequency_mhz).sum::<f64>() / p.chains.len().max(1) as f64;
        SiliconRow {
            board_serial: board_serial.to_owned(),
            profile: p.id.clone(),
            mode: mode_word(p.mode),
            target: p.target,
            voltage_mv: p.voltage_mv,
            mean_frequency_mhz: round(mean, 2),
            trimmed_chips: p.chains.iter().map(|c| c.chips.len()).sum(),
            power_watt: round(m.power_watt, 1),
            hashrate_ths: round(m.hashrate_ths, 3),
            efficiency_j_per_th: round(m.efficiency_j_per_th, 2),
            tuned_at_ms: p.tuned_at_ms,
        }
    }
}

/// `GET /api/profiles/silicon-table` (`svcos.api.profiles.silicon_table.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SiliconTableBody {
    /// `svcos.api.profiles.silicon_table.v1`.
    pub schema: &'static str,
    /// The rows' member names, in display order.
    pub columns: [&'static str; 11],
    /// Every stored tuned point.
    pub rows: Vec<SiliconRow>,
}

impl SiliconTableBody {
    /// The table of `rows`.
    pub fn new(rows: Vec<SiliconRow>) -> Self {
        SiliconTableBody {
            schema: "svcos.api.profiles.silicon_table.v1",
            columns: [
                "board_serial",
                "profile",
                "mode",
                "target",
                "voltage_mv",
                "mean_frequency_mhz",
                "trimmed_chips",
                "power_watt",
                "hashrate_ths",
                "efficiency_j_per_th",
                "tuned_at_ms",
            ],
            rows,
        }
    }
}

/// `GET /api/profiles/silicon/:id` (`svcos.api.profiles.silicon_board.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SiliconBoardBody {
    /// `svcos.api.profiles.silicon_board.v1`.
    pub schema: &'static str,
    /// The board.
    pub board_serial: String,
    /// Last written, ms since the epoch.
    pub updated_at_ms: i64,
    /// Its tuned points.
    pub profiles: Vec<Profile>,
}

impl From<&pb::GetSiliconResponse> for SiliconBoardBody {
    fn from(r: &pb::GetSiliconResponse) -> Self {
        SiliconBoardBody {
            schema: "svcos.api.profiles.silicon_board.v1",
            board_serial: r.board_serial.clone(),
            updated_at_ms: r.updated_at_ms,
            profiles: profiles(&r.profiles),
        }
    }
}

/// `DELETE /api/profiles/silicon/:id` (`svcos.api.profiles.silicon_deleted.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SiliconDeletedBody {
    /// `svcos.api.profiles.silicon_deleted.v1`.
    pub schema: &'static str,
    /// The board forgotten.
    pub board_serial: String,
    /// Always true.
    pub deleted: bool,
}

impl SiliconDeletedBody {
    /// Board `board_serial` forgotten.
    pub fn new(board_serial: String) -> Self {
        SiliconDeletedBody {
            schema: "svcos.api.profiles.silicon_deleted.v1",
            board_serial,
            deleted: true,
        }
    }
}

/// `POST /api/profiles/silicon/reload` (`svcos.api.profiles.silicon_reload.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SiliconReloadBody {
    /// `svcos.api.profiles.silicon_reload.v1`.
    pub schema: &'static str,
    /// Boards read back from disk.
    pub boards: u32,
}

impl From<&pb::ReloadProfilesResponse> for SiliconReloadBody {
    fn from(r: &pb::ReloadProfilesResponse) -> Self {
        SiliconReloadBody {
            schema: "svcos.api.profiles.silicon_reload.v1",
            boards: r.boards,
        }
    }
}

/// Chips per verdict.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct VerdictCounts {
    /// Healthy chips.
    pub ok: usize,
    /// Chips with an elevated error rate.
    pub weak: usize,
    /// Chips that stopped answering.
    pub dead: usize,
}

/// One chip as the tuner judges it.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ChipHealth {
    /// Chain number.
    pub chain_id: u32,
    /// Chip index.
    pub chip: u32,
    /// Its frequency, MHz (2 decimals).
    pub frequency_mhz: f64,
    /// Its trim against the chain's frequency, MHz (2 decimals).
    pub trim_mhz: f64,
    /// Nonces in the window.
    pub nonces: u64,
    /// Hardware errors in the window.
    pub hw_errors: u64,
    /// Errors per nonce (6 decimals).
    pub hw_error_rate: f64,
    /// Its temperature, °C (1 decimal).
    pub temp_c: f64,
    /// It answers.
    pub alive: bool,
    /// ok, weak or dead.
    pub verdict: String,
}

/// `GET /api/autotuner/chip-health` (`svcos.api.autotuner.chip_health.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ChipHealthBody {
    /// `svcos.api.autotuner.chip_health.v1`.
    pub schema: &'static str,
    /// Start of the counting window, ms since the epoch.
    pub since_ms: i64,
    /// Chips per verdict.
    pub summary: VerdictCounts,
    /// Every chip.
    pub chips: Vec<ChipHealth>,
}

impl From<&pb::GetChipHealthResponse> for ChipHealthBody {
    fn from(h: &pb::GetChipHealthResponse) -> Self {
        let count = |v: &str| h.chips.iter().filter(|c| c.verdict == v).count();
        ChipHealthBody {
            schema: "svcos.api.autotuner.chip_health.v1",
            since_ms: h.window_start_ms,
            summary: VerdictCounts {
                ok: count("ok"),
                weak: count("weak"),
                dead: count("dead"),
            },
            chips: h
                .chips
                .iter()
                .map(|c| ChipHealth {
                    chain_id: c.chain_id,
                    chip: c.chip,
                    frequency_mhz: round(c.frequency_mhz, 2),
                    trim_mhz: round(c.trim_mhz, 2),
                    nonces: c.nonces,
                    hw_errors: c.hw_errors,
                    hw_error_rate: round(c.hw_error_rate, 6),
                    temp_c: round(c.temp_c, 1),
                    alive: c.alive,
                    verdict: c.verdict.clone(),
                })
                .collect(),
        }
    }
}

/// A chip among a chain's worst.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WorstChip {
    /// Chip index.
    pub chip: u32,
    /// Errors per nonce (6 decimals).
    pub hw_error_rate: f64,
    /// Its trim, MHz (2 decimals).
    pub trim_mhz: f64,
}

/// One chain's silicon quality.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SiliconChain {
    /// Chain number.
    pub chain_id: u32,
    /// Chips judged.
    pub chips: usize,
    /// Weak chips.
    pub weak: usize,
    /// Dead chips.
    pub dead: usize,
    /// Chips trimmed below the chain's frequency.
    pub trimmed: usize,
    /// The chain's errors per nonce (6 decimals).
    pub hw_error_rate: f64,
    /// Up to five chips with errors, worst first.
    pub worst_chips: Vec<WorstChip>,
}

impl SiliconChain {
    /// Chain `chain_id` from the tuner's chip health.
    pub fn new(chain_id: u32, h: &pb::GetChipHealthResponse) -> Self {
        let chips: Vec<&pb::ChipHealth> =
            h.chips.iter().filter(|c| c.chain_id == chain_id).collect();
        let nonces: u64 = chips.iter().map(|c| c.nonces).sum();
        let errors: u64 = chips.iter().map(|c| c.hw_errors).sum();
        let mut worst: Vec<&&pb::ChipHealth> = chips.iter().filter(|c| c.hw_errors > 0).collect();
        worst.sort_by(|a, b| b.hw_error_rate.total_cmp(&a.hw_error_rate));
        SiliconChain {
            chain_id,
            chips: chips.len(),
            weak: chips.iter().filter(|c| c.verdict == "weak").count(),
            dead: chips.iter().filter(|c| c.verdict == "dead").count(),
            trimmed: chips.iter().filter(|c| c.trim_mhz < 0.0).count(),
            hw_error_rate: if nonces + errors > 0 {
                round(errors as f64 / (nonces + errors) as f64, 6)
            } else {
                0.0
            },
            worst_chips: worst
                .iter()
                .take(5)
                .map(|c| WorstChip {
                    chip: c.chip,
                    hw_error_rate: round(c.hw_error_rate, 6),
                    trim_mhz: round(c.trim_mhz, 2),
                })
                .collect(),
        }
    }
}

/// The most efficient tuned point.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct BestEfficiency {
    /// The point's id.
    pub profile: String,
    /// Its J/TH (2 decimals).
    pub efficiency_j_per_th: f64,
    /// Its supply voltage, mV.
    pub voltage_mv: f64,
}

/// `GET /api/autotuner/silicon-report` (`svcos.api.autotuner.silicon_report.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SiliconReportBody {
    /// `svcos.api.autotuner.silicon_report.v1`.
    pub schema: &'static str,
    /// This board's serial.
    pub board_serial: String,
    /// Start of the chip-health window, ms since the epoch.
    pub since_ms: i64,
    /// Per chain.
    pub chains: Vec<SiliconChain>,
    /// Tuned points of this board.
    pub tuned_profiles: usize,
    /// The most efficient tuned point; `null` before one measured.
    pub best_efficiency: Option<BestEfficiency>,
}

impl SiliconReportBody {
    /// From the tuner's chip health and profile list.
    pub fn new(h: &pb::GetChipHealthResponse, l: &pb::ListProfilesResponse) -> Self {
        let mut ids: Vec<u32> = h.chips.iter().map(|c| c.chain_id).collect();
        ids.dedup();
        let best = l
            .tuned
            .iter()
            .filter_map(|p| p.measured.as_ref().map(|m| (p, m.efficiency_j_per_th)))
            .filter(|(_, e)| *e > 0.0)
            .min_by(|a, b| a.1.total_cmp(&b.1));
        SiliconReportBody {
            schema: "svcos.api.autotuner.silicon_report.v1",
            board_serial: l.board_serial.clone(),
            since_ms: h.window_start_ms,
            chains: ids.iter().map(|&id| SiliconChain::new(id, h)).collect(),
            tuned_profiles: l.tuned.len(),
            best_efficiency: best.map(|(p, e)| BestEfficiency {
                profile: p.id.clone(),
                efficiency_j_per_th: round(e, 2),
                voltage_mv: p.voltage_mv,
            }),
        }
    }
}

/// The prices a profitability estimate used.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ProfitInputs {
    /// Price of one BTC.
    pub btc_price: f64,
    /// Network difficulty.
    pub network_difficulty: f64,
    /// BTC per block.
    pub block_reward_btc: f64,
    /// Electricity price per kWh.
    pub electricity_price_per_kwh: f64,
    /// Pool fee, percent.
    pub pool_fee_percent: f64,
}

/// `POST /api/autotuner/profitability` (`svcos.api.autotuner.profitability.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ProfitabilityBody {
    /// `svcos.api.autotuner.profitability.v1`.
    pub schema: &'static str,
    /// Measured 1-minute hashrate, TH/s (3 decimals).
    pub hashrate_ths: f64,
    /// Measured PSU power, W (1 decimal).
    pub power_watt: f64,
    /// Expected BTC a day after the pool fee; `null` when the inputs given make it overflow.
    pub btc_per_day: Option<f64>,
    /// Revenue a day (4 decimals); `null` when the inputs given make it overflow.
    pub revenue_per_day: Option<f64>,
    /// Energy a day, kWh (3 decimals).
    pub energy_kwh_per_day: f64,
    /// Electricity cost a day (4 decimals); `null` when the inputs given make it overflow.
    pub cost_per_day: Option<f64>,
    /// Revenue minus cost a day (4 decimals); `null` when the inputs given make it overflow.
    pub margin_per_day: Option<f64>,
    /// The electricity price at which the margin is zero (5 decimals); `null` when the inputs given make it overflow.
    pub break_even_price_per_kwh: Option<f64>,
    /// The configured currency.
    pub currency: String,
    /// The prices used.
    pub inputs: ProfitInputs,
    /// Where the numbers come from.
    pub source: &'static str,
}

impl From<&pb::EstimateProfitabilityResponse> for ProfitabilityBody {
    /// The tuner's estimate, rounded as documented; a figure extreme prices overflowed is `null`.
    fn from(e: &pb::EstimateProfitabilityResponse) -> Self {
        let p = e.prices.unwrap_or_default();
        ProfitabilityBody {
            schema: "svcos.api.autotuner.profitability.v1",
            hashrate_ths: round(e.hashrate_ghs / 1000.0, 3),
            power_watt: round(e.power_watt, 1),
            btc_per_day: finite(e.btc_per_day),
            revenue_per_day: finite(round(e.revenue_per_day, 4)),
            energy_kwh_per_day: round(e.energy_kwh_per_day, 3),
            cost_per_day: finite(round(e.cost_per_day, 4)),
            margin_per_day: finite(round(e.margin_per_day, 4)),
            break_even_price_per_kwh: finite(round(e.break_even_price_per_kwh, 5)),
            currency: e.currency.clone(),
            inputs: ProfitInputs {
                btc_price: p.btc_price,
                network_difficulty: p.network_difficulty,
                block_reward_btc: p.block_reward_btc,
                electricity_price_per_kwh: p.electricity_price_per_kwh,
                pool_fee_percent: p.pool_fee_percent,
            },
            source: "measured 1-minute hashrate and PSU power; prices and difficulty as given (no internet data)",
        }
    }
}

/// `x` if it is a number JSON can carry (extreme prices or a subnormal difficulty overflow).
fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// `GET /api/power/dps` (`svcos.api.power.dps.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DpsBody {
    /// `svcos.api.power.dps.v1`.
    pub schema: &'static str,
    /// `[tuner].dps_enabled`.
    pub enabled: bool,
    /// `[tuner].dps_step_watt`, W.
    pub step_watt: f64,
    /// `[tuner].dps_min_power_watt`, W.
    pub min_power_watt: f64,
    /// The reduction in force, W.
    pub reduction_watt: f64,
    /// The configured power target, W.
    pub configured_power_target_watt: f64,
    /// The target in force after the reduction, W.
    pub effective_power_target_watt: f64,
    /// The tuner's state.
    pub tuner_state: String,
    /// A reduction is in force.
    pub active: bool,
}

/// One time-of-use window.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TouWindow {
    /// Start, HH:MM local time.
    pub start: String,
    /// End, HH:MM (24:00 = midnight).
    pub end: String,
    /// Power target inside the window, W.
    pub power_target_watt: f64,
    /// Its label.
    pub label: String,
}

/// `GET`/`POST /api/tou/schedule` (`svcos.api.tou.schedule.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TouScheduleBody {
    /// `svcos.api.tou.schedule.v1`.
    pub schema: &'static str,
    /// The schedule is followed.
    pub enabled: bool,
    /// The zone the windows are read in.
    pub timezone: String,
    /// The window in force; `null` outside every window.
    pub active_window: Option<String>,
    /// The next change, RFC 3339; `null` when none is due.
    pub next_change: Option<String>,
    /// The windows.
    pub windows: Vec<TouWindow>,
}

impl TouScheduleBody {
    /// `text`: the active window, the zone and the next change (empty = none).
    pub fn new(enabled: bool, windows: &[pb::TouWindow], [active, tz, next]: [&str; 3]) -> Self {
        let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        TouScheduleBody {
            schema: "svcos.api.tou.schedule.v1",
            enabled,
            timezone: tz.to_owned(),
            active_window: some(active),
            next_change: some(next),
            windows: windows
                .iter()
                .map(|w| TouWindow {
                    start: hhmm(w.start_minute),
                    end: hhmm(w.end_minute),
                    power_target_watt: w.power_target_watt,
                    label: w.label.clone(),
                })
                .collect(),
        }
    }
}

impl From<&pb::GetTouScheduleResponse> for TouScheduleBody {
    fn from(r: &pb::GetTouScheduleResponse) -> Self {
        TouScheduleBody::new(
            r.enabled,
            &r.windows,
            [&r.active_window, &r.timezone, &r.next_change],
        )
    }
}

impl From<&pb::SetTouScheduleResponse> for TouScheduleBody {
    fn from(r: &pb::SetTouScheduleResponse) -> Self {
        TouScheduleBody::new(
            r.enabled,
            &r.windows,
            [&r.active_window, &r.timezone, &r.next_change],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_estimate_that_overflowed_is_null_not_a_number_json_cannot_carry() {
        let e = pb::EstimateProfitabilityResponse {
            hashrate_ghs: 10_000.0,
            power_watt: 1300.0,
            btc_per_day: 1.0,
            revenue_per_day: f64::INFINITY,
            energy_kwh_per_day: 31.2,
            cost_per_day: 3.123_456,
            margin_per_day: f64::INFINITY,
            break_even_price_per_kwh: f64::NAN,
            currency: "USD".into(),
            ..Default::default()
        };
        let body = ProfitabilityBody::from(&e);
        assert_eq!(body.revenue_per_day, None);
        assert_eq!(body.margin_per_day, None);
        assert_eq!(body.break_even_price_per_kwh, None);
        assert_eq!(body.cost_per_day, Some(3.1235));
        let text = serde_json::to_value(&body).unwrap();
        assert!(text["revenue_per_day"].is_null(), "{text}");
        assert_eq!(text["energy_kwh_per_day"], 31.2);
        assert_eq!(text["hashrate_ths"], 10.0);
    }
}
