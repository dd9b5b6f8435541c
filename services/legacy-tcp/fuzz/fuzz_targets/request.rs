//! Fuzz the whole request path without I/O: framing, parsing, dispatch against a fixed view
//! (with and without privilege), and encoding. Invariants: nothing panics, every reply ends
//! with cgminer's NUL, and JSON replies are valid JSON.
//!
//! `cargo +nightly fuzz run request` (from services/legacy-tcp).

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
