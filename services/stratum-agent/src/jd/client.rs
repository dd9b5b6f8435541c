//! The job-declaration client as a task. It owns two Noise connections: one to the template
//! provider (SetupConnection for Template Distribution, CoinbaseOutputConstraints, then
//! NewTemplate / SetNewPrevHash / RequestTransactionData), one to the job-declaration server
//! (SetupConnection for Job Declaration, AllocateMiningJobToken, DeclareMiningJob, answering
//! ProvideMissingTransactions). Each template that becomes current is declared; each accepted
//! declaration goes to the agent as [`JdEvent::Declared`]. Any failure ends the session with
//! [`JdEvent::Failed`] (the agent mines pool templates meanwhile) and the task starts over after
//! a backoff.
//!
//! [`test_connection`] runs the opening of both connections once and changes nothing.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use binary_sv2::{B016MOwned, B064KOwned, Seq064KOwned, U256Owned};
use bitcoin::consensus::deserialize;
use bitcoin::hashes::Hash;
use bitcoin::{Amount, Transaction, TxOut};
use common_messages_sv2::{Protocol, SetupConnectionOwned};
use job_declaration_sv2::{
    AllocateMiningJobTokenOwned, DeclareMiningJobOwned, ProvideMissingTransactionsSuccessOwned,
};
use parsers_sv2::{
    AnyMessageOwned, CommonMessagesOwned, JobDeclarationOwned, TemplateDistributionOwned,
};
use template_distribution_sv2::{
    CoinbaseOutputConstraintsOwned, NewTemplateOwned, RequestTransactionDataOwned,
};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::mpsc;

use super::coinbase::{self, CoinbaseFields};
use super::{DeclaredJob, JdEvent, text};
use crate::conn::ConnEvent;
use crate::transport::PoolUrl;
use crate::v2::noise::{self, FrameWriter};
use crate::v2::session::PROTOCOL_VERSION;

/// First retry delay after a failed session; doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// Longest retry delay.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Templates kept while waiting for the SetNewPrevHash that activates one.
const MAX_TEMPLATES: usize = 8;

/// One upstream role: where it listens and the authority key its certificate must be signed by.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    /// host:port.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Authority public key, x-only.
    pub key: [u8; 32],
    /// The key as configured (base58check).
    pub key_b58: String,
}

impl Endpoint {
    /// Parse `stratum2+tcp://host:port/<authority key>`, the form SV2 pool URLs take.
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let parsed = PoolUrl::parse(url).map_err(|e| e.to_string())?;
        if parsed.scheme != crate::transport::Scheme::V2 {
            return Err(format!("{url:?} is not a stratum2+tcp:// URL"));
        }
        let b58 = parsed
            .authority_key
            .ok_or_else(|| format!("{url:?} has no authority key after the port"))?;
        let key = crate::v2::parse_authority_key(&b58)?;
        Ok(Endpoint {
            host: parsed.host,
            port: parsed.port,
            key,
            key_b58: b58,
        })
    }

    fn addr(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// What a JD client session needs.
#[derive(Debug, Clone)]
pub struct JdParams {
    /// The job-declaration server.
    pub server: Endpoint,
    /// The template provider.
    pub template_provider: Endpoint,
    /// user_identifier of AllocateMiningJobToken (the pool worker).
    pub user: String,
    /// Full extranonce length of the pool channel the jobs will be mined on (its extranonce
    /// prefix plus the miner's part): where the declared coinbase is split.
    pub extranonce_len: usize,
    /// Connect and answer timeout.
    pub timeout: Duration,
}

/// One Noise connection to an upstream role, its frames read by a task of its own (the frame
/// reader is not cancel-safe).
struct Link {
    role: &'static str,
    frames: mpsc::Receiver<Result<Vec<u8>, String>>,
    writer: FrameWriter<OwnedWriteHalf>,
    reader: tokio::task::AbortHandle,
    timeout: Duration,
}

impl Drop for Link {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Link {
    async fn open(role: &'static str, ep: &Endpoint, timeout: Duration) -> Result<Link, String> {
        let addr = ep.addr();
        let stream = tokio::time::timeout(timeout, TcpStream::connect(&addr))
            .await
            .map_err(|_| format!("{role} {addr}: connect timed out"))?
            .map_err(|e| format!("{role} {addr}: {e}"))?;
        let _ = stream.set_nodelay(true);
        let (read, write) = stream.into_split();
        let (mut reader, writer) = noise::initiate(read, write, ep.key, &ep.key_b58, timeout)
            .await
            .map_err(|e| format!("{role} {addr}: {e}"))?;
        let (tx, frames) = mpsc::channel(64);
        let task = tokio::spawn(async move {
            loop {
                let r = reader.next().await.map_err(|e| e.to_string());
                let end = r.is_err();
                if tx.send(r).await.is_err() || end {
                    return;
                }
            }
        });
        Ok(Link {
            role,
            frames,
            writer,
            reader: task.abort_handle(),
            timeout,
        })
    }

    async fn send(&mut self, m: AnyMessageOwned) -> Result<(), String> {
        let bytes = crate::v2::frames::encode(m).map_err(|e| format!("{}: {e}", self.role))?;
        self.writer
            .send(&bytes)
            .await
            .map_err(|e| format!("{}: write: {e}", self.role))
    }

    /// The next message; `None` waits without a deadline (an idle template provider is fine).
    async fn recv(&mut self, deadline: Option<Duration>) -> Result<AnyMessageOwned, String> {
        let next = async {
            match self.frames.recv().await {
                Some(Ok(frame)) => super::decode(&frame).map_err(|e| format!("{}: {e}", self.role)),
                Some(Err(e)) => Err(format!("{}: {e}", self.role)),
                None => Err(format!("{} closed the connection", self.role)),
            }
        };
        match deadline {
            Some(d) => tokio::time::timeout(d, next)
                .await
                .map_err(|_| format!("{}: no answer within {} s", self.role, d.as_secs()))?,
            None => next.await,
        }
    }

    /// SetupConnection for `protocol`, answered with Success.
    async fn setup(&mut self, protocol: Protocol, ep: &Endpoint) -> Result<(), String> {
        let setup = SetupConnectionOwned {
            protocol,
            min_version: PROTOCOL_VERSION,
            max_version: PROTOCOL_VERSION,
            flags: 0,
            endpoint_host: text(&ep.host),
            endpoint_port: ep.port,
            vendor: text("svcos"),
            hardware_version: text("svcos-sim"),
            firmware: text(crate::v1::session::AGENT),
            device_id: text(""),
        };
        self.send(AnyMessageOwned::Common(
            CommonMessagesOwned::SetupConnection(setup),
        ))
        .await?;
        match self.recv(Some(self.timeout)).await? {
            AnyMessageOwned::Common(CommonMessagesOwned::SetupConnectionSuccess(_)) => Ok(()),
            AnyMessageOwned::Common(CommonMessagesOwned::SetupConnectionError(e)) => Err(format!(
                "{} refused SetupConnection: {}",
                self.role,
                e.error_code.as_utf8_or_hex()
            )),
            other => Err(format!(
                "{} answered SetupConnection with {}",
                self.role,
                crate::v2::frames::name(&other)
            )),
        }
    }
}

/// AllocateMiningJobToken → (token, the pool's coinbase outputs).
async fn allocate(
    jds: &mut Link,
    request_id: u32,
    user: &str,
) -> Result<(Vec<u8>, Vec<TxOut>), String> {
    let m = AllocateMiningJobTokenOwned {
        user_identifier: text(user),
        request_id,
    };
    jds.send(AnyMessageOwned::JobDeclaration(
        JobDeclarationOwned::AllocateMiningJobToken(m),
    ))
    .await?;
    match jds.recv(Some(jds.timeout)).await? {
        AnyMessageOwned::JobDeclaration(JobDeclarationOwned::AllocateMiningJobTokenSuccess(s))
            if s.request_id == request_id =>
        {
            let outputs = coinbase::decode_outputs(&s.coinbase_outputs.to_owned_bytes())
                .map_err(|e| format!("job declaration server: {e}"))?;
            if outputs.is_empty() {
                return Err(
                    "job declaration server sent no coinbase outputs to pay the pool".into(),
                );
            }
            Ok((s.mining_job_token.to_owned_bytes(), outputs))
        }
        other => Err(format!(
            "job declaration server answered AllocateMiningJobToken with {}",
            crate::v2::frames::name(&other)
        )),
    }
}

/// Run JD sessions until the agent drops the receiving end of `events` (it aborts the task when
/// the pool connection the jobs are for goes away).
/// `run_id` names this run in every event it sends.
pub async fn run(run_id: u64, params: JdParams, events: mpsc::Sender<ConnEvent>) {
    let mut backoff = FIRST_BACKOFF;
    loop {
        let (declared, error) = session(run_id, &params, &events).await;
        tracing::warn!(error = %error, "job declaration session ended; mining pool templates");
        if events
            .send(ConnEvent::Jd(run_id, JdEvent::Failed(error)))
            .await
            .is_err()
        {
            return;
        }
        if declared {
            backoff = FIRST_BACKOFF;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// A template and, once known, the previous hash it builds on.
struct Current {
    prev_hash: [u8; 32],
    min_ntime: u32,
    nbits: u32,
    template_id: u64,
}

/// One session: returns whether it declared anything, and why it ended.
async fn session(run_id: u64, p: &JdParams, events: &mpsc::Sender<ConnEvent>) -> (bool, String) {
    let mut declared = false;
    let run: Result<(), String> = async {
        let mut jds = Link::open("job declaration server", &p.server, p.timeout).await?;
        jds.setup(Protocol::JobDeclarationProtocol, &p.server)
            .await?;
        let mut tp = Link::open("template provider", &p.template_provider, p.timeout).await?;
        tp.setup(Protocol::TemplateDistributionProtocol, &p.template_provider)
            .await?;
        let mut request_id = 1u32;
        // The first token also tells how much room the pool's outputs need in the coinbase.
        let mut token = Some(allocate(&mut jds, request_id, &p.user).await?);
        let outputs_size = token
            .as_ref()
            .map_or(0, |t| coinbase::encode_outputs(&t.1).len());
        tp.send(AnyMessageOwned::TemplateDistribution(
            TemplateDistributionOwned::CoinbaseOutputConstraints(CoinbaseOutputConstraintsOwned {
                coinbase_output_max_additional_size: outputs_size as u32,
                coinbase_output_max_additional_sigops: 0,
            }),
        ))
        .await?;
        if events
            .send(ConnEvent::Jd(run_id, JdEvent::Connected))
            .await
            .is_err()
        {
            return Err("agent gone".to_string());
        }
        let mut templates: BTreeMap<u64, NewTemplateOwned> = BTreeMap::new();
        let mut current: Option<Current> = None;
        let mut backlog: VecDeque<AnyMessageOwned> = VecDeque::new();
        loop {
            let m = match backlog.pop_front() {
                Some(m) => m,
                None => tp.recv(None).await?,
            };
            let ready = match m {
                AnyMessageOwned::TemplateDistribution(TemplateDistributionOwned::NewTemplate(
                    t,
                )) => {
                    let now = (!t.future_template).then_some(t.template_id);
                    templates.insert(t.template_id, t);
                    while templates.len() > MAX_TEMPLATES {
                        templates.pop_first();
                    }
                    match (&mut current, now) {
                        (Some(c), Some(id)) => {
                            c.template_id = id;
                            true
                        }
                        _ => false,
                    }
                }
                AnyMessageOwned::TemplateDistribution(
                    TemplateDistributionOwned::SetNewPrevHash(s),
                ) => {
                    current = Some(Current {
                        prev_hash: s.prev_hash.to_array(),
                        min_ntime: s.header_timestamp,
                        nbits: s.n_bits,
                        template_id: s.template_id,
                    });
                    true
                }
                other => {
                    tracing::debug!(
                        message = crate::v2::frames::name(&other),
                        "ignored from template provider"
                    );
                    false
                }
            };
            let Some(c) = current.as_ref().filter(|_| ready) else {
                continue;
            };
            let Some(template) = templates.get(&c.template_id).cloned() else {
                return Err(format!(
                    "template provider activated template {} it never sent",
                    c.template_id
                ));
            };
            let txs = transaction_data(&mut tp, template.template_id, &mut backlog).await?;
            let (tok, pool_outputs) = match token.take() {
                Some(t) => t,
                None => {
                    request_id += 1;
                    allocate(&mut jds, request_id, &p.user).await?
                }
            };
            request_id += 1;
            let job = declare(
                &mut jds,
                request_id,
                tok,
                &pool_outputs,
                &template,
                c,
                &txs,
                p,
            )
            .await?;
            declared = true;
            if events
                .send(ConnEvent::Jd(run_id, JdEvent::Declared(Box::new(job))))
                .await
                .is_err()
            {
                return Err("agent gone".to_string());
            }
        }
    }
    .await;
    (declared, run.err().unwrap_or_default())
}

/// RequestTransactionData for a template; template messages arriving meanwhile are kept for
/// the main loop.
async fn transaction_data(
    tp: &mut Link,
    template_id: u64,
    backlog: &mut VecDeque<AnyMessageOwned>,
) -> Result<Vec<Vec<u8>>, String> {
    tp.send(AnyMessageOwned::TemplateDistribution(
        TemplateDistributionOwned::RequestTransactionData(RequestTransactionDataOwned {
            template_id,
        }),
    ))
    .await?;
    loop {
        match tp.recv(Some(tp.timeout)).await? {
            AnyMessageOwned::TemplateDistribution(
                TemplateDistributionOwned::RequestTransactionDataSuccess(s),
            ) if s.template_id == template_id => {
                return Ok(s
                    .transaction_list
                    .into_inner()
                    .into_iter()
                    .map(|t| t.into_bytes())
                    .collect());
            }
            AnyMessageOwned::TemplateDistribution(
                TemplateDistributionOwned::RequestTransactionDataError(e),
            ) if e.template_id == template_id => {
                return Err(format!(
                    "template provider has no transactions for template {template_id}: {}",
                    e.error_code.as_utf8_or_hex()
                ));
            }
            other => backlog.push_back(other),
        }
    }
}

/// The coinbase of a declared job: the pool's outputs (the first takes the template's whole
/// remaining reward, as the server's placeholder value says nothing) then the template's own.
pub fn coinbase_fields(
    template: &NewTemplateOwned,
    pool_outputs: &[TxOut],
) -> Result<CoinbaseFields, String> {
    let mut outputs = pool_outputs.to_vec();
    if let Some(first) = outputs.first_mut() {
        first.value = Amount::from_sat(template.coinbase_tx_value_remaining);
    }
    // NewTemplate carries its outputs without the count in front.
    let mut own = bitcoin::consensus::serialize(&bitcoin::VarInt(u64::from(
        template.coinbase_tx_outputs_count,
    )));
    own.extend_from_slice(&template.coinbase_tx_outputs.to_owned_bytes());
    outputs.extend(coinbase::decode_outputs(&own).map_err(|e| format!("template provider: {e}"))?);
    Ok(CoinbaseFields {
        version: template.coinbase_tx_version,
        script_prefix: template.coinbase_prefix.to_owned_bytes(),
        sequence: template.coinbase_tx_input_sequence,
        outputs: coinbase::encode_outputs(&outputs),
        locktime: template.coinbase_tx_locktime,
    })
}

#[allow(clippy::too_many_arguments)]
async fn declare(
    jds: &mut Link,
    request_id: u32,
    token: Vec<u8>,
    pool_outputs: &[TxOut],
    template: &NewTemplateOwned,
    current: &Current,
    txs: &[Vec<u8>],
    p: &JdParams,
) -> Result<DeclaredJob, String> {
    let mut txids = Vec::with_capacity(txs.len());
    let mut wtxids = Vec::with_capacity(txs.len());
    for (i, raw) in txs.iter().enumerate() {
        let tx: Transaction = deserialize(raw)
            .map_err(|e| format!("template provider: transaction {i} does not parse: {e}"))?;
        txids.push(tx.compute_txid().to_byte_array());
        wtxids.push(tx.compute_wtxid().to_byte_array());
    }
    let merkle_path = coinbase::merkle_path(&txids);
    let sent_path: Vec<[u8; 32]> = template
        .merkle_path
        .clone()
        .into_inner()
        .into_iter()
        .map(|h| h.to_array())
        .collect();
    if merkle_path != sent_path {
        return Err(format!(
            "template provider: template {}'s merkle path does not match its transactions",
            template.template_id
        ));
    }
    let fields = coinbase_fields(template, pool_outputs)?;
    let (prefix, suffix) = fields
        .split(p.extranonce_len)
        .map_err(|e| format!("template {}: {e}", template.template_id))?;
    let wire = |e: binary_sv2::Error| format!("DeclareMiningJob: {e:?}");
    let m = DeclareMiningJobOwned {
        request_id,
        mining_job_token: binary_sv2::B0255Owned::new(token).map_err(wire)?,
        version: template.version,
        coinbase_tx_prefix: B064KOwned::new(prefix).map_err(wire)?,
        coinbase_tx_suffix: B064KOwned::new(suffix).map_err(wire)?,
        wtxid_list: Seq064KOwned::new(wtxids.iter().map(|w| U256Owned::from(*w)).collect())
            .map_err(wire)?,
        excess_data: B064KOwned::new(Vec::new()).map_err(wire)?,
    };
    jds.send(AnyMessageOwned::JobDeclaration(
        JobDeclarationOwned::DeclareMiningJob(m),
    ))
    .await?;
    loop {
        match jds.recv(Some(jds.timeout)).await? {
            AnyMessageOwned::JobDeclaration(JobDeclarationOwned::ProvideMissingTransactions(m))
                if m.request_id == request_id =>
            {
                let mut list = Vec::new();
                for pos in m.unknown_tx_position_list.into_inner() {
                    let raw = txs.get(usize::from(pos)).ok_or_else(|| {
                        format!(
                            "job declaration server asked for transaction {pos} of {}",
                            txs.len()
                        )
                    })?;
                    list.push(B016MOwned::new(raw.clone()).map_err(wire)?);
                }
                let reply = ProvideMissingTransactionsSuccessOwned {
                    request_id,
                    transaction_list: Seq064KOwned::new(list).map_err(wire)?,
                };
                jds.send(AnyMessageOwned::JobDeclaration(
                    JobDeclarationOwned::ProvideMissingTransactionsSuccess(reply),
                ))
                .await?;
            }
            AnyMessageOwned::JobDeclaration(JobDeclarationOwned::DeclareMiningJobSuccess(s))
                if s.request_id == request_id =>
            {
                return Ok(DeclaredJob {
                    token: s.new_mining_job_token.to_owned_bytes(),
                    template_id: template.template_id,
                    version: template.version,
                    prev_hash: current.prev_hash,
                    min_ntime: current.min_ntime,
                    nbits: current.nbits,
                    coinbase: fields,
                    merkle_path,
                    tx_count: txs.len() as u32,
                    declared_at_ms: svcos_common::time::unix_ms(),
                });
            }
            AnyMessageOwned::JobDeclaration(JobDeclarationOwned::DeclareMiningJobError(e))
                if e.request_id == request_id =>
            {
                return Err(format!(
                    "job declaration server refused template {}: {}",
                    template.template_id,
                    e.error_code.as_utf8_or_hex()
                ));
            }
            other => {
                return Err(format!(
                    "job declaration server sent {} during a declaration",
                    crate::v2::frames::name(&other)
                ));
            }
        }
    }
}

/// One role's part of a connection test.
#[derive(Debug, Clone, PartialEq)]
pub struct RoleCheck {
    /// Whether the role answered as it should.
    pub ok: bool,
    /// Time from connect to the answer that proved it (milliseconds).
    pub latency_ms: u32,
    /// What happened.
    pub detail: String,
}

/// Connect to both roles once: Noise handshake and SetupConnection each, then
/// AllocateMiningJobToken at the server (the token is simply never used) and the first
/// NewTemplate from the template provider. Declares nothing.
pub async fn test_connection(
    server: &Endpoint,
    template_provider: &Endpoint,
    user: &str,
    timeout: Duration,
) -> (RoleCheck, RoleCheck) {
    let check = |start: Instant, r: Result<String, String>| {
        let latency_ms = start.elapsed().as_millis().min(u128::from(u32::MAX)) as u32;
        match r {
            Ok(detail) => RoleCheck {
                ok: true,
                latency_ms,
                detail,
            },
            Err(detail) => RoleCheck {
                ok: false,
                latency_ms,
                detail,
            },
        }
    };
    let start = Instant::now();
    let jds: Result<String, String> = async {
        let mut link = Link::open("job declaration server", server, timeout).await?;
        link.setup(Protocol::JobDeclarationProtocol, server).await?;
        let (_, outputs) = allocate(&mut link, 1, user).await?;
        Ok(format!(
            "Noise handshake verified, SetupConnection accepted, token allocated with {} pool coinbase output(s)",
            outputs.len()
        ))
    }
    .await;
    let jds = check(start, jds);
    let start = Instant::now();
    let tp: Result<String, String> = async {
        let mut link = Link::open("template provider", template_provider, timeout).await?;
        link.setup(Protocol::TemplateDistributionProtocol, template_provider)
            .await?;
        link.send(AnyMessageOwned::TemplateDistribution(
            TemplateDistributionOwned::CoinbaseOutputConstraints(CoinbaseOutputConstraintsOwned {
                coinbase_output_max_additional_size: 0,
                coinbase_output_max_additional_sigops: 0,
            }),
        ))
        .await?;
        loop {
            if let AnyMessageOwned::TemplateDistribution(TemplateDistributionOwned::NewTemplate(
                t,
            )) = link.recv(Some(timeout)).await?
            {
                return Ok(format!(
                    "Noise handshake verified, SetupConnection accepted, template {} received",
                    t.template_id
                ));
            }
        }
    }
    .await;
    (jds, check(start, tp))
}
