//! Link the `svcos` executable position-dependent (`-no-pie`).
//!
//! The code stays position-independent (the default relocation model, so proc-macros, build
//! scripts and tests are unaffected); only the final link resolves every absolute address at
//! link time. That drops the dynamic relocations (`.rela.dyn`, ~1 MB of the image) and, more
//! importantly, the loader no longer writes `.data.rel.ro` and the GOT at start: those pages
//! stay clean and file-backed, shared by the supervisor and the seven services instead of one
//! dirty copy per process (docs/PERFORMANCE.md, issue 15). The price is no ASLR for the
//! executable's own image (libraries, heap and stacks are still randomised).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
