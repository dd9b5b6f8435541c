//! The three chip-health surfaces (REST `/api/chips/health`, hw-agent's chip-health
//! diagnostics, the tuner's `GetChipHealth`) give every chip the same verdict for the same
//! counts: each maps its own input through its own code path into the one rule.

use std::collections::BTreeMap;

use svcos_proto::hwagent::v1::{ChainTelemetry, ChipTelemetry, Telemetry};
use svcos_tuner::search::{ChainStats, ChipStats};

/// (alive, nonces, hw errors, MHz) per chip: healthy, dead, silent, erring, lucky, starved.
const CHIPS: &[(bool, u64, u64, f64)] = &[
    (true, 400, 2, 500.0),
    (false, 380, 0, 500.0),
    (true, 0, 0, 500.0),
    (true, 300, 60, 500.0),
    (true, 54, 4, 75.0),
    (true, 90, 0, 500.0),
    (true, 410, 12, 500.0),
    (true, 200, 0, 250.0),
];

fn telemetry() -> Telemetry {
    let chips: Vec<ChipTelemetry> = CHIPS
        .iter()
        .enumerate()
        .map(
            |(i, &(alive, nonces, hw_errors, frequency_mhz))| ChipTelemetry {
                index: i as u32,
                address: (i * 4) as u32,
                frequency_mhz,
                nonces,
                hw_errors,
                alive,
                ..Default::default()
            },
        )
        .collect();
    let nonces = chips.iter().map(|c| c.nonces).sum();
    let hw_errors = chips.iter().map(|c| c.hw_errors).sum();
    Telemetry {
        chains: vec![ChainTelemetry {
            chain_id: 2,
            nonces,
            hw_errors,
            chips,
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[test]
fn rest_diagnostics_and_tuner_agree_on_every_chip() {
    let t = telemetry();

    let rest = svcos_gateway::handlers::status::chips_health_view(&t);
    let rest: BTreeMap<u32, String> = rest["chains"][0]["chips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["index"].as_u64().unwrap() as u32,
                c["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect();

    // Diagnostics over a window whose start counters were zero: the deltas are the counts.
    let chain = &t.chains[0];
    let counts: Vec<_> = chain
        .chips
        .iter()
        .map(|c| svcos_common::chiphealth::ChipCounts {
            answering: c.alive,
            nonces: c.nonces,
            hw_errors: c.hw_errors,
            frequency_mhz: c.frequency_mhz,
        })
        .collect();
    let diag: BTreeMap<u32, String> =
        svcos_hw_agent::diagnostics::checks::judge_window(chain.nonces, &counts)
            .iter()
            .enumerate()
            .map(|(i, j)| (i as u32, j.verdict.as_str().to_string()))
            .collect();

    // The tuner over a window since a zero base.
    let stats = vec![ChainStats {
        chain_id: chain.chain_id,
        nonces: chain.nonces,
        hw_errors: chain.hw_errors,
        chips: chain
            .chips
            .iter()
            .map(|c| ChipStats {
                chip: c.index,
                nonces: c.nonces,
                hw_errors: c.hw_errors,
                alive: c.alive,
            })
            .collect(),
    }];
    let tuner: BTreeMap<u32, String> = svcos_tuner::engine::chip_health_of(&stats, &t, None)
        .into_iter()
        .map(|c| (c.chip, c.verdict))
        .collect();

    assert_eq!(rest, diag);
    assert_eq!(rest, tuner);
    // The data covers every verdict, so agreement is not agreement on "ok".
    let words: Vec<&str> = rest.values().map(String::as_str).collect();
    assert_eq!(
        words,
        ["ok", "dead", "dead", "weak", "ok", "weak", "ok", "ok"],
        "{rest:?}"
    );
}
