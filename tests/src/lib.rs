//! Helpers for end-to-end tests: locate the built `svcos` binary.

use std::path::PathBuf;

/// Path of the `svcos` executable built in this workspace's target directory.
pub fn svcos_bin() -> PathBuf {
    if let Ok(p) = std::env::var("SVCOS_BIN") {
        return PathBuf::from(p);
    }
    let mut dir = std::env::current_exe().expect("test exe path");
    dir.pop();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir.join("svcos")
}
