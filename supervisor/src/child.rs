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
    let exec_err = |source| SpawnError::Exec {
        service: spec.service,
        source,
    };
    let mut cmd = Command::new(SELF_EXE);
    cmd.arg0("svcos").arg(spec.service.as_str());
    if let Some(dir) = &spec.sim_dir {
        cmd.arg("--dir").arg(dir);
    }
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
    let creds = spec.credentials.clone();
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe system
    // calls (setsid, setgroups, setgid, setuid) on data prepared before the fork; it does not
    // allocate or take locks.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            if let Some(c) = &creds
                && (libc::setgroups(c.groups.len(), c.groups.as_ptr()) < 0
                    || libc::setgid(c.gid) < 0
                    || libc::setuid(c.uid) < 0)
            {
                return Err(io::Error::last_os_error());
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
