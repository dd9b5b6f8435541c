//! Starting one service process: `svcos <service> [--dir DIR]` in its own session, output into
//! its log FIFO, and in production under its own system user.

use std::ffi::CString;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use svcos_common::ServiceName;

/// The program children run. `/proc/self/exe` (resolved in the forked child) is the very binary
/// the supervisor runs, even if the file on disk was replaced or deleted since.
const SELF_EXE: &str = "/proc/self/exe";

/// The system group every service user belongs to (socket access).
pub const SERVICE_GROUP: &str = "svcos";

/// The system user a service runs as in production (see `systemd/svcos.sysusers`).
pub fn service_user(service: ServiceName) -> String {
    format!("svcos-{service}")
}

/// Errors starting a service.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The service's system user is missing (sysusers not applied).
    #[error("system user {user} for {service} does not exist")]
    NoUser {
        /// The service.
        service: ServiceName,
        /// The missing user.
        user: String,
    },
    /// Looking up the user or its groups failed.
    #[error("cannot resolve user {user}: {source}")]
    Lookup {
        /// The user.
        user: String,
        /// The OS error.
        source: nix::Error,
    },
    /// fork/exec failed.
    #[error("cannot start {service}: {source}")]
    Exec {
        /// The service.
        service: ServiceName,
        /// The OS error.
        source: io::Error,
    },
}

/// Uid, gid and supplementary groups a child switches to before exec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Supplementary groups (e.g. `svcos`, and `dialout`/`i2c`/`gpio` for hw-agent).
    pub groups: Vec<u32>,
    /// Keep CAP_NET_BIND_SERVICE across the switch (as an ambient capability), so the proxy can
    /// bind port 80 without being root.
    pub bind_low_ports: bool,
}

/// Linux capability number of CAP_NET_BIND_SERVICE.
const CAP_NET_BIND_SERVICE: u32 = 10;
/// `_LINUX_CAPABILITY_VERSION_3`: 64-bit capability sets in two 32-bit words.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Switch user and group; with `bind_low_ports`, keep exactly CAP_NET_BIND_SERVICE as an
/// ambient capability so it survives the exec that follows.
///
/// # Safety
/// Runs between fork and exec: only raw system calls, no allocation.
unsafe fn switch_user(c: &Credentials) -> io::Result<()> {
    let fail = || Err(io::Error::last_os_error());
    // SAFETY: plain system calls on integers and on pointers to live, correctly sized values
    // owned by this frame or by `c`.
    unsafe {
        if c.bind_low_ports && libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0) < 0 {
            return fail();
        }
        if libc::setgroups(c.groups.len(), c.groups.as_ptr()) < 0
            || libc::setgid(c.gid) < 0
            || libc::setuid(c.uid) < 0
        {
            return fail();
        }
        if c.bind_low_ports {
            let bit = 1u32 << CAP_NET_BIND_SERVICE;
            let header = CapHeader {
                version: CAPABILITY_VERSION_3,
                pid: 0,
            };
            let data = [
                CapData {
                    effective: bit,
                    permitted: bit,
                    inheritable: bit,
                },
                CapData {
                    effective: 0,
                    permitted: 0,
                    inheritable: 0,
                },
            ];
            if libc::syscall(libc::SYS_capset, &header, data.as_ptr()) < 0
                || libc::prctl(
                    libc::PR_CAP_AMBIENT,
                    libc::PR_CAP_AMBIENT_RAISE,
                    CAP_NET_BIND_SERVICE as libc::c_ulong,
                    0,
                    0,
                ) < 0
            {
                return fail();
            }
        }
    }
    Ok(())
}

impl Credentials {
    /// Resolve a service's user from the password and group databases.
    pub fn for_service(service: ServiceName) -> Result<Self, SpawnError> {
        let user = service_user(service);
        let entry = nix::unistd::User::from_name(&user)
            .map_err(|source| SpawnError::Lookup {
                user: user.clone(),
                source,
            })?
            .ok_or_else(|| SpawnError::NoUser {
                service,
                user: user.clone(),
            })?;
        let cname = CString::new(user.clone()).expect("service names have no NUL");
        let groups = nix::unistd::getgrouplist(&cname, entry.gid)
            .map_err(|source| SpawnError::Lookup {
                user: user.clone(),
                source,
            })?
            .into_iter()
            .map(|g| g.as_raw())
            .collect();
        Ok(Credentials {
            uid: entry.uid.as_raw(),
            gid: entry.gid.as_raw(),
            groups,
            bind_low_ports: service == ServiceName::Proxy,
        })
    }
}

/// How to start a service.
#[derive(Debug, Clone)]
pub struct SpawnSpec {
    /// Which service.
    pub service: ServiceName,
    /// `--dir` for a sim instance; `None` in production.
    pub sim_dir: Option<PathBuf>,
    /// Drop to these credentials before exec (production as root).
    pub credentials: Option<Credentials>,
}

/// Fork and exec the service; returns its pid. The child gets its own session (so a terminal's
/// Ctrl-C and the supervisor's death do not reach it), `/dev/null` as stdin and the log FIFO
/// as stdout and stderr.
pub fn spawn(spec: &SpawnSpec, log: &OwnedFd) -> Result<u32, SpawnError> {
    let mut cmd = Command::new(SELF_EXE);
    cmd.arg0("svcos").arg(spec.service.as_str());
    if let Some(dir) = &spec.sim_dir {
        cmd.arg("--dir").arg(dir);
    }
    spawn_command(cmd, spec.service, spec.credentials.clone(), log)
}

/// Spawn a prepared command the way services are spawned (own session, log fd, credentials).
pub fn spawn_command(
    mut cmd: Command,
    service: ServiceName,
    creds: Option<Credentials>,
    log: &OwnedFd,
) -> Result<u32, SpawnError> {
    let exec_err = |source| SpawnError::Exec { service, source };
    // The supervisor's systemd handshake variables belong to the supervisor alone.
    for var in [
        "NOTIFY_SOCKET",
        "WATCHDOG_USEC",
        "WATCHDOG_PID",
        "LISTEN_FDS",
        "LISTEN_PID",
    ] {
        cmd.env_remove(var);
    }
    cmd.stdin(Stdio::null())
        .stdout(log.try_clone().map_err(exec_err)?)
        .stderr(log.try_clone().map_err(exec_err)?);
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe system
    // calls (setsid, prctl, setgroups, setgid, setuid, capset) on data prepared before the
    // fork; it does not allocate or take locks.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            if let Some(c) = &creds {
                switch_user(c)?;
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(exec_err)?;
    // Dropping a std Child neither kills nor waits: the exit watcher reaps it through waitpid.
    Ok(child.id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_names_follow_the_sysusers_file() {
        assert_eq!(service_user(ServiceName::HwAgent), "svcos-hw-agent");
        assert_eq!(service_user(ServiceName::Proxy), "svcos-proxy");
    }

    /// As root: the child runs under the given uid/gid/groups, in its own session, and with
    /// `bind_low_ports` holds CAP_NET_BIND_SERVICE (bit 10) as its only ambient capability.
    #[test]
    fn child_switches_user_and_keeps_only_net_bind() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIP: needs root to switch users");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let out_path = dir.path().join("out");
        let out: OwnedFd = std::fs::File::create(&out_path).unwrap().into();
        for bind_low_ports in [false, true] {
            let mut cmd = Command::new("/bin/sh");
            cmd.args([
                "-c",
                "echo uid=$(id -u) gid=$(id -g) groups=$(id -G); \
                 grep -E '^(CapAmb|CapEff)' /proc/self/status; \
                 echo sid=$(cut -d' ' -f6 /proc/self/stat) pid=$$",
            ]);
            let creds = Credentials {
                uid: 65534,
                gid: 65534,
                groups: vec![65534, 20],
                bind_low_ports,
            };
            let pid = spawn_command(cmd, ServiceName::Proxy, Some(creds), &out).unwrap();
            nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid as i32), None).unwrap();
            let text = std::fs::read_to_string(&out_path).unwrap();
            let run = text.split("uid=").last().unwrap();
            assert!(run.starts_with("65534 gid=65534 groups=65534 20"), "{text}");
            let amb = if bind_low_ports {
                "CapAmb:\t0000000000000400"
            } else {
                "CapAmb:\t0000000000000000"
            };
            assert!(run.contains(amb), "{text}");
            let sid = run.split("sid=").nth(1).unwrap();
            let (sid, pid_text) = sid.trim().split_once(" pid=").unwrap();
            assert_eq!(sid, pid_text, "child leads its own session");
        }
    }

    #[test]
    fn missing_user_is_a_clear_error() {
        // No svcos-* users exist on a development machine.
        if nix::unistd::User::from_name("svcos-tuner")
            .ok()
            .flatten()
            .is_some()
        {
            return;
        }
        let err = Credentials::for_service(ServiceName::Tuner).unwrap_err();
        assert!(err.to_string().contains("svcos-tuner"), "{err}");
    }
}
