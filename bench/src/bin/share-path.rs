//! The share path as one path, on one clock: a `clean_jobs` notify leaving the test pool's socket
//! → the first byte of the new block's job on every chain's UART in hw-sim; and a nonce written
//! to a chain's UART by hw-sim → its `mining.submit` read at the pool's socket.
//!
//! Runs a `svcos sim` of its own with `SVCOS_SHARE_TRACE` set (every process then logs events
//! stamped with `CLOCK_MONOTONIC`, one clock for every process; see `svcos_common::trace`), a new
//! block every `--block-interval-s`, for `--seconds`, then joins the events and prints p50/p99
//! against the targets, and p50/p99 of every hop in between. `--analyze FILE` only reads an
//! existing trace.
//!
//! Events (one line each; times in ns on the shared clock):
//! - test pool: `notify PREV T [BEFORE]` (clean notify in the socket buffer; since the tenth
//!   session also the stamp just before its `write`, which is the one used: the firmware's
//!   real-time threads can preempt the pool between the write and T, and its frames then come
//!   before T), `submit NONCE T` (read);
//! - stratum-agent: `sa.notify PREV READ PARSED PUBLISHED` (line read by the connection task,
//!   parsed by the agent, published to the job watch), `sa.stream PREV T` (taken by the
//!   StreamJobs response stream), `sa.share NONCE RECEIVED ANSWERED` (SubmitShare handler),
//!   `sa.queued NONCE T` (line queued for the connection task), `sa.wrote NONCE DEQUEUED
//!   WRITTEN` (the connection task's write);
//! - hw-agent: `hw.job PREV RECEIVED HANDED` (decoded from StreamJobs, given to every chain),
//!   `hw.frame CHAIN PREV TAKEN WRITE WRITTEN` (the job taken for the chain, on the decoding
//!   thread while the chain thread sleeps or else by that thread; frame built and write called,
//!   write returned), `hw.nonce CHAIN NONCE READ QUEUED`
//!   (read from the UART, verified and queued as a share), `hw.dispatch NONCE T` (SubmitShare
//!   call started);
//! - hw-sim: `job CHAIN PREV FIRST DONE` (first byte of the frame read, frame's wire time over),
//!   `nonce CHAIN NONCE T` (nonce response written).
//!
//! Jobs are joined by the previous-block hash (header byte order everywhere), shares by the nonce:
//! each stage takes the latest event of that nonce no later than 1 ms after the stage after it
//! (a writer stamps after its `write`, its reader may run first); a hop that comes out negative
//! that way counts as 0.
//!
//! ```sh
//! cargo build --release -p svcos
//! cargo run --release -p svcos-bench --bin share-path -- --seconds 120
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use svcos_bench::Samples;

#[derive(Parser)]
struct Args {
    /// The `svcos` executable (a release build for figures worth recording).
    #[arg(long, default_value = "target/release/svcos")]
    svcos: PathBuf,
    /// How long to mine.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Seconds between blocks (each is a clean_jobs notify).
    #[arg(long, default_value_t = 1)]
    block_interval_s: u32,
    /// Pool share difficulty (lower = more shares to time).
    #[arg(long, default_value_t = 0.00002)]
    difficulty: f64,
    /// Instance directory (default: a fresh temporary one).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Only analyse this trace file.
    #[arg(long)]
    analyze: Option<PathBuf>,
    /// Hold idle exit latency at this many microseconds while mining (`/dev/cpu_dma_latency`,
    /// root only; 0 keeps idle CPUs polling). See `svcos_bench::IdleLatencyHold`.
    #[arg(long)]
    idle_latency_us: Option<i32>,
    /// Before measuring, time the host's wake-up floor for this many seconds (one SCHED_FIFO
    /// thread per CPU sleeping to 1 ms deadlines, as cyclictest does); 0 skips it. See
    /// `svcos_bench::floor`.
    #[arg(long, default_value_t = 10)]
    floor_s: u64,
    /// Also time the wake-up floor for the whole run, beside the firmware: a host's stalls come
    /// and go, and one measured before may not be the one the run met. The probe wakes each CPU
    /// a thousand times a second for a few microseconds, ahead of every firmware thread.
    #[arg(long)]
    floor_during: bool,
    /// Leave out notifies and submits of the first seconds after the first notify: chain
    /// bring-up, first connections and cold caches, which a miner pays once per boot.
    #[arg(long, default_value_t = 10)]
    warmup_s: u64,
    /// The chains' UART speed, for the row that adds one job frame's wire time to the
    /// firmware's part (a hardware UART shifts bytes from the write on; a PTY does not).
    #[arg(long, default_value_t = 1_000_000)]
    baud: u32,
}

/// What `analyze` leaves out and assumes.
struct Analysis {
    warmup: Duration,
    /// One job frame's wire time at the chains' baud.
    frame_wire: Duration,
}

impl Analysis {
    fn of(args: &Args) -> Self {
        Analysis {
            warmup: Duration::from_secs(args.warmup_s),
            frame_wire: Duration::from_nanos(svcos_bm13xx::wire_time_ns(
                svcos_bm13xx::JOB_FRAME_LEN,
                args.baud,
            )),
        }
    }
}

fn free_port(ip: &str) -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind((ip, 0))?.local_addr()?.port())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let analysis = Analysis::of(&args);
    if let Some(trace) = &args.analyze {
        return analyze(trace, &analysis);
    }
    let tmp;
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    std::fs::create_dir_all(&dir)?;
    let _hold = svcos_bench::hold_idle_latency(args.idle_latency_us)?;
    svcos_bench::floor::print_before_run(args.floor_s);
    let bind = "127.0.0.1";
    let flags = svcos_supervisor::simcfg::SimFlags {
        bind: Some(bind.parse()?),
        api_port: Some(free_port(bind)?),
        http_port: Some(free_port(bind)?),
        legacy_port: Some(free_port(bind)?),
        pool_port: Some(free_port(bind)?),
        // The benchmark measures a miner in service, not one held for setup.
        setup_complete: true,
    };
    let mut config = svcos_supervisor::simcfg::fresh(&flags);
    config.sim.pool_block_interval_s = args.block_interval_s;
    config.sim.pool_difficulty = args.difficulty;
    config
        .save(&dir.join("config.toml"))
        .context("write config")?;
    let trace = dir.join("share-trace.log");
    let _ = std::fs::remove_file(&trace);
    let log = std::fs::File::create(dir.join("sim.log"))?;
    let mut sim = std::process::Command::new(&args.svcos)
        .arg("sim")
        .arg("--dir")
        .arg(&dir)
        .env(svcos_common::trace::ENV, &trace)
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("start {}", args.svcos.display()))?;
    println!(
        "mining for {} s, a block every {} s, share difficulty {} ({})",
        args.seconds,
        args.block_interval_s,
        args.difficulty,
        dir.display()
    );
    let steal = svcos_bench::steal_ticks();
    let mine = Duration::from_secs(args.seconds);
    let during = args.floor_during.then(|| {
        std::thread::spawn(move || svcos_bench::floor::measure(mine, Duration::from_millis(1)))
    });
    std::thread::sleep(mine);
    if let Some(Ok(mut floor)) = during.map(|t| t.join()) {
        println!("during the run, {}", floor.report());
    }
    println!(
        "{}",
        svcos_bench::steal_report(steal, Duration::from_secs(args.seconds))
    );
    // SAFETY: kill(2) on the child we spawned; SIGTERM asks the supervisor to stop every service.
    unsafe { libc::kill(sim.id() as i32, libc::SIGTERM) };
    let _ = sim.wait();
    analyze(&trace, &analysis)
}

/// Every event of a trace file, by kind.
#[derive(Default)]
struct Trace {
    /// (prevhash, notify time).
    notifies: Vec<(String, u64)>,
    /// (chain, prevhash) → (first byte read, frame complete).
    jobs: HashMap<(u32, String), (u64, u64)>,
    chains: std::collections::BTreeSet<u32>,
    /// nonce → times it was written on a UART.
    nonces: HashMap<u32, Vec<u64>>,
    /// (nonce, read time) of each mining.submit.
    submits: Vec<(u32, u64)>,
    /// prevhash → stratum-agent (read, parsed, published, taken by the stream).
    sa_jobs: HashMap<String, [u64; 4]>,
    /// prevhash → hw-agent (received, handed to the chains).
    hw_jobs: HashMap<String, [u64; 2]>,
    /// (chain, prevhash) → hw-agent chain thread (taken, write called, write returned).
    hw_frames: HashMap<(u32, String), [u64; 3]>,
    /// nonce → stamps of one firmware stage, every occurrence (nonces may repeat).
    stages: HashMap<&'static str, HashMap<u32, Vec<u64>>>,
}

/// The share path's firmware stages, pool end first: (event kind, field of its stamp).
const SHARE_STAGES: [(&str, &str); 7] = [
    ("sa.written", "mining.submit written to the pool socket"),
    ("sa.dequeued", "connection task took the line"),
    ("sa.queued", "agent checked it, line queued"),
    ("sa.received", "SubmitShare decoded in stratum-agent"),
    ("hw.dispatch", "SubmitShare call started"),
    ("hw.queued", "verified, queued as a share"),
    ("hw.read", "read from the UART by hw-agent"),
];

fn parse_text(text: &str) -> anyhow::Result<Trace> {
    let mut t = Trace::default();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| -> anyhow::Result<u64> {
            f.get(i)
                .and_then(|v| v.parse().ok())
                .with_context(|| format!("field {i} of {line:?}"))
        };
        let hex32 = |i: usize| -> anyhow::Result<u32> {
            f.get(i)
                .and_then(|v| u32::from_str_radix(v, 16).ok())
                .with_context(|| format!("field {i} of {line:?}"))
        };
        let text_at = |i: usize| -> anyhow::Result<String> {
            f.get(i)
                .map(|v| v.to_string())
                .with_context(|| format!("field {i} of {line:?}"))
        };
        let mut stage = |kind: &'static str, nonce: u32, at: u64| {
            t.stages
                .entry(kind)
                .or_default()
                .entry(nonce)
                .or_default()
                .push(at)
        };
        match f.first().copied() {
            Some("notify") => {
                let at = match num(3) {
                    Ok(before) if before > 0 => before,
                    _ => num(2)?,
                };
                t.notifies.push((text_at(1)?, at));
            }
            Some("job") => {
                let chain = num(1)? as u32;
                t.chains.insert(chain);
                t.jobs
                    .entry((chain, text_at(2)?))
                    .or_insert((num(3)?, num(4)?));
            }
            Some("nonce") => t.nonces.entry(hex32(2)?).or_default().push(num(3)?),
            Some("submit") => {
                if let Ok(n) = hex32(1) {
                    t.submits.push((n, num(2)?));
                }
            }
            Some("sa.notify") => {
                let v = [num(2)?, num(3)?, num(4)?, 0];
                t.sa_jobs.entry(text_at(1)?).or_insert(v);
            }
            Some("sa.stream") => {
                if let Some(v) = t.sa_jobs.get_mut(&text_at(1)?)
                    && v[3] == 0
                {
                    v[3] = num(2)?;
                }
            }
            Some("hw.job") => {
                let v = [num(2)?, num(3)?];
                t.hw_jobs.entry(text_at(1)?).or_insert(v);
            }
            Some("hw.frame") => {
                let v = [num(3)?, num(4)?, num(5)?];
                t.hw_frames
                    .entry((num(1)? as u32, text_at(2)?))
                    .or_insert(v);
            }
            Some("sa.wrote") => {
                let n = hex32(1)?;
                stage("sa.dequeued", n, num(2)?);
                stage("sa.written", n, num(3)?);
            }
            Some("sa.queued") => stage("sa.queued", hex32(1)?, num(2)?),
            Some("sa.share") => stage("sa.received", hex32(1)?, num(2)?),
            Some("hw.dispatch") => stage("hw.dispatch", hex32(1)?, num(2)?),
            Some("hw.nonce") => {
                let n = hex32(2)?;
                stage("hw.read", n, num(3)?);
                stage("hw.queued", n, num(4)?);
            }
            _ => {}
        }
    }
    Ok(t)
}

fn parse(path: &Path) -> anyhow::Result<Trace> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    parse_text(&text)
}

/// The latest stamp of `nonce` (or its byte-swapped form) no later than `before`.
fn latest(by_nonce: Option<&HashMap<u32, Vec<u64>>>, nonce: u32, before: u64) -> Option<u64> {
    let m = by_nonce?;
    m.get(&nonce)
        .or_else(|| m.get(&nonce.swap_bytes()))?
        .iter()
        .copied()
        .filter(|t| *t <= before)
        .max()
}

/// How far a stage's stamp may lie after the next stage's when shares are walked back: a writer
/// stamps after its `write` returned, and the reader in another process (hw-agent's chain
/// thread is real-time) may have run before that stamp. A nonce value repeats only across jobs,
/// seconds apart, so 1 ms cannot join the wrong share.
const CROSS_PROCESS_SLACK_NS: u64 = 1_000_000;

/// Named samples, printed in order.
#[derive(Default)]
struct Hops(Vec<(String, Samples)>);

impl Hops {
    /// A hop from `from` to `to`. Across processes a hop can come out negative: the writer
    /// stamps after its `write` returned and the reader may have run before that stamp, so such
    /// a hop counts as 0. A 0 stamp means the event was not traced.
    fn push(&mut self, name: &str, from: u64, to: u64) {
        if from == 0 || to == 0 {
            return;
        }
        let d = Duration::from_nanos(to.saturating_sub(from));
        match self.0.iter_mut().find(|(n, _)| n == name) {
            Some((_, s)) => s.push(d),
            None => {
                let mut s = Samples::default();
                s.push(d);
                self.0.push((name.to_string(), s));
            }
        }
    }

    fn print(&mut self, title: &str) {
        if self.0.is_empty() {
            return;
        }
        println!();
        println!("{title}");
        println!("| Hop | n | p50 | p99 | max |");
        println!("|---|---|---|---|---|");
        for (name, s) in &mut self.0 {
            println!(
                "| {name} | {} | {} | {} | {} |",
                s.len(),
                ms(s.percentile(50.0)),
                ms(s.percentile(99.0)),
                ms(s.percentile(100.0))
            );
        }
    }
}

/// One chain's stamps of one block: hw-agent's (taken, write called, write returned) and
/// hw-sim's (first byte read, frame complete).
type ChainStamps = ([u64; 3], (u64, u64));

/// Per-hop breakdown of the job path: each notify whose every stage was stamped; hops that
/// fan out to the chains count the slowest chain of that notify.
fn job_hops(t: &Trace) -> Hops {
    let mut hops = Hops::default();
    for (prev, at) in &t.notifies {
        let (Some(sa), Some(hw)) = (t.sa_jobs.get(prev), t.hw_jobs.get(prev)) else {
            continue;
        };
        let mut frames = Vec::new();
        for &chain in &t.chains {
            let (Some(f), Some(sim)) = (
                t.hw_frames.get(&(chain, prev.clone())),
                t.jobs.get(&(chain, prev.clone())),
            ) else {
                continue;
            };
            frames.push((*f, *sim));
        }
        if frames.len() != t.chains.len() || frames.is_empty() {
            continue;
        }
        let worst = |f: &dyn Fn(&ChainStamps) -> (u64, u64)| {
            frames
                .iter()
                .map(f)
                .filter(|(a, b)| b >= a)
                .map(|(a, b)| b - a)
                .max()
                .unwrap_or(0)
        };
        let worst_hop = |hops: &mut Hops, name: &str, d: u64| hops.push(name, 1, 1 + d);
        hops.push("pool socket → stratum-agent read the line", *at, sa[0]);
        hops.push("read → parsed (channel to the agent task)", sa[0], sa[1]);
        hops.push("parsed → published to the job watch", sa[1], sa[2]);
        hops.push("published → taken by the StreamJobs stream", sa[2], sa[3]);
        hops.push("stream → hw-agent decoded it (gRPC hop)", sa[3], hw[0]);
        // Since the tenth session a sleeping chain's job is taken on the decoding thread (its
        // frame written there) and only a busy chain's is handed to its thread, so this hop
        // ends at the slowest chain's take, whichever thread took it.
        let decoded = hw[0];
        worst_hop(
            &mut hops,
            "decoded → taken for the chain (slowest chain)",
            worst(&|(f, _)| (decoded, f[0])),
        );
        worst_hop(
            &mut hops,
            "took → frame built, write called (slowest chain)",
            worst(&|(f, _)| (f[0], f[1])),
        );
        worst_hop(
            &mut hops,
            "write called → returned (slowest chain)",
            worst(&|(f, _)| (f[1], f[2])),
        );
        worst_hop(
            &mut hops,
            "write returned → hw-sim read the first byte (slowest chain)",
            worst(&|(f, sim)| (f[2], sim.0)),
        );
        worst_hop(
            &mut hops,
            "first byte → frame complete, wire time (slowest chain)",
            worst(&|(_, sim)| (sim.0, sim.1)),
        );
        let written = frames.iter().map(|(f, _)| f[2]).max().unwrap_or(0);
        hops.push(
            "notify → write returned on every chain (the firmware's part)",
            *at,
            written,
        );
        let done = frames.iter().map(|(_, sim)| sim.1).max().unwrap_or(0);
        hops.push(
            "notify → frame complete on every chain (whole path)",
            *at,
            done,
        );
        // shared/TARGETS.md words the row from the notify read, not from the pool's write.
        hops.push(
            "stratum-agent read the notify → frame complete on every chain (TARGETS.md's row)",
            sa[0],
            done,
        );
    }
    hops
}

/// Per-hop breakdown of the share path, walking back from each submit the pool read.
fn share_hops(t: &Trace) -> Hops {
    let mut hops = Hops::default();
    for &(nonce, at) in &t.submits {
        let mut times = vec![("pool read the mining.submit", at)];
        let mut later = at;
        for (kind, what) in SHARE_STAGES {
            let Some(ts) = latest(t.stages.get(kind), nonce, later + CROSS_PROCESS_SLACK_NS) else {
                break;
            };
            times.push((what, ts));
            later = ts;
        }
        let Some(w) = latest(Some(&t.nonces), nonce, later + CROSS_PROCESS_SLACK_NS) else {
            continue;
        };
        if times.len() != SHARE_STAGES.len() + 1 {
            continue;
        }
        let (read, written) = (later, times[1].1);
        times.push(("hw-sim wrote the nonce on the UART", w));
        times.reverse();
        for pair in times.windows(2) {
            let ((from, a), (to, b)) = (pair[0], pair[1]);
            hops.push(&format!("{from} → {to}"), a, b);
        }
        hops.push(
            "hw-agent read it → mining.submit written (the firmware's part)",
            read,
            written,
        );
        hops.push(
            "nonce on the UART → mining.submit at the pool (whole path)",
            w,
            at,
        );
    }
    hops
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

impl Trace {
    /// Drop the notifies and submits of the first `warmup` after the first notify; returns how
    /// many were dropped.
    fn skip_warmup(&mut self, warmup: Duration) -> usize {
        let Some(start) = self.notifies.iter().map(|(_, at)| *at).min() else {
            return 0;
        };
        let cutoff = start + warmup.as_nanos() as u64;
        let before = self.notifies.len() + self.submits.len();
        self.notifies.retain(|(_, at)| *at >= cutoff);
        self.submits.retain(|(_, at)| *at >= cutoff);
        before - self.notifies.len() - self.submits.len()
    }

    /// Per clean notify whose frame hw-agent wrote on every chain: notify → the last chain's
    /// `write` returned.
    fn written_on_every_chain(&self) -> Vec<Duration> {
        let mut out = Vec::new();
        for (prev, at) in &self.notifies {
            let written: Option<Vec<u64>> = self
                .chains
                .iter()
                .map(|&c| self.hw_frames.get(&(c, prev.clone())).map(|f| f[2]))
                .collect();
            if let Some(w) = written.filter(|w| !w.is_empty())
                && let Some(last) = w.into_iter().max().filter(|last| last >= at)
            {
                out.push(Duration::from_nanos(last - at));
            }
        }
        out
    }
}

fn analyze(path: &Path, analysis: &Analysis) -> anyhow::Result<()> {
    let mut t = parse(path)?;
    let skipped = t.skip_warmup(analysis.warmup);
    println!(
        "left out {skipped} notifies and submits of the first {} s (warm-up)",
        analysis.warmup.as_secs()
    );
    let mut first_byte = Samples::default();
    let mut complete = Samples::default();
    let mut per_chain: HashMap<u32, Samples> = HashMap::new();
    let mut incomplete = 0;
    for (prev, at) in &t.notifies {
        let mut worst_first = 0u64;
        let mut worst_done = 0u64;
        let mut all = true;
        for &chain in &t.chains {
            match t.jobs.get(&(chain, prev.clone())) {
                Some(&(first, done)) if first >= *at => {
                    worst_first = worst_first.max(first - at);
                    worst_done = worst_done.max(done - at);
                    per_chain
                        .entry(chain)
                        .or_default()
                        .push(Duration::from_nanos(first - at));
                }
                _ => all = false,
            }
        }
        if all && !t.chains.is_empty() {
            first_byte.push(Duration::from_nanos(worst_first));
            complete.push(Duration::from_nanos(worst_done));
        } else {
            incomplete += 1;
        }
    }
    let mut submit = Samples::default();
    let mut unmatched = 0;
    for (nonce, at) in &t.submits {
        // The chip's nonce as the pool got it; the latest UART write of it before the submit.
        let written = t
            .nonces
            .get(nonce)
            .or_else(|| t.nonces.get(&nonce.swap_bytes()))
            .and_then(|ts| ts.iter().filter(|w| *w <= at).max());
        match written {
            Some(w) => submit.push(Duration::from_nanos(at - w)),
            None => unmatched += 1,
        }
    }
    println!(
        "{} clean notifies ({} without a job on every chain yet), {} chains, {} submits ({} unmatched)",
        t.notifies.len(),
        incomplete,
        t.chains.len(),
        t.submits.len(),
        unmatched
    );
    first_byte.report(
        "notify on the pool's socket → first job byte on every chain",
        None,
    );
    complete.report(
        "notify on the pool's socket → that job frame complete on every chain (incl. wire time)",
        None,
    );
    let mut chains: Vec<_> = per_chain.into_iter().collect();
    chains.sort_by_key(|(c, _)| *c);
    for (chain, mut s) in chains {
        s.report(&format!("  chain {chain}: notify → first job byte"), None);
    }
    submit.report(
        "nonce written on a UART → mining.submit read at the pool",
        None,
    );
    // A hardware UART starts shifting a frame when `write` hands it over; the PTY that stands
    // in for it here adds the kernel's flip-buffer work and hw-sim's wake-up first.
    let mut hardware = Samples::default();
    for d in t.written_on_every_chain() {
        hardware.push(d + analysis.frame_wire);
    }
    println!();
    println!("| What | n | p50 | p99 | Target (p99) |");
    println!("|---|---|---|---|---|");
    for (what, s, target) in [
        (
            "clean_jobs notify at the pool's socket → first job byte on every chain",
            &mut first_byte,
            "≤ 1.8 ms (to the whole frame)",
        ),
        (
            "clean_jobs notify → job frame complete on every chain (incl. 0.88 ms wire time)",
            &mut complete,
            "≤ 1.8 ms",
        ),
        (
            &format!(
                "clean_jobs notify → `write` returned on every chain + one frame's wire time ({:.3} ms; a hardware UART, modelled)",
                analysis.frame_wire.as_secs_f64() * 1e3
            ),
            &mut hardware,
            "≤ 1.8 ms",
        ),
        (
            "nonce on the UART → `mining.submit` at the pool's socket",
            &mut submit,
            "≤ 1 ms",
        ),
    ] {
        println!(
            "| {what} | {} | {} | {} | {target} |",
            s.len(),
            ms(s.percentile(50.0)),
            ms(s.percentile(99.0))
        );
    }
    job_hops(&t).print(
        "Per hop, clean notify → job frame on every chain (only notifies stamped at every hop):",
    );
    share_hops(&t).print(
        "Per hop, nonce on the UART → mining.submit at the pool (only shares stamped at every hop):",
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One block and one share through every stamp, 1 µs apart unless said otherwise.
    const TRACE: &str = "\
notify aa 1000
sa.notify aa 2000 3000 4000
sa.stream aa 5000
hw.job aa 6000 7000
hw.frame 0 aa 8000 9000 10000
hw.frame 1 aa 8500 9500 12000
job 0 aa 11000 20000
job 1 aa 13000 22000
nonce 1 0000002a 100000
hw.nonce 1 0000002a 101000 102000
hw.dispatch 0000002a 103000
sa.share 0000002a 104000 104500
sa.queued 0000002a 105000
sa.wrote 0000002a 106000 107000
submit 0000002a 108000
nonce 1 0000002a 5000000
submit 0000002b 6000000
";

    fn table(h: &mut Hops) -> Vec<(String, usize, u64)> {
        h.0.iter_mut()
            .map(|(n, s)| (n.clone(), s.len(), s.percentile(50.0).as_nanos() as u64))
            .collect()
    }

    #[test]
    fn a_notify_counts_from_the_stamp_before_the_pools_write_when_there_is_one() {
        let t = parse_text("notify bb 5000 900\nnotify cc 7000\n").unwrap();
        assert_eq!(
            t.notifies,
            vec![("bb".to_string(), 900), ("cc".to_string(), 7000)]
        );
    }

    #[test]
    fn the_job_path_splits_into_hops_with_the_slowest_chain_per_fan_out() {
        let t = parse_text(TRACE).unwrap();
        let hops = table(&mut job_hops(&t));
        let want: [(&str, u64); 13] = [
            ("pool socket → stratum-agent read the line", 1000),
            ("read → parsed (channel to the agent task)", 1000),
            ("parsed → published to the job watch", 1000),
            ("published → taken by the StreamJobs stream", 1000),
            ("stream → hw-agent decoded it (gRPC hop)", 1000),
            ("decoded → taken for the chain (slowest chain)", 2500),
            ("took → frame built, write called (slowest chain)", 1000),
            ("write called → returned (slowest chain)", 2500),
            (
                "write returned → hw-sim read the first byte (slowest chain)",
                1000,
            ),
            (
                "first byte → frame complete, wire time (slowest chain)",
                9000,
            ),
            (
                "notify → write returned on every chain (the firmware's part)",
                11000,
            ),
            ("notify → frame complete on every chain (whole path)", 21000),
            (
                "stratum-agent read the notify → frame complete on every chain (TARGETS.md's row)",
                20000,
            ),
        ];
        assert_eq!(hops.len(), want.len());
        for ((name, n, ns), (want_name, want_ns)) in hops.iter().zip(want) {
            assert_eq!((name.as_str(), *n, *ns), (want_name, 1, want_ns));
        }
    }

    #[test]
    fn a_share_is_traced_back_stage_by_stage_and_later_repeats_are_ignored() {
        let t = parse_text(TRACE).unwrap();
        let hops = table(&mut share_hops(&t));
        // The nonce written again 5 ms later comes after the submit it would otherwise match,
        // and the submit of an unstamped nonce has no path.
        assert_eq!(hops.len(), 10, "{hops:?}");
        assert!(hops.iter().all(|(_, n, _)| *n == 1));
        assert_eq!(
            hops[0],
            (
                "hw-sim wrote the nonce on the UART → read from the UART by hw-agent".to_string(),
                1,
                1000
            )
        );
        assert_eq!(hops[7].2, 1000, "written → pool read");
        assert_eq!(
            hops[8],
            (
                "hw-agent read it → mining.submit written (the firmware's part)".to_string(),
                1,
                6000
            )
        );
        assert_eq!(
            hops[9],
            (
                "nonce on the UART → mining.submit at the pool (whole path)".to_string(),
                1,
                8000
            )
        );
    }

    #[test]
    fn the_warm_up_is_left_out_and_the_modelled_row_takes_the_last_chains_write() {
        let mut t = parse_text(TRACE).unwrap();
        assert_eq!(
            t.written_on_every_chain(),
            vec![Duration::from_nanos(11000)],
            "chain 1 returned at 12000, the notify was at 1000"
        );
        // The notify at 1000 opens the run: a 5 µs warm-up keeps the submits at 108000 and
        // 6000000, a 6 ms one drops everything.
        assert_eq!(t.skip_warmup(Duration::from_micros(5)), 1);
        assert_eq!(t.submits.len(), 2);
        assert!(t.written_on_every_chain().is_empty());
        let mut t = parse_text(TRACE).unwrap();
        assert_eq!(t.skip_warmup(Duration::from_millis(6)), 3);
        assert!(t.notifies.is_empty() && t.submits.is_empty());
        let mut t = parse_text(TRACE).unwrap();
        assert_eq!(t.skip_warmup(Duration::ZERO), 0);
    }

    #[test]
    fn a_reader_ahead_of_the_writers_stamp_counts_as_zero_and_untraced_stamps_are_skipped() {
        let mut h = Hops::default();
        h.push("hop", 2000, 1500);
        h.push("hop", 0, 1500);
        h.push("hop", 1000, 0);
        assert_eq!(table(&mut h), vec![("hop".to_string(), 1, 0)]);
    }

    #[test]
    fn a_share_with_a_missing_stage_is_left_out_and_byte_swapped_nonces_match() {
        let text = "nonce 0 2a000000 10\nhw.nonce 0 0000002a 20 30\nsubmit 0000002a 99\n";
        let t = parse_text(text).unwrap();
        assert!(share_hops(&t).0.is_empty());
        let m: HashMap<u32, Vec<u64>> = [(0x2a00_0000, vec![10, 50, 200])].into();
        assert_eq!(latest(Some(&m), 0x2a, 100), Some(50));
        assert_eq!(latest(Some(&m), 0x2a, 5), None);
        assert_eq!(latest(None, 0x2a, 100), None);
    }
}
