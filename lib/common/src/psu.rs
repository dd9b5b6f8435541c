//! The PSU catalogue and the bypass rule: which PSU models the PMBus driver knows, what output
//! range and rating each has, and which `[power.psu_override]` declarations may change them.
//!
//! One home for both, so the catalogue route (`/api/hardware/psu_catalog`) and hw-agent's
//! bypass matrix (`/api/hardware/psu_bypass_matrix`, computed by hw-agent from the PSU it reads)
//! never disagree. The rule, per model:
//!
//! | Model | Output voltage window | Rating in force |
//! |---|---|---|
//! | in the catalogue, voltage control | the catalogue range, narrowed by the override's `voltage_min_v`/`voltage_max_v` (never widened) | the catalogue rating, lowered by an enabled override's `max_watt` (never raised) |
//! | in the catalogue, fixed output | the catalogue range; the override's voltages are refused | as above |
//! | not in the catalogue | the override's declared range, else the PMBus command range (1-16 V) | an enabled override's `max_watt`, else none |
//!
//! The catalogue has no firmware-specific entries: no PSU maker publishes which revisions
//! behave differently, so every row applies to any firmware revision, and the revision the PSU
//! reports (PMBus `MFR_REVISION`) is shown beside the row it matched.

use serde::Serialize;

use crate::bounds::VOLTAGE_MV;
use crate::config::PsuOverrideConfig;

/// A PSU model the PMBus driver knows.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PsuModel {
    /// Model name as MFR_MODEL reports it.
    pub model: &'static str,
    /// Lowest output, V.
    pub output_min_v: f64,
    /// Highest output, V.
    pub output_max_v: f64,
    /// Rated output power, W.
    pub rated_watt: f64,
    /// The driver can set its output voltage.
    pub voltage_control: bool,
}

const fn psu(
    model: &'static str,
    output_min_v: f64,
    output_max_v: f64,
    rated_watt: f64,
    voltage_control: bool,
) -> PsuModel {
    PsuModel {
        model,
        output_min_v,
        output_max_v,
        rated_watt,
        voltage_control,
    }
}

/// The PSU models of the catalogue.
pub const PSU_MODELS: &[PsuModel] = &[
    psu("APW3++", 12.0, 12.0, 1600.0, false),
    psu("APW7", 12.0, 12.0, 1800.0, false),
    psu("APW9+", 14.5, 21.0, 3600.0, true),
    psu("APW12", 12.0, 15.0, 3600.0, true),
];

/// The catalogue entry of a model as MFR_MODEL reports it (trimmed, case-insensitive).
pub fn find(model: &str) -> Option<&'static PsuModel> {
    let model = model.trim();
    PSU_MODELS
        .iter()
        .find(|m| m.model.eq_ignore_ascii_case(model))
}

/// What an override field may do to a model's figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum OverrideRule {
    /// It may only narrow (voltages) or lower (power) the catalogue figure.
    Narrow,
    /// It is ignored: the model's output is fixed.
    Refused,
    /// The catalogue has no figure: the override declares it.
    Declare,
}

impl OverrideRule {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            OverrideRule::Narrow => "narrow",
            OverrideRule::Refused => "refused",
            OverrideRule::Declare => "declare",
        }
    }
}

/// One row of the bypass matrix: a model (or "unknown model") and what overrides do to it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BypassRow {
    /// Catalogue model; `None` for the row of every model not in the catalogue.
    pub model: Option<&'static PsuModel>,
    /// `[power.psu_override].voltage_min_v` / `voltage_max_v`.
    pub voltage_override: OverrideRule,
    /// `[power.psu_override].max_watt`.
    pub power_override: OverrideRule,
}

/// The rule of a model (`None`: not in the catalogue).
pub fn row(model: Option<&'static PsuModel>) -> BypassRow {
    match model {
        Some(m) => BypassRow {
            model: Some(m),
            voltage_override: if m.voltage_control {
                OverrideRule::Narrow
            } else {
                OverrideRule::Refused
            },
            power_override: OverrideRule::Narrow,
        },
        None => BypassRow {
            model: None,
            voltage_override: OverrideRule::Declare,
            power_override: OverrideRule::Declare,
        },
    }
}

/// Every row: the catalogue in its order, then the unknown-model row.
pub fn matrix() -> Vec<BypassRow> {
    PSU_MODELS
        .iter()
        .map(|m| row(Some(m)))
        .chain([row(None)])
        .collect()
}

/// The voltage window and rating in force for a PSU, with where each came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    /// Lowest output, V.
    pub voltage_min_v: f64,
    /// Highest output, V.
    pub voltage_max_v: f64,
    /// `catalogue`, `psu_override` (narrowed or declared) or `pmbus_range`.
    pub voltage_source: &'static str,
    /// Rating in force, W; `None` when nothing declares one.
    pub rated_watt: Option<f64>,
    /// `catalogue`, `psu_override`, or empty when none.
    pub rated_source: &'static str,
}

/// Apply the rule of `model`'s row to an override section.
pub fn window(model: Option<&'static PsuModel>, o: &PsuOverrideConfig) -> Window {
    let r = row(model);
    let declared_min = (o.enabled && o.voltage_min_v > 0.0).then_some(o.voltage_min_v);
    let declared_max = (o.enabled && o.voltage_max_v > 0.0).then_some(o.voltage_max_v);
    let declared_watt = (o.enabled && o.max_watt > 0.0).then_some(o.max_watt);
    match r.model {
        Some(m) => {
            let (mut lo, mut hi, mut vsrc) = (m.output_min_v, m.output_max_v, "catalogue");
            if r.voltage_override == OverrideRule::Narrow {
                if let Some(v) = declared_min.filter(|v| *v > lo && *v <= hi) {
                    (lo, vsrc) = (v, "psu_override");
                }
                if let Some(v) = declared_max.filter(|v| *v < hi && *v >= lo) {
                    (hi, vsrc) = (v, "psu_override");
                }
            }
            let (watt, wsrc) = match declared_watt.filter(|w| *w < m.rated_watt) {
                Some(w) => (w, "psu_override"),
                None => (m.rated_watt, "catalogue"),
            };
            Window {
                voltage_min_v: lo,
                voltage_max_v: hi,
                voltage_source: vsrc,
                rated_watt: Some(watt),
                rated_source: wsrc,
            }
        }
        None => {
            let (lo, hi, vsrc) = match (declared_min, declared_max) {
                (Some(lo), Some(hi)) => (lo, hi, "psu_override"),
                _ => (
                    VOLTAGE_MV.min / 1000.0,
                    VOLTAGE_MV.max / 1000.0,
                    "pmbus_range",
                ),
            };
            Window {
                voltage_min_v: lo,
                voltage_max_v: hi,
                voltage_source: vsrc,
                rated_watt: declared_watt,
                rated_source: if declared_watt.is_some() {
                    "psu_override"
                } else {
                    ""
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn over(enabled: bool, watt: f64, min_v: f64, max_v: f64) -> PsuOverrideConfig {
        PsuOverrideConfig {
            enabled,
            model: String::new(),
            max_watt: watt,
            voltage_min_v: min_v,
            voltage_max_v: max_v,
        }
    }

    #[test]
    fn lookup_is_trimmed_and_case_insensitive() {
        assert_eq!(find(" apw12 ").unwrap().model, "APW12");
        assert!(find("APW99").is_none());
    }

    #[test]
    fn the_rule_table() {
        let apw12 = find("APW12");
        let apw3 = find("APW3++");
        // (model, override, window min/max, voltage source, rating, rating source)
        let cases = [
            (
                apw12,
                over(false, 0.0, 0.0, 0.0),
                (12.0, 15.0),
                "catalogue",
                Some(3600.0),
                "catalogue",
            ),
            // Narrowed on both ends, rating lowered.
            (
                apw12,
                over(true, 3000.0, 12.5, 14.0),
                (12.5, 14.0),
                "psu_override",
                Some(3000.0),
                "psu_override",
            ),
            // Widening and raising are ignored.
            (
                apw12,
                over(true, 4000.0, 10.0, 20.0),
                (12.0, 15.0),
                "catalogue",
                Some(3600.0),
                "catalogue",
            ),
            // A disabled override declares nothing.
            (
                apw12,
                over(false, 3000.0, 12.5, 14.0),
                (12.0, 15.0),
                "catalogue",
                Some(3600.0),
                "catalogue",
            ),
            // A fixed-output model refuses voltages but takes a lower rating.
            (
                apw3,
                over(true, 1200.0, 11.0, 11.5),
                (12.0, 12.0),
                "catalogue",
                Some(1200.0),
                "psu_override",
            ),
            // Unknown model: the override declares, else the PMBus range and no rating.
            (
                None,
                over(true, 2000.0, 10.0, 14.0),
                (10.0, 14.0),
                "psu_override",
                Some(2000.0),
                "psu_override",
            ),
            (
                None,
                over(false, 0.0, 0.0, 0.0),
                (1.0, 16.0),
                "pmbus_range",
                None,
                "",
            ),
        ];
        for (i, (model, o, (lo, hi), vsrc, watt, wsrc)) in cases.into_iter().enumerate() {
            let w = window(model, &o);
            assert_eq!(
                (w.voltage_min_v, w.voltage_max_v, w.voltage_source),
                (lo, hi, vsrc),
                "case {i}"
            );
            assert_eq!((w.rated_watt, w.rated_source), (watt, wsrc), "case {i}");
        }
    }

    #[test]
    fn the_matrix_has_every_model_and_the_unknown_row() {
        let m = matrix();
        assert_eq!(m.len(), PSU_MODELS.len() + 1);
        assert_eq!(m[0].voltage_override, OverrideRule::Refused);
        assert_eq!(m[3].voltage_override, OverrideRule::Narrow);
        assert!(m.last().unwrap().model.is_none());
        assert_eq!(m.last().unwrap().power_override, OverrideRule::Declare);
    }
}
