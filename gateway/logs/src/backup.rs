//! The log backup (`GET /api/log/backup`) and its manifest: which files it holds and the tar.gz
//! of them. Service logs (as the supervisor wrote them), diagnostic reports and the debug audit
//! log; never the config (pool passwords) nor auth state.

use std::io::Write;
use std::path::{Path, PathBuf};

use svcos_api_types::diagnostics::LogFile;

/// Files a backup holds: (name in the archive, path), `logs/<service>.log[.1]` from `logs_dir`
/// and `diagnostics/*.json[l]` from `diagnostics_dir` (hw-agent's reports and audit log).
pub fn files(logs_dir: &Path, diagnostics_dir: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let mut add_dir = |prefix: &str, dir: &Path, keep: &dyn Fn(&str) -> bool| {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(keep))
            .collect();
        entries.sort();
        for p in entries {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            out.push((format!("{prefix}/{name}"), p.clone()));
        }
    };
    add_dir("logs", logs_dir, &|n: &str| {
        n.ends_with(".log") || n.ends_with(".log.1")
    });
    add_dir("diagnostics", diagnostics_dir, &|n: &str| {
        n.ends_with(".json") || n.contains(".jsonl")
    });
    out
}

/// The manifest rows of `files`: size, modification time, whether the gateway can read it.
pub fn manifest(files: Vec<(String, PathBuf)>) -> Vec<LogFile> {
    files
        .into_iter()
        .map(|(name, path)| {
            let meta = std::fs::metadata(&path).ok();
            LogFile {
                name,
                bytes: meta.as_ref().map(|m| m.len()),
                modified_ms: meta
                    .and_then(|m| m.modified().ok())
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map(|d| d.as_millis() as u64),
                readable: std::fs::File::open(&path).is_ok(),
            }
        })
        .collect()
}

/// The tar.gz of `files`, each under `svcos-logs/<name>`.
pub fn archive(files: &[(String, PathBuf)]) -> std::io::Result<Vec<u8>> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    for (name, path) in files {
        // A file rotated away between listing and reading is skipped, not an error.
        if let Ok(mut f) = std::fs::File::open(path) {
            tar.append_file(format!("svcos-logs/{name}"), &mut f)?;
        }
    }
    let mut gz = tar.into_inner()?;
    gz.flush()?;
    gz.finish()
}
