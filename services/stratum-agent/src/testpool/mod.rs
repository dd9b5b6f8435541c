//! The test pool: a real Stratum V1 server for the sim and for tests.
//!
//! It hands out synthetic but well-formed work (a coinbase with a height push, the miner's
//! extranonces and a P2PKH output; a merkle branch; a clean-jobs block change every interval) and
//! verifies every share by SHA-256d against its difficulty, with its own header assembly on
//! rust-bitcoin's hashes so a bug in `svcos_work` cannot hide itself. Misbehaviour is switched on
//! through [`Behavior`] (gRPC `svcos.testpool.v1` on its socket, or [`TestPool::set_behavior`] in
//! tests). Sessions can be resumed: `mining.subscribe` with a known subscription id gets its old
//! extranonce1 back, so a miner that reconnects keeps its work valid.

mod jd;
pub mod sv2;
pub mod wire;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bitcoin::hashes::{Hash, HashEngine, sha256d};
use serde_json::{Value, json};
use svcos_common::Shutdown;
use svcos_proto::testpool::v1 as pb;
pub use svcos_proto::testpool::v1::Behavior;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;

/// The version bits the pool lets miners roll (BIP 320's general-purpose range).
pub const SERVER_VERSION_MASK: u32 = 0x1fff_e000;
/// Block version of every job.
const JOB_VERSION: u32 = 0x2000_0000;
/// nbits of every job: difficulty 1, so a lucky sim share now and then is a "block".
const JOB_NBITS: u32 = 0x1d00_ffff;
/// Extranonce1 length.
const EXTRANONCE1_LEN: usize = 4;
/// Coinbase tag after the extranonces.
const TAG: &[u8] = b"/svcos-testpool/";
/// Longest line a miner may send.
const MAX_LINE: usize = 16 * 1024;

/// What the pool is configured with.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolSettings {
    /// Share difficulty set on every connection.
    pub difficulty: f64,
    /// Time between clean-jobs block changes.
    pub block_interval: Duration,
    /// Time between job updates within a block (not clean, earlier jobs stay valid), as real
    /// pools send when new transactions arrive; keeps a healthy connection from looking silent.
    pub job_interval: Duration,
    /// Extranonce2 size handed out.
    pub extranonce2_size: usize,
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            difficulty: 0.0001,
            block_interval: Duration::from_secs(60),
            job_interval: Duration::from_secs(30),
            extranonce2_size: 4,
        }
    }
}

/// One job the pool handed out.
#[derive(Debug, Clone)]
struct PoolJob {
    id: String,
    prev_hash: [u8; 32],
    coinb1: Vec<u8>,
    coinb2: Vec<u8>,
    merkle_branch: Vec<[u8; 32]>,
    ntime: u32,
    clean: bool,
}

impl PoolJob {
    fn notify_params(&self) -> Value {
        // Stratum sends prevhash with each 4-byte word byte-swapped.
        let mut prev = self.prev_hash;
        for w in prev.chunks_exact_mut(4) {
            w.reverse();
        }
        json!([
            self.id,
            hex::encode(prev),
            hex::encode(&self.coinb1),
            hex::encode(&self.coinb2),
            self.merkle_branch
                .iter()
                .map(hex::encode)
                .collect::<Vec<_>>(),
            format!("{JOB_VERSION:08x}"),
            format!("{JOB_NBITS:08x}"),
            format!("{:08x}", self.ntime),
            self.clean,
        ])
    }
}

/// What every connection hears about.
#[derive(Debug, Clone)]
enum Broadcast {
    Job(Arc<PoolJob>),
    Disconnect,
    Reconnect {
        host: String,
        port: u16,
        wait_s: u32,
    },
}

#[derive(Debug, Default)]
struct Inner {
    height: u64,
    job_seq: u64,
    jobs: VecDeque<Arc<PoolJob>>,
    behavior: Behavior,
    workers: BTreeMap<String, pb::WorkerStats>,
    reject_reasons: HashMap<String, u64>,
    /// Subscription id → extranonce1, for resuming.
    sessions: HashMap<String, u32>,
    next_extranonce1: u32,
    seen: HashSet<(String, Vec<u8>, u32, u32, u32)>,
    connections_total: u64,
    connections_open: u64,
    resumed_sessions: u64,
    found_blocks: u64,
    /// The SV2 upstream's counters; `None` until it runs.
    sv2: Sv2Counters,
    sv2_running: bool,
    /// Job declaration: tokens, declared jobs, custom jobs and their counters.
    jd: jd::JdState,
}

#[derive(Debug, Default)]
struct Sv2Counters {
    authority: String,
    connections: u64,
    handshakes: u64,
    channels: u64,
    accepted: u64,
    rejected: u64,
}

/// A running test pool's shared state and control handle.
#[derive(Debug)]
pub struct TestPool {
    settings: PoolSettings,
    inner: Mutex<Inner>,
    tx: broadcast::Sender<Broadcast>,
}

fn sha256d(data: &[u8]) -> [u8; 32] {
    sha256d::Hash::hash(data).to_byte_array()
}

/// Difficulty a little-endian 256-bit hash achieves (difficulty 1 = 0xffff << 208).
fn achieved_difficulty(hash: &[u8; 32]) -> f64 {
    let value = hash
        .iter()
        .rev()
        .fold(0.0f64, |acc, b| acc * 256.0 + f64::from(*b));
    let diff1 = 65535.0 * 2f64.powi(208);
    if value == 0.0 {
        f64::INFINITY
    } else {
        diff1 / value
    }
}

/// What a share's hash must meet.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Threshold {
    /// Stratum V1: a share difficulty (compared with a relative epsilon).
    Difficulty(f64),
    /// Stratum V2: an exact little-endian 256-bit target.
    Target([u8; 32]),
}

/// A share a miner submitted, checked.
#[derive(Debug, PartialEq)]
enum Verdict {
    Accepted { difficulty: f64, block: bool },
    Rejected(i64, &'static str),
}

impl TestPool {
    /// A pool with the first block's job ready.
    pub fn new(settings: PoolSettings) -> Arc<Self> {
        let (tx, _) = broadcast::channel(64);
        let pool = Arc::new(TestPool {
            settings,
            inner: Mutex::new(Inner::default()),
            tx,
        });
        pool.new_block();
        pool
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Start a new block: a clean job replaces every earlier one. Returns the height.
    pub fn new_block(&self) -> u64 {
        let job = {
            let mut inner = self.lock();
            inner.height += 1;
            inner.job_seq += 1;
            let job = Arc::new(self.make_job(inner.height, inner.job_seq));
            inner.jobs.clear();
            inner.jobs.push_back(job.clone());
            inner.seen.clear();
            inner.jd.new_block();
            job
        };
        let height = self.lock().height;
        let _ = self.tx.send(Broadcast::Job(job));
        height
    }

    /// A job update within the current block: new id and ntime, earlier jobs stay valid.
    pub fn update_job(&self) {
        let job = {
            let mut inner = self.lock();
            inner.job_seq += 1;
            let mut job = self.make_job(inner.height, inner.job_seq);
            job.clean = false;
            let job = Arc::new(job);
            inner.jobs.push_back(job.clone());
            while inner.jobs.len() > 16 {
                inner.jobs.pop_front();
            }
            job
        };
        let _ = self.tx.send(Broadcast::Job(job));
    }

    fn make_job(&self, height: u64, seq: u64) -> PoolJob {
        let prev_hash = sha256d(format!("testpool-block-{height}").as_bytes());
        let script_len = 4 + EXTRANONCE1_LEN + self.settings.extranonce2_size + TAG.len();
        let mut coinb1 = Vec::new();
        coinb1.extend_from_slice(&1u32.to_le_bytes());
        coinb1.push(1);
        coinb1.extend_from_slice(&[0; 32]);
        coinb1.extend_from_slice(&[0xff; 4]);
        coinb1.push(script_len as u8);
        // BIP 34 height push: 3 bytes little-endian.
        coinb1.push(3);
        coinb1.extend_from_slice(&(height as u32).to_le_bytes()[..3]);
        let mut coinb2 = TAG.to_vec();
        coinb2.extend_from_slice(&[0xff; 4]);
        coinb2.push(1);
        coinb2.extend_from_slice(&312_500_000u64.to_le_bytes());
        coinb2.extend_from_slice(&[0x19, 0x76, 0xa9, 0x14]);
        coinb2.extend_from_slice(&sha256d(b"testpool-payout")[..20]);
        coinb2.extend_from_slice(&[0x88, 0xac]);
        coinb2.extend_from_slice(&0u32.to_le_bytes());
        let merkle_branch = (0..2)
            .map(|i| sha256d(format!("testpool-tx-{height}-{i}").as_bytes()))
            .collect();
        PoolJob {
            id: format!("{seq:x}"),
            prev_hash,
            coinb1,
            coinb2,
            merkle_branch,
            ntime: svcos_common::time::unix_ms().div_euclid(1000) as u32,
            clean: true,
        }
    }

    /// Replace the misbehaviour switches.
    pub fn set_behavior(&self, behavior: Behavior) {
        self.lock().behavior = behavior;
    }

    /// The current misbehaviour switches.
    pub fn behavior(&self) -> Behavior {
        self.lock().behavior.clone()
    }

    /// Close every open miner connection.
    pub fn disconnect_all(&self) -> u32 {
        let n = self.lock().connections_open as u32;
        let _ = self.tx.send(Broadcast::Disconnect);
        n
    }

    /// Send client.reconnect to every connection.
    pub fn send_reconnect(&self, host: String, port: u16, wait_s: u32) -> u32 {
        let n = self.lock().connections_open as u32;
        let _ = self.tx.send(Broadcast::Reconnect { host, port, wait_s });
        n
    }

    /// Counters and per-worker verified shares.
    pub fn stats(&self) -> pb::GetStatsResponse {
        let inner = self.lock();
        pb::GetStatsResponse {
            workers: inner.workers.values().cloned().collect(),
            connections_total: inner.connections_total,
            connections_open: inner.connections_open,
            blocks: inner.height,
            reject_reasons: inner.reject_reasons.clone(),
            resumed_sessions: inner.resumed_sessions,
            behavior: Some(inner.behavior.clone()),
            found_blocks: inner.found_blocks,
            sv2: inner.sv2_running.then(|| pb::Sv2Stats {
                authority_pubkey: inner.sv2.authority.clone(),
                connections: inner.sv2.connections,
                handshakes: inner.sv2.handshakes,
                channels: inner.sv2.channels,
                accepted: inner.sv2.accepted,
                rejected: inner.sv2.rejected,
            }),
            jd: inner.sv2_running.then_some(inner.jd.stats),
        }
    }

    /// The job-declaration counters (tokens, declarations, shares on declared jobs).
    pub fn jd_stats(&self) -> pb::JdStats {
        self.lock().jd.stats
    }

    /// Accepted shares of one worker (0 if unknown).
    pub fn accepted(&self, worker: &str) -> u64 {
        self.lock().workers.get(worker).map_or(0, |w| w.accepted)
    }

    /// Rejected shares of one worker (0 if unknown).
    pub fn rejected(&self, worker: &str) -> u64 {
        self.lock().workers.get(worker).map_or(0, |w| w.rejected)
    }

    /// The SV2 upstream's counters (verified Success / Error answers).
    pub fn sv2_counts(&self) -> (u64, u64) {
        let inner = self.lock();
        (inner.sv2.accepted, inner.sv2.rejected)
    }

    /// Verify a submit against the job list with SHA-256d.
    #[allow(clippy::too_many_arguments)]
    fn verify(
        &self,
        worker: &str,
        job_id: &str,
        extranonce1: u32,
        extranonce2: &[u8],
        ntime: u32,
        nonce: u32,
        version_bits: Option<u32>,
        version_mask: Option<u32>,
        threshold: Threshold,
    ) -> Verdict {
        let mut inner = self.lock();
        let verdict = (|| {
            if inner.behavior.reject_all {
                return Verdict::Rejected(23, "Rejected by test pool (reject_all)");
            }
            let job = inner.jobs.iter().find(|j| j.id == job_id).cloned();
            let Some(job) = job.or_else(|| inner.jd.custom_jobs.get(job_id).cloned()) else {
                return Verdict::Rejected(21, "Job not found (stale)");
            };
            if extranonce2.len() != self.settings.extranonce2_size {
                return Verdict::Rejected(20, "Incorrect size of extranonce2");
            }
            if ntime < job.ntime || ntime > job.ntime.saturating_add(7200) {
                return Verdict::Rejected(20, "ntime out of range");
            }
            let version = match (version_bits, version_mask) {
                (None, _) => JOB_VERSION,
                (Some(_), None) => return Verdict::Rejected(20, "version rolling not negotiated"),
                (Some(bits), Some(mask)) if bits & !mask != 0 => {
                    return Verdict::Rejected(20, "version bits outside the mask");
                }
                // BIP 310: nVersion = (job_version & ~mask) | (version_bits & mask).
                (Some(bits), Some(mask)) => (JOB_VERSION & !mask) | (bits & mask),
            };
            let key = (
                job_id.to_string(),
                [&extranonce1.to_be_bytes()[..], extranonce2].concat(),
                ntime,
                nonce,
                version,
            );
            if !inner.seen.insert(key) {
                return Verdict::Rejected(22, "Duplicate share");
            }
            let mut coinbase = job.coinb1.clone();
            coinbase.extend_from_slice(&extranonce1.to_be_bytes());
            coinbase.extend_from_slice(extranonce2);
            coinbase.extend_from_slice(&job.coinb2);
            let mut root = sha256d(&coinbase);
            for branch in &job.merkle_branch {
                let mut e = sha256d::Hash::engine();
                e.input(&root);
                e.input(branch);
                root = sha256d::Hash::from_engine(e).to_byte_array();
            }
            let mut header = Vec::with_capacity(80);
            header.extend_from_slice(&version.to_le_bytes());
            header.extend_from_slice(&job.prev_hash);
            header.extend_from_slice(&root);
            header.extend_from_slice(&ntime.to_le_bytes());
            header.extend_from_slice(&JOB_NBITS.to_le_bytes());
            header.extend_from_slice(&nonce.to_le_bytes());
            let hash = sha256d(&header);
            let achieved = achieved_difficulty(&hash);
            let enough = match threshold {
                // A relative epsilon: both sides compute the target in floating point.
                Threshold::Difficulty(d) => achieved >= d * (1.0 - 1e-9),
                Threshold::Target(t) => crate::v2::frames::meets_target(&hash, &t),
            };
            if !enough {
                return Verdict::Rejected(23, "Low difficulty share");
            }
            Verdict::Accepted {
                difficulty: achieved,
                block: achieved >= 1.0,
            }
        })();
        let stats = inner
            .workers
            .entry(worker.to_string())
            .or_insert_with(|| pb::WorkerStats {
                worker: worker.to_string(),
                ..Default::default()
            });
        match &verdict {
            Verdict::Accepted {
                difficulty: achieved,
                block,
            } => {
                stats.accepted += 1;
                stats.accepted_difficulty += match threshold {
                    Threshold::Difficulty(d) => d,
                    Threshold::Target(t) => crate::v2::frames::target_to_difficulty(&t),
                };
                stats.best_difficulty = stats.best_difficulty.max(*achieved);
                if *block {
                    inner.found_blocks += 1;
                }
            }
            Verdict::Rejected(_, reason) => {
                stats.rejected += 1;
                *inner.reject_reasons.entry(reason.to_string()).or_default() += 1;
            }
        }
        verdict
    }
}

/// Serve miners on `listener` until shutdown, starting a new block every interval.
pub async fn serve(pool: Arc<TestPool>, listener: TcpListener, shutdown: Shutdown) {
    let blocks = {
        let (pool, shutdown) = (pool.clone(), shutdown.clone());
        async move {
            let mut block = tokio::time::interval(pool.settings.block_interval);
            let mut update = tokio::time::interval(pool.settings.job_interval);
            block.tick().await;
            update.tick().await;
            loop {
                tokio::select! {
                    _ = block.tick() => {
                        pool.new_block();
                        update.reset();
                    }
                    _ = update.tick() => pool.update_job(),
                    _ = shutdown.wait() => break,
                }
            }
        }
    };
    let accept = async {
        loop {
            let (stream, peer) = tokio::select! {
                r = listener.accept() => match r {
                    Ok(x) => x,
                    Err(e) => { tracing::warn!(error = %e, "accept failed"); tokio::time::sleep(Duration::from_millis(50)).await; continue; }
                },
                _ = shutdown.wait() => break,
            };
            let (pool, shutdown) = (pool.clone(), shutdown.clone());
            tokio::spawn(async move {
                if pool.behavior().refuse_connections {
                    return;
                }
                {
                    let mut inner = pool.lock();
                    inner.connections_total += 1;
                    inner.connections_open += 1;
                }
                if let Err(e) = connection(&pool, stream, peer, shutdown).await {
                    tracing::debug!(%peer, error = %e, "miner connection ended");
                }
                pool.lock().connections_open -= 1;
            });
        }
    };
    tokio::join!(blocks, accept);
}

/// Per-connection protocol state.
struct Conn {
    extranonce1: Option<u32>,
    session_id: Option<String>,
    version_mask: Option<u32>,
    authorized: bool,
    difficulty: f64,
}

async fn connection(
    pool: &Arc<TestPool>,
    stream: TcpStream,
    peer: SocketAddr,
    shutdown: Shutdown,
) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut rx = pool.tx.subscribe();
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read);
    let mut buf = Vec::new();
    let mut conn = Conn {
        extranonce1: None,
        session_id: None,
        version_mask: None,
        authorized: false,
        difficulty: pool.settings.difficulty,
    };
    let trace = svcos_common::trace::enabled();
    loop {
        // A new block's clean notify, for the share-path trace once it is on the socket.
        let mut clean_notify = None;
        // `buf` keeps a partial line across select iterations; cleared once a line is handled.
        let out: Vec<String> = tokio::select! {
            n = read_line(&mut lines, &mut buf) => {
                let read_ns = if trace { svcos_common::trace::mono_ns() } else { 0 };
                if n? == 0 { return Ok(()); }
                if buf.len() > MAX_LINE {
                    return Ok(());
                }
                let slow = pool.behavior().slow_ms;
                if slow > 0 {
                    tokio::time::sleep(Duration::from_millis(slow.into())).await;
                }
                let parsed = wire::parse_call(buf.trim_ascii());
                buf.clear();
                match parsed {
                    Ok(call) => {
                        if trace && call.method == "mining.submit" {
                            svcos_common::trace::record(
                                "submit",
                                format_args!("{} {read_ns}", wire::str_param(&call, 4).unwrap_or("-")),
                            );
                        }
                        handle_call(pool, &mut conn, call)
                    }
                    Err(_) => vec![wire::error(&Value::Null, 20, "Parse error")],
                }
            }
            msg = rx.recv() => match msg {
                Ok(Broadcast::Job(job)) => {
                    if conn.authorized && !pool.behavior().silent {
                        if trace && job.clean {
                            clean_notify = Some(job.prev_hash);
                        }
                        vec![wire::notification("mining.notify", job.notify_params())]
                    } else { vec![] }
                }
                Ok(Broadcast::Disconnect) => return Ok(()),
                Ok(Broadcast::Reconnect { host, port, wait_s }) => {
                    let params = if host.is_empty() && port == 0 { json!([]) } else { json!([host, port, wait_s]) };
                    let line = wire::notification("client.reconnect", params);
                    write.write_all(line.as_bytes()).await?;
                    return Ok(());
                }
                Err(broadcast::error::RecvError::Lagged(_)) => vec![],
                Err(broadcast::error::RecvError::Closed) => return Ok(()),
            },
            _ = shutdown.wait() => return Ok(()),
        };
        let garbage = pool.behavior().garbage;
        let mut before_ns = 0;
        for line in out {
            if garbage {
                write.write_all(b"}{ not json \x01\n").await?;
            }
            if clean_notify.is_some() {
                before_ns = svcos_common::trace::mono_ns();
            }
            write.write_all(line.as_bytes()).await?;
        }
        if let Some(prev) = clean_notify {
            // In the kernel's socket buffer now: the moment the miner could read it. The stamp
            // before the write goes along: the firmware's real-time threads may preempt this
            // thread between the write and this stamp, and then the frames can come first.
            svcos_common::trace::record(
                "notify",
                format_args!(
                    "{} {} {before_ns}",
                    hex::encode(prev),
                    svcos_common::trace::mono_ns()
                ),
            );
        }
        let _ = peer;
    }
}

/// Read one line of at most [`MAX_LINE`] (+1 so an overlong line is detectable).
async fn read_line<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
) -> std::io::Result<usize> {
    let mut limited = tokio::io::AsyncReadExt::take(r, MAX_LINE as u64 + 1);
    limited.read_until(b'\n', buf).await
}

fn handle_call(pool: &Arc<TestPool>, conn: &mut Conn, call: wire::Call) -> Vec<String> {
    let id = &call.id;
    match call.method.as_str() {
        "mining.configure" => {
            let mut result = serde_json::Map::new();
            let names: Vec<&str> = call
                .params
                .first()
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            for name in names {
                match name {
                    "version-rolling" => {
                        let miner_mask = call
                            .params
                            .get(1)
                            .and_then(|o| o.get("version-rolling.mask"))
                            .and_then(Value::as_str)
                            .and_then(|s| u32::from_str_radix(s, 16).ok())
                            .unwrap_or(u32::MAX);
                        let mask = SERVER_VERSION_MASK & miner_mask;
                        conn.version_mask = Some(mask);
                        result.insert("version-rolling".into(), json!(true));
                        result.insert("version-rolling.mask".into(), json!(format!("{mask:08x}")));
                    }
                    "minimum-difficulty" => {
                        result.insert("minimum-difficulty".into(), json!(false));
                    }
                    other => {
                        result.insert(other.into(), json!(false));
                    }
                }
            }
            vec![wire::result(id, Value::Object(result))]
        }
        "mining.subscribe" => {
            let mut inner = pool.lock();
            let resume = wire::str_param(&call, 1)
                .and_then(|s| inner.sessions.get(s).map(|e| (s.to_string(), *e)));
            let (sid, en1) = match resume {
                Some(x) => {
                    inner.resumed_sessions += 1;
                    x
                }
                None => {
                    inner.next_extranonce1 += 1;
                    let en1 = inner.next_extranonce1;
                    let sid = format!("tp{en1:08x}");
                    inner.sessions.insert(sid.clone(), en1);
                    (sid, en1)
                }
            };
            conn.extranonce1 = Some(en1);
            conn.session_id = Some(sid.clone());
            vec![wire::result(
                id,
                json!([
                    [["mining.set_difficulty", sid], ["mining.notify", sid]],
                    format!("{en1:08x}"),
                    pool.settings.extranonce2_size
                ]),
            )]
        }
        "mining.authorize" => {
            if conn.extranonce1.is_none() {
                return vec![wire::error(id, 25, "Not subscribed")];
            }
            let behavior = pool.behavior();
            let wrong_password = !behavior.required_password.is_empty()
                && wire::str_param(&call, 1) != Some(behavior.required_password.as_str());
            if behavior.refuse_authorize
                || wrong_password
                || wire::str_param(&call, 0).is_none_or(str::is_empty)
            {
                return vec![wire::result(id, json!(false))];
            }
            conn.authorized = true;
            let mut out = vec![
                wire::result(id, json!(true)),
                wire::notification("mining.set_difficulty", json!([conn.difficulty])),
            ];
            if !pool.behavior().silent {
                // The current job, marked clean: the miner has nothing older from us.
                if let Some(job) = pool.lock().jobs.back().cloned() {
                    out.push(wire::notification("mining.notify", job.notify_params()));
                }
            }
            out
        }
        "mining.extranonce.subscribe" => vec![wire::result(id, json!(true))],
        "mining.suggest_difficulty" => vec![wire::result(id, json!(true))],
        "mining.submit" => {
            if !conn.authorized {
                return vec![wire::error(id, 24, "Unauthorized worker")];
            }
            let (Some(worker), Some(job_id), Some(en2), Some(ntime), Some(nonce)) = (
                wire::str_param(&call, 0),
                wire::str_param(&call, 1),
                wire::str_param(&call, 2).and_then(|s| hex::decode(s).ok()),
                wire::hex_u32(&call, 3),
                wire::hex_u32(&call, 4),
            ) else {
                return vec![wire::error(id, 20, "Malformed submit")];
            };
            let version_bits = match call.params.get(5) {
                None => None,
                Some(_) => match wire::hex_u32(&call, 5) {
                    Some(v) => Some(v),
                    None => return vec![wire::error(id, 20, "Malformed version bits")],
                },
            };
            let en1 = conn.extranonce1.unwrap_or_default();
            match pool.verify(
                worker,
                job_id,
                en1,
                &en2,
                ntime,
                nonce,
                version_bits,
                conn.version_mask,
                Threshold::Difficulty(conn.difficulty),
            ) {
                Verdict::Accepted { .. } => vec![wire::result(id, json!(true))],
                Verdict::Rejected(code, reason) => vec![wire::error(id, code, reason)],
            }
        }
        _ => vec![wire::error(id, 20, "Unknown method")],
    }
}

/// The gRPC control service of a test pool.
#[derive(Debug, Clone)]
pub struct ControlService(pub Arc<TestPool>);

#[tonic::async_trait]
impl pb::test_pool_service_server::TestPoolService for ControlService {
    async fn get_stats(
        &self,
        _: tonic::Request<pb::GetStatsRequest>,
    ) -> Result<tonic::Response<pb::GetStatsResponse>, tonic::Status> {
        Ok(tonic::Response::new(self.0.stats()))
    }
    async fn set_behavior(
        &self,
        r: tonic::Request<pb::SetBehaviorRequest>,
    ) -> Result<tonic::Response<pb::SetBehaviorResponse>, tonic::Status> {
        self.0
            .set_behavior(r.into_inner().behavior.unwrap_or_default());
        Ok(tonic::Response::new(pb::SetBehaviorResponse {}))
    }
    async fn new_block(
        &self,
        _: tonic::Request<pb::NewBlockRequest>,
    ) -> Result<tonic::Response<pb::NewBlockResponse>, tonic::Status> {
        Ok(tonic::Response::new(pb::NewBlockResponse {
            height: self.0.new_block(),
        }))
    }
    async fn disconnect_all(
        &self,
        _: tonic::Request<pb::DisconnectAllRequest>,
    ) -> Result<tonic::Response<pb::DisconnectAllResponse>, tonic::Status> {
        Ok(tonic::Response::new(pb::DisconnectAllResponse {
            closed: self.0.disconnect_all(),
        }))
    }
    async fn send_reconnect(
        &self,
        r: tonic::Request<pb::SendReconnectRequest>,
    ) -> Result<tonic::Response<pb::SendReconnectResponse>, tonic::Status> {
        let r = r.into_inner();
        let port = u16::try_from(r.port)
            .map_err(|_| tonic::Status::invalid_argument("port must be 0-65535"))?;
        Ok(tonic::Response::new(pb::SendReconnectResponse {
            sent: self.0.send_reconnect(r.host, port, r.wait_s),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn_for(pool: &Arc<TestPool>, mask: Option<u32>) -> Conn {
        let mut c = Conn {
            extranonce1: None,
            session_id: None,
            version_mask: None,
            authorized: false,
            difficulty: pool.settings.difficulty,
        };
        let _ = handle_call(
            pool,
            &mut c,
            wire::parse_call(br#"{"id":1,"method":"mining.subscribe","params":["t"]}"#).unwrap(),
        );
        c.version_mask = mask;
        c
    }

    /// Brute-force a nonce meeting `difficulty` with the pool's own header layout.
    fn find_share(
        pool: &Arc<TestPool>,
        en1: u32,
        difficulty: f64,
        version: u32,
    ) -> (String, Vec<u8>, u32, u32) {
        let job = pool.lock().jobs.back().cloned().unwrap();
        let en2 = vec![0, 0, 0, 7];
        let mut cb = job.coinb1.clone();
        cb.extend_from_slice(&en1.to_be_bytes());
        cb.extend_from_slice(&en2);
        cb.extend_from_slice(&job.coinb2);
        let mut root = sha256d(&cb);
        for b in &job.merkle_branch {
            root = sha256d(&[&root[..], &b[..]].concat());
        }
        for nonce in 0.. {
            let h = [
                &version.to_le_bytes()[..],
                &job.prev_hash,
                &root,
                &job.ntime.to_le_bytes(),
                &JOB_NBITS.to_le_bytes(),
                &u32::to_le_bytes(nonce),
            ]
            .concat();
            if achieved_difficulty(&sha256d(&h)) >= difficulty {
                return (job.id.clone(), en2, job.ntime, nonce);
            }
        }
        unreachable!()
    }

    #[test]
    fn verifies_by_sha256d_and_rejects_dupes_stale_and_low() {
        let pool = TestPool::new(PoolSettings {
            difficulty: 0.001,
            ..Default::default()
        });
        let c = conn_for(&pool, Some(SERVER_VERSION_MASK));
        let en1 = c.extranonce1.unwrap();
        let rolled = JOB_VERSION | 0x0000_6000;
        let (job, en2, ntime, nonce) = find_share(&pool, en1, 0.001, rolled);
        let v = |nonce, bits| {
            pool.verify(
                "w",
                &job,
                en1,
                &en2,
                ntime,
                nonce,
                bits,
                c.version_mask,
                Threshold::Difficulty(0.001),
            )
        };
        assert!(matches!(v(nonce, Some(0x6000)), Verdict::Accepted { .. }));
        assert_eq!(
            v(nonce, Some(0x6000)),
            Verdict::Rejected(22, "Duplicate share")
        );
        // Same nonce, different version: the hash changes and (almost surely) misses.
        assert_eq!(
            v(nonce, Some(0x2000)),
            Verdict::Rejected(23, "Low difficulty share")
        );
        assert_eq!(
            v(nonce, Some(0x1)),
            Verdict::Rejected(20, "version bits outside the mask")
        );
        pool.new_block();
        assert_eq!(
            v(nonce + 1, Some(0x6000)),
            Verdict::Rejected(21, "Job not found (stale)")
        );
        assert_eq!((pool.accepted("w"), pool.rejected("w")), (1, 4));
    }

    #[test]
    fn resumes_a_known_session() {
        let pool = TestPool::new(PoolSettings::default());
        let c = conn_for(&pool, None);
        let sid = c.session_id.clone().unwrap();
        let mut c2 = Conn {
            extranonce1: None,
            session_id: None,
            version_mask: None,
            authorized: false,
            difficulty: 1.0,
        };
        let line = format!(r#"{{"id":1,"method":"mining.subscribe","params":["t","{sid}"]}}"#);
        handle_call(&pool, &mut c2, wire::parse_call(line.as_bytes()).unwrap());
        assert_eq!(c2.extranonce1, c.extranonce1);
        assert_eq!(pool.stats().resumed_sessions, 1);
        let mut c3 = Conn {
            extranonce1: None,
            session_id: None,
            version_mask: None,
            authorized: false,
            difficulty: 1.0,
        };
        handle_call(
            &pool,
            &mut c3,
            wire::parse_call(br#"{"id":1,"method":"mining.subscribe","params":["t","nope"]}"#)
                .unwrap(),
        );
        assert_ne!(c3.extranonce1, c.extranonce1);
    }
}
