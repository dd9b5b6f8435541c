//! The share path as one path, on one clock: a `clean_jobs` notify leaving the test pool's socket
//! → the first byte of the new block's job on every chain's UART in hw-sim; and a nonce written
//! to a chain's UART by hw-sim → its `mining.submit` read at the pool's socket.
//!
//! Runs a `svcos sim` of its own with `SVCOS_SHARE_TRACE` set (hw-sim and the test pool then log
//! events stamped with `CLOCK_MONOTONIC`, one clock for every process; see
//! `svcos_common::trace`), a new block every `--block-interval-s`, for `--seconds`, then joins the
//! events and prints p50/p99 against the targets. `--analyze FILE` only reads an existing trace.
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
}

fn free_port(ip: &str) -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind((ip, 0))?.local_addr()?.port())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(trace) = &args.analyze {
        return analyze(trace);
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
    let bind = "127.0.0.1";
    let flags = svcos_supervisor::simcfg::SimFlags {
        bind: Some(bind.parse()?),
        api_port: Some(free_port(bind)?),
        http_port: Some(free_port(bind)?),
        legacy_port: Some(free_port(bind)?),
        pool_port: Some(free_port(bind)?),
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
    std::thread::sleep(Duration::from_secs(args.seconds));
    // SAFETY: kill(2) on the child we spawned; SIGTERM asks the supervisor to stop every service.
    unsafe { libc::kill(sim.id() as i32, libc::SIGTERM) };
    let _ = sim.wait();
    analyze(&trace)
}

#[derive(Default)]
struct Trace {
    /// prevhash → notify time.
    notifies: Vec<(String, u64)>,
    /// (chain, prevhash) → (first byte read, frame complete).
    jobs: HashMap<(u32, String), (u64, u64)>,
    chains: std::collections::BTreeSet<u32>,
    /// nonce → times it was written on a UART.
    nonces: HashMap<u32, Vec<u64>>,
    /// (nonce, read time) of each mining.submit.
    submits: Vec<(u32, u64)>,
}

fn parse(path: &Path) -> anyhow::Result<Trace> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
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
        match f.first().copied() {
            Some("notify") => t.notifies.push((f[1].to_string(), num(2)?)),
            Some("job") => {
                let chain = num(1)? as u32;
                t.chains.insert(chain);
                t.jobs
                    .entry((chain, f[2].to_string()))
                    .or_insert((num(3)?, num(4)?));
            }
            Some("nonce") => t.nonces.entry(hex32(2)?).or_default().push(num(3)?),
            Some("submit") => {
                if let Ok(n) = hex32(1) {
                    t.submits.push((n, num(2)?));
                }
            }
            _ => {}
        }
    }
    Ok(t)
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn analyze(path: &Path) -> anyhow::Result<()> {
    let t = parse(path)?;
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
    Ok(())
}
