//! Fuzz the config file parser and validator (`svcos_common::config`), the way every service
//! loads its config at start and the gateway imports one.
//!
//! Invariants: nothing panics; a config that parses and validates serialises (the gateway saves
//! it with `to_toml`), loads again from that text to the same TOML (so a service never
//! crash-loops on a file the gateway wrote), and survives the JSON path of `GET /api/config` →
//! `POST /api/config` (serialised to JSON, parsed back, still valid).
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use svcos_common::config::Config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(config) = Config::from_toml_str(text, Path::new("fuzz.toml")) else {
        return;
    };
    let saved = config.to_toml();
    let reloaded = Config::from_toml_str(&saved, Path::new("saved.toml"))
        .unwrap_or_else(|e| panic!("a validated config must load again: {e}\n{saved}"));
    assert_eq!(reloaded.to_toml(), saved, "save → load → save is stable");

    let json = serde_json::to_value(&config).expect("config serialises to JSON");
    let back: Config = serde_json::from_value(json.clone())
        .unwrap_or_else(|e| panic!("GET /api/config JSON must parse back: {e}\n{json}"));
    back.validate()
        .unwrap_or_else(|e| panic!("the JSON round trip must stay valid: {e}\n{json}"));
});
