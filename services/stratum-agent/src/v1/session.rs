//! The Stratum V1 client session as a pure state machine: feed it parsed pool messages, get back
//! lines to write and events for the pool manager. It owns request ids, the negotiated
//! extensions, extranonce, difficulty and version mask of one connection, and nothing else, so
//! every protocol rule here is unit-tested without a socket.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::codec::{
    ConfigureRequest, Incoming, Notify, PoolError, Request, encode_reply, encode_request,
    parse_configure_result, parse_subscribe_result,
};

/// The mask we offer in `mining.configure`: BIP 320's general-purpose bits.
pub const OFFERED_VERSION_MASK: u32 = 0x1fff_e000;
/// Unanswered requests remembered per connection.
pub const MAX_PENDING: usize = 4096;
/// Answer to `client.get_version`.
pub const AGENT: &str = concat!("svcos/", env!("CARGO_PKG_VERSION"));

/// What the session needs to know at start. Its `Debug` never shows the password.
#[derive(Clone, PartialEq)]
pub struct SessionParams {
    /// Worker name.
    pub user: String,
    /// Worker password (never logged).
    pub password: String,
    /// Ask for version rolling (BIP 310).
    pub version_rolling: bool,
    /// Sent as `mining.suggest_difficulty` and as BIP 310 minimum-difficulty when > 0.
    pub suggest_difficulty: f64,
    /// Subscription id of the previous connection to the same pool, to resume its extranonce.
    pub resume: Option<String>,
}

impl std::fmt::Debug for SessionParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionParams")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .field("version_rolling", &self.version_rolling)
            .field("suggest_difficulty", &self.suggest_difficulty)
            .field("resume", &self.resume)
            .finish()
    }
}

/// Which request an id belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pending {
    Configure,
    Subscribe,
    Authorize,
    ExtranonceSubscribe,
    SuggestDifficulty,
    Submit(u64),
}

/// Something the pool manager must act on.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionEvent {
    /// Write this line to the pool.
    Send(String),
    /// Write this plaintext frame to the pool (Stratum V2 sessions).
    SendFrame(Vec<u8>),
    /// Subscribed; `resumed` when the pool kept the previous subscription id.
    Subscribed {
        /// Whether the subscription id we asked to resume was granted.
        resumed: bool,
    },
    /// The pool accepted the worker.
    Authorized,
    /// The pool refused the worker (or the subscription), with its reason.
    Refused(String),
    /// A new job, with the difficulty in force when it arrived.
    Job(Box<Notify>),
    /// The share difficulty changed.
    Difficulty(f64),
    /// Extranonce1 / extranonce2 size changed: every earlier job is void.
    ExtranonceChanged,
    /// The version mask changed (`None`: rolling off).
    VersionMask(Option<u32>),
    /// The pool's answer to a submitted share.
    ShareResult {
        /// The ticket given to [`Session::submit`].
        ticket: u64,
        /// Accepted or not.
        accepted: bool,
        /// The pool's reason when rejected.
        reason: Option<PoolError>,
    },
    /// `client.reconnect`.
    Reconnect {
        /// New host, if any.
        host: Option<String>,
        /// New port, if any.
        port: Option<u16>,
        /// Seconds to wait first.
        wait_s: u64,
    },
    /// `client.show_message`.
    Message(String),
}

/// One share to submit, in header terms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShareSubmit<'a> {
    /// Pool job id.
    pub job_id: &'a str,
    /// Extranonce2 bytes.
    pub extranonce2: &'a [u8],
    /// Header time.
    pub ntime: u32,
    /// Header nonce.
    pub nonce: u32,
    /// The full rolled version used in the header.
    pub version: u32,
}

/// One connection's protocol state.
#[derive(Debug)]
pub struct Session {
    params: SessionParams,
    next_id: u64,
    pending: HashMap<u64, Pending>,
    /// Subscription id the pool gave (to resume on the next connection).
    pub session_id: Option<String>,
    /// Extranonce1, once subscribed.
    pub extranonce1: Vec<u8>,
    /// Extranonce2 size in bytes, once subscribed.
    pub extranonce2_size: usize,
    /// Whether subscribe succeeded.
    pub subscribed: bool,
    /// Whether authorize succeeded.
    pub authorized: bool,
    /// Current share difficulty (1 until the pool says otherwise, as the protocol defines).
    pub difficulty: f64,
    /// Negotiated version mask, `None` when rolling is off.
    pub version_mask: Option<u32>,
    /// Notifies received.
    pub notifies: u64,
}

impl Session {
    /// A session that has sent nothing yet.
    pub fn new(params: SessionParams) -> Self {
        Session {
            params,
            next_id: 1,
            pending: HashMap::new(),
            session_id: None,
            extranonce1: Vec::new(),
            extranonce2_size: 0,
            subscribed: false,
            authorized: false,
            difficulty: 1.0,
            version_mask: None,
            notifies: 0,
        }
    }

    /// The worker name shares are submitted under.
    pub fn user(&self) -> &str {
        &self.params.user
    }

    fn request(&mut self, kind: Pending, req: &Request<'_>) -> String {
        let id = self.next_id;
        self.next_id += 1;
        // A pool that never answers must not grow this map without bound: requests more than
        // MAX_PENDING ids old will not be answered any more.
        if self.pending.len() >= MAX_PENDING {
            let floor = id.saturating_sub(MAX_PENDING as u64);
            self.pending.retain(|k, _| *k > floor);
        }
        self.pending.insert(id, kind);
        encode_request(id, req)
    }

    /// The opening lines, pipelined: configure (BIP 310 wants it first), subscribe (resuming
    /// when we have an id), suggest_difficulty, authorize.
    pub fn start(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        let min_diff =
            (self.params.suggest_difficulty > 0.0).then_some(self.params.suggest_difficulty);
        if self.params.version_rolling || min_diff.is_some() {
            let req = Request::Configure(ConfigureRequest {
                version_rolling_mask: self.params.version_rolling.then_some(OFFERED_VERSION_MASK),
                version_rolling_min_bits: 2,
                minimum_difficulty: min_diff,
            });
            lines.push(self.request(Pending::Configure, &req));
        }
        let resume = self.params.resume.clone();
        lines.push(self.request(
            Pending::Subscribe,
            &Request::Subscribe {
                agent: AGENT,
                resume: resume.as_deref(),
            },
        ));
        if let Some(d) = min_diff {
            lines.push(self.request(Pending::SuggestDifficulty, &Request::SuggestDifficulty(d)));
        }
        let (user, password) = (self.params.user.clone(), self.params.password.clone());
        lines.push(self.request(
            Pending::Authorize,
            &Request::Authorize {
                user: &user,
                password: &password,
            },
        ));
        lines
    }

    /// Encode a share submission; `ticket` comes back in [`SessionEvent::ShareResult`].
    pub fn submit(&mut self, ticket: u64, share: ShareSubmit<'_>) -> String {
        let user = self.params.user.clone();
        // BIP 310: version_bits are the rolled version masked with the last mask, not an XOR.
        let version_bits = self.version_mask.map(|m| share.version & m);
        self.request(
            Pending::Submit(ticket),
            &Request::Submit {
                user: &user,
                job_id: share.job_id,
                extranonce2: share.extranonce2,
                ntime: share.ntime,
                nonce: share.nonce,
                version_bits,
            },
        )
    }

    /// Tickets of shares still waiting for an answer (lost when the connection drops).
    pub fn pending_tickets(&self) -> Vec<u64> {
        self.pending
            .values()
            .filter_map(|p| match p {
                Pending::Submit(t) => Some(*t),
                _ => None,
            })
            .collect()
    }

    /// Handle one parsed message.
    pub fn handle(&mut self, msg: Incoming) -> Vec<SessionEvent> {
        let mut out = Vec::new();
        match msg {
            Incoming::Response { id, result, error } => match self.pending.remove(&id) {
                Some(kind) => self.on_response(kind, result, error, &mut out),
                None => tracing::debug!(id, "answer to an unknown request id"),
            },
            Incoming::Notify(n) => {
                self.notifies += 1;
                out.push(SessionEvent::Job(Box::new(n)));
            }
            Incoming::SetDifficulty(d) => {
                self.difficulty = d;
                out.push(SessionEvent::Difficulty(d));
            }
            Incoming::SetExtranonce {
                extranonce1,
                extranonce2_size,
            } => {
                self.extranonce1 = extranonce1;
                self.extranonce2_size = extranonce2_size;
                out.push(SessionEvent::ExtranonceChanged);
            }
            Incoming::SetVersionMask(mask) => {
                // Only meaningful once rolling was negotiated (BIP 310).
                if self.version_mask.is_some() {
                    self.version_mask = Some(mask);
                    out.push(SessionEvent::VersionMask(Some(mask)));
                }
            }
            Incoming::Reconnect { host, port, wait_s } => {
                out.push(SessionEvent::Reconnect { host, port, wait_s })
            }
            Incoming::GetVersion { id } => {
                out.push(SessionEvent::Send(encode_reply(&id, json!(AGENT), None)))
            }
            Incoming::ShowMessage(m) => out.push(SessionEvent::Message(m)),
            Incoming::Ping { id } => {
                out.push(SessionEvent::Send(encode_reply(&id, json!("pong"), None)))
            }
            Incoming::Unknown { method, id } => {
                if !id.is_null() && !method.is_empty() {
                    out.push(SessionEvent::Send(encode_reply(
                        &id,
                        Value::Null,
                        Some((20, "method not supported")),
                    )));
                }
            }
        }
        out
    }

    fn on_response(
        &mut self,
        kind: Pending,
        result: Value,
        error: Option<PoolError>,
        out: &mut Vec<SessionEvent>,
    ) {
        match kind {
            Pending::Configure => {
                // An error means the pool does not know BIP 310: mine without extensions.
                let granted = if error.is_none() {
                    parse_configure_result(&result)
                } else {
                    Default::default()
                };
                self.version_mask = granted.version_mask.filter(|m| *m != 0);
                out.push(SessionEvent::VersionMask(self.version_mask));
            }
            Pending::Subscribe => {
                let parsed = match error {
                    Some(e) => Err(e.message),
                    None => parse_subscribe_result(&result).map_err(|e| e.to_string()),
                };
                match parsed {
                    Ok(s) => {
                        let resumed = s.session_id.is_some() && s.session_id == self.params.resume;
                        self.session_id = s.session_id;
                        self.extranonce1 = s.extranonce1;
                        self.extranonce2_size = s.extranonce2_size;
                        self.subscribed = true;
                        out.push(SessionEvent::Subscribed { resumed });
                        // Ask for mid-session extranonce changes now that the pool knows us.
                        out.push(SessionEvent::Send(self.request(
                            Pending::ExtranonceSubscribe,
                            &Request::ExtranonceSubscribe,
                        )));
                    }
                    Err(reason) => out.push(SessionEvent::Refused(format!("subscribe: {reason}"))),
                }
            }
            Pending::Authorize => {
                if error.is_none() && result.as_bool() == Some(true) {
                    self.authorized = true;
                    out.push(SessionEvent::Authorized);
                } else {
                    let reason =
                        error.map_or_else(|| "authorization refused".to_string(), |e| e.message);
                    out.push(SessionEvent::Refused(format!("authorize: {reason}")));
                }
            }
            // Optional extensions: a refusal changes nothing.
            Pending::ExtranonceSubscribe | Pending::SuggestDifficulty => {}
            Pending::Submit(ticket) => {
                let accepted = error.is_none() && result.as_bool() == Some(true);
                let reason = if accepted {
                    None
                } else {
                    Some(error.unwrap_or(PoolError {
                        code: 0,
                        message: "rejected".into(),
                    }))
                };
                out.push(SessionEvent::ShareResult {
                    ticket,
                    accepted,
                    reason,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::codec::parse_line;
    use super::*;

    fn params() -> SessionParams {
        SessionParams {
            user: "acct.worker".into(),
            password: "secret".into(),
            version_rolling: true,
            suggest_difficulty: 0.0,
            resume: None,
        }
    }

    fn feed(s: &mut Session, line: &str) -> Vec<SessionEvent> {
        s.handle(parse_line(line.as_bytes()).unwrap())
    }

    fn ids(lines: &[String]) -> Vec<(u64, String)> {
        lines
            .iter()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                (
                    v["id"].as_u64().unwrap(),
                    v["method"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn handshake_negotiates_rolling_and_submits_masked_bits() {
        let mut s = Session::new(params());
        let lines = s.start();
        assert_eq!(
            ids(&lines),
            [
                (1, "mining.configure".into()),
                (2, "mining.subscribe".into()),
                (3, "mining.authorize".into())
            ]
        );
        assert_eq!(
            feed(
                &mut s,
                r#"{"id":1,"result":{"version-rolling":true,"version-rolling.mask":"18000000"},"error":null}"#
            ),
            [SessionEvent::VersionMask(Some(0x1800_0000))]
        );
        let ev = feed(
            &mut s,
            r#"{"id":2,"result":[[["mining.notify","s1"]],"08000002",4],"error":null}"#,
        );
        assert_eq!(ev[0], SessionEvent::Subscribed { resumed: false });
        assert!(
            matches!(&ev[1], SessionEvent::Send(l) if l.contains("mining.extranonce.subscribe"))
        );
        assert_eq!(
            (s.extranonce1.as_slice(), s.extranonce2_size),
            (&[8u8, 0, 0, 2][..], 4)
        );
        assert_eq!(
            feed(&mut s, r#"{"id":3,"result":true,"error":null}"#),
            [SessionEvent::Authorized]
        );

        let line = s.submit(
            42,
            ShareSubmit {
                job_id: "j",
                extranonce2: &[0, 0, 0, 9],
                ntime: 5,
                nonce: 6,
                version: 0x3800_0000,
            },
        );
        let v: Value = serde_json::from_str(&line).unwrap();
        // 0x38000000 & 0x18000000: only the negotiated bits travel.
        assert_eq!(v["params"][5], "18000000");
        assert_eq!(s.pending_tickets(), [42]);
        let id = v["id"].as_u64().unwrap();
        let ev = feed(
            &mut s,
            &format!(r#"{{"id":{id},"result":null,"error":[23,"Low difficulty share",null]}}"#),
        );
        assert_eq!(
            ev,
            [SessionEvent::ShareResult {
                ticket: 42,
                accepted: false,
                reason: Some(PoolError {
                    code: 23,
                    message: "Low difficulty share".into()
                })
            }]
        );
        assert!(s.pending_tickets().is_empty());
    }

    #[test]
    fn pool_without_bip310_mines_without_rolling() {
        let mut s = Session::new(params());
        s.start();
        assert_eq!(
            feed(
                &mut s,
                r#"{"id":1,"result":null,"error":[20,"Unknown method",null]}"#
            ),
            [SessionEvent::VersionMask(None)]
        );
        // set_version_mask before negotiation is ignored.
        assert!(
            feed(
                &mut s,
                r#"{"id":null,"method":"mining.set_version_mask","params":["00006000"]}"#
            )
            .is_empty()
        );
        let line = s.submit(
            1,
            ShareSubmit {
                job_id: "j",
                extranonce2: &[1],
                ntime: 1,
                nonce: 2,
                version: 0x2000_0000,
            },
        );
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["params"].as_array().unwrap().len(), 5);
    }

    #[test]
    fn resume_is_detected_and_refusal_reported() {
        let mut s = Session::new(SessionParams {
            resume: Some("s1".into()),
            version_rolling: false,
            ..params()
        });
        let lines = s.start();
        assert_eq!(ids(&lines)[0].1, "mining.subscribe");
        let v: Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(v["params"][1], "s1");
        let ev = feed(
            &mut s,
            r#"{"id":1,"result":[[["mining.notify","s1"]],"aa",4],"error":null}"#,
        );
        assert_eq!(ev[0], SessionEvent::Subscribed { resumed: true });
        assert_eq!(
            feed(&mut s, r#"{"id":2,"result":false,"error":null}"#),
            [SessionEvent::Refused(
                "authorize: authorization refused".into()
            )]
        );
        assert!(!s.authorized);
    }

    /// A stable-toolchain stand-in for the cargo-fuzz target: seeded random mutations of real
    /// pool lines through the parser and the state machine must never panic.
    #[test]
    fn mutated_pool_lines_never_panic() {
        use rand::{Rng, SeedableRng};
        let seeds = [
            r#"{"params": ["bf", "4d16b6f85af6e2198f44ae2a6de67f78487ae5611b77c6c0440b921e00000000", "0100", "0200", ["0000000000000000000000000000000000000000000000000000000000000000"], "00000002", "1c2ac4af", "504e86b9", false], "id": null, "method": "mining.notify"}"#,
            r#"{"id":2,"result":[[["mining.notify","s1"]],"08000002",4],"error":null}"#,
            r#"{"id":1,"result":{"version-rolling":true,"version-rolling.mask":"18000000"},"error":null}"#,
            r#"{"id":5,"result":null,"error":[23,"Low difficulty share",null]}"#,
            r#"{"id":null,"method":"client.reconnect","params":["h",3333,1]}"#,
            r#"{"id":null,"method":"mining.set_extranonce","params":["aabb",4]}"#,
        ];
        let mut rng = rand::rngs::StdRng::seed_from_u64(310);
        let mut s = Session::new(params());
        s.start();
        for _ in 0..20_000 {
            let mut line = seeds[rng.random_range(0..seeds.len())].as_bytes().to_vec();
            for _ in 0..rng.random_range(1..4) {
                let i = rng.random_range(0..line.len());
                match rng.random_range(0..3) {
                    0 => line[i] = rng.random(),
                    1 => line.truncate(i),
                    _ => {
                        let punct = b"[]{},:0-e\"";
                        line.insert(i, punct[rng.random_range(0..punct.len())])
                    }
                }
                if line.is_empty() {
                    break;
                }
            }
            if let Ok(msg) = parse_line(&line) {
                let _ = s.handle(msg);
            }
        }
    }

    #[test]
    fn unanswered_requests_are_bounded() {
        let mut s = Session::new(params());
        s.start();
        for t in 0..(MAX_PENDING as u64 * 2) {
            s.submit(
                t,
                ShareSubmit {
                    job_id: "j",
                    extranonce2: &[0],
                    ntime: 0,
                    nonce: 0,
                    version: 0,
                },
            );
        }
        assert!(s.pending_tickets().len() <= MAX_PENDING);
        assert!(
            s.pending_tickets().contains(&(MAX_PENDING as u64 * 2 - 1)),
            "the newest are kept"
        );
    }

    #[test]
    fn debug_output_never_shows_the_password() {
        let s = Session::new(params());
        let text = format!("{s:?}");
        assert!(!text.contains("secret"), "{text}");
        assert!(text.contains("acct.worker"));
    }

    #[test]
    fn suggest_difficulty_and_server_requests() {
        let mut s = Session::new(SessionParams {
            suggest_difficulty: 1024.0,
            version_rolling: false,
            ..params()
        });
        let lines = s.start();
        let methods: Vec<String> = ids(&lines).into_iter().map(|(_, m)| m).collect();
        assert_eq!(
            methods,
            [
                "mining.configure",
                "mining.subscribe",
                "mining.suggest_difficulty",
                "mining.authorize"
            ]
        );
        let ev = feed(
            &mut s,
            r#"{"id":"gv","method":"client.get_version","params":[]}"#,
        );
        let SessionEvent::Send(reply) = &ev[0] else {
            panic!()
        };
        let v: Value = serde_json::from_str(reply).unwrap();
        assert_eq!(
            (v["id"].as_str(), v["result"].as_str()),
            (Some("gv"), Some(AGENT))
        );
        assert_eq!(
            feed(
                &mut s,
                r#"{"id":null,"method":"mining.set_difficulty","params":[8]}"#
            ),
            [SessionEvent::Difficulty(8.0)]
        );
        assert_eq!(s.difficulty, 8.0);
        assert_eq!(
            feed(
                &mut s,
                r#"{"id":null,"method":"mining.set_extranonce","params":["0102",2]}"#
            ),
            [SessionEvent::ExtranonceChanged]
        );
        assert_eq!(s.extranonce2_size, 2);
        let ev = feed(&mut s, r#"{"id":9,"method":"mining.bogus","params":[]}"#);
        assert!(matches!(&ev[0], SessionEvent::Send(l) if l.contains("\"id\":9")));
    }
}
