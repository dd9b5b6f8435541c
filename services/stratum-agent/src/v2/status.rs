//! What `GetSv2Status` reports: the live state of the SV2 connection the agent mines on (or last
//! tried), rebuilt by the agent on every SV2 event and published as a snapshot.

use svcos_proto::stratum::v1::{GetSv2StatusResponse, Sv2Message};

use super::session::{LoggedMessage, Sv2Session};

/// Per-connection facts outside the protocol session: the endpoint, key and handshake.
#[derive(Debug, Clone, Default)]
pub struct Sv2Link {
    /// host:port.
    pub endpoint: String,
    /// The URL's authority key (base58check).
    pub authority_b58: String,
    /// Its fingerprint.
    pub fingerprint: String,
    /// none, in_progress, ok, failed.
    pub handshake: &'static str,
    /// What the handshake step said.
    pub handshake_detail: String,
    /// When it finished.
    pub handshake_at_ms: i64,
    /// Handshake entries for the message log (the session logs the rest).
    pub handshake_log: Vec<LoggedMessage>,
}

/// Build the snapshot of one connection.
pub fn snapshot(
    link: &Sv2Link,
    session: Option<&Sv2Session>,
    pool_index: i32,
    active: bool,
    closed_error: Option<&str>,
) -> GetSv2StatusResponse {
    let state = match (closed_error, session) {
        (Some(_), _) => "closed",
        (None, _) if link.handshake == "in_progress" => "handshake",
        (None, Some(s)) if s.authorized => "channel_open",
        (None, Some(_)) => "setup",
        (None, None) => "connecting",
    };
    let mut messages: Vec<Sv2Message> = link
        .handshake_log
        .iter()
        .chain(session.into_iter().flat_map(|s| s.log.iter()))
        .map(|m| Sv2Message {
            timestamp_ms: m.at_ms,
            direction: m.direction.to_string(),
            message_type: m.message_type.clone(),
            summary: m.summary.clone(),
        })
        .collect();
    let excess = messages.len().saturating_sub(super::session::LOG_LEN);
    messages.drain(..excess);
    let last_error = closed_error
        .map(str::to_string)
        .or_else(|| session.map(|s| s.last_error.clone()))
        .unwrap_or_default();
    let mut r = GetSv2StatusResponse {
        enabled: true,
        state: state.to_string(),
        endpoint: link.endpoint.clone(),
        handshake: link.handshake.to_string(),
        authority_pubkey: link.authority_b58.clone(),
        authority_fingerprint: link.fingerprint.clone(),
        handshake_detail: link.handshake_detail.clone(),
        handshake_at_ms: link.handshake_at_ms,
        messages,
        last_error,
        pool_index,
        active,
        ..Default::default()
    };
    if let Some(s) = session {
        if let Some((version, flags)) = s.setup {
            r.protocol_version = version.into();
            r.setup_flags = flags;
        }
        r.channel_open = s.authorized;
        if let Some(id) = s.channel_id {
            r.channel_id = id;
            r.channel_type = "extended".into();
            let mut be = s.target;
            be.reverse();
            r.target = hex::encode(be);
            r.difficulty = s.difficulty;
            r.extranonce_prefix = hex::encode(&s.extranonce1);
            r.extranonce_size = s.extranonce2_size as u32;
            r.group_channel_id = s.group_channel_id;
        }
        r.version_mask = s.version_mask.unwrap_or(0);
        r.jobs_received = s.jobs_received;
        r.shares_accepted = s.accepted;
        r.shares_rejected = s.rejected;
    }
    r
}
