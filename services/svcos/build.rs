//! Link settings of the `svcos` executable (docs/PERFORMANCE.md, issue 15).
//!
//! **Position-dependent (`-no-pie`).** The code stays position-independent (the default
//! relocation model, so proc-macros, build scripts and tests are unaffected); only the final link
//! resolves every absolute address at link time. That drops the dynamic relocations
//! (`.rela.dyn`, ~1 MB of the image) and, more importantly, the loader no longer writes
//! `.data.rel.ro` and the GOT at start: those pages stay clean and file-backed, shared by the
//! supervisor and the seven services instead of one dirty copy per process. The price is no ASLR
//! for the executable's own image (libraries, heap and stacks are still randomised).
//!
//! **No unwind tables when panics abort.** With `panic = "abort"` (the release profile) nothing
//! unwinds: a panic prints its message and aborts, and the supervisor restarts the service. The
//! call-frame tables (`.eh_frame` and its search index `.eh_frame_hdr`, ~1.8 MB, a sixth of the
//! image) would only serve a panic backtrace, and the landing-pad tables (`.gcc_except_table`)
//! only an unwind, so the link drops them. std and the C libraries
//! arrive precompiled with their tables, which is why `-C force-unwind-tables=no` alone does not
//! remove them and the linker has to. A backtrace requested with `RUST_BACKTRACE` comes out
//! empty. A build script cannot see the profile's panic strategy (`CARGO_CFG_PANIC` is the
//! target's default), so the rule keys on the profile: `release` (and `bench`, which inherits
//! it) is the one that sets `panic = "abort"` in the workspace's Cargo.toml. Debug and test
//! builds unwind and keep everything; `SVCOS_KEEP_UNWIND_TABLES=1` keeps them in a release build
//! (for a backtrace while debugging).

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=SVCOS_KEEP_UNWIND_TABLES");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    println!("cargo:rustc-link-arg-bins=-no-pie");
    let release = std::env::var("PROFILE").as_deref() == Ok("release");
    let keep = std::env::var_os("SVCOS_KEEP_UNWIND_TABLES").is_some_and(|v| v == "1");
    if release && !keep {
        let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
        let script = out.join("no-unwind-tables.ld");
        // An augmenting script (`INSERT`), not a replacement: the default layout stays as is.
        std::fs::write(
            &script,
            concat!(
                "SECTIONS { /DISCARD/ : { *(.eh_frame) *(.eh_frame.*)",
                " *(.gcc_except_table) *(.gcc_except_table.*) } } INSERT AFTER .text;\n",
            ),
        )
        .expect("write the linker script");
        println!("cargo:rustc-link-arg-bins=-Wl,--no-eh-frame-hdr");
        println!("cargo:rustc-link-arg-bins=-Wl,-T,{}", script.display());
    }
}
