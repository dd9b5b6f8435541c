//! Mining work math, shared by stratum-agent (builds templates, checks shares), hw-agent (rolls
//! extranonce2/ntime/version, verifies nonces) and hw-sim/test-pool (hash and verify real
//! SHA-256d). Hashing and header layout come from rust-bitcoin; this crate only adds the Stratum
//! conventions (word-swapped prevhash, coinbase assembly, pool difficulty) on top.

pub mod network;

use bitcoin::block::{Header, Version};
use bitcoin::consensus::encode::serialize;
use bitcoin::hashes::{Hash, HashEngine, sha256, sha256d};
use bitcoin::{BlockHash, CompactTarget, TxMerkleNode};

/// A parse or shape error in Stratum work fields.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WorkError {
    /// A hex field did not decode.
    #[error("{field}: not hex")]
    Hex {
        /// Which field.
        field: &'static str,
    },
    /// A field had the wrong byte length.
    #[error("{field}: expected {expected} bytes, got {got}")]
    Length {
        /// Which field.
        field: &'static str,
        /// Bytes required.
        expected: usize,
        /// Bytes given.
        got: usize,
    },
}

/// The pool-independent part of a Stratum job, in header byte order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// Previous block hash as serialised in the header.
    pub prev_hash: [u8; 32],
    /// Coinbase part before extranonce1.
    pub coinb1: Vec<u8>,
    /// Coinbase part after extranonce2.
    pub coinb2: Vec<u8>,
    /// Pool-assigned extranonce1.
    pub extranonce1: Vec<u8>,
    /// Merkle branch, in the pool's order.
    pub merkle_branch: Vec<[u8; 32]>,
    /// Block version before rolling.
    pub version: u32,
    /// Compact target of the block.
    pub nbits: u32,
    /// Header time from the pool.
    pub ntime: u32,
}

/// The rolled values that, with a [`Job`], make one header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Roll<'a> {
    /// Miner-chosen extranonce2.
    pub extranonce2: &'a [u8],
    /// Header time (may be rolled forward within the pool's tolerance).
    pub ntime: u32,
    /// Full version after rolling the allowed bits.
    pub version: u32,
    /// Header nonce.
    pub nonce: u32,
}

/// Decode Stratum's `prevhash` (32 bytes, each 4-byte word byte-swapped) into header order.
pub fn prevhash_from_stratum(hex_str: &str) -> Result<[u8; 32], WorkError> {
    let mut bytes = decode_fixed::<32>("prevhash", hex_str)?;
    for word in bytes.chunks_exact_mut(4) {
        word.reverse();
    }
    Ok(bytes)
}

/// Encode a header-order previous hash as Stratum's word-swapped hex (for the test pool).
pub fn prevhash_to_stratum(prev_hash: &[u8; 32]) -> String {
    let mut bytes = *prev_hash;
    for word in bytes.chunks_exact_mut(4) {
        word.reverse();
    }
    hex::encode(bytes)
}

/// Decode a big-endian hex u32 as Stratum sends version, nbits and ntime.
pub fn u32_from_stratum(field: &'static str, hex_str: &str) -> Result<u32, WorkError> {
    Ok(u32::from_be_bytes(decode_fixed::<4>(field, hex_str)?))
}

fn decode_fixed<const N: usize>(field: &'static str, hex_str: &str) -> Result<[u8; N], WorkError> {
    let v = hex::decode(hex_str).map_err(|_| WorkError::Hex { field })?;
    let got = v.len();
    v.try_into().map_err(|_| WorkError::Length {
        field,
        expected: N,
        got,
    })
}

/// Decode a hex field of any length.
pub fn bytes_from_hex(field: &'static str, hex_str: &str) -> Result<Vec<u8>, WorkError> {
    hex::decode(hex_str).map_err(|_| WorkError::Hex { field })
}

impl Job {
    /// The coinbase transaction bytes for an extranonce2.
    pub fn coinbase(&self, extranonce2: &[u8]) -> Vec<u8> {
        let mut tx = Vec::with_capacity(
            self.coinb1.len() + self.extranonce1.len() + extranonce2.len() + self.coinb2.len(),
        );
        tx.extend_from_slice(&self.coinb1);
        tx.extend_from_slice(&self.extranonce1);
        tx.extend_from_slice(extranonce2);
        tx.extend_from_slice(&self.coinb2);
        tx
    }

    /// The merkle root for an extranonce2: the coinbase txid folded with each branch hash.
    pub fn merkle_root(&self, extranonce2: &[u8]) -> TxMerkleNode {
        let mut node = sha256d::Hash::hash(&self.coinbase(extranonce2)).to_byte_array();
        for branch in &self.merkle_branch {
            let mut engine = sha256d::Hash::engine();
            engine.input(&node);
            engine.input(branch);
            node = sha256d::Hash::from_engine(engine).to_byte_array();
        }
        TxMerkleNode::from_byte_array(node)
    }

    /// The block header for a roll.
    pub fn header(&self, roll: Roll<'_>) -> Header {
        self.header_with_root(
            self.merkle_root(roll.extranonce2),
            roll.ntime,
            roll.version,
            roll.nonce,
        )
    }

    /// The block header for a precomputed merkle root (hw-agent computes the root once per
    /// extranonce2 and then varies only version, ntime and nonce).
    pub fn header_with_root(
        &self,
        merkle_root: TxMerkleNode,
        ntime: u32,
        version: u32,
        nonce: u32,
    ) -> Header {
        Header {
            version: Version::from_consensus(version as i32),
            prev_blockhash: BlockHash::from_byte_array(self.prev_hash),
            merkle_root,
            time: ntime,
            bits: CompactTarget::from_consensus(self.nbits),
            nonce,
        }
    }
}

/// The 80 serialised header bytes.
pub fn header_bytes(header: &Header) -> [u8; 80] {
    serialize(header).try_into().expect("a header is 80 bytes")
}

/// SHA-256d of a header, as the 32 bytes the hash function outputs (little-endian number).
pub fn header_hash(header: &Header) -> [u8; 32] {
    header.block_hash().to_byte_array()
}

/// SHA-256 midstate of the first 64 header bytes: what BM1387-class chips are given instead of
/// the full header.
pub fn midstate(header_bytes: &[u8; 80]) -> [u8; 32] {
    let mut engine = sha256::Hash::engine();
    engine.input(&header_bytes[..64]);
    engine.midstate().to_byte_array()
}

/// Finish SHA-256d of a header from its midstate and its last 16 bytes (merkle tail, ntime,
/// nbits, nonce). Equal to [`header_hash`] of the same header.
pub fn hash_from_midstate(midstate: &[u8; 32], tail: &[u8; 16]) -> [u8; 32] {
    let mut engine =
        sha256::HashEngine::from_midstate(sha256::Midstate::from_byte_array(*midstate), 64);
    engine.input(tail);
    let first = sha256::Hash::from_engine(engine);
    sha256::Hash::hash(first.as_byte_array()).to_byte_array()
}

/// Difficulty 1 target (0xffff << 208) as f64.
const DIFF1: f64 =
    65535.0 * 411_376_139_330_301_510_538_742_295_639_337_626_245_683_966_408_394_965_837_152_256.0;

/// Share difficulty a hash achieves (pool difficulty units: difficulty 1 = 0xffff << 208).
pub fn hash_difficulty(hash: &[u8; 32]) -> f64 {
    let value = le_to_f64(hash);
    if value == 0.0 {
        f64::INFINITY
    } else {
        DIFF1 / value
    }
}

/// Whether a hash meets a pool difficulty.
pub fn meets_difficulty(hash: &[u8; 32], difficulty: f64) -> bool {
    le_cmp(hash, &target_from_difficulty(difficulty)) != std::cmp::Ordering::Greater
}

/// The 256-bit target (little-endian bytes) of a pool difficulty.
pub fn target_from_difficulty(difficulty: f64) -> [u8; 32] {
    if difficulty.is_nan() || difficulty <= 0.0 {
        return [0xff; 32];
    }
    f64_to_le(DIFF1 / difficulty)
}

/// Whether a little-endian hash is at or below a little-endian target (exact comparison; an SV2
/// channel's target arrives as bytes, not as a difficulty).
pub fn meets_target(hash: &[u8; 32], target: &[u8; 32]) -> bool {
    le_cmp(hash, target) != std::cmp::Ordering::Greater
}

/// Whether a hash meets the block's own target (nbits): a found block.
pub fn meets_nbits(hash: &[u8; 32], nbits: u32) -> bool {
    let target = bitcoin::Target::from_compact(CompactTarget::from_consensus(nbits));
    le_cmp(hash, &target.to_le_bytes()) != std::cmp::Ordering::Greater
}

fn le_to_f64(bytes: &[u8; 32]) -> f64 {
    bytes
        .iter()
        .rev()
        .fold(0.0, |acc, b| acc * 256.0 + f64::from(*b))
}

fn f64_to_le(mut value: f64) -> [u8; 32] {
    let max = 2f64.powi(256);
    if value >= max {
        return [0xff; 32];
    }
    let mut out = [0u8; 32];
    for i in (0..32).rev() {
        let scale = 2f64.powi(8 * i as i32);
        let byte = (value / scale).floor().clamp(0.0, 255.0);
        out[i] = byte as u8;
        value -= byte * scale;
    }
    out
}

fn le_cmp(a: &[u8; 32], b: &[u8; 32]) -> std::cmp::Ordering {
    a.iter().rev().cmp(b.iter().rev())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Block 125552, the worked example of the Bitcoin wiki's "Block hashing algorithm" page.
    fn block_125552() -> Header {
        let mut prev =
            hex::decode("00000000000008a3a41b85b8b29ad444def299fee21793cd8b9e567eab02cd81")
                .unwrap();
        prev.reverse();
        let mut root =
            hex::decode("2b12fcf1b09288fcaff797d71e950e71ae42b91e8bdb2304758dfcffc2b620e3")
                .unwrap();
        root.reverse();
        let job = Job {
            prev_hash: prev.try_into().unwrap(),
            coinb1: vec![],
            coinb2: vec![],
            extranonce1: vec![],
            merkle_branch: vec![],
            version: 1,
            nbits: 0x1a44b9f2,
            ntime: 1305998791,
        };
        job.header_with_root(
            TxMerkleNode::from_byte_array(root.try_into().unwrap()),
            1305998791,
            1,
            2504433986,
        )
    }

    #[test]
    fn known_block_hashes_and_meets_its_target() {
        let h = block_125552();
        let mut hash = header_hash(&h);
        assert!(meets_nbits(&hash, 0x1a44b9f2));
        hash.reverse();
        assert_eq!(
            hex::encode(hash),
            "00000000000000001e8d6829a8a21adc5d38d0a473b144b6765798e61f98bd1d"
        );
    }

    #[test]
    fn midstate_path_equals_full_hash() {
        let h = block_125552();
        let bytes = header_bytes(&h);
        let tail: [u8; 16] = bytes[64..].try_into().unwrap();
        assert_eq!(
            hash_from_midstate(&midstate(&bytes), &tail),
            header_hash(&h)
        );
    }

    #[test]
    fn prevhash_word_swap_round_trips() {
        let stratum = "4d16b6f85af6e2198f44ae2a6de67f78487ae5611b77c6c0440b921e00000000";
        let header_order = prevhash_from_stratum(stratum).unwrap();
        assert_eq!(&header_order[..4], &[0xf8, 0xb6, 0x16, 0x4d]);
        assert_eq!(prevhash_to_stratum(&header_order), stratum);
        assert!(matches!(
            prevhash_from_stratum("00"),
            Err(WorkError::Length { .. })
        ));
        assert!(matches!(
            prevhash_from_stratum("zz"),
            Err(WorkError::Hex { .. })
        ));
    }

    #[test]
    fn difficulty_and_target_agree() {
        let h = block_125552();
        let hash = header_hash(&h);
        let d = hash_difficulty(&hash);
        assert!(d > 200_000.0, "{d}");
        assert!(meets_difficulty(&hash, d * 0.999));
        assert!(!meets_difficulty(&hash, d * 1.001));
        // Difficulty 1 target is 0x00000000ffff0000...
        let t = target_from_difficulty(1.0);
        assert_eq!(&t[26..], &[0xff, 0xff, 0, 0, 0, 0]);
        assert!(t[..26].iter().all(|b| *b == 0));
    }

    #[test]
    fn merkle_root_folds_branch() {
        let job = Job {
            prev_hash: [0; 32],
            coinb1: vec![1, 2],
            coinb2: vec![5],
            extranonce1: vec![3],
            merkle_branch: vec![[7; 32]],
            version: 0x2000_0000,
            nbits: 0x1d00ffff,
            ntime: 0,
        };
        let cb = sha256d::Hash::hash(&[1, 2, 3, 4, 5]).to_byte_array();
        let mut cat = cb.to_vec();
        cat.extend_from_slice(&[7; 32]);
        let expect = sha256d::Hash::hash(&cat).to_byte_array();
        assert_eq!(job.merkle_root(&[4]).to_byte_array(), expect);
    }
}
