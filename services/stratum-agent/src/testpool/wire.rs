//! The test pool's own minimal server-side Stratum V1 codec.
//!
//! Deliberately independent of the client's `v1::codec` (the SRI `sv1_api` crate is not in this
//! machine's registry mirror): a shared parser would hide a shared bug, so the pool reads calls
//! through its own serde types and writes answers with its own encoder.

use serde::Deserialize;
use serde_json::{Value, json};

/// One JSON-RPC call from a miner.
#[derive(Debug, Deserialize)]
pub struct Call {
    /// Request id (echoed in the answer).
    #[serde(default)]
    pub id: Value,
    /// Method name.
    pub method: String,
    /// Positional params.
    #[serde(default)]
    pub params: Vec<Value>,
}

/// Parse one line from a miner.
pub fn parse_call(line: &[u8]) -> Result<Call, serde_json::Error> {
    serde_json::from_slice(line)
}

/// An answer line.
pub fn result(id: &Value, result: Value) -> String {
    format!("{}\n", json!({"id": id, "result": result, "error": null}))
}

/// An error answer line, `[code, message, null]` as most pools send it.
pub fn error(id: &Value, code: i64, message: &str) -> String {
    format!(
        "{}\n",
        json!({"id": id, "result": null, "error": [code, message, null]})
    )
}

/// A notification line (id null).
pub fn notification(method: &str, params: Value) -> String {
    format!(
        "{}\n",
        json!({"id": null, "method": method, "params": params})
    )
}

/// The string at `params[i]`.
pub fn str_param(call: &Call, i: usize) -> Option<&str> {
    call.params.get(i).and_then(Value::as_str)
}

/// A big-endian hex u32 param (ntime, nonce, version bits).
pub fn hex_u32(call: &Call, i: usize) -> Option<u32> {
    let s = str_param(call, i)?;
    if s.len() != 8 {
        return None;
    }
    u32::from_str_radix(s, 16).ok()
}
