//! hw-agent benchmark on the full S9-class sim board (3 chains × 63 chips). Prints figures,
//! asserts nothing about speed. Run:
//!
//! ```text
//! cargo test --release -p svcos-hw-agent --test bench -- --ignored --nocapture
//! ```

mod common;

use std::time::{Duration, Instant};

use common::*;
use svcos_hw_agent::probes::percentile;
use svcos_proto::hwagent::v1::MiningState;

fn ms(d: Option<Duration>) -> f64 {
    d.map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
}

fn proc_field(pid: u32, file: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).ok()?;
    text.lines()
        .find(|l| l.starts_with(key))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// Child body for the CPU/RSS measurement.
#[test]
#[ignore = "child process of bench_hw_agent"]
fn bench_child() {
    if let Some(dir) = child_dir() {
        child_main(&dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run with --ignored --nocapture"]
async fn bench_hw_agent() {
    let _serial = SERIAL.lock().await;
    let config = svcos_common::config::Config::default();
    let bench = Bench::start(config).await;

    // 1. Cold bring-up and the latency probes, hw-agent in this process.
    // Share difficulty 2^-22: about 80 shares per second from the sim's real hashing.
    let realistic = 1.0 / 4_194_304.0;
    let agent = bench.start_agent();
    bench.send_job(job(0, 1, true, realistic));
    bench
        .wait_for("mining", Duration::from_secs(120), |t| {
            state(t) == MiningState::Mining && t.nonces > 0
        })
        .await;
    let bring_up = agent.probes.bring_up_time();
    for n in 1..=300u64 {
        bench.send_job(job(n, 1, true, realistic));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let clean = agent.probes.clean_job_samples();
    let submit = agent.probes.nonce_submit_samples();
    let dispatch = agent.probes.nonce_dispatch_samples();
    // Burst: share difficulty below the ticket, every nonce is a share (hundreds per second).
    bench.send_job(job(400, 1, true, 1e-9));
    tokio::time::sleep(Duration::from_secs(8)).await;
    let burst: Vec<Duration> =
        agent.probes.nonce_submit_samples()[submit.len().min(4096)..].to_vec();
    let t = bench.telemetry(false).await.unwrap();
    agent.stop().await;

    // 2. Re-attach after a stop (the chips kept hashing).
    let agent = bench.start_agent();
    bench
        .wait_for("re-attached", Duration::from_secs(60), |t| {
            state(t) == MiningState::Mining
        })
        .await;
    let reattach = agent.probes.reattach_time();
    agent.stop().await;

    // 3. CPU and memory of hw-agent as its own process, at full virtual hashrate.
    let mut child = bench.spawn_agent_process("bench_child");
    bench
        .wait_for("child mining", Duration::from_secs(60), |t| {
            state(t) == MiningState::Mining && t.nonces > 0
        })
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pid = child.id();
    let ticks_per_s = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .unwrap()
        .unwrap() as f64;
    let (c0, t0) = (cpu_ticks(pid), Instant::now());
    // Keep clean jobs coming as a pool at a block change would, plus a telemetry reader.
    for n in 1000..1020u64 {
        bench.send_job(job(n, 1, n % 10 == 0, 0.00002));
        let _ = bench.telemetry(false).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let cpu = (cpu_ticks(pid) - c0) as f64 / ticks_per_s / t0.elapsed().as_secs_f64();
    let rss = proc_field(pid, "status", "VmRSS:").unwrap_or(0);
    let pss = proc_field(pid, "smaps_rollup", "Pss:").unwrap_or(0);
    let tt = bench.telemetry(false).await.unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    child.wait().unwrap();

    let floor_ms = svcos_bm13xx::wire_time_ns(svcos_bm13xx::JOB_FRAME_LEN, 1_000_000) as f64 / 1e6;
    println!("hw-agent benchmark, S9-class sim board 3 x 63 chips, 1 Mbaud");
    println!(
        "  clean_jobs -> first frame written on every chain: n={} p50={:.3} ms p99={:.3} ms (wire floor of one 88-byte frame {:.3} ms)",
        clean.len(),
        ms(percentile(&clean, 50.0)),
        ms(percentile(&clean, 99.0)),
        floor_ms
    );
    println!(
        "  nonce bytes read -> SubmitShare answered, share difficulty 2^-22 (~80/s): n={} p50={:.3} ms p99={:.3} ms",
        submit.len(),
        ms(percentile(&submit, 50.0)),
        ms(percentile(&submit, 99.0))
    );
    println!(
        "  nonce bytes read -> SubmitShare issued (inside hw-agent), same run: n={} p50={:.3} ms p99={:.3} ms",
        dispatch.len(),
        ms(percentile(&dispatch, 50.0)),
        ms(percentile(&dispatch, 99.0))
    );
    println!(
        "  same, burst (every nonce a share, ~500/s): n={} p50={:.3} ms p99={:.3} ms",
        burst.len(),
        ms(percentile(&burst, 50.0)),
        ms(percentile(&burst, 99.0))
    );
    println!(
        "  cold bring-up (3 chains in parallel): {:.1} ms",
        ms(bring_up)
    );
    println!("  re-attach: {:.1} ms", ms(reattach));
    println!(
        "  hw-agent process: CPU {:.1} % of one core, RSS {} KiB, PSS {} KiB; virtual hashrate {:.2} TH/s (5 s), nonces {} hw_errors {}",
        cpu * 100.0,
        rss,
        pss,
        tt.hashrate.as_ref().map_or(0.0, |h| h.ghs_5s / 1000.0),
        tt.nonces,
        tt.hw_errors
    );
    println!(
        "  (in-process phase: nonces {} shares_sent {})",
        t.nonces, t.shares_sent
    );
    bench.stop().await;
}
