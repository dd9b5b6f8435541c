//! What a pool job says about the chain it builds on: the network difficulty of its compact
//! bits, the BIP34 height at the start of its coinbase and the previous block's hash as
//! explorers print it. All through rust-bitcoin's types (`CompactTarget`, `Target`, consensus
//! decoding, script instructions), so the gateway's `/api/network/block` carries no Bitcoin
//! arithmetic of its own.

use bitcoin::consensus::Decodable;
use bitcoin::hashes::Hash;
use bitcoin::script::{self, Instruction, Script};
use bitcoin::{BlockHash, CompactTarget, OutPoint, Target, VarInt};

/// The facts `/api/network/block` reports from a job.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockFacts {
    /// BIP34 height of the block the job builds, when the coinbase carries one.
    pub height: Option<u64>,
    /// Previous block hash in display (big-endian) hex; `None` when not 32 bytes.
    pub previous_block_hash: Option<String>,
    /// Network difficulty of `nbits`; `None` for a zero or negative compact target.
    pub network_difficulty: Option<f64>,
    /// The full 256-bit target of `nbits`, 64 hex digits; `None` as for the difficulty.
    pub network_target: Option<String>,
}

/// The facts of a job from its Stratum fields: `prev_hash` in header order, `coinb1` (the
/// coinbase up to extranonce1), `nbits` as in the header.
pub fn block_facts(prev_hash: &[u8], coinb1: &[u8], nbits: u32) -> BlockFacts {
    let target = network_target(nbits);
    BlockFacts {
        height: bip34_height(coinb1),
        previous_block_hash: display_hash(prev_hash),
        network_difficulty: target.map(|t| t.difficulty_float()),
        network_target: target.map(|t| hex::encode(t.to_be_bytes())),
    }
}

/// The target of compact bits; `None` when it is zero or its mantissa's sign bit is set (a
/// header with such bits is invalid, so there is no difficulty to report).
pub fn network_target(nbits: u32) -> Option<Target> {
    if nbits & 0x0080_0000 != 0 {
        return None;
    }
    let t = Target::from_compact(CompactTarget::from_consensus(nbits));
    (t != Target::ZERO).then_some(t)
}

/// Network difficulty of compact bits (the difficulty-1 target over this target).
pub fn network_difficulty(nbits: u32) -> Option<f64> {
    network_target(nbits).map(|t| t.difficulty_float())
}

/// The BIP34 height at the start of the coinbase scriptSig. `coinb1` is only the coinbase's
/// head (the extranonces and the rest follow), so it is decoded field by field up to the
/// script's first instruction, a push of a non-negative number (heights 1-16 may come as
/// `OP_1`..`OP_16`). This reports what the job says rather than validating it, so a push wider
/// than needed (a fixed 3-byte push, as some pools and the test pool send) is read too.
pub fn bip34_height(coinb1: &[u8]) -> Option<u64> {
    let mut r = coinb1;
    let _version = i32::consensus_decode(&mut r).ok()?;
    // A coinbase has exactly one input (a segwit marker would read as zero inputs: pools send
    // the stripped serialization, so that is not a coinbase head either).
    if VarInt::consensus_decode(&mut r).ok()?.0 != 1 {
        return None;
    }
    if !OutPoint::consensus_decode(&mut r).ok()?.is_null() {
        return None;
    }
    let _script_len = VarInt::consensus_decode(&mut r).ok()?;
    let first = Script::from_bytes(r).instructions().next()?.ok()?;
    let height = match first {
        Instruction::PushBytes(b) => script::read_scriptint_non_minimal(b.as_bytes()).ok()?,
        op @ Instruction::Op(_) => op.script_num()?,
    };
    u64::try_from(height).ok()
}

/// A block hash in display order (as explorers print it) from header-order bytes.
pub fn display_hash(header_order: &[u8]) -> Option<String> {
    BlockHash::from_slice(header_order)
        .ok()
        .map(|h| h.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stripped coinbase head up to and including `height_push`, as a pool's coinb1 is.
    fn coinb1(height_push: &[u8]) -> Vec<u8> {
        let mut c = vec![1, 0, 0, 0, 1];
        c.extend([0; 32]);
        c.extend([0xff; 4]);
        c.push((height_push.len() + 8) as u8);
        c.extend(height_push);
        c
    }

    #[test]
    fn compact_bits_to_target_and_difficulty() {
        // (bits, target, difficulty): genesis, block 32 256 (the first retarget), 840 000.
        let cases: &[(u32, &str, f64)] = &[
            (
                0x1d00ffff,
                "00000000ffff0000000000000000000000000000000000000000000000000000",
                1.0,
            ),
            (
                0x1d00d86a,
                "00000000d86a0000000000000000000000000000000000000000000000000000",
                1.182_899_534_312_841_6,
            ),
            (
                0x17034219,
                "0000000000000000000342190000000000000000000000000000000000000000",
                86_388_558_925_171.02,
            ),
        ];
        for &(bits, target, difficulty) in cases {
            let t = network_target(bits).unwrap();
            assert_eq!(hex::encode(t.to_be_bytes()), target, "{bits:#x}");
            assert_eq!(t.to_compact_lossy().to_consensus(), bits, "{bits:#x}");
            let d = network_difficulty(bits).unwrap();
            assert!((d / difficulty - 1.0).abs() < 1e-12, "{bits:#x}: {d}");
        }
        // Sign bit set, or a zero mantissa: no target, no difficulty.
        assert_eq!(network_difficulty(0x1d80ffff), None);
        assert_eq!(network_difficulty(0x1d000000), None);
    }

    #[test]
    fn bip34_heights_of_real_blocks() {
        // (scriptSig head, height): block 840 000 (the fourth halving), 227 931 (BIP34 enforced),
        // a height needing a sign byte (128), one whose top byte has bit 7 set (8 388 608).
        let cases: &[(&[u8], u64)] = &[
            (&[0x03, 0x40, 0xd1, 0x0c], 840_000),
            (&[0x03, 0x5b, 0x7a, 0x03], 227_931),
            (&[0x02, 0x80, 0x00], 128),
            (&[0x04, 0x00, 0x00, 0x80, 0x00], 8_388_608),
            // Regtest heights 1-16 are OP_1..OP_16, height 0 is OP_0 (an empty push).
            (&[0x55], 5),
            (&[0x60], 16),
            (&[0x00], 0),
        ];
        for &(push, height) in cases {
            assert_eq!(bip34_height(&coinb1(push)), Some(height), "{push:02x?}");
        }
        // Wider pushes than needed are read (the test pool pushes 3 bytes for any height).
        assert_eq!(bip34_height(&coinb1(&[0x03, 0x05, 0x00, 0x00])), Some(5));
        assert_eq!(
            bip34_height(&coinb1(&[0x04, 0x40, 0xd1, 0x0c, 0x00])),
            Some(840_000)
        );
        // Negative, truncated, not a coinbase.
        assert_eq!(bip34_height(&coinb1(&[0x01, 0x81])), None);
        assert_eq!(bip34_height(&coinb1(&[0x02, 0x40, 0xd1, 0x8c])), None);
        assert_eq!(bip34_height(&coinb1(&[0x03, 0x40, 0xd1])), None);
        let mut two_inputs = coinb1(&[0x03, 0x40, 0xd1, 0x0c]);
        two_inputs[4] = 2;
        assert_eq!(bip34_height(&two_inputs), None);
        let mut spends = coinb1(&[0x03, 0x40, 0xd1, 0x0c]);
        spends[5] = 1;
        assert_eq!(bip34_height(&spends), None);
    }

    #[test]
    fn previous_hash_in_display_order() {
        // Block 840 000's hash, as explorers print it, from its header-order bytes.
        let shown = "0000000000000000000320283a032748cef8227873ff4872689bf23f1cda83a5";
        let mut header_order = hex::decode(shown).unwrap();
        header_order.reverse();
        assert_eq!(display_hash(&header_order).as_deref(), Some(shown));
        assert_eq!(display_hash(&header_order[..31]), None);
        let f = block_facts(
            &header_order,
            &coinb1(&[0x03, 0x40, 0xd1, 0x0c]),
            0x17034219,
        );
        assert_eq!(f.height, Some(840_000));
        assert_eq!(f.previous_block_hash.as_deref(), Some(shown));
        assert!(
            f.network_target
                .unwrap()
                .starts_with("000000000000000000034219")
        );
    }
}
