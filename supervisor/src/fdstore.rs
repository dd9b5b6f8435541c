//! The server side of [`svcos_common::fdstore`]: the supervisor holds descriptors its services
//! leave with it (hw-agent's chain UARTs) and hands them back to the next process of the same
//! service, so the kernel keeps the bytes that arrive meanwhile.
//!
//! A plain thread with blocking I/O: the store is off every latency path, and a slow client can
//! hold it up for at most the socket timeouts, never the manager task. The caller is identified
//! by its peer pid against the pidfiles the manager writes. What the store holds dies with the
//! supervisor; the service re-deposits periodically, so a restarted supervisor holds them again
//! within seconds.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::socket::{
    AddressFamily, Backlog, SockFlag, SockType, UnixAddr, accept4, bind, getsockopt, listen,
    setsockopt, socket, sockopt,
};
use svcos_common::fdstore::{self, Request};
use svcos_common::{Layout, ServiceName};

use crate::procfs;

/// How long one client may take per message.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);

/// What the store holds, per service.
#[derive(Debug, Default)]
pub struct FdStore {
    held: Mutex<HashMap<ServiceName, Vec<(String, OwnedFd)>>>,
}

impl FdStore {
    /// Names held for a service (tests and logs).
    pub fn names(&self, service: ServiceName) -> Vec<String> {
        self.lock()
            .get(&service)
            .map(|v| v.iter().map(|(n, _)| n.clone()).collect())
            .unwrap_or_default()
    }

    /// Drop everything (the sim's reboot: the devices behind the descriptors are gone).
    pub fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ServiceName, Vec<(String, OwnedFd)>>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Bind the store's socket (mode 0660, group `group` when given) and serve it on a thread.
pub fn serve(
    layout: &Layout,
    services: Vec<ServiceName>,
    group: Option<nix::unistd::Gid>,
) -> io::Result<Arc<FdStore>> {
    use std::os::unix::fs::PermissionsExt;
    let path = fdstore::socket_path(layout);
    let _ = std::fs::remove_file(&path);
    let sock = socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    bind(sock.as_raw_fd(), &UnixAddr::new(&path)?)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o660))?;
    if let Some(g) = group {
        nix::unistd::chown(&path, None, Some(g))?;
    }
    listen(&sock, Backlog::new(16)?)?;
    let store = Arc::new(FdStore::default());
    let worker = Arc::clone(&store);
    let layout = layout.clone();
    std::thread::Builder::new()
        .name("fdstore".into())
        .stack_size(256 * 1024)
        .spawn(move || {
            loop {
                // CLOEXEC everywhere: the supervisor forks children, which must inherit nothing.
                let conn = match accept4(sock.as_raw_fd(), SockFlag::SOCK_CLOEXEC) {
                    // SAFETY: accept just returned this descriptor; nothing else owns it.
                    Ok(fd) => unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) },
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(e) => {
                        tracing::warn!(error = %e, "fd store accept failed; store closed");
                        return;
                    }
                };
                if let Err(e) = handle(&worker, &layout, &services, &conn) {
                    tracing::warn!(error = %e, "fd store: request refused");
                }
            }
        })?;
    tracing::debug!(path = %path.display(), "fd store up");
    Ok(store)
}

/// The managed service whose current process is `pid`, by the pidfiles.
fn service_of(layout: &Layout, services: &[ServiceName], pid: u32) -> Option<ServiceName> {
    services.iter().copied().find(|s| {
        procfs::read_pidfile(&layout.pidfile(*s))
            .ok()
            .flatten()
            .is_some_and(|id| id.pid == pid)
    })
}

fn handle(
    store: &FdStore,
    layout: &Layout,
    services: &[ServiceName],
    conn: &OwnedFd,
) -> io::Result<()> {
    // `as _`: time_t is 32 bits on 32-bit glibc (armv7), 64 elsewhere.
    let tv = nix::sys::time::TimeVal::new(CLIENT_TIMEOUT.as_secs() as _, 0);
    setsockopt(conn, sockopt::ReceiveTimeout, &tv)?;
    setsockopt(conn, sockopt::SendTimeout, &tv)?;
    let cred = getsockopt(conn, sockopt::PeerCredentials)?;
    let Some(service) = service_of(layout, services, cred.pid() as u32) else {
        // Also a service that asks before its pidfile is written (it retries): not worth a warning.
        tracing::debug!(
            pid = cred.pid(),
            "fd store: caller is no managed service (yet)"
        );
        return Ok(());
    };
    let (text, fds) = fdstore::recv(conn.as_raw_fd())?;
    match fdstore::parse_request(&text) {
        Some(Request::Get) => {
            let held = store.lock();
            let entries = held.get(&service).map(Vec::as_slice).unwrap_or(&[]);
            let names: Vec<&str> = entries.iter().map(|(n, _)| n.as_str()).collect();
            let raw: Vec<RawFd> = entries.iter().map(|(_, fd)| fd.as_raw_fd()).collect();
            fdstore::send(conn.as_raw_fd(), &fdstore::fds_message(&names), &raw)?;
            tracing::info!(%service, fds = names.len(), "fd store: handed back descriptors");
        }
        Some(Request::Put(names)) if names.len() == fds.len() => {
            let changed = store.names(service) != names;
            store
                .lock()
                .insert(service, names.iter().cloned().zip(fds).collect());
            if changed {
                tracing::info!(%service, ?names, "fd store: holding descriptors");
            }
            fdstore::send(conn.as_raw_fd(), b"OK", &[])?;
        }
        _ => {
            fdstore::send(conn.as_raw_fd(), b"ERR bad request", &[])?;
        }
    }
    Ok(())
}

/// Where the socket is for `layout` (for logs and tests).
pub fn socket_path(layout: &Layout) -> PathBuf {
    fdstore::socket_path(layout)
}
