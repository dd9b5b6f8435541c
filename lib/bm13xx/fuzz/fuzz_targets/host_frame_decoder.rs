//! Fuzz the host → chip frame decoder the simulator's chips run.
//!
//! Invariants: no panic; once drained, less than one longest frame stays buffered; every decoded
//! frame re-encodes to bytes that decode to the same frame.
#![no_main]

use libfuzzer_sys::fuzz_target;
use svcos_bm13xx::{HostFrame, HostFrameDecoder, MAX_HOST_FRAME_LEN};

fuzz_target!(|data: &[u8]| {
    let mut decoder = HostFrameDecoder::new();
    for chunk in data.split(|b| *b == 0xfe) {
        decoder.push(chunk);
        while let Some(frame) = decoder.next_frame() {
            let wire = match frame {
                HostFrame::Command(c) => c.encode(),
                HostFrame::Job(j) => j.encode().to_vec(),
            };
            assert_eq!(HostFrame::decode(&wire).map(|(f, _)| f), Ok(frame));
        }
        assert!(decoder.buffered() < MAX_HOST_FRAME_LEN);
        assert!(decoder.wanted() >= 1);
    }
});
