//! Per-chip health verdicts (`/api/chips/health`) and per-chain diagnostics
//! (`/api/diagnostics/chain`), both judged from hw-agent's telemetry.

use std::collections::BTreeMap;

use serde::Serialize;
use svcos_common::chiphealth::{self, ChipCounts};
use svcos_proto::hwagent::v1::{ChainState, ChainTelemetry, Telemetry};

use crate::{enum_word, round};

/// One chip's verdict.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ChipHealth {
    /// Chip index on its chain.
    pub index: u32,
    /// ok, weak or dead.
    pub verdict: &'static str,
    /// Verified nonces (lifetime).
    pub nonces: u64,
    /// Nonces that failed verification.
    pub hw_errors: u64,
    /// Nonces its frequency share of the chain's would give, 1 decimal; `null` when that is
    /// not a number (a non-finite frequency reading).
    pub expected_nonces: Option<f64>,
    /// Why (empty when ok).
    pub evidence: Vec<String>,
}

/// One chain's chips.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ChainHealth {
    /// Chain id.
    pub chain_id: u32,
    /// Its chips.
    pub chips: Vec<ChipHealth>,
}

/// `GET /api/chips/health` (`svcos.api.chips.health.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ChipsHealthBody {
    /// `svcos.api.chips.health.v1`.
    pub schema: &'static str,
    /// The rule, in words.
    pub rule: &'static str,
    /// Chips per verdict (ok, weak, dead; each present).
    pub summary: BTreeMap<&'static str, u32>,
    /// Per chain.
    pub chains: Vec<ChainHealth>,
}

fn chip_counts(c: &ChainTelemetry) -> Vec<ChipCounts> {
    c.chips
        .iter()
        .map(|chip| ChipCounts {
            answering: chip.alive,
            nonces: chip.nonces,
            hw_errors: chip.hw_errors,
            frequency_mhz: chip.frequency_mhz,
        })
        .collect()
}

impl ChipsHealthBody {
    /// Every chip judged by the one rule (`svcos_common::chiphealth`) over hw-agent's lifetime
    /// counters.
    pub fn new(t: &Telemetry) -> Self {
        let mut summary = BTreeMap::from([("ok", 0u32), ("weak", 0), ("dead", 0)]);
        let chains = t
            .chains
            .iter()
            .map(|c| {
                let judged = chiphealth::judge_chain(c.nonces, &chip_counts(c));
                let chips = c
                    .chips
                    .iter()
                    .zip(judged)
                    .map(|(chip, j)| {
                        let verdict = j.verdict.as_str();
                        *summary.entry(verdict).or_default() += 1;
                        ChipHealth {
                            index: chip.index,
                            verdict,
                            nonces: chip.nonces,
                            hw_errors: chip.hw_errors,
                            expected_nonces: Some(round(j.expected_nonces, 1))
                                .filter(|x| x.is_finite()),
                            evidence: j.reasons,
                        }
                    })
                    .collect();
                ChainHealth {
                    chain_id: c.chain_id,
                    chips,
                }
            })
            .collect();
        ChipsHealthBody {
            schema: "svcos.api.chips.health.v1",
            rule: chiphealth::RULE,
            summary,
            chains,
        }
    }
}

/// One chain's diagnosis.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ChainDiagnosis {
    /// Chain id.
    pub chain_id: u32,
    /// The chain's state word (mining, fault, missing, ...).
    pub state: String,
    /// No findings.
    pub healthy: bool,
    /// What is wrong, in words.
    pub findings: Vec<String>,
    /// Nonces that failed verification.
    pub hw_errors: u64,
    /// Verified nonces.
    pub nonces: u64,
}

impl From<&ChainTelemetry> for ChainDiagnosis {
    fn from(c: &ChainTelemetry) -> Self {
        let state = c.state();
        let mut findings = Vec::new();
        if c.chips_detected < c.chips_expected {
            findings.push(format!(
                "{} of {} chips answer",
                c.chips_detected, c.chips_expected
            ));
        }
        let word = enum_word(state.as_str_name(), "CHAIN_STATE_");
        if matches!(state, ChainState::Fault | ChainState::Missing) {
            findings.push(format!("chain is {word}"));
        }
        let expected = c.hashrate.as_ref().map_or(0.0, |h| h.ghs_expected);
        let actual = c.hashrate.as_ref().map_or(0.0, |h| h.ghs_1m);
        if expected > 0.0 && actual < expected * 0.8 && state == ChainState::Mining {
            findings.push(format!(
                "hashrate {actual:.0} GH/s is below 80 % of the expected {expected:.0} GH/s"
            ));
        }
        ChainDiagnosis {
            chain_id: c.chain_id,
            state: word,
            healthy: findings.is_empty(),
            findings,
            hw_errors: c.hw_errors,
            nonces: c.nonces,
        }
    }
}

/// `GET /api/diagnostics/chain` (`svcos.api.diagnostics.chain.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ChainDiagnosticsBody {
    /// `svcos.api.diagnostics.chain.v1`.
    pub schema: &'static str,
    /// Per chain.
    pub chains: Vec<ChainDiagnosis>,
}

impl ChainDiagnosticsBody {
    /// Every chain of the snapshot.
    pub fn new(t: &Telemetry) -> Self {
        ChainDiagnosticsBody {
            schema: "svcos.api.diagnostics.chain.v1",
            chains: t.chains.iter().map(ChainDiagnosis::from).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use svcos_proto::hwagent::v1::{ChipTelemetry, Hashrate};

    fn chain(mhz: f64) -> ChainTelemetry {
        ChainTelemetry {
            chain_id: 1,
            nonces: 100,
            chips_expected: 3,
            chips_detected: 2,
            state: ChainState::Mining as i32,
            hashrate: Some(Hashrate {
                ghs_1m: 50.0,
                ghs_expected: 100.0,
                ..Default::default()
            }),
            chips: (0..2)
                .map(|index| ChipTelemetry {
                    index,
                    alive: true,
                    nonces: 50,
                    frequency_mhz: mhz,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn expected_nonces_that_is_not_a_number_is_null() {
        // An infinite frequency reading makes the share inf/inf.
        let t = Telemetry {
            chains: vec![chain(f64::INFINITY)],
            ..Default::default()
        };
        let v = serde_json::to_value(ChipsHealthBody::new(&t)).unwrap();
        assert!(
            v["chains"][0]["chips"][0]["expected_nonces"].is_null(),
            "{v}"
        );
        let t = Telemetry {
            chains: vec![chain(500.0)],
            ..Default::default()
        };
        let v = serde_json::to_value(ChipsHealthBody::new(&t)).unwrap();
        assert_eq!(v["chains"][0]["chips"][0]["expected_nonces"], 50.0, "{v}");
        assert_eq!(
            v["summary"]["ok"].as_u64().unwrap()
                + v["summary"]["weak"].as_u64().unwrap()
                + v["summary"]["dead"].as_u64().unwrap(),
            2
        );
    }

    #[test]
    fn chain_findings_name_missing_chips_and_low_hashrate() {
        let d = ChainDiagnosis::from(&chain(500.0));
        assert!(!d.healthy);
        assert_eq!(d.state, "mining");
        assert_eq!(d.findings.len(), 2, "{:?}", d.findings);
        assert!(d.findings[0].starts_with("2 of 3 chips"));
        assert!(d.findings[1].contains("below 80 %"));
    }
}
