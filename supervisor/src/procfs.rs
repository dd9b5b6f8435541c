//! Process identity for re-adoption: pidfiles that hold pid + start time, `/proc` checks that
//! defeat pid reuse, and waiting for the exit of a process that may not be our child (pidfd).

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use crate::policy::ExitKind;

/// Errors reading or writing a pidfile.
#[derive(Debug, thiserror::Error)]
pub enum PidfileError {
    /// The file could not be written.
    #[error("cannot write pidfile {path}: {source}")]
    Write {
        /// The pidfile.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// The file does not hold "PID STARTTIME".
    #[error("malformed pidfile {path}")]
    Malformed {
        /// The pidfile.
        path: PathBuf,
    },
}

/// A process named by pid and kernel start time, which together never repeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessId {
    /// The pid.
    pub pid: u32,
    /// Field 22 of `/proc/<pid>/stat`: start time in clock ticks after boot.
    pub start_ticks: u64,
}

/// Start time of a live process, from `/proc/<pid>/stat`.
pub fn start_ticks(pid: u32) -> io::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_start_ticks(&stat)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "malformed /proc/<pid>/stat"))
}

/// Field 22 of a `/proc/<pid>/stat` line. The comm field (2) may contain spaces and
/// parentheses, so fields are counted after its last `)`.
fn parse_start_ticks(stat: &str) -> Option<u64> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    // Fields from 3 (state) on; start time is field 22, i.e. the 20th after the comm.
    after_comm.split_whitespace().nth(19)?.parse().ok()
}

/// Whether `/proc/<pid>/stat` shows a zombie (exited, not yet reaped).
fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let after = &s[s.rfind(')')? + 1..];
            after
                .split_whitespace()
                .next()
                .map(|st| st == "Z" || st == "X")
        })
        .unwrap_or(true)
}

/// The argv of a live process.
pub fn cmdline(pid: u32) -> io::Result<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline"))?;
    Ok(raw
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect())
}

/// Whether an argv is `svcos <service> ...`.
pub fn is_service_cmdline(argv: &[String], service: &str) -> bool {
    let prog_ok = argv
        .first()
        .map(|a| Path::new(a).file_name().is_some_and(|n| n == "svcos"))
        .unwrap_or(false);
    prog_ok && argv.get(1).is_some_and(|a| a == service)
}

impl ProcessId {
    /// Identify a live process now.
    pub fn of(pid: u32) -> io::Result<Self> {
        Ok(ProcessId {
            pid,
            start_ticks: start_ticks(pid)?,
        })
    }

    /// Whether this exact process (not a later one with the same pid) is alive and runs
    /// `svcos <service>`.
    pub fn is_alive_as(&self, service: &str) -> bool {
        start_ticks(self.pid).is_ok_and(|t| t == self.start_ticks)
            && !is_zombie(self.pid)
            && cmdline(self.pid).is_ok_and(|argv| is_service_cmdline(&argv, service))
    }

    /// Pidfile text.
    pub fn to_pidfile(self) -> String {
        format!("{} {}\n", self.pid, self.start_ticks)
    }

    /// Parse pidfile text.
    pub fn from_pidfile(text: &str) -> Option<Self> {
        let mut it = text.split_whitespace();
        let pid = it.next()?.parse().ok()?;
        let start_ticks = it.next()?.parse().ok()?;
        it.next()
            .is_none()
            .then_some(ProcessId { pid, start_ticks })
    }

    /// When this process started, on the [`since_boot`] clock.
    pub fn started_since_boot(&self) -> Option<Duration> {
        // SAFETY: sysconf has no memory-safety preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        (hz > 0).then(|| {
            Duration::from_secs(self.start_ticks / hz as u64)
                + Duration::from_secs(self.start_ticks % hz as u64) / hz as u32
        })
    }
}

/// What a live process uses, as `/proc` shows it (Prometheus' process metrics, per service).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    /// Resident set size, bytes.
    pub rss_bytes: u64,
    /// User plus system CPU time, seconds.
    pub cpu_seconds: f64,
    /// Start time, Unix seconds.
    pub start_time_unix_s: f64,
}

/// The usage of `pid` now; `None` when it is gone or `/proc` says something unexpected.
pub fn usage(pid: u32) -> Option<Usage> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let boot_time_s = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| parse_boot_time(&s))?;
    // SAFETY: sysconf has no memory-safety preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()?;
    parse_usage(
        &stat,
        boot_time_s,
        u64::try_from(hz).ok()?,
        u64::try_from(page).ok()?,
    )
}

/// [`Usage`] from a `/proc/<pid>/stat` line: utime and stime (fields 14, 15) and start time
/// (22) in clock ticks, rss (24) in pages; `boot_time_s` is `/proc/stat`'s `btime`.
fn parse_usage(stat: &str, boot_time_s: u64, hz: u64, page: u64) -> Option<Usage> {
    if hz == 0 {
        return None;
    }
    let after_comm = &stat[stat.rfind(')')? + 1..];
    // Field n (1-based) is the (n - 3)th after the comm.
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    let ticks = field(14)? + field(15)?;
    Some(Usage {
        rss_bytes: field(24)? * page,
        cpu_seconds: ticks as f64 / hz as f64,
        start_time_unix_s: boot_time_s as f64 + field(22)? as f64 / hz as f64,
    })
}

/// `btime` of `/proc/stat`: when the system booted, in Unix seconds.
fn parse_boot_time(proc_stat: &str) -> Option<u64> {
    proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// Time since boot (CLOCK_BOOTTIME), the clock `/proc/<pid>/stat` start times are on. The
/// supervisor measures uptimes on it so adopted and spawned processes compare alike.
pub fn since_boot() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid, exclusively borrowed `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

impl ProcessId {
    /// How long this process has been running.
    pub fn age(&self) -> Option<Duration> {
        self.started_since_boot()
            .map(|s| since_boot().saturating_sub(s))
    }
}

/// The exact argv the supervisor starts a service with.
pub fn service_argv(service: &str, sim_dir: Option<&Path>) -> Vec<String> {
    let mut argv = vec!["svcos".to_string(), service.to_string()];
    if let Some(dir) = sim_dir {
        argv.push("--dir".into());
        argv.push(dir.to_string_lossy().into_owned());
    }
    argv
}

/// Live (non-zombie) processes whose argv is exactly `argv`, oldest first. This finds a child
/// whose pidfile was never written (the supervisor died between fork and pidfile).
pub fn find_processes(argv: &[String]) -> Vec<ProcessId> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found: Vec<ProcessId> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != std::process::id())
        .filter(|pid| cmdline(*pid).is_ok_and(|a| a == argv))
        .filter(|pid| !is_zombie(*pid))
        .filter_map(|pid| ProcessId::of(pid).ok())
        .collect();
    found.sort_by_key(|p| p.start_ticks);
    found
}

/// Write a pidfile atomically (a supervisor killed mid-write leaves the old or the new one).
pub fn write_pidfile(path: &Path, id: ProcessId) -> Result<(), PidfileError> {
    svcos_common::fsutil::atomic_write(path, id.to_pidfile().as_bytes(), 0o644).map_err(|source| {
        PidfileError::Write {
            path: path.to_path_buf(),
            source,
        }
    })
}

/// Read a pidfile; `Ok(None)` when there is none.
pub fn read_pidfile(path: &Path) -> Result<Option<ProcessId>, PidfileError> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            ProcessId::from_pidfile(&text)
                .map(Some)
                .ok_or_else(|| PidfileError::Malformed {
                    path: path.to_path_buf(),
                })
        }
        Err(_) => Ok(None),
    }
}

/// Remove a pidfile, ignoring a missing one.
pub fn remove_pidfile(path: &Path) {
    let _ = std::fs::remove_file(path);
}

/// A pidfd: becomes readable when the process exits, whoever its parent is.
fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1; no pointers.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this fd to us and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Wait until `id` exits. For our own child (`reap`), reap it and return its status; for an
/// adopted process the status is [`ExitKind::Unknown`].
pub async fn wait_exit(id: ProcessId, reap: bool) -> ExitKind {
    match pidfd_open(id.pid) {
        Ok(fd) => {
            // The pid may have been reused between the identity check and pidfd_open; the
            // pidfd now pins whatever process has it, so compare start times again.
            if !reap && start_ticks(id.pid).ok() != Some(id.start_ticks) {
                return ExitKind::Unknown;
            }
            // SAFETY: the AsyncFd owns the pidfd, so it stays open and unchanged for its life.
            match unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) } {
                Ok(afd) => {
                    let _ = afd.readable().await;
                }
                Err(_) => poll_until_gone(id).await,
            }
        }
        // Kernels before 5.3 lack pidfd_open: fall back to polling /proc.
        Err(_) => poll_until_gone(id).await,
    }
    if reap {
        reap_child(id.pid)
    } else {
        ExitKind::Unknown
    }
}

async fn poll_until_gone(id: ProcessId) {
    loop {
        let alive = start_ticks(id.pid).is_ok_and(|t| t == id.start_ticks) && !is_zombie(id.pid);
        if !alive {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Collect the status of an exited child.
fn reap_child(pid: u32) -> ExitKind {
    loop {
        match waitpid(Pid::from_raw(pid as i32), Some(WaitPidFlag::empty())) {
            Ok(WaitStatus::Exited(_, code)) => return ExitKind::Code(code),
            Ok(WaitStatus::Signaled(_, sig, _)) => return ExitKind::Signal(sig as i32),
            Ok(_) => continue,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return ExitKind::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_reads_the_stat_fields_after_the_comm() {
        // A comm with spaces and a parenthesis; utime 150, stime 50, starttime 1000, rss 300.
        let stat = "42 (a) b (c) S 1 42 42 0 -1 4194560 10 0 0 0 150 50 0 0 20 0 3 0 1000 \
                    9000000 300 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let u = parse_usage(stat, 1_700_000_000, 100, 4096).unwrap();
        assert_eq!(u.rss_bytes, 300 * 4096);
        assert_eq!(u.cpu_seconds, 2.0);
        assert_eq!(u.start_time_unix_s, 1_700_000_010.0);
        assert_eq!(parse_usage("42 (x) S 1", 0, 100, 4096), None);
        assert_eq!(parse_usage(stat, 0, 0, 4096), None);
        assert_eq!(
            parse_boot_time("cpu  1 2 3\nbtime 1700000000\nprocesses 9\n"),
            Some(1_700_000_000)
        );
        assert_eq!(parse_boot_time("cpu 1\n"), None);
    }

    #[test]
    fn own_usage_is_plausible() {
        let u = usage(std::process::id()).unwrap();
        assert!(u.rss_bytes > 100_000, "{u:?}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            u.start_time_unix_s <= now + 1.0 && u.start_time_unix_s > now - 86_400.0 * 365.0,
            "{u:?}"
        );
    }

    #[test]
    fn start_ticks_survive_odd_comm_names() {
        let stat =
            "1234 (a) b (c) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 200";
        assert_eq!(parse_start_ticks(stat), Some(987654));
        assert_eq!(parse_start_ticks("garbage"), None);
    }

    #[test]
    fn own_process_identity_and_age() {
        let me = ProcessId::of(std::process::id()).unwrap();
        assert_eq!(me.start_ticks, start_ticks(std::process::id()).unwrap());
        // The test binary is not `svcos ...`: the cmdline check must refuse it.
        assert!(!me.is_alive_as("hw-agent"));
        assert!(me.age().is_some());
    }

    #[test]
    fn pidfile_round_trip_and_malformed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pids/x.pid");
        assert_eq!(read_pidfile(&path).unwrap(), None);
        let id = ProcessId {
            pid: 42,
            start_ticks: 7,
        };
        write_pidfile(&path, id).unwrap();
        assert_eq!(read_pidfile(&path).unwrap(), Some(id));
        std::fs::write(&path, "42\n").unwrap();
        assert!(matches!(
            read_pidfile(&path),
            Err(PidfileError::Malformed { .. })
        ));
        assert_eq!(ProcessId::from_pidfile("1 2 3"), None);
    }

    #[test]
    fn finds_processes_by_exact_argv() {
        let mut child = std::process::Command::new("sleep")
            .arg("31.4159")
            .spawn()
            .unwrap();
        let argv = vec!["sleep".to_string(), "31.4159".to_string()];
        // spawn() returns after fork; until the child has exec'd, its cmdline is still ours.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut found = find_processes(&argv);
        while found.is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
            found = find_processes(&argv);
        }
        assert_eq!(
            found.iter().map(|p| p.pid).collect::<Vec<_>>(),
            [child.id()]
        );
        assert!(
            find_processes(&argv[..1])
                .iter()
                .all(|p| p.pid != child.id())
        );
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(find_processes(&argv).is_empty());
        assert_eq!(
            service_argv("auth", Some(Path::new("/s"))),
            ["svcos", "auth", "--dir", "/s"]
        );
    }

    #[test]
    fn cmdline_match() {
        let argv = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(is_service_cmdline(
            &argv(&["svcos", "auth", "--dir", "/x"]),
            "auth"
        ));
        assert!(is_service_cmdline(
            &argv(&["/usr/bin/svcos", "auth"]),
            "auth"
        ));
        assert!(!is_service_cmdline(&argv(&["svcos", "tuner"]), "auth"));
        assert!(!is_service_cmdline(&argv(&["bash", "auth"]), "auth"));
        assert!(!is_service_cmdline(&argv(&[]), "auth"));
    }

    // The children are reaped by wait_exit itself (waitpid), which clippy cannot see.
    #[allow(clippy::zombie_processes)]
    #[tokio::test]
    async fn wait_exit_reaps_child_status() {
        let child = std::process::Command::new("sh")
            .args(["-c", "exit 3"])
            .spawn()
            .unwrap();
        let id = ProcessId {
            pid: child.id(),
            start_ticks: 0,
        };
        assert_eq!(wait_exit(id, true).await, ExitKind::Code(3));
        let child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let id = ProcessId {
            pid: child.id(),
            start_ticks: 0,
        };
        nix::sys::signal::kill(
            Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        assert_eq!(wait_exit(id, true).await, ExitKind::Signal(9));
    }
}
