//! Whatever a pool sends: the line parser, the result decoders and the session state machine must
//! never panic, only return errors or events.
#![no_main]

use libfuzzer_sys::fuzz_target;
use svcos_stratum_agent::v1::codec::{Incoming, parse_configure_result, parse_line, parse_subscribe_result};
use svcos_stratum_agent::v1::session::{Session, SessionParams};

fuzz_target!(|data: &[u8]| {
    let mut session = Session::new(SessionParams {
        user: "w".into(),
        password: "x".into(),
        version_rolling: true,
        suggest_difficulty: 0.0,
        resume: None,
    });
    let _ = session.start();
    // One input may hold several lines: a whole conversation.
    for line in data.split(|b| *b == b'\n') {
        if let Ok(msg) = parse_line(line) {
            if let Incoming::Response { result, .. } = &msg {
                let _ = parse_subscribe_result(result);
                let _ = parse_configure_result(result);
            }
            let _ = session.handle(msg);
        }
    }
});
