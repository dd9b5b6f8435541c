//! One Stratum V2 pool connection as a task: TCP, the Noise NX handshake against the pool's
//! authority key, then decrypted frames to the agent and plaintext frames from it. Like the V1
//! task it owns only the socket; the protocol state lives in the agent's [`super::session`].

use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::noise::{self, NoiseError};
use crate::conn::{ConnEvent, ConnHandle, ConnId};
use crate::transport::PoolUrl;

/// Start a connection task reporting to `events`. `authority` is the pool URL's key (x-only
/// bytes and the base58 text it was given as).
pub fn spawn(
    conn: ConnId,
    url: PoolUrl,
    authority: ([u8; 32], String),
    timeout: Duration,
    events: mpsc::Sender<ConnEvent>,
) -> ConnHandle {
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(256);
    let task = tokio::spawn(async move {
        let addr = url.addr();
        let stream = match tokio::time::timeout(timeout, TcpStream::connect(&addr)).await {
            Err(_) => Err(format!("connect to {addr}: timed out")),
            Ok(Err(e)) => Err(format!("connect to {addr}: {e}")),
            Ok(Ok(s)) => Ok(s),
        };
        let error = match stream {
            Err(e) => e,
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                let (read, write) = stream.into_split();
                match noise::initiate(read, write, authority.0, &authority.1, timeout).await {
                    Err(e) => {
                        let detail = e.to_string();
                        let _ = events
                            .send(ConnEvent::Sv2Handshake {
                                conn,
                                ok: false,
                                detail: detail.clone(),
                                at_ms: svcos_common::time::unix_ms(),
                            })
                            .await;
                        detail
                    }
                    Ok((mut reader, mut writer)) => {
                        let ok = ConnEvent::Sv2Handshake {
                            conn,
                            ok: true,
                            detail: "Noise NX complete; the pool's certificate is signed by the configured authority key".into(),
                            at_ms: svcos_common::time::unix_ms(),
                        };
                        if events.send(ok).await.is_err()
                            || events.send(ConnEvent::Connected(conn)).await.is_err()
                        {
                            return;
                        }
                        // The frame reader is not cancel-safe: it gets a task of its own.
                        let frames = events.clone();
                        let mut read_task = tokio::spawn(async move {
                            loop {
                                let frame = reader.next().await?;
                                let at_us = svcos_common::time::unix_us();
                                if frames
                                    .send(ConnEvent::Frame { conn, frame, at_us })
                                    .await
                                    .is_err()
                                {
                                    return Ok::<(), NoiseError>(());
                                }
                            }
                        });
                        let _guard = AbortOnDrop(read_task.abort_handle());
                        let error = loop {
                            tokio::select! {
                                r = &mut read_task => break match r {
                                    Ok(Ok(())) => return,
                                    Ok(Err(NoiseError::Io(e))) if e.kind() == std::io::ErrorKind::UnexpectedEof => "pool closed the connection".to_string(),
                                    Ok(Err(e)) => e.to_string(),
                                    Err(e) => format!("reader: {e}"),
                                },
                                frame = rx.recv() => match frame {
                                    Some(frame) => if let Err(e) = writer.send(&frame).await {
                                        break format!("write: {e}");
                                    },
                                    None => { read_task.abort(); return; }
                                },
                            }
                        };
                        read_task.abort();
                        error
                    }
                }
            }
        };
        let _ = events.send(ConnEvent::Closed { conn, error }).await;
    });
    ConnHandle::new(tx, task.abort_handle())
}

/// Aborts the frame reader when the connection task itself is dropped (the agent closed it).
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
