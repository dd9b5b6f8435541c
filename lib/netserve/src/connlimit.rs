//! Connection caps for the TCP listeners (gateway 8080, proxy 80, legacy 4028).
//!
//! Without a cap one client holding thousands of idle connections uses up the process's file
//! descriptors (or every serving slot), and the owner's own browser waits. A [`ConnLimiter`]
//! applies four rules, so that neither one address, nor many, nor slow requests lock the owner
//! out:
//!
//! - **Per client** (`per_peer`): a client is its IPv4 address, or its IPv6 /64 ([`client_key`]:
//!   a host picks any address of its prefix, so a key per address would give it a fresh share
//!   per address). A client at its share is refused at once.
//! - **In total** (`total`, kept under the descriptor limit by [`fd_budget`]): at the total a new
//!   connection is admitted by closing another (eviction), chosen in this order: idle and not
//!   authenticated, then idle, then one whose requests in flight are all unauthenticated; least
//!   recently active first within each group. Flood connections are idle or unauthenticated
//!   and older than the owner's, so the owner gets in. A newcomer whose client already holds
//!   its fair share of the total (total / clients holding connections) is refused instead, so
//!   flooding addresses settle rather than evict each other in a loop; and when every connection
//!   is serving an authenticated request (or [`EVICT_SLACK`] evictions are still closing), any
//!   newcomer is refused.
//! - **Unauthenticated requests** (those naming no credential on a connection that never
//!   authenticated) may be in flight on at most half of the total and half of one client's share
//!   ([`ConnPermit::busy`]), so slow logins and uploads cannot take the slots an authenticated
//!   request needs.
//! - **Host-local connections** (the port-80 proxy's to the gateway) carry many clients' requests
//!   one after another, so the per-client share counts their requests in flight per forwarded
//!   client instead of the connection ([`ConnLimiter::try_acquire_host_local`]).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Descriptors kept out of every connection budget for what else a process opens: stdio, its
/// gRPC channels and socket, config and state files, the runtime's epoll and signal descriptors.
pub const RESERVED_FDS: usize = 64;
/// Evicted connections that may still be closing while new ones are admitted in their place.
pub const EVICT_SLACK: usize = 32;

/// Why a connection or request was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// This client already holds its share.
    PerPeer,
    /// The process holds as many connections as it may, none of which can be closed for this one.
    Total,
    /// Unauthenticated requests already hold their bounded share of the slots.
    Unauthenticated,
}

/// The key a client is counted under: an IPv4 address (IPv4-mapped IPv6 included) as is, an
/// IPv6 address as its /64 network (the login throttle keys on the same).
pub fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        },
        v4 => v4,
    }
}

/// The most connections worth admitting when each costs `fds_per_conn` descriptors: `wanted`,
/// or what the soft `RLIMIT_NOFILE` leaves after [`RESERVED_FDS`] and [`EVICT_SLACK`] if lower
/// (at least 1). Past that, `accept` itself would fail with EMFILE.
pub fn fd_budget(wanted: usize, fds_per_conn: usize) -> usize {
    let limit = match nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE) {
        Ok((soft, _)) if soft == nix::sys::resource::RLIM_INFINITY => usize::MAX,
        Ok((soft, _)) => usize::try_from(soft).unwrap_or(usize::MAX),
        // getrlimit cannot fail for a valid resource; assume the common default if it does.
        Err(_) => 1024,
    };
    let room = limit.saturating_sub(RESERVED_FDS + EVICT_SLACK) / fds_per_conn.max(1);
    wanted.min(room).max(1)
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    conns: HashMap<u64, Conn>,
    /// Connections per client (host-local connections are not counted here).
    by_client: HashMap<IpAddr, usize>,
    /// Requests in flight per forwarded client on host-local connections.
    requests: HashMap<IpAddr, usize>,
    /// Unauthenticated requests in flight, in all and per client.
    unauth: usize,
    unauth_by_client: HashMap<IpAddr, usize>,
    /// Connections evicted but not closed yet (still holding their descriptor).
    evicting: usize,
}

#[derive(Debug)]
struct Conn {
    /// `None` for a host-local connection (counted per request).
    client: Option<IpAddr>,
    busy: usize,
    busy_unauth: usize,
    authed: bool,
    /// Last time a request ended (or the connection was accepted).
    active_at: Instant,
    /// Last write progress, in ms since the limiter's epoch (an answer still going out counts).
    wrote: Arc<AtomicU64>,
    evicted: bool,
    kick: Arc<Notify>,
}

impl Conn {
    fn last_active(&self, epoch: Instant) -> Instant {
        let wrote = epoch + Duration::from_millis(self.wrote.load(Ordering::Relaxed));
        self.active_at.max(wrote)
    }

    /// Eviction order (lower goes first); `None` when it must not be evicted.
    fn eviction_group(&self) -> Option<u8> {
        match (self.busy, self.authed || self.client.is_none()) {
            _ if self.evicted => None,
            (0, false) => Some(0),
            (0, true) => Some(1),
            (busy, _) if busy == self.busy_unauth => Some(2),
            _ => None,
        }
    }
}

fn bump(map: &mut HashMap<IpAddr, usize>, key: IpAddr) {
    *map.entry(key).or_insert(0) += 1;
}

fn unbump(map: &mut HashMap<IpAddr, usize>, key: IpAddr) {
    if let Some(n) = map.get_mut(&key) {
        *n -= 1;
        if *n == 0 {
            map.remove(&key);
        }
    }
}

impl Inner {
    /// Mark the first connection in eviction order for closing; whether there was one.
    fn evict_one(&mut self, epoch: Instant) -> bool {
        if self.evicting >= EVICT_SLACK {
            return false;
        }
        let victim = self
            .conns
            .iter()
            .filter_map(|(id, c)| Some(((c.eviction_group()?, c.last_active(epoch)), *id)))
            .min()
            .map(|(_, id)| id);
        let Some(conn) = victim.and_then(|id| self.conns.get_mut(&id)) else {
            return false;
        };
        conn.evicted = true;
        conn.kick.notify_one();
        self.evicting += 1;
        true
    }
}

/// Per-client and total connection caps (cheap to clone; clones share the counts).
#[derive(Debug, Clone)]
pub struct ConnLimiter {
    per_peer: usize,
    total: usize,
    epoch: Instant,
    inner: Arc<Mutex<Inner>>,
}

/// A connection's slot; dropping it frees the slot.
#[derive(Debug)]
pub struct ConnPermit {
    id: u64,
    limiter: ConnLimiter,
    kick: Arc<Notify>,
    wrote: Arc<AtomicU64>,
}

/// A request in flight on a connection; dropping it makes the connection idle again.
#[derive(Debug)]
pub struct Busy {
    id: u64,
    limiter: ConnLimiter,
    /// The forwarded client whose request count this holds (host-local connections).
    request_of: Option<IpAddr>,
    /// The client an unauthenticated request counts under.
    unauth_of: Option<IpAddr>,
}

impl ConnLimiter {
    /// At most `per_peer` connections per client and `total` in all (each at least 1).
    pub fn new(per_peer: usize, total: usize) -> Self {
        ConnLimiter {
            per_peer: per_peer.max(1),
            total: total.max(1),
            epoch: Instant::now(),
            inner: Arc::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // No update spans a panic point, so a poisoned lock still holds consistent counts.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admit a connection from `peer`, or say why not.
    pub fn try_acquire(&self, peer: IpAddr) -> Result<ConnPermit, Refused> {
        self.admit(Some(client_key(peer)))
    }

    /// Admit a connection from this host itself (the port-80 proxy's to the gateway): only the
    /// total applies here; its requests count per client in [`ConnPermit::busy`].
    pub fn try_acquire_host_local(&self) -> Result<ConnPermit, Refused> {
        self.admit(None)
    }

    fn admit(&self, client: Option<IpAddr>) -> Result<ConnPermit, Refused> {
        let mut inner = self.lock();
        if let Some(key) = client
            && inner.by_client.get(&key).copied().unwrap_or(0) >= self.per_peer
        {
            return Err(Refused::PerPeer);
        }
        if inner.conns.len() - inner.evicting >= self.total {
            // A client already holding its fair share of the total is refused rather than
            // closing another's connection: many flooding addresses then settle at their
            // shares instead of evicting each other in a loop (which would also use up the
            // eviction slack the owner's newcomer needs).
            let fair = (self.total / inner.by_client.len().max(1)).max(1);
            let holds = client.map_or(0, |key| inner.by_client.get(&key).copied().unwrap_or(0));
            if holds >= fair || !inner.evict_one(self.epoch) {
                return Err(Refused::Total);
            }
        }
        let id = inner.next_id;
        inner.next_id += 1;
        let kick = Arc::new(Notify::new());
        let wrote = Arc::new(AtomicU64::new(0));
        inner.conns.insert(
            id,
            Conn {
                client,
                busy: 0,
                busy_unauth: 0,
                authed: false,
                active_at: Instant::now(),
                wrote: wrote.clone(),
                evicted: false,
                kick: kick.clone(),
            },
        );
        if let Some(key) = client {
            bump(&mut inner.by_client, key);
        }
        Ok(ConnPermit {
            id,
            limiter: self.clone(),
            kick,
            wrote,
        })
    }

    /// Close the connection first in eviction order (to free a descriptor after EMFILE).
    pub fn evict_idle(&self) -> bool {
        self.lock().evict_one(self.epoch)
    }

    /// Connections held now, evicted ones still closing included.
    pub fn held(&self) -> usize {
        self.lock().conns.len()
    }

    /// The total cap.
    pub fn total(&self) -> usize {
        self.total
    }
}

impl ConnPermit {
    /// Mark a request from `client` in flight until the [`Busy`] is dropped, or refuse it.
    /// `claims_auth`: the request names a credential (a false one is refused before its body
    /// is read, so it holds no slot for long). `client` is the forwarded client on a
    /// host-local connection; a counted connection's own client applies otherwise.
    pub fn busy(&self, client: IpAddr, claims_auth: bool) -> Result<Busy, Refused> {
        let l = &self.limiter;
        let mut inner = l.lock();
        let Some(conn) = inner.conns.get(&self.id) else {
            return Err(Refused::Total);
        };
        let host_local = conn.client.is_none();
        let key = conn.client.unwrap_or_else(|| client_key(client));
        // A shared (host-local) connection's earlier clients say nothing about this one.
        let unauth = !claims_auth && (host_local || !conn.authed);
        if host_local && inner.requests.get(&key).copied().unwrap_or(0) >= l.per_peer {
            return Err(Refused::PerPeer);
        }
        if unauth
            && (inner.unauth >= (l.total / 2).max(1)
                || inner.unauth_by_client.get(&key).copied().unwrap_or(0)
                    >= (l.per_peer / 2).max(1))
        {
            return Err(Refused::Unauthenticated);
        }
        let conn = inner.conns.get_mut(&self.id).expect("looked up above");
        conn.busy += 1;
        conn.busy_unauth += usize::from(unauth);
        if unauth {
            inner.unauth += 1;
            bump(&mut inner.unauth_by_client, key);
        }
        if host_local {
            bump(&mut inner.requests, key);
        }
        Ok(Busy {
            id: self.id,
            limiter: l.clone(),
            request_of: host_local.then_some(key),
            unauth_of: unauth.then_some(key),
        })
    }

    /// This connection served an authenticated request: it is evicted after unauthenticated
    /// ones, and its further requests count as authenticated.
    pub fn authenticated(&self) {
        if let Some(conn) = self.limiter.lock().conns.get_mut(&self.id) {
            conn.authed = true;
        }
    }

    /// Resolves once the limiter chose this connection for closing.
    pub async fn evicted(&self) {
        self.kick.notified().await;
    }

    /// When the connection has been idle for `timeout`; `None` while a request is in flight.
    pub fn idle_deadline(&self, timeout: Duration) -> Option<Instant> {
        let inner = self.limiter.lock();
        let conn = inner.conns.get(&self.id)?;
        (conn.busy == 0).then(|| conn.last_active(self.limiter.epoch) + timeout)
    }

    /// Whether a request is in flight.
    pub fn is_busy(&self) -> bool {
        let inner = self.limiter.lock();
        inner.conns.get(&self.id).is_some_and(|c| c.busy > 0)
    }

    /// Note that bytes of an answer went out (a client still downloading is not idle). Lock-free.
    pub fn note_write(&self) {
        let ms = u64::try_from(self.limiter.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.wrote.store(ms, Ordering::Relaxed);
    }
}

impl Drop for ConnPermit {
    fn drop(&mut self) {
        let mut inner = self.limiter.lock();
        if let Some(conn) = inner.conns.remove(&self.id) {
            if conn.evicted {
                inner.evicting -= 1;
            }
            if let Some(key) = conn.client {
                unbump(&mut inner.by_client, key);
            }
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let mut inner = self.limiter.lock();
        if let Some(key) = self.request_of {
            unbump(&mut inner.requests, key);
        }
        if let Some(key) = self.unauth_of {
            inner.unauth -= 1;
            unbump(&mut inner.unauth_by_client, key);
        }
        if let Some(conn) = inner.conns.get_mut(&self.id) {
            conn.busy -= 1;
            conn.busy_unauth -= usize::from(self.unauth_of.is_some());
            conn.active_at = Instant::now();
        }
    }
}

/// Marks a response to a request whose credential was verified (a response extension the
/// gateway's guard sets), so its connection is evicted after unauthenticated ones.
#[derive(Debug, Clone, Copy)]
pub struct Authenticated;

/// The error and detail of a refusal (the same words on every port).
pub fn refusal_text(why: Refused) -> (&'static str, &'static str) {
    match why {
        Refused::PerPeer => (
            "too many connections from this address",
            "each client address (an IPv6 client: its /64) may hold a limited number of connections ([api].max_connections_per_peer)",
        ),
        Refused::Total => (
            "too many connections",
            "the miner holds as many connections as it may ([api].max_connections); a client holding its share of them is refused rather than closing another's",
        ),
        Refused::Unauthenticated => (
            "too many requests without a token in progress",
            "requests without a token may hold at most half of the connections (half of one client's share), so the owner's requests always find a slot",
        ),
    }
}

/// The error envelope of a refusal, as JSON.
pub fn refusal_body(why: Refused) -> String {
    let (error, detail) = refusal_text(why);
    format!(
        "{{\"error\":\"{error}\",\"detail\":\"{detail}\",\"code\":\"unclassified_error\",\"suggestion\":\"close idle connections and retry\"}}"
    )
}

/// A refusal as a response of an HTTP port: 503 with `Retry-After: 1`, the error envelope, and
/// `Connection: close`.
pub fn refusal_response(why: Refused) -> hyper::Response<String> {
    hyper::Response::builder()
        .status(hyper::StatusCode::SERVICE_UNAVAILABLE)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .header(hyper::header::RETRY_AFTER, "1")
        .header(hyper::header::CONNECTION, "close")
        .body(refusal_body(why))
        .expect("a valid response")
}

/// The whole HTTP/1.1 answer an HTTP port writes to a connection it does not admit
/// ([`refusal_response`] as bytes).
pub fn http_refusal(why: Refused) -> Vec<u8> {
    let body = refusal_body(why);
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
        let _ = tokio::time::timeout(Duration::from_secs(1), async {
            stream.write_all(&http_refusal(why)).await?;
            stream.shutdown().await
        })
        .await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn clients_are_ipv4_addresses_and_ipv6_64s() {
        let table = [
            ("10.0.0.1", "10.0.0.1"),
            ("::ffff:10.0.0.1", "10.0.0.1"),
            ("2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::"),
            ("2001:db8:1:2::1", "2001:db8:1:2::"),
            ("2001:db8:1:3::1", "2001:db8:1:3::"),
            ("::1", "::"),
        ];
        for (addr, key) in table {
            assert_eq!(client_key(ip(addr)), ip(key), "{addr}");
        }
    }

    #[test]
    fn the_budget_stays_under_the_descriptor_limit() {
        let (soft, _) =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
        let room = usize::try_from(soft)
            .unwrap_or(usize::MAX)
            .saturating_sub(RESERVED_FDS + EVICT_SLACK);
        assert_eq!(fd_budget(usize::MAX, 1), room.max(1));
        assert_eq!(fd_budget(usize::MAX, 2), (room / 2).max(1));
        assert_eq!(fd_budget(7, 1), 7.min(room).max(1));
        assert_eq!(fd_budget(0, 1), 1);
    }

    #[tokio::test]
    async fn per_client_cap_counts_a_64_as_one_client() {
        let limiter = ConnLimiter::new(2, 100);
        let _a = limiter.try_acquire(ip("2001:db8::1")).unwrap();
        let _b = limiter.try_acquire(ip("2001:db8::2")).unwrap();
        assert_eq!(
            limiter.try_acquire(ip("2001:db8::ffff:3")).unwrap_err(),
            Refused::PerPeer
        );
        let _c = limiter.try_acquire(ip("2001:db8:0:1::1")).unwrap();
        let a1 = limiter.try_acquire(ip("10.0.0.1")).unwrap();
        let _a2 = limiter.try_acquire(ip("::ffff:10.0.0.1")).unwrap();
        assert_eq!(
            limiter.try_acquire(ip("10.0.0.1")).unwrap_err(),
            Refused::PerPeer
        );
        drop(a1);
        assert!(limiter.try_acquire(ip("10.0.0.1")).is_ok());
    }

    #[tokio::test]
    async fn at_the_total_idle_unauthenticated_connections_go_first_least_recent_first() {
        let limiter = ConnLimiter::new(10, 3);
        let owner = limiter.try_acquire(ip("10.0.0.1")).unwrap();
        owner.authenticated();
        let old = limiter.try_acquire(ip("10.0.0.2")).unwrap();
        tokio::time::sleep(Duration::from_millis(2)).await;
        let new = limiter.try_acquire(ip("10.0.0.3")).unwrap();
        // The owner's connection is the oldest, but it authenticated: `old` goes.
        let _d = limiter.try_acquire(ip("10.0.0.4")).unwrap();
        assert!(limiter.lock().conns[&old.id].evicted);
        assert!(!limiter.lock().conns[&owner.id].evicted);
        assert_eq!(limiter.held(), 4, "old holds its descriptor until closed");
        drop(old);
        // `new` had activity (an answer going out) after `_d` was accepted; `_d` goes.
        tokio::time::sleep(Duration::from_millis(2)).await;
        new.note_write();
        let _e = limiter.try_acquire(ip("10.0.0.5")).unwrap();
        assert!(limiter.lock().conns[&_d.id].evicted);
        assert!(!limiter.lock().conns[&new.id].evicted);
    }

    #[tokio::test]
    async fn at_the_total_a_client_holding_its_share_is_refused_not_evicting() {
        let limiter = ConnLimiter::new(10, 4);
        let flood: Vec<_> = (0..4)
            .map(|i| {
                limiter
                    .try_acquire(ip(&format!("10.0.0.{}", 1 + i % 2)))
                    .unwrap()
            })
            .collect();
        // Two clients, 2 each: each holds its share of 4.
        assert_eq!(
            limiter.try_acquire(ip("10.0.0.1")).unwrap_err(),
            Refused::Total
        );
        assert!(!limiter.lock().conns.values().any(|c| c.evicted));
        // A client holding nothing replaces the least recently active idle connection.
        let _owner = limiter.try_acquire(ip("10.0.0.9")).unwrap();
        assert!(limiter.lock().conns[&flood[0].id].evicted);
    }

    #[tokio::test]
    async fn an_authenticated_request_in_flight_is_never_evicted() {
        let limiter = ConnLimiter::new(10, 2);
        let a = limiter.try_acquire(ip("10.0.0.1")).unwrap();
        let b = limiter.try_acquire(ip("10.0.0.2")).unwrap();
        let _busy_a = a.busy(ip("10.0.0.1"), true).unwrap();
        let _busy_b = b.busy(ip("10.0.0.2"), false).unwrap();
        // b's request is unauthenticated (a slow login body): it goes, a stays.
        assert!(limiter.try_acquire(ip("10.0.0.3")).is_ok());
        assert!(limiter.lock().conns[&b.id].evicted);
        assert!(!limiter.lock().conns[&a.id].evicted);
        assert!(a.idle_deadline(Duration::from_secs(1)).is_none());
    }

    #[tokio::test]
    async fn refused_when_nothing_can_be_evicted_and_evictions_are_bounded() {
        let limiter = ConnLimiter::new(100, 1);
        let a = limiter.try_acquire(ip("10.0.0.1")).unwrap();
        let busy = a.busy(ip("10.0.0.1"), true).unwrap();
        assert_eq!(
            limiter.try_acquire(ip("10.0.0.2")).unwrap_err(),
            Refused::Total
        );
        drop(busy);
        let mut held = vec![a];
        for i in 0..EVICT_SLACK {
            let newcomer = ip(&format!("10.0.1.{i}"));
            held.push(limiter.try_acquire(newcomer).expect("one is evicted"));
        }
        assert_eq!(
            limiter.try_acquire(ip("10.0.0.3")).unwrap_err(),
            Refused::Total,
            "the slack is used up"
        );
        held.remove(0);
        assert!(limiter.try_acquire(ip("10.0.0.3")).is_ok());
    }

    #[tokio::test]
    async fn unauthenticated_requests_hold_at_most_half() {
        let limiter = ConnLimiter::new(4, 8);
        let conns: Vec<_> = (1..=4)
            .map(|i| limiter.try_acquire(ip(&format!("10.0.0.{i}"))).unwrap())
            .collect();
        // One client: half of its share of 4.
        let extra = limiter.try_acquire(ip("10.0.0.1")).unwrap();
        let _r1 = conns[0].busy(ip("10.0.0.1"), false).unwrap();
        let _r2 = extra.busy(ip("10.0.0.1"), false).unwrap();
        let third = limiter.try_acquire(ip("10.0.0.1")).unwrap();
        assert_eq!(
            third.busy(ip("10.0.0.1"), false).unwrap_err(),
            Refused::Unauthenticated
        );
        assert!(third.busy(ip("10.0.0.1"), true).is_ok(), "a token passes");
        // In all: half of 8.
        let _r3 = conns[1].busy(ip("10.0.0.2"), false).unwrap();
        let _r4 = conns[2].busy(ip("10.0.0.3"), false).unwrap();
        assert_eq!(
            conns[3].busy(ip("10.0.0.4"), false).unwrap_err(),
            Refused::Unauthenticated
        );
        // A connection that authenticated before is not asked again.
        conns[3].authenticated();
        assert!(conns[3].busy(ip("10.0.0.4"), false).is_ok());
    }

    #[tokio::test]
    async fn host_local_connections_count_requests_per_forwarded_client() {
        let limiter = ConnLimiter::new(2, 100);
        let pooled: Vec<_> = (0..5)
            .map(|_| limiter.try_acquire_host_local().unwrap())
            .collect();
        let _a1 = pooled[0].busy(ip("192.168.1.7"), true).unwrap();
        let a2 = pooled[1].busy(ip("192.168.1.7"), true).unwrap();
        assert_eq!(
            pooled[2].busy(ip("192.168.1.7"), true).unwrap_err(),
            Refused::PerPeer
        );
        let _b = pooled[2].busy(ip("192.168.1.8"), true).unwrap();
        drop(a2);
        assert!(pooled[3].busy(ip("192.168.1.7"), true).is_ok());
        // Being authenticated once does not make a shared connection's next client so.
        pooled[4].authenticated();
        let _u = pooled[4].busy(ip("192.168.1.9"), false).unwrap();
        assert_eq!(limiter.lock().unauth, 1);
    }
}
