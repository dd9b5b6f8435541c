//! One pool connection as a task: connect, then shuttle lines. It owns only the socket; the
//! protocol state lives in the agent, which gets every line as an event (with the time it was
//! read, for latency accounting) and hands back lines to write.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use crate::transport::{PoolUrl, Tls, connect};
use crate::v1::codec::MAX_LINE;

/// Identity of one connection attempt (never reused within a process).
pub type ConnId = u64;

/// What a connection reports to the agent.
#[derive(Debug)]
pub enum ConnEvent {
    /// The transport is up; the agent should send the opening lines.
    Connected(ConnId),
    /// One line from the pool, without its newline.
    Line {
        /// Which connection.
        conn: ConnId,
        /// The bytes.
        line: Vec<u8>,
        /// When it was read (unix microseconds).
        at_us: i64,
        /// When it was read on the share-path trace clock (`svcos_common::trace`); 0 when the
        /// trace is off.
        read_ns: u64,
    },
    /// Stratum V2: the Noise handshake finished (before `Connected`) or failed (before
    /// `Closed`).
    Sv2Handshake {
        /// Which connection.
        conn: ConnId,
        /// Whether the pool proved it holds the configured authority key.
        ok: bool,
        /// What happened, for the status API.
        detail: String,
        /// When (unix milliseconds).
        at_ms: i64,
    },
    /// Stratum V2: one decrypted frame (header + payload).
    Frame {
        /// Which connection.
        conn: ConnId,
        /// The plaintext frame.
        frame: Vec<u8>,
        /// When it was read (unix microseconds).
        at_us: i64,
    },
    /// The job-declaration client's news (`crate::jd::client`), with the id of the client run
    /// that sent it (a dropped run's late news is ignored).
    Jd(u64, crate::jd::JdEvent),
    /// The connection is gone (or never came up), with why.
    Closed {
        /// Which connection.
        conn: ConnId,
        /// Human-readable cause.
        error: String,
    },
}

/// The agent's handle on a running connection. Dropping it closes the connection.
#[derive(Debug)]
pub struct ConnHandle {
    /// Lines (V1) or plaintext frames (V2) to write.
    tx: mpsc::Sender<Vec<u8>>,
    task: tokio::task::AbortHandle,
}

impl ConnHandle {
    /// Queue a line for writing. False when the writer is gone or hopelessly behind.
    pub fn send(&self, line: String) -> bool {
        self.tx.try_send(line.into_bytes()).is_ok()
    }

    /// Queue bytes (an SV2 frame) for writing. False as for [`Self::send`].
    pub fn send_bytes(&self, bytes: Vec<u8>) -> bool {
        self.tx.try_send(bytes).is_ok()
    }

    /// A handle on a connection task started elsewhere (the SV2 one).
    pub(crate) fn new(tx: mpsc::Sender<Vec<u8>>, task: tokio::task::AbortHandle) -> Self {
        ConnHandle { tx, task }
    }
}

impl Drop for ConnHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Start a connection task reporting to `events`.
pub fn spawn(
    conn: ConnId,
    url: PoolUrl,
    tls: Tls,
    timeout: Duration,
    events: mpsc::Sender<ConnEvent>,
) -> ConnHandle {
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(256);
    let task = tokio::spawn(async move {
        let error = match connect(&url, &tls, timeout).await {
            Err(e) => e.to_string(),
            Ok(stream) => {
                if events.send(ConnEvent::Connected(conn)).await.is_err() {
                    return;
                }
                let (read, mut write) = tokio::io::split(stream);
                let mut reader = BufReader::new(read);
                let mut buf = Vec::with_capacity(1024);
                loop {
                    // `read_until` keeps partial input in `buf` when the select picks the writer
                    // branch, so `buf` is only cleared after a whole line was handled.
                    tokio::select! {
                        n = read_line(&mut reader, &mut buf) => match n {
                            Ok(0) => break "pool closed the connection".to_string(),
                            Ok(_) if buf.len() > MAX_LINE => break "pool sent an overlong line".to_string(),
                            Ok(_) => {
                                let read_ns = svcos_common::trace::stamp();
                                let at_us = svcos_common::time::unix_us();
                                let line = buf.trim_ascii_end().to_vec();
                                buf.clear();
                                if line.is_empty() { continue; }
                                if events.send(ConnEvent::Line { conn, line, at_us, read_ns }).await.is_err() { return; }
                            }
                            Err(e) => break format!("read: {e}"),
                        },
                        line = rx.recv() => match line {
                            Some(line) => {
                                let dequeued_ns = svcos_common::trace::stamp();
                                if let Err(e) = async { write.write_all(&line).await?; write.flush().await }.await {
                                    break format!("write: {e}");
                                }
                                if dequeued_ns != 0 && let Some(nonce) = submitted_nonce(&line) {
                                    svcos_common::trace::record(
                                        "sa.wrote",
                                        format_args!("{nonce:08x} {dequeued_ns} {}", svcos_common::trace::mono_ns()),
                                    );
                                }
                            }
                            None => return,
                        },
                    }
                }
            }
        };
        let _ = events.send(ConnEvent::Closed { conn, error }).await;
    });
    ConnHandle {
        tx,
        task: task.abort_handle(),
    }
}

/// The nonce of a Stratum V1 `mining.submit` line, for the share-path trace (which only parses
/// lines it stamps, so nothing is parsed while the trace is off).
fn submitted_nonce(line: &[u8]) -> Option<u32> {
    let v: serde_json::Value = serde_json::from_slice(line).ok()?;
    if v.get("method")?.as_str()? != "mining.submit" {
        return None;
    }
    u32::from_str_radix(v.get("params")?.get(4)?.as_str()?, 16).ok()
}

async fn read_line<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
) -> std::io::Result<usize> {
    let mut limited = tokio::io::AsyncReadExt::take(r, MAX_LINE as u64 + 1);
    limited.read_until(b'\n', buf).await
}

#[cfg(test)]
mod tests {
    use super::submitted_nonce;

    #[test]
    fn the_trace_finds_the_nonce_of_a_submit_line_only() {
        let submit = br#"{"id":7,"method":"mining.submit","params":["w","j1","00000001","6530a1b2","1a2b3c4d"]}"#;
        assert_eq!(submitted_nonce(&submit[..]), Some(0x1a2b_3c4d));
        let with_newline = [&submit[..], b"\n"].concat();
        assert_eq!(submitted_nonce(&with_newline), Some(0x1a2b_3c4d));
        for other in [
            &br#"{"id":1,"method":"mining.subscribe","params":["svcos"]}"#[..],
            br#"{"id":8,"method":"mining.submit","params":["w","j1"]}"#,
            br#"{"id":9,"method":"mining.submit","params":["w","j1","00","6530a1b2","zz"]}"#,
            b"not json",
        ] {
            assert_eq!(
                submitted_nonce(other),
                None,
                "{}",
                String::from_utf8_lossy(other)
            );
        }
    }
}
