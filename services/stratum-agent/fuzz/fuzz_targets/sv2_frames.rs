//! The Stratum V2 client's inbound path after decryption: arbitrary plaintext frames through the
//! reference parser and the client session, and the job-declaration client's parser (Job
//! Declaration and Template Distribution frames, serialised coinbase outputs). Nothing may panic;
//! bad input is an error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use svcos_stratum_agent::v2::frames;
use svcos_stratum_agent::v2::session::{Sv2Params, Sv2Session};

fuzz_target!(|data: &[u8]| {
    let _ = frames::decode(data);
    let _ = frames::kind(data);
    let _ = svcos_stratum_agent::jd::decode(data);
    let _ = svcos_stratum_agent::jd::coinbase::decode_outputs(data);
    let mut session = Sv2Session::new(Sv2Params {
        user: "fuzz".into(),
        version_rolling: true,
        endpoint_host: "pool".into(),
        endpoint_port: 3336,
        device_id: String::new(),
        work_selection: false,
    });
    let _ = session.start(0);
    // Several frames in one input: a 2-byte length prefix before each.
    let mut rest = data;
    while rest.len() >= 2 {
        let n = usize::from(u16::from_le_bytes([rest[0], rest[1]])).min(rest.len() - 2);
        let _ = session.handle(&rest[2..2 + n], 0);
        rest = &rest[2 + n..];
    }
});
