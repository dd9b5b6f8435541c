//! End-to-end tests of the supervisor against the real `svcos sim` process tree.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use svcos_e2e::{SIM_SERVICES, Sim, SimOptions, WAIT, list_svcos_processes, svcos_bin};

fn pids(sim: &Sim) -> BTreeMap<String, u32> {
    sim.status()
        .unwrap()
        .into_iter()
        .map(|s| (s.name, s.pid.expect("running service has a pid")))
        .collect()
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigkill_of_each_service_restarts_only_that_service() {
    let mut sim = Sim::start(SimOptions::default()).unwrap();
    // hw-sim is the simulated hardware, not a firmware service: killing it yanks the board, and
    // hw-agent deliberately exits when its UARTs vanish so that the supervisor restarts it for a
    // fresh discovery. So hw-sim goes last, and hw-agent is exempt from the check in that round;
    // every other service must be untouched in every round.
    let order = SIM_SERVICES
        .into_iter()
        .filter(|s| *s != "hw-sim")
        .chain(["hw-sim"]);
    for service in order {
        let before = pids(&sim);
        let new_pid = sim.kill_service_and_wait(service).unwrap();
        assert_ne!(new_pid, before[service], "{service} got a new process");
        let after: BTreeMap<String, u32> = sim
            .status()
            .unwrap()
            .into_iter()
            .filter_map(|s| Some((s.name, s.pid?)))
            .collect();
        for (name, pid) in &before {
            if name != service && !(service == "hw-sim" && name == "hw-agent") {
                assert_eq!(
                    after.get(name),
                    Some(pid),
                    "{name} kept running while {service} restarted"
                );
            }
        }
        assert_eq!(
            sim.processes_of(service),
            vec![new_pid],
            "exactly one {service} process"
        );
        let row = sim
            .status()
            .unwrap()
            .into_iter()
            .find(|s| s.name == service)
            .unwrap();
        assert!(row.restarts >= 1, "{row:?}");
        assert_eq!(
            row.last_exit.as_deref(),
            Some("killed by signal 9 (SIGKILL)")
        );
    }
}

#[test]
fn killed_supervisor_leaves_children_running_and_restart_readopts_them() {
    let mut sim = Sim::start(SimOptions::default()).unwrap();
    let before = pids(&sim);
    sim.kill_supervisor().unwrap();
    // Children are in their own sessions and write to FIFOs: nothing reaches them.
    for (name, pid) in &before {
        assert_eq!(sim.processes_of(name), vec![*pid], "{name} survived");
    }
    // A pidfile may be missing (the supervisor died between fork and pidfile): the process is
    // still found by its command line.
    std::fs::remove_file(sim.runtime_dir().join("pids/gateway.pid")).unwrap();
    sim.restart_supervisor().unwrap();
    let after = pids(&sim);
    assert_eq!(
        after, before,
        "every service was re-adopted, none restarted"
    );
    for name in SIM_SERVICES {
        assert_eq!(sim.processes_of(name).len(), 1, "no duplicate {name}");
    }
    assert!(sim.log().contains("re-adopted running process"));
    // An adopted process is still supervised: killing it gets it restarted.
    let new_pid = sim.kill_service_and_wait("auth").unwrap();
    assert_ne!(new_pid, before["auth"]);
    // The re-opened FIFO carries the output of an adopted child: its SIGTERM log line shows
    // up tagged in the new supervisor's log.
    let tagged = |log: &str| {
        log.lines()
            .filter(|l| l.starts_with("legacy-tcp: "))
            .count()
    };
    let before_lines = tagged(&sim.log());
    let restarted = sim.ctl(&["restart", "legacy-tcp"]).unwrap();
    assert!(restarted.status.success(), "{restarted:?}");
    wait_until("a tagged line from the adopted legacy-tcp", || {
        tagged(&sim.log()) > before_lines
    });
}

#[test]
fn sigterm_stops_everything_in_reverse_boot_order() {
    let mut sim = Sim::start(SimOptions::default()).unwrap();
    let status = sim.stop().unwrap().expect("supervisor was running");
    assert!(status.success(), "{status}");
    let log = sim.log();
    let order: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("INFO stopping service="))
        .filter_map(|l| l.split("service=").nth(1)?.split_whitespace().next())
        .collect();
    let mut want: Vec<&str> = SIM_SERVICES.to_vec();
    want.reverse();
    assert_eq!(order, want, "{log}");
    assert!(
        !log.contains("grace period over"),
        "every service stopped within its grace period:\n{log}"
    );
    for name in SIM_SERVICES {
        assert!(sim.processes_of(name).is_empty(), "{name} is gone");
    }
    assert!(!sim.socket("supervisor").exists());
}

#[test]
fn ctl_stop_start_restart_and_errors() {
    let sim = Sim::start(SimOptions::default()).unwrap();
    let old = sim.pid("tuner").unwrap();
    let out = sim.ctl(&["stop", "tuner"]).unwrap();
    assert!(out.status.success(), "{out:?}");
    let row = |name: &str| {
        sim.status()
            .unwrap()
            .into_iter()
            .find(|s| s.name == name)
            .unwrap()
    };
    assert_eq!(row("tuner").state, "stopped");
    assert_eq!(row("tuner").pid, None);
    assert!(sim.processes_of("tuner").is_empty());
    // Stopping a stopped service answers at once.
    let again = sim.ctl(&["stop", "tuner"]).unwrap();
    assert!(again.status.success(), "{again:?}");
    let out = sim.ctl(&["start", "tuner"]).unwrap();
    assert!(out.status.success(), "{out:?}");
    let started = row("tuner");
    assert_eq!(started.state, "running");
    assert_ne!(started.pid, Some(old));
    let out = sim.ctl(&["restart", "tuner"]).unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_ne!(row("tuner").pid, started.pid);
    let text = sim.ctl(&["status"]).unwrap();
    let table = String::from_utf8_lossy(&text.stdout);
    for name in SIM_SERVICES {
        assert!(table.contains(name), "{table}");
    }
    let bad = sim.ctl(&["restart", "nope"]).unwrap();
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("unknown service \"nope\""),
        "{bad:?}"
    );
}

#[test]
fn ctl_without_supervisor_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(svcos_bin())
        .args(["ctl", "--dir"])
        .arg(dir.path())
        .args(["status", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(69));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no supervisor is running"),
        "{out:?}"
    );
}

#[test]
fn second_supervisor_on_same_dir_refuses() {
    let sim = Sim::start(SimOptions::default()).unwrap();
    let out = Command::new(svcos_bin())
        .args(["sim", "--dir"])
        .arg(sim.dir())
        .env_remove("DBUS_SESSION_BUS_ADDRESS")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("another supervisor is already running"),
        "{out:?}"
    );
    for name in SIM_SERVICES {
        assert_eq!(sim.processes_of(name).len(), 1, "no duplicate {name}");
    }
}

#[test]
fn sim_rejects_non_loopback_bind() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(svcos_bin())
        .args(["sim", "--bind", "0.0.0.0", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(
        list_svcos_processes()
            .iter()
            .all(|(_, argv)| !argv.iter().any(|a| Path::new(a) == dir.path()))
    );
}

/// A private D-Bus daemon for one test.
struct Bus {
    daemon: Child,
    address: String,
}

impl Bus {
    fn start() -> Option<Bus> {
        let mut daemon = Command::new("dbus-daemon")
            .args(["--session", "--nofork", "--nopidfile", "--print-address=1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let mut line = String::new();
        BufReader::new(daemon.stdout.take()?)
            .read_line(&mut line)
            .ok()?;
        Some(Bus {
            daemon,
            address: line.trim().to_string(),
        })
    }

    fn busctl(&self, args: &[&str]) -> std::process::Output {
        Command::new("busctl")
            .arg(format!("--address={}", self.address))
            .args(args)
            .output()
            .expect("run busctl")
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

#[test]
fn dbus_list_restart_and_state_signal() {
    if !have("dbus-daemon") || !have("busctl") {
        eprintln!("SKIP: dbus-daemon or busctl not installed");
        return;
    }
    let bus = Bus::start().expect("private dbus-daemon");
    let sim = Sim::start(SimOptions {
        dbus_address: Some(bus.address.clone()),
        ..SimOptions::default()
    })
    .unwrap();
    let obj = [
        "org.svcos.Supervisor1",
        "/org/svcos/Supervisor1",
        "org.svcos.Supervisor1",
    ];

    let list = bus.busctl(&[&["call"], &obj[..], &["ListServices"]].concat());
    assert!(list.status.success(), "{list:?}");
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(text.starts_with("a(ssuuts) 9 "), "{text}");
    for name in SIM_SERVICES {
        let pid = sim.pid(name).unwrap();
        assert!(
            text.contains(&format!("\"{name}\" \"running\" {pid} ")),
            "{name} with pid {pid} in {text}"
        );
    }

    let policy = bus.busctl(&[&["call"], &obj[..], &["ListRestartState"]].concat());
    assert!(policy.status.success(), "{policy:?}");
    let text = String::from_utf8_lossy(&policy.stdout);
    assert!(text.starts_with("a(sstu) 9 "), "{text}");
    assert!(text.contains("\"tuner\" \"none\" 0 0"), "{text}");

    // Watch signals while restarting the tuner through D-Bus. gdbus flushes every line, so
    // the test sees the subscription and each signal as they happen.
    let old = sim.pid("tuner").unwrap();
    let monitor_log = sim.dir().join("dbus-monitor.log");
    let mut monitor = have("gdbus").then(|| {
        Command::new("gdbus")
            .args(["monitor", "--address", &bus.address])
            .args(["--dest", "org.svcos.Supervisor1"])
            .stdout(std::fs::File::create(&monitor_log).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    });
    if monitor.is_some() {
        wait_until("gdbus monitor to subscribe", || {
            std::fs::read_to_string(&monitor_log).is_ok_and(|t| t.contains("is owned by"))
        });
    } else {
        eprintln!("SKIP (signal part): gdbus not installed");
    }
    let restart = bus.busctl(&[&["call"], &obj[..], &["Restart", "s", "tuner"]].concat());
    assert!(restart.status.success(), "{restart:?}");
    let new = sim.pid("tuner").unwrap();
    assert_ne!(new, old);
    if let Some(monitor) = monitor.as_mut() {
        let stopping = "ServiceStateChanged ('tuner', 'stopping',";
        let running = format!("ServiceStateChanged ('tuner', 'running', uint32 {new})");
        wait_until("ServiceStateChanged(tuner, running, new pid)", || {
            let t = std::fs::read_to_string(&monitor_log).unwrap_or_default();
            t.find(stopping)
                .zip(t.find(&running))
                .is_some_and(|(a, b)| a < b)
        });
        let _ = kill(Pid::from_raw(monitor.id() as i32), Signal::SIGTERM);
        let _ = monitor.wait();
    }

    let bad = bus.busctl(&[&["call"], &obj[..], &["Stop", "s", "nope"]].concat());
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown service"));
}

fn row<'a>(st: &'a [svcos_e2e::ServiceStatus], name: &str) -> &'a svcos_e2e::ServiceStatus {
    st.iter().find(|s| s.name == name).expect("service listed")
}

/// A crash loop climbs the escalation ladder instead of ending `failed`: dependants restarted,
/// then the sim's reboot (whole stack), then, with the reboot-loop guard spent, slow retries.
/// `strategy = "never"` still leaves a service down.
#[test]
fn crash_loop_escalates_and_never_strategy_stays_down() {
    let mut sim = Sim::start(SimOptions {
        config_patch: Some(
            "[supervisor.services.tuner]\nintensity_max_restarts = 2\nintensity_window_s = 600\n\
             backoff_floor_ms = 1\nbackoff_cap_ms = 1\nstable_after_ms = 600000\n\
             [supervisor.services.legacy-tcp]\nstrategy = \"never\"\n\
             [supervisor.escalation]\nreboot_max = 1\nslow_retry_ms = 3000\n"
                .into(),
        ),
        ..SimOptions::default()
    })
    .unwrap();
    let before = pids(&sim);
    // Two crashes are plain restarts; the third breaches two restarts in the window: the tuner
    // comes back with every service after it in boot order (rest-for-one).
    sim.kill_service_and_wait("tuner").unwrap();
    sim.kill_service_and_wait("tuner").unwrap();
    assert_eq!(row(&sim.status().unwrap(), "tuner").escalation, "none");
    sim.kill_service_and_wait("tuner").unwrap();
    let st = sim
        .wait_for(WAIT, |st| {
            ["legacy-tcp", "gateway", "proxy"].iter().all(|n| {
                let s = row(st, n);
                s.state == "running" && s.pid != Some(before[*n])
            })
        })
        .unwrap();
    assert_eq!(row(&st, "tuner").escalation, "restart-dependants");
    assert_eq!(row(&st, "tuner").state, "running");
    for n in ["hw-sim", "test-pool", "hw-agent", "stratum-agent", "auth"] {
        assert_eq!(row(&st, n).pid, Some(before[n]), "{n} is not a dependant");
    }
    // Two more breach the limit at this rung: the sim reboots, i.e. the whole stack restarts
    // (simulated board included) and every history starts over.
    sim.kill_service_and_wait("tuner").unwrap();
    let hw_sim = row(&sim.status().unwrap(), "hw-sim").pid;
    sim.signal_service("tuner", Signal::SIGKILL).unwrap();
    let st = sim
        .wait_for(WAIT, |st| {
            st.iter().all(|s| s.state == "running") && row(st, "hw-sim").pid != hw_sim
        })
        .unwrap();
    assert!(st.iter().all(|s| s.escalation == "none"), "{st:#?}");
    let guard = sim.dir().join("state/supervisor/reboots.json");
    let text = std::fs::read_to_string(&guard).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["reboots"].as_array().map(Vec::len), Some(1), "{text}");
    // Again up to the reboot rung: the guard allows one reboot per hour, so the tuner falls
    // back to slow retries, and comes back after them; it is never `failed`.
    for _ in 0..4 {
        sim.kill_service_and_wait("tuner").unwrap();
    }
    let hw_sim = row(&sim.status().unwrap(), "hw-sim").pid;
    sim.signal_service("tuner", Signal::SIGKILL).unwrap();
    let st = sim
        .wait_for(WAIT, |st| row(st, "tuner").escalation == "slow-retry")
        .unwrap();
    let tuner = row(&st, "tuner");
    assert_eq!(tuner.backoff_ms, 3000, "{tuner:?}");
    assert_ne!(tuner.state, "failed");
    sim.wait_for(WAIT, |st| row(st, "tuner").state == "running")
        .unwrap();
    assert_eq!(
        row(&sim.status().unwrap(), "hw-sim").pid,
        hw_sim,
        "no second reboot"
    );
    // strategy = never: a crash leaves it down.
    sim.signal_service("legacy-tcp", Signal::SIGKILL).unwrap();
    sim.wait_for(WAIT, |st| {
        st.iter()
            .any(|s| s.name == "legacy-tcp" && s.state == "failed" && s.pid.is_none())
    })
    .unwrap();
    // An operator's start brings it back with a clean history.
    let out = sim.ctl(&["start", "legacy-tcp"]).unwrap();
    assert!(out.status.success(), "{out:?}");
    let out = sim.ctl(&["start", "tuner"]).unwrap();
    assert!(out.status.success(), "{out:?}");
    let table = String::from_utf8(sim.ctl(&["status"]).unwrap().stdout).unwrap();
    assert!(table.contains("ESCALATION"), "{table}");
}

#[test]
fn notifies_systemd_ready_status_and_watchdog() {
    use std::os::unix::net::UnixDatagram;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    // Read like systemd does, all the time, from before the start.
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = socket.recv(&mut buf) {
            for line in String::from_utf8_lossy(&buf[..n]).lines() {
                if tx.send(line.to_string()).is_err() {
                    return;
                }
            }
        }
    });
    let sim = Sim::start(SimOptions {
        env: vec![
            ("NOTIFY_SOCKET".into(), path.to_string_lossy().into_owned()),
            ("WATCHDOG_USEC".into(), "200000".into()),
        ],
        ..SimOptions::default()
    })
    .unwrap();
    let mut seen = Vec::new();
    let want = ["READY=1", "WATCHDOG=1", "STATUS=9/9 services running"];
    while !want.iter().all(|w| seen.iter().any(|s: &String| s == w)) {
        let line = rx
            .recv_timeout(WAIT)
            .unwrap_or_else(|e| panic!("{e}; seen {seen:?}"));
        seen.push(line);
    }
    // READY comes once boot is complete, i.e. after every service reported SERVING.
    let ready = seen.iter().position(|s| s == "READY=1").unwrap();
    assert!(
        seen[..ready]
            .iter()
            .any(|s| s == "STATUS=8/9 services running"),
        "{seen:?}"
    );
    // The handshake variables are the supervisor's alone.
    let pid = sim.pid("gateway").unwrap();
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let environ = String::from_utf8_lossy(&environ);
    assert!(!environ.contains("NOTIFY_SOCKET="), "{environ}");
    assert!(!environ.contains("WATCHDOG_USEC="), "{environ}");
}

#[test]
fn sighup_from_a_closed_terminal_stops_everything_cleanly() {
    let mut sim = Sim::start(SimOptions::default()).unwrap();
    let pid = sim.supervisor_pid().unwrap();
    kill(Pid::from_raw(pid as i32), Signal::SIGHUP).unwrap();
    let status = sim
        .wait_supervisor_exit(WAIT)
        .unwrap()
        .expect("supervisor exits on SIGHUP");
    assert!(status.success(), "{status}");
    assert!(sim.log().contains("SIGHUP: shutting down"));
    for name in SIM_SERVICES {
        assert!(sim.processes_of(name).is_empty(), "{name} is gone");
    }
}
