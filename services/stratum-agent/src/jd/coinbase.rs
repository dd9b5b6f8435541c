//! The coinbase and merkle arithmetic of a declared job, with no I/O. The JD client, the mining
//! session (SetCustomMiningJob → a job hw-agent can mine) and the test pool (which rebuilds the
//! coinbase from SetCustomMiningJob to verify shares) all call these, so the three cannot split
//! the transaction at different places.
//!
//! The coinbase is serialised without witness (its txid is what the merkle root commits to):
//! `version | 1 input | null prevout | script length | script prefix ‖ extranonce | sequence |
//! outputs | locktime`. The *prefix* is everything before the extranonce (the channel's
//! extranonce prefix followed by the miner's part), the *suffix* everything after it.

use bitcoin::TxOut;
use bitcoin::consensus::{deserialize, serialize};
use bitcoin::hashes::{Hash, HashEngine, sha256d};

/// Longest coinbase scriptSig consensus allows.
pub const MAX_SCRIPT_SIG: usize = 100;

/// Why a coinbase cannot be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CoinbaseError {
    /// The scriptSig (template prefix + extranonce) is outside consensus' 2–100 bytes.
    #[error("coinbase scriptSig would be {0} bytes (2-100 allowed)")]
    ScriptSize(usize),
    /// The outputs are not a consensus-serialised output list.
    #[error("coinbase outputs are not a serialised output list: {0}")]
    Outputs(String),
}

/// SHA-256d in internal byte order (what txids and merkle nodes are on the wire).
pub fn sha256d(data: &[u8]) -> [u8; 32] {
    sha256d::Hash::hash(data).to_byte_array()
}

/// Serialise outputs as consensus does inside a transaction (count, then each output): the form
/// of AllocateMiningJobToken.Success's and SetCustomMiningJob's output fields here.
pub fn encode_outputs(outputs: &[TxOut]) -> Vec<u8> {
    serialize(&outputs.to_vec())
}

/// The inverse of [`encode_outputs`].
pub fn decode_outputs(bytes: &[u8]) -> Result<Vec<TxOut>, CoinbaseError> {
    deserialize::<Vec<TxOut>>(bytes).map_err(|e| CoinbaseError::Outputs(e.to_string()))
}

/// The coinbase's fields, as NewTemplate and SetCustomMiningJob carry them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoinbaseFields {
    /// Transaction version.
    pub version: u32,
    /// Start of the scriptSig (BIP 34 height and the template provider's data).
    pub script_prefix: Vec<u8>,
    /// The input's nSequence.
    pub sequence: u32,
    /// Every output, consensus-serialised with its count ([`encode_outputs`]).
    pub outputs: Vec<u8>,
    /// nLockTime.
    pub locktime: u32,
}

impl CoinbaseFields {
    /// The coinbase split around an extranonce of `extranonce_len` bytes: (prefix, suffix).
    pub fn split(&self, extranonce_len: usize) -> Result<(Vec<u8>, Vec<u8>), CoinbaseError> {
        let script_len = self.script_prefix.len() + extranonce_len;
        if !(2..=MAX_SCRIPT_SIG).contains(&script_len) {
            return Err(CoinbaseError::ScriptSize(script_len));
        }
        decode_outputs(&self.outputs)?;
        let mut prefix = Vec::with_capacity(42 + self.script_prefix.len());
        prefix.extend_from_slice(&self.version.to_le_bytes());
        prefix.push(1);
        prefix.extend_from_slice(&[0; 32]);
        prefix.extend_from_slice(&[0xff; 4]);
        // ≤ 100, so the compact size is one byte.
        prefix.push(script_len as u8);
        prefix.extend_from_slice(&self.script_prefix);
        let mut suffix = Vec::with_capacity(8 + self.outputs.len());
        suffix.extend_from_slice(&self.sequence.to_le_bytes());
        suffix.extend_from_slice(&self.outputs);
        suffix.extend_from_slice(&self.locktime.to_le_bytes());
        Ok((prefix, suffix))
    }
}

/// The merkle path of the coinbase (position 0) in a block whose other transactions have these
/// txids, in block order: the sibling at each level, bottom up. The coinbase's own hash is never
/// needed: position 0's sibling at every level is built from the other transactions only.
pub fn merkle_path(txids: &[[u8; 32]]) -> Vec<[u8; 32]> {
    let mut level: Vec<[u8; 32]> = std::iter::once([0; 32])
        .chain(txids.iter().copied())
        .collect();
    let mut path = Vec::new();
    while level.len() > 1 {
        if level.len() % 2 == 1 {
            level.push(*level.last().expect("non-empty"));
        }
        path.push(level[1]);
        level = level
            .chunks(2)
            .map(|pair| {
                let mut e = sha256d::Hash::engine();
                e.input(&pair[0]);
                e.input(&pair[1]);
                sha256d::Hash::from_engine(e).to_byte_array()
            })
            .collect();
    }
    path
}

/// The merkle root a coinbase hash reaches along `path` (the miner's and the pool's fold).
pub fn merkle_root(coinbase_txid: [u8; 32], path: &[[u8; 32]]) -> [u8; 32] {
    path.iter().fold(coinbase_txid, |root, sibling| {
        let mut e = sha256d::Hash::engine();
        e.input(&root);
        e.input(sibling);
        sha256d::Hash::from_engine(e).to_byte_array()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bitcoin::{Amount, ScriptBuf};

    fn fields(outputs: &[TxOut]) -> CoinbaseFields {
        CoinbaseFields {
            version: 2,
            script_prefix: vec![3, 1, 2, 3],
            sequence: 0xffff_ffff,
            outputs: encode_outputs(outputs),
            locktime: 0,
        }
    }

    #[test]
    fn split_coinbase_parses_as_a_transaction_whose_txid_bitcoin_agrees_with() {
        let out = TxOut {
            value: Amount::from_sat(312_500_000),
            script_pubkey: ScriptBuf::from_bytes(vec![0x51]),
        };
        let (prefix, suffix) = fields(std::slice::from_ref(&out)).split(8).unwrap();
        let tx: bitcoin::Transaction =
            deserialize(&[prefix.clone(), vec![7; 8], suffix.clone()].concat()).unwrap();
        assert!(tx.is_coinbase());
        assert_eq!(tx.output, vec![out]);
        assert_eq!(
            tx.input[0].script_sig.as_bytes(),
            &[3, 1, 2, 3, 7, 7, 7, 7, 7, 7, 7, 7]
        );
        assert_eq!(
            tx.compute_txid().to_byte_array(),
            sha256d(&[prefix, vec![7; 8], suffix].concat())
        );
        assert_eq!(fields(&[]).split(97), Err(CoinbaseError::ScriptSize(101)));
        let mut bad = fields(&[]);
        bad.outputs = vec![5];
        assert!(matches!(bad.split(8), Err(CoinbaseError::Outputs(_))));
    }

    #[test]
    fn merkle_path_reaches_the_root_bitcoin_computes() {
        for n in 0..9u8 {
            let txids: Vec<[u8; 32]> = (0..n).map(|i| sha256d(&[i])).collect();
            let coinbase = sha256d(b"coinbase");
            let all: Vec<bitcoin::Txid> = std::iter::once(coinbase)
                .chain(txids.iter().copied())
                .map(bitcoin::Txid::from_byte_array)
                .collect();
            let expected = bitcoin::merkle_tree::calculate_root(all.into_iter()).unwrap();
            assert_eq!(
                merkle_root(coinbase, &merkle_path(&txids)),
                expected.to_byte_array(),
                "{n} transactions"
            );
        }
    }
}
