//! Supervisor benchmark: restart latency (SIGKILL → SERVING), re-adoption time after a
//! supervisor SIGKILL, idle memory of the whole stack and the binary size.
//!
//! Run with `bench/supervisor/run.sh` (builds the release binary first). It prints figures; it
//! asserts nothing (numbers depend on the machine).
//!
//! Method:
//! - restart latency: for each service, KILLS times: read its pid from the supervisor's pidfile,
//!   SIGKILL it (t0), wait until the old process is dead (a zombie or gone, so no probe can reach
//!   its dying listener), then probe gRPC health on its socket every 0.2 ms until SERVING (t1).
//!   t1 - t0 includes the supervisor's exit detection (pidfd), the policy's floor delay (20 ms),
//!   fork/exec, the service's start-up and the probe interval. The policy is set so that every
//!   kill counts as an isolated crash (`stable_after_ms = 0`, no intensity limit): otherwise
//!   100 kills in a row would, by design, back off exponentially and then give up.
//! - re-adoption: SIGKILL the supervisor, start `svcos sim` again on the same directory (t0),
//!   poll its ListServices every 1 ms until every service is running with its old pid (t1).
//! - idle memory: after IDLE_S seconds idle, Pss and Rss from /proc/<pid>/smaps_rollup of every
//!   process; the stack sum excludes the sim-only hw-sim and test-pool.

use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use svcos_e2e::{SIM_SERVICES, Sim, SimOptions, svcos_bin};
use svcos_proto::supervisor::v1 as pb;
use svcos_proto::supervisor::v1::supervisor_service_client::SupervisorServiceClient;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pidfile_pid(sim: &Sim, service: &str) -> Option<u32> {
    let text = std::fs::read_to_string(
        sim.runtime_dir()
            .join("pids")
            .join(format!("{service}.pid")),
    )
    .ok()?;
    text.split_whitespace().next()?.parse().ok()
}

fn is_dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .is_some_and(|s| s == "Z" || s == "X"),
        Err(_) => true,
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

fn smaps_kb(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with(&format!("{key}:")))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn restart_latency(sim: &Sim, rt: &tokio::runtime::Runtime, kills: u64) {
    println!("\n## restart latency, SIGKILL -> SERVING ({kills} kills per service)");
    println!("| service | p50 ms | p99 ms | max ms |");
    println!("|---|---|---|---|");
    let mut all = Vec::new();
    for service in SIM_SERVICES {
        let socket = sim.socket(service);
        let mut samples = Vec::with_capacity(kills as usize);
        for _ in 0..kills {
            // The previous round's process must be the one the supervisor tracks.
            let deadline = Instant::now() + Duration::from_secs(30);
            let pid = loop {
                if let Some(p) = pidfile_pid(sim, service).filter(|p| !is_dead(*p)) {
                    break p;
                }
                assert!(Instant::now() < deadline, "{service} has no live pid");
                std::thread::sleep(Duration::from_millis(1));
            };
            let t0 = Instant::now();
            kill(Pid::from_raw(pid as i32), Signal::SIGKILL).expect("kill");
            while !is_dead(pid) {
                std::thread::sleep(Duration::from_micros(50));
            }
            let serving = rt.block_on(async {
                let deadline = Instant::now() + Duration::from_secs(30);
                while Instant::now() < deadline {
                    if svcos_common::ipc::check_health_at(
                        socket.clone(),
                        Duration::from_millis(200),
                    )
                    .await
                    {
                        return true;
                    }
                    tokio::time::sleep(Duration::from_micros(200)).await;
                }
                false
            });
            assert!(serving, "{service} did not come back");
            samples.push(t0.elapsed());
            // Wait for the new pidfile before the next kill.
            let deadline = Instant::now() + Duration::from_secs(30);
            while pidfile_pid(sim, service).is_none_or(|p| p == pid) {
                assert!(Instant::now() < deadline, "{service}: no new pidfile");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        samples.sort();
        println!(
            "| {service} | {} | {} | {} |",
            ms(percentile(&samples, 50.0)),
            ms(percentile(&samples, 99.0)),
            ms(*samples.last().unwrap())
        );
        all.extend(samples);
    }
    all.sort();
    println!(
        "| **all** | {} | {} | {} |",
        ms(percentile(&all, 50.0)),
        ms(percentile(&all, 99.0)),
        ms(*all.last().unwrap())
    );
}

/// Poll the supervisor's ListServices over its socket every millisecond until `done` holds.
fn poll_supervisor(
    sim: &Sim,
    rt: &tokio::runtime::Runtime,
    mut done: impl FnMut(&[pb::ServiceInfo]) -> bool,
) -> Vec<pb::ServiceInfo> {
    let socket = sim.socket("supervisor");
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            assert!(Instant::now() < deadline, "supervisor never got there");
            let channel =
                svcos_common::ipc::channel_with_timeout(socket.clone(), Duration::from_secs(1));
            let mut client = SupervisorServiceClient::new(channel);
            if let Ok(r) = client.list_services(pb::ListServicesRequest {}).await {
                let services = r.into_inner().services;
                if done(&services) {
                    return services;
                }
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
}

fn all_running(services: &[pb::ServiceInfo]) -> bool {
    services.len() == SIM_SERVICES.len()
        && services
            .iter()
            .all(|s| s.state == pb::ServiceState::Running as i32)
}

fn readoption(sim: &mut Sim, rt: &tokio::runtime::Runtime, rounds: u64) {
    println!("\n## re-adoption after a supervisor SIGKILL ({rounds} rounds)");
    let mut samples = Vec::new();
    for _ in 0..rounds {
        let before = poll_supervisor(sim, rt, all_running);
        sim.kill_supervisor().expect("kill supervisor");
        let t0 = Instant::now();
        sim.restart_supervisor_nowait().expect("respawn");
        poll_supervisor(sim, rt, |now| {
            all_running(now)
                && now
                    .iter()
                    .all(|s| before.iter().any(|b| b.name == s.name && b.pid == s.pid))
        });
        samples.push(t0.elapsed());
    }
    samples.sort();
    println!(
        "p50 {} ms, max {} ms (spawn of the new supervisor until its ListServices shows every \
         service running with its old pid; polled every 1 ms)",
        ms(percentile(&samples, 50.0)),
        ms(*samples.last().unwrap())
    );
}

fn memory(sim: &Sim, idle: Duration) {
    println!("\n## idle memory after {} s", idle.as_secs());
    std::thread::sleep(idle);
    println!("| process | PSS KiB | RSS KiB |");
    println!("|---|---|---|");
    let mut stack_pss = 0;
    let mut stack_rss = 0;
    let mut rows: Vec<(String, u32)> = Vec::new();
    if let Some(pid) = sim.supervisor_pid() {
        rows.push(("supervisor".into(), pid));
    }
    for service in SIM_SERVICES {
        if let Some(pid) = pidfile_pid(sim, service) {
            rows.push((service.to_string(), pid));
        }
    }
    for (name, pid) in rows {
        let pss = smaps_kb(pid, "Pss");
        let rss = smaps_kb(pid, "Rss");
        let sim_only = name == "hw-sim" || name == "test-pool";
        if !sim_only {
            stack_pss += pss;
            stack_rss += rss;
        }
        let note = if sim_only {
            " (sim only, excluded)"
        } else {
            ""
        };
        println!("| {name}{note} | {pss} | {rss} |");
    }
    println!(
        "| **stack (supervisor + 7 services)** | **{stack_pss}** ({:.2} MiB) | {stack_rss} |",
        stack_pss as f64 / 1024.0
    );
}

fn binary_size(bin: &Path) {
    println!("\n## binary");
    let size = std::fs::metadata(bin).map(|m| m.len()).unwrap_or(0);
    println!(
        "{}: {size} bytes ({:.2} MiB)",
        bin.display(),
        size as f64 / (1024.0 * 1024.0)
    );
}

fn main() {
    let kills = env_or("KILLS", 100);
    let rounds = env_or("READOPT_ROUNDS", 10);
    let idle = Duration::from_secs(env_or("IDLE_S", 10));
    let bin = svcos_bin();
    println!("# svcOS supervisor benchmark");
    println!("binary: {}", bin.display());
    let t0 = Instant::now();
    let mut sim = Sim::start(SimOptions {
        config_patch: Some(
            "[supervisor.default]\nstable_after_ms = 0\nintensity_max_restarts = 1000000\n".into(),
        ),
        ..SimOptions::default()
    })
    .expect("start sim");
    println!(
        "cold start to every service running (incl. ctl polling): {} ms",
        ms(t0.elapsed())
    );
    memory(&sim, idle);
    binary_size(&bin);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    restart_latency(&sim, &rt, kills);
    readoption(&mut sim, &rt, rounds);
}
