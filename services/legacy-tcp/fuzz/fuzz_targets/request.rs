//! Fuzz the whole request path without I/O: framing, parsing, dispatch against a fixed view
//! (with and without privilege), and encoding. Invariants: nothing panics, every reply ends
//! with cgminer's NUL, and JSON replies are valid JSON.
//!
//! `cargo +nightly fuzz run request` (from services/legacy-tcp). Without cargo-fuzz:
//! `RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4
//! -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table
//! -Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing" cargo +nightly build --release
//! --target x86_64-unknown-linux-gnu --bin request`, then run
//! `target/x86_64-unknown-linux-gnu/release/request corpus/request -max_total_time=120`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use svcos_legacy_tcp::commands::{self, Identity, Plan, View};
use svcos_legacy_tcp::protocol::{self, Format, Frame};
use svcos_legacy_tcp::reply::{self, Response, Stamp};

fuzz_target!(|data: &[u8]| {
    let len = match protocol::frame(data) {
        Frame::Complete(n) => n,
        Frame::Incomplete => data.len(),
    };
    assert!(len <= data.len());
    let Ok(request) = protocol::parse(&data[..len]) else {
        return;
    };
    let identity = Identity {
        version: "0.0.0".into(),
        model: "Antminer S9".into(),
    };
    let view = View {
        telemetry: None,
        pools: None,
        inventory: None,
        identity: &identity,
    };
    for privileged in [false, true] {
        let response = match commands::dispatch(&request, privileged, &view) {
            Plan::Done(r) => r,
            Plan::Act(action) => Response::Single(commands::action_reply(
                &action,
                &commands::ActionOutcome::Ok(None),
            )),
        };
        let stamp = Stamp {
            when: 0,
            description: "fuzz",
        };
        let bytes = reply::encode(&response, request.format, stamp);
        assert_eq!(bytes.last(), Some(&0));
        if request.format == Format::Json {
            serde_json::from_slice::<serde_json::Value>(&bytes[..bytes.len() - 1])
                .expect("JSON replies are valid JSON");
        }
    }
});
