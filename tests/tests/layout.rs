//! The layout's claims (ARCHITECTURE.md, docs/DESIGN.md "Crate map"), checked against the
//! workspace itself: each folder holds one kind of crate and imports run one way only.
//!
//! - `proto/` and `lib/*` are libraries every process may use; they use nothing above them.
//! - `services/*` are processes: each is named after a `ServiceName` and uses only `lib/*` and
//!   `proto/`, never another process's crate, the gateway's or the supervisor's.
//! - `gateway/*` is the gateway process and the libraries only it calls (setup wizard, fleet).
//! - `supervisor/` uses only `lib/*` and `proto/`; `svcos/`, the one binary, ties them together.
//!
//! Development dependencies are left out: a test rig may reach anywhere.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use svcos_common::ServiceName;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Crate name → (folder relative to the root, normal dependencies inside the workspace).
fn workspace() -> BTreeMap<String, (String, Vec<String>)> {
    let root = workspace_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(&root)
        .output()
        .expect("cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let root = meta["workspace_root"].as_str().unwrap().to_string();
    let mut crates = BTreeMap::new();
    for p in meta["packages"].as_array().unwrap() {
        let manifest = p["manifest_path"].as_str().unwrap();
        let dir = Path::new(manifest)
            .parent()
            .unwrap()
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let deps = p["dependencies"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["kind"].is_null() && d["path"].is_string())
            .map(|d| d["name"].as_str().unwrap().to_string())
            .collect();
        crates.insert(p["name"].as_str().unwrap().to_string(), (dir, deps));
    }
    crates
}

fn layer(dir: &str) -> &str {
    match dir.split('/').next().unwrap() {
        "proto" | "lib" => "lib",
        top => top,
    }
}

#[test]
fn imports_run_one_way_between_the_folders() {
    let crates = workspace();
    assert!(crates.len() > 15, "{crates:?}");
    let dir_of = |name: &str| crates[name].0.clone();
    let mut wrong = Vec::new();
    for (name, (dir, deps)) in &crates {
        let allowed: &[&str] = match layer(dir) {
            "lib" | "services" | "supervisor" => &["lib"],
            "gateway" => &["lib", "gateway"],
            // The binary, the end-to-end tests, the benchmarks and the public data server.
            _ => continue,
        };
        for d in deps {
            let to = dir_of(d);
            if !allowed.contains(&layer(&to)) {
                wrong.push(format!("{name} ({dir}) uses {d} ({to})"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn every_folder_under_services_is_a_process() {
    let processes: Vec<&str> = ServiceName::ALL.iter().map(|s| s.as_str()).collect();
    let crates = workspace();
    let mut seen = 0;
    for (name, (dir, _)) in &crates {
        if let Some(folder) = dir.strip_prefix("services/") {
            seen += 1;
            assert!(
                processes.contains(&folder),
                "{name} lives in {dir} but no process is called {folder}; libraries go in lib/ \
                 (or gateway/ when only the gateway calls them)"
            );
        }
    }
    assert!(seen >= 6, "{seen}");
    // And the other way: the libraries are not filed among the processes.
    for lib in ["svcos-common", "svcos-work", "svcos-bm13xx"] {
        assert!(
            crates[lib].0.starts_with("lib/"),
            "{lib}: {}",
            crates[lib].0
        );
    }
}

#[test]
fn architecture_md_is_a_ten_minute_read() {
    let text = std::fs::read_to_string(workspace_root().join("ARCHITECTURE.md")).unwrap();
    let words = text.split_whitespace().count();
    assert!(
        words <= 3_500,
        "ARCHITECTURE.md has {words} words (at most 3 500)"
    );
}
