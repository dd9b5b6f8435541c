//! Stratum V1 wire codec for the client side: one JSON-RPC object per line, parsed into typed
//! messages and encoded from typed requests. No I/O: the session and the fuzz target call these
//! functions on byte slices.

use serde_json::{Value, json};
use svcos_work::{WorkError, bytes_from_hex, prevhash_from_stratum, u32_from_stratum};

/// Longest line accepted from a pool. A notify with a 20-deep merkle branch and a large coinbase
/// is a few KiB; anything far larger is garbage or an attack.
pub const MAX_LINE: usize = 64 * 1024;

/// Why a line from the pool could not be understood.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CodecError {
    /// Longer than [`MAX_LINE`].
    #[error("line of {0} bytes exceeds the limit")]
    TooLong(usize),
    /// Not a JSON object.
    #[error("not JSON: {0}")]
    Json(String),
    /// Neither a response (id + result/error) nor a method call.
    #[error("not a JSON-RPC message")]
    Shape,
    /// A known method with parameters of the wrong shape.
    #[error("{method}: bad params: {reason}")]
    Params {
        /// The method.
        method: String,
        /// What was wrong.
        reason: String,
    },
    /// A hex work field did not decode.
    #[error("{0}")]
    Work(#[from] WorkError),
}

/// An error object from the pool, in whichever of the three common shapes it came
/// (`[code, "message", data]`, `{"code", "message"}` or a bare string).
#[derive(Debug, Clone, PartialEq)]
pub struct PoolError {
    /// The pool's numeric code (21 job not found, 22 duplicate, 23 low difficulty, 24
    /// unauthorized, 25 not subscribed by convention); 0 if the pool gave none.
    pub code: i64,
    /// The pool's own wording.
    pub message: String,
}

/// A `mining.notify` job, decoded into header byte order.
#[derive(Debug, Clone, PartialEq)]
pub struct Notify {
    /// The pool's job id.
    pub job_id: String,
    /// Previous block hash in header order (the wire form swaps each 4-byte word).
    pub prev_hash: [u8; 32],
    /// Coinbase part before extranonce1.
    pub coinb1: Vec<u8>,
    /// Coinbase part after extranonce2.
    pub coinb2: Vec<u8>,
    /// Merkle branch in the pool's order.
    pub merkle_branch: Vec<[u8; 32]>,
    /// Block version.
    pub version: u32,
    /// Compact target.
    pub nbits: u32,
    /// Header time.
    pub ntime: u32,
    /// Whether all earlier jobs are void.
    pub clean_jobs: bool,
}

/// One message from the pool.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// The answer to one of our requests.
    Response {
        /// Our request id (non-numeric ids cannot be ours and parse as [`Incoming::Unknown`]).
        id: u64,
        /// `result`, `Value::Null` when absent.
        result: Value,
        /// `error`, when not null.
        error: Option<PoolError>,
    },
    /// `mining.notify`.
    Notify(Notify),
    /// `mining.set_difficulty`.
    SetDifficulty(f64),
    /// `mining.set_extranonce`.
    SetExtranonce {
        /// New extranonce1.
        extranonce1: Vec<u8>,
        /// New extranonce2 size in bytes.
        extranonce2_size: usize,
    },
    /// `mining.set_version_mask` (BIP 310).
    SetVersionMask(u32),
    /// `client.reconnect`: host/port absent means "the same pool".
    Reconnect {
        /// New host, if given.
        host: Option<String>,
        /// New port, if given.
        port: Option<u16>,
        /// Seconds to wait before reconnecting.
        wait_s: u64,
    },
    /// `client.get_version`: must be answered with the request's own id.
    GetVersion {
        /// The id to echo.
        id: Value,
    },
    /// `client.show_message`.
    ShowMessage(String),
    /// `mining.ping` / `client.ping`: answered with "pong".
    Ping {
        /// The id to echo.
        id: Value,
    },
    /// A method we do not know; ignored (answered with an error when it carries an id).
    Unknown {
        /// The method name, or "" for a response with a foreign id.
        method: String,
        /// Its id, when it expects an answer.
        id: Value,
    },
}

/// Parse one line (without or with its trailing newline).
pub fn parse_line(line: &[u8]) -> Result<Incoming, CodecError> {
    if line.len() > MAX_LINE {
        return Err(CodecError::TooLong(line.len()));
    }
    let value: Value = serde_json::from_slice(line).map_err(|e| CodecError::Json(e.to_string()))?;
    let Value::Object(mut obj) = value else {
        return Err(CodecError::Shape);
    };
    let id = obj.remove("id").unwrap_or(Value::Null);
    match obj.remove("method") {
        Some(Value::String(method)) => {
            let params = obj.remove("params").unwrap_or(Value::Array(vec![]));
            parse_call(method, id, params)
        }
        Some(_) => Err(CodecError::Shape),
        None => {
            if !obj.contains_key("result") && !obj.contains_key("error") {
                return Err(CodecError::Shape);
            }
            let error = obj.remove("error").and_then(parse_error);
            let result = obj.remove("result").unwrap_or(Value::Null);
            match id.as_u64() {
                Some(id) => Ok(Incoming::Response { id, result, error }),
                None => Ok(Incoming::Unknown {
                    method: String::new(),
                    id: Value::Null,
                }),
            }
        }
    }
}

fn parse_error(v: Value) -> Option<PoolError> {
    match v {
        Value::Null => None,
        Value::Array(a) => Some(PoolError {
            code: a.first().and_then(Value::as_i64).unwrap_or(0),
            message: a
                .get(1)
                .and_then(Value::as_str)
                .unwrap_or("unknown error")
                .to_string(),
        }),
        Value::Object(o) => Some(PoolError {
            code: o.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: o
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("unknown error")
                .to_string(),
        }),
        Value::String(s) => Some(PoolError {
            code: 0,
            message: s,
        }),
        other => Some(PoolError {
            code: 0,
            message: other.to_string(),
        }),
    }
}

fn params_err(method: &str, reason: impl Into<String>) -> CodecError {
    CodecError::Params {
        method: method.to_string(),
        reason: reason.into(),
    }
}

fn str_at<'a>(method: &str, p: &'a [Value], i: usize) -> Result<&'a str, CodecError> {
    p.get(i)
        .and_then(Value::as_str)
        .ok_or_else(|| params_err(method, format!("param {i} must be a string")))
}

/// Pools send difficulties as numbers, and a few as numeric strings.
fn number(v: &Value) -> Option<f64> {
    v.as_f64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}

fn parse_call(method: String, id: Value, params: Value) -> Result<Incoming, CodecError> {
    let p: Vec<Value> = match params {
        Value::Array(a) => a,
        Value::Null => vec![],
        other => vec![other],
    };
    let m = method.as_str();
    Ok(match m {
        "mining.notify" => {
            if p.len() < 9 {
                return Err(params_err(m, "needs 9 params"));
            }
            let merkle_branch = p[4]
                .as_array()
                .ok_or_else(|| params_err(m, "merkle branch must be an array"))?
                .iter()
                .map(|h| {
                    let s = h
                        .as_str()
                        .ok_or_else(|| params_err(m, "merkle hash must be a string"))?;
                    let b = bytes_from_hex("merkle_branch", s)?;
                    b.try_into().map_err(|b: Vec<u8>| {
                        CodecError::Work(WorkError::Length {
                            field: "merkle_branch",
                            expected: 32,
                            got: b.len(),
                        })
                    })
                })
                .collect::<Result<Vec<[u8; 32]>, CodecError>>()?;
            let job_id = str_at(m, &p, 0)?;
            if job_id.is_empty() {
                return Err(params_err(m, "empty job id"));
            }
            Incoming::Notify(Notify {
                job_id: job_id.to_string(),
                prev_hash: prevhash_from_stratum(str_at(m, &p, 1)?)?,
                coinb1: bytes_from_hex("coinb1", str_at(m, &p, 2)?)?,
                coinb2: bytes_from_hex("coinb2", str_at(m, &p, 3)?)?,
                merkle_branch,
                version: u32_from_stratum("version", str_at(m, &p, 5)?)?,
                nbits: u32_from_stratum("nbits", str_at(m, &p, 6)?)?,
                ntime: u32_from_stratum("ntime", str_at(m, &p, 7)?)?,
                clean_jobs: p[8].as_bool().unwrap_or(false),
            })
        }
        "mining.set_difficulty" => {
            let d = p
                .first()
                .and_then(number)
                .filter(|d| d.is_finite() && *d > 0.0)
                .ok_or_else(|| params_err(m, "difficulty must be a positive number"))?;
            Incoming::SetDifficulty(d)
        }
        "mining.set_extranonce" => {
            let extranonce1 = bytes_from_hex("extranonce1", str_at(m, &p, 0)?)?;
            let extranonce2_size = p
                .get(1)
                .and_then(Value::as_u64)
                .filter(|n| (1..=32).contains(n))
                .ok_or_else(|| params_err(m, "extranonce2 size must be 1-32"))?
                as usize;
            Incoming::SetExtranonce {
                extranonce1,
                extranonce2_size,
            }
        }
        "mining.set_version_mask" => {
            Incoming::SetVersionMask(u32_from_stratum("version_mask", str_at(m, &p, 0)?)?)
        }
        "client.reconnect" => {
            let host = p
                .first()
                .and_then(Value::as_str)
                .filter(|h| !h.is_empty())
                .map(str::to_string);
            let port = p.get(1).and_then(|v| {
                v.as_u64()
                    .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
                    .and_then(|n| u16::try_from(n).ok())
                    .filter(|n| *n > 0)
            });
            let wait_s = p.get(2).and_then(number).unwrap_or(0.0).clamp(0.0, 3600.0) as u64;
            Incoming::Reconnect { host, port, wait_s }
        }
        "client.get_version" => Incoming::GetVersion { id },
        "client.show_message" => Incoming::ShowMessage(
            p.first()
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        ),
        "mining.ping" | "client.ping" => Incoming::Ping { id },
        _ => Incoming::Unknown { method, id },
    })
}

/// One extension request of `mining.configure` (BIP 310).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConfigureRequest {
    /// Ask for version rolling with this miner mask.
    pub version_rolling_mask: Option<u32>,
    /// Minimum bits the miner needs when rolling.
    pub version_rolling_min_bits: u32,
    /// Ask for a minimum difficulty.
    pub minimum_difficulty: Option<f64>,
}

/// A request the client sends.
#[derive(Debug, Clone, PartialEq)]
pub enum Request<'a> {
    /// `mining.configure` (BIP 310).
    Configure(ConfigureRequest),
    /// `mining.subscribe [agent, session_id?]`.
    Subscribe {
        /// User agent.
        agent: &'a str,
        /// Subscription id to resume, from the previous connection.
        resume: Option<&'a str>,
    },
    /// `mining.authorize [user, password]`.
    Authorize {
        /// Worker.
        user: &'a str,
        /// Password (never logged: [`Request`] has no Display).
        password: &'a str,
    },
    /// `mining.extranonce.subscribe []`.
    ExtranonceSubscribe,
    /// `mining.suggest_difficulty [d]`.
    SuggestDifficulty(f64),
    /// `mining.submit [user, job, en2, ntime, nonce, version_bits?]`.
    Submit {
        /// Worker.
        user: &'a str,
        /// Pool job id.
        job_id: &'a str,
        /// Extranonce2 bytes.
        extranonce2: &'a [u8],
        /// Header time.
        ntime: u32,
        /// Header nonce.
        nonce: u32,
        /// BIP 310 `version_bits`: the rolled version masked with the negotiated mask.
        version_bits: Option<u32>,
    },
}

/// Encode a request with `id` as one line including the newline.
pub fn encode_request(id: u64, request: &Request<'_>) -> String {
    let (method, params) = match request {
        Request::Configure(c) => {
            let mut names = Vec::new();
            let mut opts = serde_json::Map::new();
            if let Some(mask) = c.version_rolling_mask {
                names.push("version-rolling");
                opts.insert("version-rolling.mask".into(), json!(format!("{mask:08x}")));
                opts.insert(
                    "version-rolling.min-bit-count".into(),
                    json!(c.version_rolling_min_bits),
                );
            }
            if let Some(d) = c.minimum_difficulty {
                names.push("minimum-difficulty");
                opts.insert("minimum-difficulty.value".into(), json!(d));
            }
            ("mining.configure", json!([names, opts]))
        }
        Request::Subscribe { agent, resume } => match resume {
            Some(s) => ("mining.subscribe", json!([agent, s])),
            None => ("mining.subscribe", json!([agent])),
        },
        Request::Authorize { user, password } => ("mining.authorize", json!([user, password])),
        Request::ExtranonceSubscribe => ("mining.extranonce.subscribe", json!([])),
        Request::SuggestDifficulty(d) => ("mining.suggest_difficulty", json!([d])),
        Request::Submit {
            user,
            job_id,
            extranonce2,
            ntime,
            nonce,
            version_bits,
        } => {
            let mut p = vec![
                json!(user),
                json!(job_id),
                json!(hex::encode(extranonce2)),
                json!(format!("{ntime:08x}")),
                json!(format!("{nonce:08x}")),
            ];
            if let Some(v) = version_bits {
                p.push(json!(format!("{v:08x}")));
            }
            ("mining.submit", Value::Array(p))
        }
    };
    let mut line = json!({"id": id, "method": method, "params": params}).to_string();
    line.push('\n');
    line
}

/// Encode our answer to a pool's request (`client.get_version`, ping, unknown methods).
pub fn encode_reply(id: &Value, result: Value, error: Option<(i64, &str)>) -> String {
    let error = error.map_or(Value::Null, |(c, m)| json!([c, m, null]));
    let mut line = json!({"id": id, "result": result, "error": error}).to_string();
    line.push('\n');
    line
}

/// What a `mining.subscribe` result carries.
#[derive(Debug, Clone, PartialEq)]
pub struct Subscribed {
    /// The subscription id for `mining.notify` (used to resume), if the pool gave one.
    pub session_id: Option<String>,
    /// Extranonce1.
    pub extranonce1: Vec<u8>,
    /// Extranonce2 size in bytes.
    pub extranonce2_size: usize,
}

/// Decode a `mining.subscribe` result: `[[["mining.notify", id], ...], extranonce1, size]`.
pub fn parse_subscribe_result(result: &Value) -> Result<Subscribed, CodecError> {
    let m = "mining.subscribe";
    let a = result
        .as_array()
        .filter(|a| a.len() >= 3)
        .ok_or_else(|| params_err(m, "result must be [subscriptions, extranonce1, size]"))?;
    // The subscriptions are either one pair or a list of pairs; prefer mining.notify's id.
    let mut session_id = None;
    if let Some(subs) = a[0].as_array() {
        let pairs: Vec<&Value> = if subs.first().is_some_and(Value::is_string) {
            vec![&a[0]]
        } else {
            subs.iter().collect()
        };
        for pair in pairs {
            let Some(arr) = pair.as_array() else { continue };
            let name = arr.first().and_then(Value::as_str);
            if let (Some(name), Some(id)) = (name, arr.get(1).and_then(Value::as_str))
                && (session_id.is_none() || name == "mining.notify")
            {
                session_id = Some(id.to_string());
            }
        }
    }
    let extranonce1 = bytes_from_hex(
        "extranonce1",
        a[1].as_str()
            .ok_or_else(|| params_err(m, "extranonce1 must be a string"))?,
    )?;
    let extranonce2_size =
        a[2].as_u64()
            .filter(|n| (1..=32).contains(n))
            .ok_or_else(|| params_err(m, "extranonce2 size must be 1-32"))? as usize;
    Ok(Subscribed {
        session_id,
        extranonce1,
        extranonce2_size,
    })
}

/// What a `mining.configure` result grants.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Configured {
    /// The negotiated mask when version rolling was granted.
    pub version_mask: Option<u32>,
    /// Whether the minimum difficulty was accepted.
    pub minimum_difficulty: bool,
}

/// Decode a `mining.configure` result (BIP 310). A pool that does not know the method answers
/// with an error; that means "no extensions", not a failure.
pub fn parse_configure_result(result: &Value) -> Configured {
    let granted = |k: &str| result.get(k).and_then(Value::as_bool).unwrap_or(false);
    let version_mask = if granted("version-rolling") {
        result
            .get("version-rolling.mask")
            .and_then(Value::as_str)
            .and_then(|s| u32_from_stratum("version_mask", s).ok())
    } else {
        None
    };
    Configured {
        version_mask,
        minimum_difficulty: granted("minimum-difficulty"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The example notify of the original Stratum V1 documentation (slush pool).
    const SLUSH_NOTIFY: &str = r#"{"params": ["bf", "4d16b6f85af6e2198f44ae2a6de67f78487ae5611b77c6c0440b921e00000000", "01000000010000000000000000000000000000000000000000000000000000000000000000ffffffff20020862062f503253482f04b8864e5008", "072f736c7573682f000000000100f2052a010000001976a914d23fcdf86f7e756a64a7a9688ef9903327048ed988ac00000000", [], "00000002", "1c2ac4af", "504e86b9", false], "id": null, "method": "mining.notify"}"#;
    // Its example subscribe answer.
    const SLUSH_SUBSCRIBE: &str = r#"{"id": 1, "result": [ [ ["mining.set_difficulty", "b4b6693b72a50c7116db18d6497cac52"], ["mining.notify", "ae6812eb4cd7735a302a8a9dd95cf71f"]], "08000002", 4], "error": null}"#;

    #[test]
    fn slush_notify_fixture() {
        let Incoming::Notify(n) = parse_line(SLUSH_NOTIFY.as_bytes()).unwrap() else {
            panic!("not a notify");
        };
        assert_eq!(n.job_id, "bf");
        // The first wire word 4d16b6f8 is byte-swapped into header order.
        assert_eq!(&n.prev_hash[..4], &[0xf8, 0xb6, 0x16, 0x4d]);
        assert_eq!(&n.prev_hash[28..], &[0, 0, 0, 0]);
        assert_eq!(n.version, 2);
        assert_eq!(n.nbits, 0x1c2ac4af);
        assert_eq!(n.ntime, 0x504e86b9);
        assert!(!n.clean_jobs);
        assert!(n.merkle_branch.is_empty());
        assert_eq!(n.coinb1.len(), 58);
    }

    #[test]
    fn slush_subscribe_fixture_prefers_notify_subscription() {
        let Incoming::Response { id, result, error } =
            parse_line(SLUSH_SUBSCRIBE.as_bytes()).unwrap()
        else {
            panic!("not a response");
        };
        assert_eq!((id, error), (1, None));
        let s = parse_subscribe_result(&result).unwrap();
        assert_eq!(
            s.session_id.as_deref(),
            Some("ae6812eb4cd7735a302a8a9dd95cf71f")
        );
        assert_eq!(s.extranonce1, vec![8, 0, 0, 2]);
        assert_eq!(s.extranonce2_size, 4);
        // The single-pair form some pools use.
        let single = serde_json::json!([["mining.notify", "abc"], "00", 8]);
        assert_eq!(
            parse_subscribe_result(&single)
                .unwrap()
                .session_id
                .as_deref(),
            Some("abc")
        );
    }

    #[test]
    fn bip310_configure_exchange() {
        let line = encode_request(
            1,
            &Request::Configure(ConfigureRequest {
                version_rolling_mask: Some(0x1fffe000),
                version_rolling_min_bits: 2,
                minimum_difficulty: Some(2048.0),
            }),
        );
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["method"], "mining.configure");
        assert_eq!(
            v["params"][0],
            serde_json::json!(["version-rolling", "minimum-difficulty"])
        );
        assert_eq!(v["params"][1]["version-rolling.mask"], "1fffe000");
        assert_eq!(v["params"][1]["version-rolling.min-bit-count"], 2);
        assert_eq!(v["params"][1]["minimum-difficulty.value"], 2048.0);
        // BIP 310's example result.
        let answer = r#"{"error": null, "id": 1, "result": {"version-rolling": true, "version-rolling.mask": "18000000", "minimum-difficulty": true}}"#;
        let Incoming::Response { result, .. } = parse_line(answer.as_bytes()).unwrap() else {
            panic!()
        };
        assert_eq!(
            parse_configure_result(&result),
            Configured {
                version_mask: Some(0x1800_0000),
                minimum_difficulty: true
            }
        );
        let refused = serde_json::json!({"version-rolling": false});
        assert_eq!(parse_configure_result(&refused).version_mask, None);
        // BIP 310's set_version_mask example.
        assert_eq!(
            parse_line(
                br#"{"params":["00003000"], "id":null, "method": "mining.set_version_mask"}"#
            )
            .unwrap(),
            Incoming::SetVersionMask(0x3000)
        );
    }

    #[test]
    fn submit_carries_version_bits_as_sixth_param() {
        let line = encode_request(
            7,
            &Request::Submit {
                user: "w",
                job_id: "bf",
                extranonce2: &[0, 0, 0, 1],
                ntime: 0x504e86ed,
                nonce: 0xb2957c02,
                version_bits: Some(0x0000_6000),
            },
        );
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            v["params"],
            serde_json::json!(["w", "bf", "00000001", "504e86ed", "b2957c02", "00006000"])
        );
        assert!(line.ends_with('\n'));
    }

    #[test]
    fn error_shapes() {
        let cases: [(&str, i64, &str); 4] = [
            (
                r#"{"id":3,"result":null,"error":[23,"Low difficulty share",null]}"#,
                23,
                "Low difficulty share",
            ),
            (
                r#"{"id":3,"result":false,"error":{"code":21,"message":"Job not found"}}"#,
                21,
                "Job not found",
            ),
            (r#"{"id":3,"result":false,"error":"Stale"}"#, 0, "Stale"),
            (r#"{"id":3,"result":false,"error":[]}"#, 0, "unknown error"),
        ];
        for (line, code, message) in cases {
            let Incoming::Response { error: Some(e), .. } = parse_line(line.as_bytes()).unwrap()
            else {
                panic!("{line}")
            };
            assert_eq!((e.code, e.message.as_str()), (code, message), "{line}");
        }
    }

    #[test]
    fn server_calls() {
        let table: [(&str, Incoming); 7] = [
            (
                r#"{"id":null,"method":"mining.set_difficulty","params":[512]}"#,
                Incoming::SetDifficulty(512.0),
            ),
            (
                r#"{"id":null,"method":"mining.set_difficulty","params":["0.5"]}"#,
                Incoming::SetDifficulty(0.5),
            ),
            (
                r#"{"id":null,"method":"mining.set_extranonce","params":["aabb",6]}"#,
                Incoming::SetExtranonce {
                    extranonce1: vec![0xaa, 0xbb],
                    extranonce2_size: 6,
                },
            ),
            (
                r#"{"id":null,"method":"client.reconnect","params":["p.example","3334",5]}"#,
                Incoming::Reconnect {
                    host: Some("p.example".into()),
                    port: Some(3334),
                    wait_s: 5,
                },
            ),
            (
                r#"{"id":null,"method":"client.reconnect","params":[]}"#,
                Incoming::Reconnect {
                    host: None,
                    port: None,
                    wait_s: 0,
                },
            ),
            (
                r#"{"id":"v1","method":"client.get_version","params":[]}"#,
                Incoming::GetVersion {
                    id: serde_json::json!("v1"),
                },
            ),
            (
                r#"{"id":null,"method":"client.show_message","params":["maintenance at 5"]}"#,
                Incoming::ShowMessage("maintenance at 5".into()),
            ),
        ];
        for (line, want) in table {
            assert_eq!(parse_line(line.as_bytes()).unwrap(), want, "{line}");
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for line in [
            &b"hello"[..],
            b"[1,2]",
            b"{}",
            br#"{"id":null,"method":"mining.set_difficulty","params":[-1]}"#,
            br#"{"id":null,"method":"mining.notify","params":["a","00","","",[],"1","2","3",true]}"#,
            br#"{"id":null,"method":"mining.notify","params":["a"]}"#,
            br#"{"id":null,"method":"mining.set_extranonce","params":["zz",4]}"#,
        ] {
            assert!(parse_line(line).is_err(), "{}", String::from_utf8_lossy(line));
        }
        assert!(matches!(
            parse_line(&vec![b' '; MAX_LINE + 1]),
            Err(CodecError::TooLong(_))
        ));
    }
}
