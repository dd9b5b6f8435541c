//! What a pool job tells about the network: difficulty from the compact bits, the block height a
//! BIP34 coinbase commits to, and the previous block hash as block explorers show it. The
//! gateway's `/api/network/block` maps these; no internet lookup is involved.

use bitcoin::consensus::Decodable;
use bitcoin::hashes::Hash;
use bitcoin::{BlockHash, CompactTarget, Target, VarInt};

/// Network difficulty of compact bits (difficulty-1 target / target); `None` for a zero or
/// negative target, which no valid block header carries.
pub fn nbits_difficulty(nbits: u32) -> Option<f64> {
    if nbits & 0x007f_ffff == 0 || nbits & 0x0080_0000 != 0 {
        return None;
    }
    let d = Target::from_compact(CompactTarget::from_consensus(nbits)).difficulty_float();
    d.is_finite().then_some(d)
}

fn read_varint(b: &[u8], at: &mut usize) -> Option<u64> {
    let mut rest = b.get(*at..)?;
    let before = rest.len();
    let n = VarInt::consensus_decode(&mut rest).ok()?.0;
    *at += before - rest.len();
    Some(n)
}

/// The BIP34 block height at the start of the coinbase scriptSig (in the Stratum `coinb1`, the
/// coinbase transaction up to the extranonce).
pub fn bip34_height(coinb1: &[u8]) -> Option<u64> {
    let mut at = 4; // version
    if read_varint(coinb1, &mut at)? != 1 {
        return None; // a coinbase has exactly one input
    }
    at += 36; // null prevout
    let _script_len = read_varint(coinb1, &mut at)?;
    let op = *coinb1.get(at)?;
    match op {
        // OP_1..OP_16: heights 1-16 (BIP34 allows the small-number opcodes).
        0x51..=0x60 => Some(u64::from(op - 0x50)),
        1..=8 => {
            let n = usize::from(op);
            let bytes = coinb1.get(at + 1..at + 1 + n)?;
            if bytes.last()? & 0x80 != 0 {
                return None; // negative: not a height
            }
            Some(
                bytes
                    .iter()
                    .rev()
                    .fold(0u64, |acc, x| (acc << 8) | u64::from(*x)),
            )
        }
        _ => None,
    }
}

/// A block hash in display order (as explorers show it) from header-order bytes.
pub fn display_hash(header_order: &[u8]) -> String {
    match <[u8; 32]>::try_from(header_order) {
        Ok(bytes) => BlockHash::from_byte_array(bytes).to_string(),
        Err(_) => {
            let mut b = header_order.to_vec();
            b.reverse();
            hex::encode(b)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn difficulty_from_nbits() {
        assert_eq!(nbits_difficulty(0x1d00ffff), Some(1.0));
        // Block 840000.
        let d = nbits_difficulty(0x17034219).unwrap();
        assert!((d / 86_388_558_925_171.02 - 1.0).abs() < 1e-9, "{d}");
        assert_eq!(nbits_difficulty(0x1d000000), None);
        assert_eq!(nbits_difficulty(0x1d80ffff), None);
    }

    #[test]
    fn height_from_coinbase() {
        let mut c = vec![1, 0, 0, 0, 1];
        c.extend([0; 32]);
        c.extend([0xff; 4]);
        c.push(20);
        c.extend([3, 0x40, 0xd1, 0x0c]); // 840000
        assert_eq!(bip34_height(&c), Some(840_000));
        let mut small = c.clone();
        small[42] = 0x51 + 4; // OP_5
        assert_eq!(bip34_height(&small[..43]), Some(5));
        let mut negative = c.clone();
        negative[45] = 0x8c;
        assert_eq!(bip34_height(&negative), None);
        let mut two_inputs = c.clone();
        two_inputs[4] = 2;
        assert_eq!(bip34_height(&two_inputs), None);
        assert_eq!(bip34_height(&c[..40]), None);
    }

    #[test]
    fn hash_in_display_order() {
        let mut b = [0u8; 32];
        b[0] = 0x6f;
        b[31] = 0x01;
        let shown = display_hash(&b);
        assert!(shown.starts_with("01") && shown.ends_with("6f"), "{shown}");
        assert_eq!(display_hash(&[1, 2]), "0201");
    }
}
