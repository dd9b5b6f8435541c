//! Fuzz the chip → host response decoder hw-agent runs on every UART byte.
//!
//! The input is split into chunks at every 0xFE byte so the fuzzer also explores frames torn
//! across reads. Invariants: no panic; once drained, fewer than one frame's bytes stay buffered
//! (noise can never grow memory or wedge the reader); every decoded response re-encodes to bytes
//! that decode to itself; counters add up.
#![no_main]

use libfuzzer_sys::fuzz_target;
use svcos_bm13xx::{RESPONSE_LEN, Response, ResponseDecoder};

fuzz_target!(|data: &[u8]| {
    let mut decoder = ResponseDecoder::new();
    let mut decoded = 0u64;
    for chunk in data.split(|b| *b == 0xfe) {
        decoder.push(chunk);
        while let Some(response) = decoder.next_response() {
            decoded += 1;
            let wire = response.encode();
            assert_eq!(Response::decode(&wire), Ok(response));
        }
        assert!(decoder.buffered() < RESPONSE_LEN);
    }
    let stats = decoder.stats();
    assert_eq!(stats.frames, decoded);
    let pushed = data.len() as u64 - data.iter().filter(|b| **b == 0xfe).count() as u64;
    assert!(stats.frames * RESPONSE_LEN as u64 + stats.garbage_bytes <= pushed);
});
