//! The TCP side: one request per connection, answered from the snapshots, then closed.
//!
//! Connections are admitted by a [`ConnLimiter`] ([`svcos_common::connlimit`]): at most
//! `max_clients_per_peer` per client (an IPv6 client: its /64), more get a STATUS=E reply and
//! are closed; at `max_clients` (kept under the descriptor limit) a new connection is admitted
//! by closing the one that has waited longest without sending its request (allow-listed
//! addresses' last), so a flood from many addresses cannot keep a fleet tool or the owner out.
//! Reads are bounded in size ([`MAX_REQUEST`]) and time, so a slow or silent client only ever
//! holds its own slot for a bounded while.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use svcos_common::Shutdown;
use svcos_common::connlimit::ConnLimiter;
use svcos_common::connlimit::{ConnPermit, Refused};
use svcos_common::status::is_unavailable;
use svcos_proto::hwagent::v1::hw_agent_service_client::HwAgentServiceClient;
use svcos_proto::hwagent::v1::{SetChainEnabledRequest, SetFrequencyRequest};
use svcos_proto::stratum::v1::stratum_service_client::StratumServiceClient;
use svcos_proto::stratum::v1::{
    AddPoolRequest, RemovePoolRequest, SetPoolEnabledRequest, SetPoolPriorityRequest,
    SwitchPoolRequest,
};
use svcos_proto::supervisor::v1::ServiceRequest;
use svcos_proto::supervisor::v1::supervisor_service_client::SupervisorServiceClient;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::{Instant, timeout, timeout_at};
use tonic::transport::Channel;

use crate::allow::AllowList;
use crate::commands::{self, Action, ActionOutcome, Identity, Plan, View};
use crate::live::Live;
use crate::protocol::{self, Format, Frame, MAX_REQUEST, ParseError};
use crate::reply::{self, Reply, Response, Stamp, Status, code};

/// Bounds on one connection.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections held at once; at the cap, the one waiting longest for its request goes.
    pub max_clients: usize,
    /// Connections one client address may hold; more are closed at once.
    pub max_clients_per_peer: usize,
    /// Time a client has to deliver a complete request.
    pub read_timeout: Duration,
    /// Time a client has to take the reply.
    pub write_timeout: Duration,
    /// Largest request read.
    pub max_request: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_clients: 64,
            max_clients_per_peer: 8,
            // cgminer waits 10 s; fleet tools send at once, so 2 s is plenty and frees the
            // slot of a silent client sooner.
            read_timeout: Duration::from_secs(2),
            write_timeout: Duration::from_secs(2),
            max_request: MAX_REQUEST,
        }
    }
}

/// The gRPC clients privileged commands use. Channels connect lazily.
#[derive(Debug, Clone)]
pub struct Peers {
    /// hw-agent (ascset, ascenable, ascdisable).
    pub hw: HwAgentServiceClient<Channel>,
    /// stratum-agent (pool controls).
    pub stratum: StratumServiceClient<Channel>,
    /// The supervisor's control socket (restart).
    pub supervisor: SupervisorServiceClient<Channel>,
}

/// Everything a connection needs.
#[derive(Debug)]
pub struct Server {
    /// Latest snapshots.
    pub live: Live,
    /// Clients for privileged commands.
    pub peers: Peers,
    /// Who may run privileged commands.
    pub allow: AllowList,
    /// Per-connection bounds.
    pub limits: Limits,
    /// Firmware and board identity.
    pub identity: Identity,
    description: String,
}

impl Server {
    /// Assemble a server.
    pub fn new(
        live: Live,
        peers: Peers,
        allow: AllowList,
        limits: Limits,
        identity: Identity,
    ) -> Self {
        let description = identity.description();
        Server {
            live,
            peers,
            allow,
            limits,
            identity,
            description,
        }
    }

    /// Accept and answer connections until `shutdown`.
    pub async fn serve(
        self: Arc<Self>,
        listener: TcpListener,
        shutdown: Shutdown,
    ) -> std::io::Result<()> {
        let total = svcos_common::connlimit::fd_budget(self.limits.max_clients, 1);
        let limiter = ConnLimiter::new(self.limits.max_clients_per_peer, total);
        let refusals = Arc::new(Semaphore::new(REFUSALS_IN_FLIGHT));
        loop {
            let (stream, peer) = tokio::select! {
                r = listener.accept() => match r {
                    Ok(x) => x,
                    Err(e) => {
                        // EMFILE and friends: free a descriptor and back off instead of spinning.
                        let evicted = limiter.evict_idle();
                        tracing::warn!(error = %e, evicted, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                _ = shutdown.wait() => return Ok(()),
            };
            let slot = match limiter.try_acquire(peer.ip()) {
                Ok(slot) => slot,
                Err(why) => {
                    tracing::debug!(peer = %peer.ip(), ?why, "connection over the cap; refused");
                    self.refuse(stream, why, &refusals);
                    continue;
                }
            };
            if self.allow.privileged(peer.ip()) {
                slot.authenticated();
            }
            let server = self.clone();
            tokio::spawn(async move { server.connection(stream, peer, slot).await });
        }
    }

    /// Tell a connection beyond its address's share why it is closed (a cgminer STATUS=E, in
    /// JSON: nothing has been read to know the client's format), then close it. Each refusal
    /// holds its socket for at most [`REFUSAL_GRACE`]; while [`REFUSALS_IN_FLIGHT`] are
    /// pending, a flood's further connections are closed without a word, so refusing never
    /// costs more descriptors than serving.
    fn refuse(&self, mut stream: TcpStream, why: Refused, refusals: &Arc<Semaphore>) {
        let Ok(permit) = refusals.clone().try_acquire_owned() else {
            return;
        };
        let reply = self.encode(&Response::Single(over_cap(why)), Format::Json);
        tokio::spawn(async move {
            let _ = timeout(REFUSAL_GRACE, async {
                stream.write_all(&reply).await?;
                stream.shutdown().await?;
                // Unread request bytes at close make the kernel reset the connection, which
                // can destroy the reply before the client reads it.
                let mut sink = [0u8; 512];
                while stream.read(&mut sink).await? > 0 {}
                Ok::<_, std::io::Error>(())
            })
            .await;
            drop(permit);
        });
    }

    async fn connection(&self, mut stream: TcpStream, peer: SocketAddr, slot: ConnPermit) {
        let _ = stream.set_nodelay(true);
        // Evicted while still waiting for its request: closed without a word.
        let reply = tokio::select! {
            reply = self.read_and_answer(&mut stream, peer.ip(), &slot) => reply,
            () = slot.evicted() => None,
        };
        let Some(reply) = reply else {
            return;
        };
        let _ = timeout(self.limits.write_timeout, async {
            stream.write_all(&reply).await?;
            stream.shutdown().await
        })
        .await;
        drop(slot);
        // Closing with unread bytes makes the kernel send RST, which can destroy the reply
        // in flight (a client that sent a trailing newline after its JSON). Drain briefly.
        let mut sink = [0u8; 512];
        let _ = timeout(Duration::from_millis(200), async {
            let mut total = 0;
            while total < MAX_REQUEST {
                match stream.read(&mut sink).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => total += n,
                }
            }
        })
        .await;
    }

    /// Read one request and produce the bytes to send; `None` closes without a reply (the
    /// client sent no byte before the read timeout, so it may not even speak this protocol).
    /// A client that sent only blanks and closed its side is answered, as cgminer answers an
    /// empty request.
    async fn read_and_answer(
        &self,
        stream: &mut TcpStream,
        ip: IpAddr,
        slot: &ConnPermit,
    ) -> Option<Vec<u8>> {
        let mut buf: Vec<u8> = Vec::with_capacity(256);
        let mut chunk = [0u8; 2048];
        let deadline = Instant::now() + self.limits.read_timeout;
        let len = loop {
            match timeout_at(deadline, stream.read(&mut chunk)).await {
                Ok(Ok(0)) => break buf.len(),
                Err(_) => {
                    // Timeout: answer what arrived (truncated input gets an error).
                    if buf.is_empty() {
                        return None;
                    }
                    break buf.len();
                }
                Ok(Ok(n)) => {
                    buf.extend_from_slice(&chunk[..n]);
                    if let Frame::Complete(len) = protocol::frame(&buf) {
                        break len;
                    }
                    if buf.len() >= self.limits.max_request {
                        let format = protocol::guess_format(&buf);
                        tracing::debug!(%ip, "request too large");
                        let reply = too_large(format, self.limits.max_request);
                        return Some(self.encode(&Response::Single(reply), format));
                    }
                }
                Ok(Err(_)) => return None,
            }
        };
        // Answered from memory in microseconds: no unauthenticated share to enforce, but a
        // connection being answered is not evicted.
        let _busy = slot.busy(ip, true).ok();
        let bytes = &buf[..len.min(buf.len())];
        let request = match protocol::parse(bytes) {
            Ok(r) => r,
            Err(e) => {
                let format = protocol::guess_format(bytes);
                return Some(self.encode(&Response::Single(parse_error(e)), format));
            }
        };
        let privileged = self.allow.privileged(ip);
        let plan = {
            let telemetry = self.live.telemetry.borrow();
            let pools = self.live.pools.borrow();
            let inventory = self.live.inventory.borrow();
            let view = View {
                telemetry: telemetry.as_ref(),
                pools: pools.as_ref(),
                inventory: inventory.as_ref(),
                identity: &self.identity,
            };
            match commands::dispatch(&request, privileged, &view) {
                Plan::Done(response) => return Some(self.encode(&response, request.format)),
                Plan::Act(action) => action,
            }
        };
        tracing::info!(%ip, command = %request.command, "privileged command");
        let outcome = self.execute(&plan).await;
        let reply = commands::action_reply(&plan, &outcome);
        Some(self.encode(&Response::Single(reply), request.format))
    }

    fn encode(&self, response: &Response, format: Format) -> Vec<u8> {
        reply::encode(
            response,
            format,
            Stamp {
                when: svcos_common::time::unix_ms() / 1000,
                description: &self.description,
            },
        )
    }

    /// Carry out a privileged action over gRPC.
    async fn execute(&self, action: &Action) -> ActionOutcome {
        let result: Result<Option<u32>, tonic::Status> = match action.clone() {
            Action::SwitchPool { index, .. } => self
                .peers
                .stratum
                .clone()
                .switch_pool(SwitchPoolRequest { index })
                .await
                .map(|_| None),
            Action::SetPoolEnabled { index, enabled, .. } => self
                .peers
                .stratum
                .clone()
                .set_pool_enabled(SetPoolEnabledRequest { index, enabled })
                .await
                .map(|_| None),
            Action::AddPool {
                url,
                user,
                password,
            } => self
                .peers
                .stratum
                .clone()
                .add_pool(AddPoolRequest {
                    url,
                    user,
                    password,
                })
                .await
                .map(|r| Some(r.into_inner().index)),
            Action::RemovePool { index, .. } => self
                .peers
                .stratum
                .clone()
                .remove_pool(RemovePoolRequest { index })
                .await
                .map(|_| None),
            Action::PoolPriority { order } => self
                .peers
                .stratum
                .clone()
                .set_pool_priority(SetPoolPriorityRequest { order })
                .await
                .map(|_| None),
            Action::Restart => {
                let mut supervisor = self.peers.supervisor.clone();
                let mut result = Ok(None);
                for name in ["stratum-agent", "hw-agent"] {
                    if let Err(e) = supervisor
                        .restart(ServiceRequest {
                            name: name.to_string(),
                        })
                        .await
                    {
                        result = Err(e);
                        break;
                    }
                }
                result
            }
            Action::SetFrequency { chain_id, mhz, .. } => self
                .peers
                .hw
                .clone()
                .set_frequency(SetFrequencyRequest {
                    chain_id: Some(chain_id),
                    chip: None,
                    frequency_mhz: mhz,
                })
                .await
                .map(|_| None),
            Action::SetChainEnabled {
                chain_id, enabled, ..
            } => self
                .peers
                .hw
                .clone()
                .set_chain_enabled(SetChainEnabledRequest { chain_id, enabled })
                .await
                .map(|_| None),
        };
        match result {
            Ok(index) => ActionOutcome::Ok(index),
            Err(status) if is_unavailable(&status) => {
                ActionOutcome::Unavailable(status.message().to_string())
            }
            Err(status) if status.code() == tonic::Code::FailedPrecondition => {
                ActionOutcome::Precondition(status.message().to_string())
            }
            Err(status) => ActionOutcome::Refused(status.message().to_string()),
        }
    }
}

fn parse_error(e: ParseError) -> Reply {
    Reply::status(match e {
        ParseError::Empty => Status::error(code::INVCMD, "Invalid command: empty request"),
        ParseError::InvalidJson => Status::invalid_json(),
        ParseError::MissingCommand => Status::error(code::MISCMD, "Missing JSON 'command'"),
        ParseError::CommandNotString => Status::invalid_command(),
    })
}

/// Refusals of over-cap connections that may be pending at once.
const REFUSALS_IN_FLIGHT: usize = 256;
/// How long one refusal may hold its socket.
const REFUSAL_GRACE: Duration = Duration::from_millis(250);

fn over_cap(why: Refused) -> Reply {
    Reply::status(Status::error(
        code::ACCDENY,
        match why {
            Refused::PerPeer => {
                "Too many connections from this address; close idle connections and retry"
            }
            Refused::Total | Refused::Unauthenticated => "Too many connections; retry in a second",
        },
    ))
}

/// The code is what cgminer gives a request past its buffer (it parses the truncated bytes:
/// `Invalid JSON`, or an unknown plain command), so clients keyed on codes see cgminer's; the
/// message says what is actually wrong.
fn too_large(format: Format, max: usize) -> Reply {
    let msg = format!("Request too long: at most {max} bytes");
    Reply::status(match format {
        Format::Json => Status::error(code::INVJSON, msg),
        Format::Plain => Status::error(code::INVCMD, msg),
    })
}
