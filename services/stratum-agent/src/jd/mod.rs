//! Stratum V2 job declaration (behind `[stratum].sv2_enabled` and `[stratum.jd].enabled`): the
//! miner picks the block template, the pool only pays for it.
//!
//! * [`client`]: the job-declaration client as a task: templates from a template provider
//!   (Template Distribution protocol), declared to a job-declaration server (Job Declaration
//!   protocol), each declared job handed to the agent as a [`JdEvent`].
//! * [`coinbase`]: the coinbase split and merkle path every role computes the same way (pure).
//!
//! The agent puts a declared job on the pool's mining connection with SetCustomMiningJob
//! (`v2::session`); the pool answers with the job id its shares then carry. Whenever the JD
//! client has no valid declared job (refused, disconnected, the pool moved to a new block
//! first) the session mines the pool's own jobs again, and the status says why.

pub mod client;
pub mod coinbase;

use parsers_sv2::{
    AnyMessage, AnyMessageOwned, JobDeclaration, JobDeclarationTypes, TemplateDistribution,
    TemplateDistributionTypes,
};

use crate::v2::frames::FrameError;

/// A job the job-declaration server accepted: everything SetCustomMiningJob carries, and what
/// the status reports about it.
#[derive(Debug, Clone, PartialEq)]
pub struct DeclaredJob {
    /// The token DeclareMiningJob.Success returned (SetCustomMiningJob presents it).
    pub token: Vec<u8>,
    /// The template provider's template id.
    pub template_id: u64,
    /// Block header version.
    pub version: u32,
    /// The previous block hash the template builds on (internal byte order).
    pub prev_hash: [u8; 32],
    /// Earliest header time.
    pub min_ntime: u32,
    /// Compact block target.
    pub nbits: u32,
    /// The coinbase (pool outputs first, then the template's).
    pub coinbase: coinbase::CoinbaseFields,
    /// The coinbase's merkle path through the template's transactions.
    pub merkle_path: Vec<[u8; 32]>,
    /// Transactions besides the coinbase.
    pub tx_count: u32,
    /// When the server accepted it (unix milliseconds).
    pub declared_at_ms: i64,
}

/// What the JD client reports to the agent (through the connections' event channel, so the
/// agent's one loop orders it with the pool's frames).
#[derive(Debug, Clone, PartialEq)]
pub enum JdEvent {
    /// Both the server and the template provider completed SetupConnection.
    Connected,
    /// The server accepted a job on the newest template.
    Declared(Box<DeclaredJob>),
    /// A declaration was refused or a connection failed: mine pool templates until the next
    /// declared job. The string says why, for the status.
    Failed(String),
}

/// Decode a plaintext frame of the Common, Job Declaration or Template Distribution protocol
/// (the JD client's and the test pool's JD/TD roles; mining frames go through
/// [`crate::v2::frames::decode`], which keeps these parsers out of mining-only paths).
pub fn decode(frame: &[u8]) -> Result<AnyMessageOwned, FrameError> {
    crate::v2::frames::decode_with(frame, |t, payload| {
        if JobDeclarationTypes::try_from(t).is_ok() {
            Some(JobDeclaration::try_from((t, payload)).map(AnyMessage::JobDeclaration))
        } else if TemplateDistributionTypes::try_from(t).is_ok() {
            Some(TemplateDistribution::try_from((t, payload)).map(AnyMessage::TemplateDistribution))
        } else {
            None
        }
    })
}

/// SV2 text, cut to the 255 bytes the wire allows (error codes and names are short anyway).
pub fn text(s: &str) -> binary_sv2::Str0255Owned {
    let mut s = s.to_string();
    while s.len() > 255 {
        s.pop();
    }
    binary_sv2::Str0255Owned::try_from(s)
        .unwrap_or_else(|_| binary_sv2::Str0255Owned::try_from(String::new()).expect("empty fits"))
}
