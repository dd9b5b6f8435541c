//! The error-code corpus and the power profiles as the service loads them (the copy compiled
//! into the binary): size floor, unique keys, a complete source on every record, nothing
//! invented, and simulated points labelled as such. The data is built by
//! `open-data/tools/gen_error_codes.py`; these checks hold whatever the generator produces.

use std::collections::{BTreeMap, HashSet};

use serde_json::{Map, Value};
use svcos_open_data::datasets::{Records, Source, feed_from_text, load_all, manifest};

fn records() -> Records {
    let src = Source::default();
    let infos = manifest(&src).unwrap();
    let (name, text) = src.read(&infos["price-index"].file).unwrap();
    let feed = feed_from_text(&name, &text, &infos).unwrap();
    load_all(&src, &infos, &feed).unwrap()
}

fn text<'a>(r: &'a Map<String, Value>, path: &[&str]) -> Option<&'a str> {
    let mut v = r.get(path[0])?;
    for p in &path[1..] {
        v = v.get(p)?;
    }
    v.as_str()
}

#[test]
fn error_codes_have_a_complete_source_and_nothing_invented() {
    let recs = records();
    let codes = &recs.by_dataset["error-codes"];
    // The spec's corpus is 650 codes; every code here is a real one from a named source (see
    // docs/OPEN-DATA.md), never padded.
    assert!(codes.len() >= 650, "{} codes", codes.len());
    let mut seen = HashSet::new();
    let mut per_maker: BTreeMap<String, usize> = BTreeMap::new();
    for r in codes {
        let code = text(r, &["code"]).unwrap();
        assert!(seen.insert(code.to_string()), "duplicate {code}");
        *per_maker
            .entry(text(r, &["manufacturer_slug"]).unwrap().to_string())
            .or_default() += 1;
        let url = text(r, &["source", "url"]);
        let repo_path = text(r, &["source", "repository"]).zip(text(r, &["source", "path"]));
        assert!(
            url.is_some() || repo_path.is_some(),
            "{code}: no url or repository+path"
        );
        assert!(
            text(r, &["source", "license"]).is_some(),
            "{code}: no licence"
        );
        let date = text(r, &["source", "retrieved"]).unwrap_or_default();
        assert!(
            date.len() == 10 && date.starts_with("20"),
            "{code}: retrieved {date:?}"
        );
        for rule in ["component", "severity", "diy_difficulty"] {
            assert!(
                text(r, &["classification", rule]).is_some(),
                "{code}: {rule} rule"
            );
        }
        // Nothing invented: a repair-cost band needs its own source URL, parts need a
        // source that states them (none of the current sources does).
        match &r["repair_cost_cad"] {
            Value::Null => {}
            band => assert!(
                band["source_url"].as_str().is_some(),
                "{code}: unsourced band"
            ),
        }
        assert_eq!(
            r["replacement_parts"],
            Value::Array(vec![]),
            "{code}: parts"
        );
    }
    // Each source family is present (a generator that silently lost one would pass a count).
    for (maker, floor) in [
        ("microbt", 250),
        ("svcos", 37),
        ("cgminer", 60),
        ("bfgminer", 25),
        ("innosilicon", 20),
        ("canaan", 51),
        ("bitaxe", 90),
        ("stratum-v2", 13),
        ("btcpool", 20),
        ("datum-gateway", 30),
        ("ckpool", 16),
        ("bitmain", 18),
    ] {
        let n = per_maker.get(maker).copied().unwrap_or(0);
        assert!(n >= floor, "{maker}: {n} < {floor}");
    }
    // The Whatsminer slot templates are expanded over slots 0-2 only.
    assert!(seen.contains("WHATSMINER-5052") && !seen.contains("WHATSMINER-5053"));
    assert!(seen.contains("WHATSMINER-2022") && !seen.contains("WHATSMINER-2023"));
    // BFGMiner's table adds only what cgminer's lacks: its own CPU codes 98-103 and GPU codes,
    // never a second copy of a cgminer code with the same meaning (10, MSG_NODEVS).
    assert!(seen.contains("BFGMINER-API-98") && seen.contains("BFGMINER-API-259"));
    assert!(!seen.contains("BFGMINER-API-10") && seen.contains("CGMINER-API-10"));
    // MicroBT's API message codes add only BTMiner's own (132, 135-137): 14, 23 and 45 are
    // cgminer's codes with the same meaning, 131 and 134 are success answers.
    assert!(seen.contains("WHATSMINER-API-132") && !seen.contains("WHATSMINER-API-14"));
    assert!(!seen.contains("WHATSMINER-API-131"));
    // ESP-Miner's Wi-Fi reasons carry ESP-IDF's numbers (15 = 4-way handshake timeout).
    assert!(seen.contains("BITAXE-WIFI-15") && seen.contains("BITAXE-WIFI-212"));
}

#[test]
fn simulated_power_points_are_labelled_and_published_ones_sourced() {
    let recs = records();
    let points = &recs.by_dataset["power-profiles"];
    for p in points {
        let id = text(p, &["id"]).unwrap();
        let kind = text(p, &["kind"]).unwrap();
        assert!(
            text(p, &["source", "url"]).is_some() || text(p, &["source", "path"]).is_some(),
            "{id}"
        );
        if kind == "simulated" {
            assert!(text(p, &["measured_on"]).is_some(), "{id}");
            assert!(
                id.contains("sim"),
                "{id}: a simulated profile says so in its name"
            );
            assert!(
                text(p, &["source", "title"]).unwrap().contains("simulated"),
                "{id}"
            );
        } else {
            assert!(
                text(p, &["source", "url"]).unwrap().starts_with("https://"),
                "{id}"
            );
        }
    }
    // The published tuned S9 point keeps both of its source's figures, and its efficiency is
    // derived from them (85.3 W/TH in the source).
    let tuned: Vec<_> = points
        .iter()
        .filter(|p| text(p, &["kind"]) == Some("tuned"))
        .collect();
    let s9 = tuned
        .iter()
        .find(|p| text(p, &["id"]) == Some("antminer-s9-braiins-asicboost-overclock"))
        .expect("the tuned S9 point");
    assert_eq!(s9["power_w"].as_f64(), Some(1331.0));
    assert_eq!(s9["hashrate_ths"].as_f64(), Some(15.6));
    assert_eq!(s9["efficiency_j_per_th"].as_f64(), Some(85.32));
    assert!(
        s9["step"].as_i64().unwrap() > 0,
        "an overclock is a positive step"
    );
    assert!(tuned.iter().all(|p| text(p, &["measured_on"]).is_none()));
}
