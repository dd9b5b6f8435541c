//! Stratum V2 (behind `[stratum].sv2_enabled`), on the reference implementation's crates.
//!
//! * [`frames`]: plaintext frames ↔ `parsers_sv2` messages, target arithmetic (pure, fuzzed).
//! * [`session`]: the mining client's protocol state for one connection (pure).
//! * [`noise`]: the Noise NX handshake (both roles) and the encrypted frame reader/writer.
//! * [`conn`]: one pool connection as a task (TCP, handshake, frames to and from the agent).
//! * [`status`]: what `GetSv2Status` reports, kept by the agent from live state.

pub mod conn;
pub mod frames;
pub mod noise;
pub mod session;
pub mod status;

/// Parse a base58check authority public key (the SRI key format) into its x-only bytes.
pub fn parse_authority_key(s: &str) -> Result<[u8; 32], String> {
    let key: key_utils::Secp256k1PublicKey = s
        .parse()
        .map_err(|e| format!("authority key {s:?} is not a base58check secp256k1 key: {e:?}"))?;
    Ok(key.into_bytes())
}

/// A short fingerprint of an authority key: the first 8 bytes of its SHA-256, hex.
pub fn fingerprint(key: &[u8; 32]) -> String {
    use bitcoin::hashes::{Hash, sha256};
    hex::encode(&sha256::Hash::hash(key).to_byte_array()[..8])
}
