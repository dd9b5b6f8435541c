//! The supervisor's descriptor store: a service leaves open file descriptors with the
//! supervisor and gets them back when it starts again, like systemd's `FileDescriptorStore=`.
//!
//! Why: hw-agent's chain UARTs. Bytes that reach a TTY nobody has open are dropped, on a real
//! UART as on the sim's PTY; while a descriptor stays open the kernel keeps them in the TTY's
//! input buffer. With the supervisor holding a duplicate of each UART, the nonces the chips find
//! while hw-agent restarts wait in the kernel, and the new hw-agent reads them on the very same
//! open file (same baud, same exclusive lock) and submits every valid one.
//!
//! Protocol, on the `SOCK_SEQPACKET` socket [`SOCKET_NAME`] in the runtime directory; one
//! datagram per message, descriptors as `SCM_RIGHTS`:
//! - `GET` → `FDS\n<name>\n<name>…` with the stored descriptors in that order.
//! - `PUT\n<name>\n<name>…` with one descriptor per name → `OK`: replaces everything stored
//!   for the caller (an empty `PUT` forgets it all).
//!
//! The supervisor identifies the caller by its peer pid (`SO_PEERCRED`) against the pidfiles it
//! writes, so a service only ever sees its own descriptors.

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, UnixAddr,
    connect, recvmsg, sendmsg, socket,
};

use crate::Layout;

/// File name of the store's socket in the runtime directory.
pub const SOCKET_NAME: &str = "fdstore.sock";
/// Most descriptors one message carries (far below the kernel's SCM_MAX_FD of 253).
pub const MAX_FDS: usize = 32;
/// Longest message.
pub const MAX_MESSAGE: usize = 4096;
/// Send/receive timeout of a client call: the store must never hold up a start.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(1);

/// The store's socket for an instance.
pub fn socket_path(layout: &Layout) -> PathBuf {
    layout.runtime_dir.join(SOCKET_NAME)
}

/// A request, parsed.
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    /// Hand back everything stored for the caller.
    Get,
    /// Replace what is stored with these names (descriptors alongside).
    Put(Vec<String>),
}

/// Parse a request's text.
pub fn parse_request(text: &[u8]) -> Option<Request> {
    let text = std::str::from_utf8(text).ok()?;
    let mut lines = text.split('\n');
    match lines.next()? {
        "GET" => Some(Request::Get),
        "PUT" => Some(Request::Put(
            lines.filter(|l| !l.is_empty()).map(String::from).collect(),
        )),
        _ => None,
    }
}

fn message(head: &str, names: &[&str]) -> Vec<u8> {
    let mut text = head.to_string();
    for n in names {
        text.push('\n');
        text.push_str(n);
    }
    text.into_bytes()
}

/// Send `text` with `fds` attached on a connected seqpacket socket.
pub fn send(sock: RawFd, text: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let iov = [IoSlice::new(text)];
    let cmsgs = if fds.is_empty() {
        Vec::new()
    } else {
        vec![ControlMessage::ScmRights(fds)]
    };
    sendmsg::<UnixAddr>(sock, &iov, &cmsgs, MsgFlags::MSG_NOSIGNAL, None)?;
    Ok(())
}

/// Receive one message and the descriptors that came with it (0 bytes: the peer closed).
pub fn recv(sock: RawFd) -> io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut buf = vec![0u8; MAX_MESSAGE];
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let (len, fds) = {
        let mut iov = [IoSliceMut::new(&mut buf)];
        let msg =
            recvmsg::<UnixAddr>(sock, &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)?;
        let mut fds = Vec::new();
        for c in msg.cmsgs()? {
            if let ControlMessageOwned::ScmRights(raw) = c {
                for fd in raw {
                    // SAFETY: the kernel just installed these descriptors in this process for
                    // this message; nothing else owns them.
                    fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
                }
            }
        }
        (msg.bytes, fds)
    };
    buf.truncate(len);
    Ok((buf, fds))
}

fn connect_to(path: &Path) -> io::Result<OwnedFd> {
    let sock = socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    // `as _`: time_t is 32 bits on 32-bit glibc (armv7), 64 elsewhere.
    let timeout = nix::sys::time::TimeVal::new(CLIENT_TIMEOUT.as_secs() as _, 0);
    nix::sys::socket::setsockopt(&sock, nix::sys::socket::sockopt::SendTimeout, &timeout)?;
    nix::sys::socket::setsockopt(&sock, nix::sys::socket::sockopt::ReceiveTimeout, &timeout)?;
    connect(sock.as_raw_fd(), &UnixAddr::new(path)?)?;
    Ok(sock)
}

/// Fetch the descriptors stored for this process's service (empty when none or no store).
pub fn fetch(layout: &Layout) -> io::Result<Vec<(String, OwnedFd)>> {
    let sock = connect_to(&socket_path(layout))?;
    send(sock.as_raw_fd(), b"GET", &[])?;
    let (text, fds) = recv(sock.as_raw_fd())?;
    let text = String::from_utf8_lossy(&text);
    let mut lines = text.split('\n');
    if lines.next() != Some("FDS") {
        return Err(io::Error::other(format!("fd store answered {text:?}")));
    }
    let names: Vec<String> = lines.filter(|l| !l.is_empty()).map(String::from).collect();
    if names.len() != fds.len() {
        return Err(io::Error::other(format!(
            "fd store sent {} names for {} descriptors",
            names.len(),
            fds.len()
        )));
    }
    Ok(names.into_iter().zip(fds).collect())
}

/// Leave these descriptors (duplicated by the kernel) with the store, replacing what it held.
pub fn deposit(layout: &Layout, fds: &[(String, BorrowedFd<'_>)]) -> io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::other("too many descriptors for the fd store"));
    }
    let sock = connect_to(&socket_path(layout))?;
    let names: Vec<&str> = fds.iter().map(|(n, _)| n.as_str()).collect();
    let raw: Vec<RawFd> = fds.iter().map(|(_, fd)| fd.as_raw_fd()).collect();
    send(sock.as_raw_fd(), &message("PUT", &names), &raw)?;
    let (answer, _) = recv(sock.as_raw_fd())?;
    if answer != b"OK" {
        return Err(io::Error::other(format!(
            "fd store refused: {}",
            String::from_utf8_lossy(&answer)
        )));
    }
    Ok(())
}

/// The answer to a `GET`, for the server.
pub fn fds_message(names: &[&str]) -> Vec<u8> {
    message("FDS", names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse() {
        assert_eq!(parse_request(b"GET"), Some(Request::Get));
        assert_eq!(
            parse_request(b"PUT\n/dev/ttyS1\n/dev/pts/4"),
            Some(Request::Put(vec!["/dev/ttyS1".into(), "/dev/pts/4".into()]))
        );
        assert_eq!(parse_request(b"PUT"), Some(Request::Put(vec![])));
        assert_eq!(parse_request(b"DROP"), None);
        assert_eq!(parse_request(&[0xff]), None);
        assert_eq!(fds_message(&["a", "b"]), b"FDS\na\nb");
    }
}
