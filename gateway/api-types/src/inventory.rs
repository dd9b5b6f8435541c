//! Hardware inventory bodies: the hashboards' PIC controllers, the PSU bypass matrix, the
//! chips' PVT table and the environment recipe. hw-agent reads and decides all of it
//! (`HwDiagnosticsService.GetPicInfo`, `GetPsuBypassMatrix`, `GetPvtTable`, `GetEnvRecipe`);
//! these conversions only shape its answers.

use serde::Serialize;
use svcos_proto::hwagent::v1::{
    ChainPvt, ChipPvt, FittedPsuWindow, GetEnvRecipeResponse, GetPicInfoResponse,
    GetPsuBypassMatrixResponse, GetPvtTableResponse, PicInfo, PsuBypassRow, RecipeEntry,
};

use crate::round;

fn text(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

/// One hashboard's PIC voltage controller.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PicBoard {
    /// Chain (hashboard) number.
    pub chain_id: u32,
    /// 7-bit I2C address.
    pub address: u32,
    /// The address as `0x..`.
    pub address_hex: String,
    /// The PIC answered; otherwise the readings are `null` and `error` says why.
    pub answered: bool,
    /// Firmware (application) version it reports.
    pub firmware_version: Option<u32>,
    /// The setpoint it holds, read back, mV.
    pub setpoint_mv: Option<f64>,
    /// The board's rail as it measures it, mV (0 while the chain is unpowered).
    pub measured_mv: Option<f64>,
    /// What hw-agent last wrote to it, mV; `null` when nothing since hw-agent started.
    pub written_mv: Option<f64>,
    /// Why it did not answer.
    pub error: Option<String>,
}

impl From<&PicInfo> for PicBoard {
    fn from(p: &PicInfo) -> Self {
        PicBoard {
            chain_id: p.chain_id,
            address: p.address,
            address_hex: format!("{:#04x}", p.address),
            answered: p.answered,
            firmware_version: p.firmware_version,
            setpoint_mv: p.setpoint_mv,
            measured_mv: p.measured_mv,
            written_mv: p.written_mv,
            error: text(&p.error),
        }
    }
}

/// `GET /api/hardware/pic_info` (`svcos.api.hardware.pic_info.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PicInfoBody {
    /// `svcos.api.hardware.pic_info.v1`.
    pub schema: &'static str,
    /// I2C bus number.
    pub bus: u32,
    /// One per hashboard with a PIC; empty on boards without (Bitaxe).
    pub boards: Vec<PicBoard>,
}

impl From<&GetPicInfoResponse> for PicInfoBody {
    fn from(r: &GetPicInfoResponse) -> Self {
        PicInfoBody {
            schema: "svcos.api.hardware.pic_info.v1",
            bus: r.bus,
            boards: r.boards.iter().map(PicBoard::from).collect(),
        }
    }
}

/// One row of the bypass matrix.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct BypassRow {
    /// Catalogue model; `null` for the row of every model not in the catalogue.
    pub model: Option<String>,
    /// Firmware revisions the row applies to (`any`).
    pub firmware: String,
    /// Lowest output, V.
    pub voltage_min_v: f64,
    /// Highest output, V.
    pub voltage_max_v: f64,
    /// The driver can set its output voltage.
    pub voltage_control: bool,
    /// Rated output, W; `null` for unknown models.
    pub rated_watt: Option<f64>,
    /// What `[power.psu_override]` voltages may do: `narrow`, `refused` or `declare`.
    pub voltage_override: String,
    /// What `[power.psu_override].max_watt` may do: `narrow` or `declare`.
    pub power_override: String,
}

impl From<&PsuBypassRow> for BypassRow {
    fn from(r: &PsuBypassRow) -> Self {
        BypassRow {
            model: text(&r.model),
            firmware: r.firmware.clone(),
            voltage_min_v: r.voltage_min_v,
            voltage_max_v: r.voltage_max_v,
            voltage_control: r.voltage_control,
            rated_watt: r.rated_watt,
            voltage_override: r.voltage_override.clone(),
            power_override: r.power_override.clone(),
        }
    }
}

/// The fitted PSU against its row.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PsuWindow {
    /// MFR_MODEL as the PSU reports it; `null` when it did not answer.
    pub model: Option<String>,
    /// MFR_REVISION as the PSU reports it; `null` when it did not answer.
    pub firmware: Option<String>,
    /// A catalogue row matched the model.
    pub in_catalogue: bool,
    /// Lowest output in force, V.
    pub voltage_min_v: f64,
    /// Highest output in force, V.
    pub voltage_max_v: f64,
    /// Where the window came from: `catalogue`, `psu_override` or `pmbus_range`.
    pub voltage_source: String,
    /// Rating in force, W; `null` when nothing declares one.
    pub rated_watt: Option<f64>,
    /// Where the rating came from: `catalogue`, `psu_override`; `null` without one.
    pub rated_source: Option<String>,
    /// Output setpoint now, V.
    pub setpoint_v: f64,
    /// The setpoint lies outside the window in force.
    pub bypassed: bool,
    /// Why model or firmware are `null`.
    pub error: Option<String>,
}

impl From<&FittedPsuWindow> for PsuWindow {
    fn from(f: &FittedPsuWindow) -> Self {
        PsuWindow {
            model: text(&f.model),
            firmware: text(&f.firmware),
            in_catalogue: f.in_catalogue,
            voltage_min_v: f.voltage_min_v,
            voltage_max_v: f.voltage_max_v,
            voltage_source: f.voltage_source.clone(),
            rated_watt: f.rated_watt,
            rated_source: text(&f.rated_source),
            setpoint_v: round(f.setpoint_v, 3),
            bypassed: f.bypassed,
            error: text(&f.error),
        }
    }
}

/// `GET /api/hardware/psu_bypass_matrix` (`svcos.api.hardware.psu_bypass_matrix.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PsuBypassMatrixBody {
    /// `svcos.api.hardware.psu_bypass_matrix.v1`.
    pub schema: &'static str,
    /// The catalogue's models, then the unknown-model row.
    pub rows: Vec<BypassRow>,
    /// The PSU fitted; `null` on boards without a PMBus PSU.
    pub fitted: Option<PsuWindow>,
}

impl From<&GetPsuBypassMatrixResponse> for PsuBypassMatrixBody {
    fn from(r: &GetPsuBypassMatrixResponse) -> Self {
        PsuBypassMatrixBody {
            schema: "svcos.api.hardware.psu_bypass_matrix.v1",
            rows: r.rows.iter().map(BypassRow::from).collect(),
            fitted: r.fitted.as_ref().map(PsuWindow::from),
        }
    }
}

/// One chip's PVT readings.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PvtChip {
    /// Index in chain order.
    pub chip: u32,
    /// Address on the chain.
    pub address: u32,
    /// The chip answered every PVT register.
    pub answered: bool,
    /// Junction temperature, C (2 decimals).
    pub temperature_c: Option<f64>,
    /// Core (domain) voltage, mV (1 decimal).
    pub voltage_mv: Option<f64>,
    /// Ring-oscillator frequency, MHz (3 decimals): the die's speed.
    pub ring_oscillator_mhz: Option<f64>,
}

impl From<&ChipPvt> for PvtChip {
    fn from(c: &ChipPvt) -> Self {
        PvtChip {
            chip: c.chip,
            address: c.address,
            answered: c.answered,
            temperature_c: c.temperature_c.map(|v| round(v, 2)),
            voltage_mv: c.voltage_mv.map(|v| round(v, 1)),
            ring_oscillator_mhz: c.ring_oscillator_mhz.map(|v| round(v, 3)),
        }
    }
}

/// One chain's PVT table.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PvtChain {
    /// Chain number.
    pub chain_id: u32,
    /// Why the chain could not be read; `chips` is then empty.
    pub error: Option<String>,
    /// The chain's board sensor, read right after the registers, C.
    pub sensor_board_c: Option<f64>,
    /// The chain's chip-side (hottest chip) sensor, read right after the registers, C.
    pub sensor_chip_c: Option<f64>,
    /// Every chip.
    pub chips: Vec<PvtChip>,
}

impl From<&ChainPvt> for PvtChain {
    fn from(c: &ChainPvt) -> Self {
        PvtChain {
            chain_id: c.chain_id,
            error: text(&c.error),
            sensor_board_c: c.sensor_board_c,
            sensor_chip_c: c.sensor_chip_c,
            chips: c.chips.iter().map(PvtChip::from).collect(),
        }
    }
}

/// `GET /api/miner/pvt-table` (`svcos.api.miner.pvt_table.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PvtTableBody {
    /// `svcos.api.miner.pvt_table.v1`.
    pub schema: &'static str,
    /// When hw-agent read the registers, Unix ms.
    pub read_at_ms: i64,
    /// Every chain.
    pub chains: Vec<PvtChain>,
}

impl From<&GetPvtTableResponse> for PvtTableBody {
    fn from(r: &GetPvtTableResponse) -> Self {
        PvtTableBody {
            schema: "svcos.api.miner.pvt_table.v1",
            read_at_ms: r.read_at_ms,
            chains: r.chains.iter().map(PvtChain::from).collect(),
        }
    }
}

/// One setting in force and where it came from.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RecipeItem {
    /// Setting name.
    pub name: String,
    /// A number; `null` for a word or when nothing is set.
    pub value: Option<f64>,
    /// A word (`auto`, `manual`, `home`...); `null` for a number.
    pub text: Option<String>,
    /// Unit of `value`; `null` for none.
    pub unit: Option<String>,
    /// `config:<key>`, `default:<key>`, `mode:<mode>`, `governor:<limit>`, `api`, `rpc`, `thermal_pid`.
    pub source: String,
}

impl From<&RecipeEntry> for RecipeItem {
    fn from(e: &RecipeEntry) -> Self {
        RecipeItem {
            name: e.name.clone(),
            value: e.value,
            text: text(&e.text),
            unit: text(&e.unit),
            source: e.source.clone(),
        }
    }
}

/// `GET /api/env/recipe` (`svcos.api.env.recipe.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EnvRecipeBody {
    /// `svcos.api.env.recipe.v1`.
    pub schema: &'static str,
    /// `[system].mode` in force.
    pub mode: String,
    /// Fan mode and duty, and how the fan cap is honoured.
    pub cooling: Vec<RecipeItem>,
    /// The fan policy: PID target and duty range.
    pub fan: Vec<RecipeItem>,
    /// Temperature limits.
    pub thermal: Vec<RecipeItem>,
    /// Power target, hard limit, backstop and sleep.
    pub power: Vec<RecipeItem>,
}

impl From<&GetEnvRecipeResponse> for EnvRecipeBody {
    fn from(r: &GetEnvRecipeResponse) -> Self {
        let part = |p: &str| {
            r.entries
                .iter()
                .filter(|e| e.part == p)
                .map(RecipeItem::from)
                .collect()
        };
        EnvRecipeBody {
            schema: "svcos.api.env.recipe.v1",
            mode: r.mode.clone(),
            cooling: part("cooling"),
            fan: part("fan"),
            thermal: part("thermal"),
            power: part("power"),
        }
    }
}
