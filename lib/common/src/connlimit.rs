//! Connection caps for the TCP listeners (gateway 8080, proxy 80, legacy 4028).
//!
//! Without a cap one client holding thousands of idle connections uses up the process's file
//! descriptors (or every serving slot), and the owner's own browser waits. A [`ConnLimiter`]
//! admits a connection only while its address holds fewer than `per_peer` and the process fewer
//! than `total`; the [`ConnPermit`] gives the slot back when the connection ends. A flood from
//! one address therefore costs at most `per_peer` slots, and everyone else still gets in.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// This address already holds its share.
    PerPeer,
    /// The process holds as many connections as it may.
    Total,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    by_peer: HashMap<IpAddr, usize>,
}

/// Per-address and total connection caps (cheap to clone; clones share the counts).
#[derive(Debug, Clone)]
pub struct ConnLimiter {
    per_peer: usize,
    total: usize,
    counts: Arc<Mutex<Counts>>,
}

/// A connection's slot; dropping it frees the slot.
#[derive(Debug)]
pub struct ConnPermit {
    peer: IpAddr,
    counts: Arc<Mutex<Counts>>,
}

impl ConnLimiter {
    /// At most `per_peer` connections per client address and `total` in all (each at least 1).
    pub fn new(per_peer: usize, total: usize) -> Self {
        ConnLimiter {
            per_peer: per_peer.max(1),
            total: total.max(1),
            counts: Arc::default(),
        }
    }

    /// Admit a connection from `peer`, or say why not.
    pub fn try_acquire(&self, peer: IpAddr) -> Result<ConnPermit, Refused> {
        let peer = canonical(peer);
        let mut counts = self.counts.lock().expect("connection counts lock");
        if counts.total >= self.total {
            return Err(Refused::Total);
        }
        let held = counts.by_peer.entry(peer).or_insert(0);
        if *held >= self.per_peer {
            return Err(Refused::PerPeer);
        }
        *held += 1;
        counts.total += 1;
        Ok(ConnPermit {
            peer,
            counts: self.counts.clone(),
        })
    }

    /// Connections held now (all addresses).
    pub fn held(&self) -> usize {
        self.counts.lock().expect("connection counts lock").total
    }
}

impl Drop for ConnPermit {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().expect("connection counts lock");
        counts.total = counts.total.saturating_sub(1);
        if let Some(held) = counts.by_peer.get_mut(&self.peer) {
            *held -= 1;
            if *held == 0 {
                counts.by_peer.remove(&self.peer);
            }
        }
    }
}

/// The whole HTTP/1.1 answer an HTTP port writes to a connection it does not admit: 503 with
/// `Retry-After: 1`, the error envelope, and `Connection: close`.
pub fn http_refusal(why: Refused) -> Vec<u8> {
    let (error, detail) = match why {
        Refused::PerPeer => (
            "too many connections from this address",
            "each client address may hold a limited number of connections ([api].max_connections_per_peer)",
        ),
        Refused::Total => (
            "too many connections",
            "the miner holds as many connections as it may ([api].max_connections)",
        ),
    };
    let body = format!(
        "{{\"error\":\"{error}\",\"detail\":\"{detail}\",\"code\":\"unclassified_error\",\"suggestion\":\"close idle connections and retry\"}}"
    );
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Answer a connection that was not admitted with [`http_refusal`] (bounded in time) and close.
pub fn refuse_http(mut stream: tokio::net::TcpStream, why: Refused) {
    use tokio::io::AsyncWriteExt;
    tokio::spawn(async move {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), async {
            stream.write_all(&http_refusal(why)).await?;
            stream.shutdown().await
        })
        .await;
    });
}

/// Accept the next connection the caps admit, answering the others with [`http_refusal`] on
/// the way; `None` once `shutdown` fires. The one admission step of the HTTP ports (gateway,
/// proxy): a failed accept (EMFILE and friends) backs off briefly instead of spinning.
pub async fn admit_http(
    listener: &tokio::net::TcpListener,
    limiter: &ConnLimiter,
    shutdown: &crate::Shutdown,
) -> Option<(tokio::net::TcpStream, std::net::SocketAddr, ConnPermit)> {
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.wait() => return None,
        };
        match limiter.try_acquire(peer.ip()) {
            Ok(slot) => return Some((stream, peer, slot)),
            Err(why) => {
                tracing::debug!(peer = %peer.ip(), ?why, "connection over the cap; refused");
                refuse_http(stream, why);
            }
        }
    }
}

/// IPv4-mapped IPv6 peers (a dual-stack listener) count as their IPv4 address.
fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_peer_and_total_caps_and_release() {
        let limiter = ConnLimiter::new(2, 3);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let a1 = limiter.try_acquire(a).unwrap();
        let _a2 = limiter
            .try_acquire("::ffff:10.0.0.1".parse().unwrap())
            .unwrap();
        assert_eq!(limiter.try_acquire(a).unwrap_err(), Refused::PerPeer);
        let _b1 = limiter.try_acquire(b).unwrap();
        assert_eq!(limiter.try_acquire(b).unwrap_err(), Refused::Total);
        assert_eq!(limiter.held(), 3);
        drop(a1);
        assert_eq!(limiter.held(), 2);
        let _b2 = limiter.try_acquire(b).unwrap();
        assert_eq!(limiter.try_acquire(b).unwrap_err(), Refused::Total);
    }
}
