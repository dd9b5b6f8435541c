//! The test pool's own server-side parser reads whatever a miner sends.
#![no_main]

use libfuzzer_sys::fuzz_target;
use svcos_stratum_agent::testpool::wire;

fuzz_target!(|data: &[u8]| {
    if let Ok(call) = wire::parse_call(data) {
        for i in 0..8 {
            let _ = wire::str_param(&call, i);
            let _ = wire::hex_u32(&call, i);
        }
    }
});
