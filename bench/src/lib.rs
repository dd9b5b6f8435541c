//! Shared pieces of the benchmark binaries: latency samples and their summary, a keep-alive HTTP
//! client, a cgminer request, and a process's memory.

use std::time::Duration;

pub mod floor;

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One keep-alive HTTP/1.1 connection, requests sent one after another.
pub struct HttpClient {
    sender: SendRequest<Full<Bytes>>,
    host: String,
}

impl HttpClient {
    /// Connect (TCP_NODELAY, like a browser or a fleet tool).
    pub async fn connect(host: &str, port: u16) -> anyhow::Result<Self> {
        Self::connect_from(host, port, None).await
    }

    /// Connect from a chosen local address (a firmware that limits per client address sees
    /// distinct clients; on Linux every 127.x.y.z is a local address of `lo`).
    pub async fn connect_from(
        host: &str,
        port: u16,
        local: Option<std::net::IpAddr>,
    ) -> anyhow::Result<Self> {
        let stream = match local {
            None => tokio::net::TcpStream::connect((host, port))
                .await
                .with_context(|| format!("connect {host}:{port}"))?,
            Some(ip) => {
                let remote = tokio::net::lookup_host((host, port))
                    .await?
                    .find(|a| a.is_ipv4() == ip.is_ipv4())
                    .with_context(|| format!("no address of {host} in {ip}'s family"))?;
                let socket = if ip.is_ipv4() {
                    tokio::net::TcpSocket::new_v4()?
                } else {
                    tokio::net::TcpSocket::new_v6()?
                };
                socket.bind(std::net::SocketAddr::new(ip, 0))?;
                socket
                    .connect(remote)
                    .await
                    .with_context(|| format!("connect {remote} from {ip}"))?
            }
        };
        stream.set_nodelay(true)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        Ok(HttpClient {
            sender,
            host: format!("{host}:{port}"),
        })
    }

    async fn send(
        &mut self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> anyhow::Result<(u16, Bytes)> {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", &self.host);
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let body = match body {
            Some(b) => {
                req = req.header("content-type", "application/json");
                Full::new(Bytes::copy_from_slice(b.as_bytes()))
            }
            None => Full::new(Bytes::new()),
        };
        self.sender.ready().await?;
        let resp = self.sender.send_request(req.body(body)?).await?;
        let status = resp.status().as_u16();
        Ok((status, resp.into_body().collect().await?.to_bytes()))
    }

    /// GET `path`: (status, body).
    pub async fn get(&mut self, path: &str, token: Option<&str>) -> anyhow::Result<(u16, Bytes)> {
        self.send("GET", path, token, None).await
    }

    /// POST a JSON body without a token.
    pub async fn post(&mut self, path: &str, json: &str) -> anyhow::Result<(u16, Bytes)> {
        self.send("POST", path, None, Some(json)).await
    }

    /// DELETE with a token.
    pub async fn delete(&mut self, path: &str, token: &str) -> anyhow::Result<(u16, Bytes)> {
        self.send("DELETE", path, Some(token), None).await
    }
}

/// One cgminer API request on a new TCP connection, read to EOF (what pyasic does).
pub async fn cgminer_request(addr: &str, payload: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("connect {addr}"))?;
    s.set_nodelay(true)?;
    s.write_all(payload).await?;
    let mut buf = Vec::with_capacity(2048);
    s.read_to_end(&mut buf).await?;
    anyhow::ensure!(!buf.is_empty(), "empty cgminer reply from {addr}");
    Ok(buf)
}

/// One cgminer request's hops as the client sees them: TCP handshake done, first reply byte,
/// end of the reply (the server's FIN), each from the start.
#[derive(Debug, Clone, Copy)]
pub struct CgminerTimes {
    /// `connect` returned (SYN, SYN-ACK, ACK on loopback; the server has not run yet).
    pub connected: Duration,
    /// The first reply byte arrived (accept, read, parse, answer, write).
    pub first_byte: Duration,
    /// EOF: the server's half-close arrived after the whole reply.
    pub done: Duration,
}

/// [`cgminer_request`] with the time of each hop.
pub async fn cgminer_request_timed(
    addr: &str,
    payload: &[u8],
) -> anyhow::Result<(Vec<u8>, CgminerTimes)> {
    let start = std::time::Instant::now();
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("connect {addr}"))?;
    let connected = start.elapsed();
    s.set_nodelay(true)?;
    s.write_all(payload).await?;
    let mut buf = Vec::with_capacity(2048);
    let n = s.read_buf(&mut buf).await?;
    let first_byte = start.elapsed();
    if n > 0 {
        s.read_to_end(&mut buf).await?;
    }
    let done = start.elapsed();
    anyhow::ensure!(!buf.is_empty(), "empty cgminer reply from {addr}");
    Ok((
        buf,
        CgminerTimes {
            connected,
            first_byte,
            done,
        },
    ))
}

/// (PSS, RSS) of a process in KiB, from `/proc/<pid>/smaps_rollup`.
pub fn pss_kib(pid: u32) -> anyhow::Result<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .with_context(|| format!("smaps_rollup of {pid}"))?;
    let field = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Ok((field("Pss:"), field("Rss:")))
}

/// Latency samples of one benchmark run.
#[derive(Debug, Default)]
pub struct Samples {
    durations: Vec<Duration>,
}

impl Samples {
    /// Room for `n` samples.
    pub fn with_capacity(n: usize) -> Self {
        Samples {
            durations: Vec::with_capacity(n),
        }
    }

    /// Record one sample.
    pub fn push(&mut self, d: Duration) {
        self.durations.push(d);
    }

    /// How many samples.
    pub fn len(&self) -> usize {
        self.durations.len()
    }

    /// No samples yet.
    pub fn is_empty(&self) -> bool {
        self.durations.is_empty()
    }

    /// Merge another run's samples.
    pub fn extend(&mut self, other: Samples) {
        self.durations.extend(other.durations);
    }

    /// How many samples are `d` or longer.
    pub fn count_at_least(&self, d: Duration) -> usize {
        self.durations.iter().filter(|&&s| s >= d).count()
    }

    /// The `p`-th percentile (0..=100), nearest-rank.
    pub fn percentile(&mut self, p: f64) -> Duration {
        if self.durations.is_empty() {
            return Duration::ZERO;
        }
        self.durations.sort_unstable();
        let rank = ((p / 100.0) * self.durations.len() as f64).ceil() as usize;
        self.durations[rank.clamp(1, self.durations.len()) - 1]
    }

    /// Print `label: n, p50, p99, max` in microseconds, plus a rate if `wall` is given.
    pub fn report(&mut self, label: &str, wall: Option<Duration>) {
        let n = self.durations.len();
        let p50 = self.percentile(50.0);
        let p99 = self.percentile(99.0);
        let max = self.percentile(100.0);
        let rate = wall
            .map(|w| format!(", {:.0}/s", n as f64 / w.as_secs_f64()))
            .unwrap_or_default();
        println!(
            "{label}: n={n}, p50={:.1} us, p99={:.1} us, max={:.1} us{rate}",
            p50.as_secs_f64() * 1e6,
            p99.as_secs_f64() * 1e6,
            max.as_secs_f64() * 1e6
        );
    }
}

/// A PM QoS request on `/dev/cpu_dma_latency`, held for as long as the value lives.
///
/// The kernel keeps the request only while the file stays open, and an idle CPU then picks no
/// idle state whose exit latency exceeds it; 0 leaves only the polling state. This is what
/// cyclictest does by default. It matters on a virtual machine whose guest halt-polling is off
/// (the Firecracker VMs here boot with `haltpoll.guest_halt_poll_ns=0`): there every wake-up of an
/// idle vCPU is a VM exit and re-entry, which costs more than the firmware's own work on the
/// path. A control board's WFI wake-up is a few microseconds, so holding it measures the firmware
/// rather than the hypervisor. Benchmarks print whether they held it.
pub struct IdleLatencyHold {
    _file: std::fs::File,
}

impl IdleLatencyHold {
    /// Ask for idle exit latency ≤ `us` microseconds (needs write access to the device: root).
    pub fn hold(us: i32) -> anyhow::Result<Self> {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/cpu_dma_latency")
            .context("open /dev/cpu_dma_latency")?;
        // The device takes a binary s32 (a string would be parsed too; binary is unambiguous).
        file.write_all(&us.to_ne_bytes())
            .context("write /dev/cpu_dma_latency")?;
        Ok(IdleLatencyHold { _file: file })
    }
}

/// Hold the idle latency a benchmark was asked to, saying on stdout which it measured under.
pub fn hold_idle_latency(us: Option<i32>) -> anyhow::Result<Option<IdleLatencyHold>> {
    match us {
        Some(us) => {
            let hold = IdleLatencyHold::hold(us)?;
            println!("idle exit latency held at ≤ {us} µs (/dev/cpu_dma_latency)");
            Ok(Some(hold))
        }
        None => {
            println!("idle exit latency: the machine's default (no /dev/cpu_dma_latency request)");
            Ok(None)
        }
    }
}

/// Time the hypervisor ran something else on this machine's CPUs, summed over all of them
/// (`steal` in `/proc/stat`, in USER_HZ ticks); `None` off Linux or on a kernel without it.
pub fn steal_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines().next()?.split_whitespace().nth(8)?.parse().ok()
}

/// A one-line account of the steal time since `before` over `wall`: on a shared host, a run with
/// steal has tails that say more about the neighbours than about the firmware.
pub fn steal_report(before: Option<u64>, wall: Duration) -> String {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    match (before, steal_ticks()) {
        (Some(a), Some(b)) => {
            let stolen = b.saturating_sub(a) as f64 / hz;
            format!(
                "CPU steal during the run: {:.3} s of CPU time over {:.1} s ({:.2} % of one CPU)",
                stolen,
                wall.as_secs_f64(),
                100.0 * stolen / wall.as_secs_f64().max(1e-9)
            )
        }
        _ => "CPU steal during the run: not reported by this kernel".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut s = Samples::default();
        for ms in 1..=100 {
            s.push(Duration::from_millis(ms));
        }
        assert_eq!(s.percentile(50.0), Duration::from_millis(50));
        assert_eq!(s.percentile(99.0), Duration::from_millis(99));
        assert_eq!(s.percentile(100.0), Duration::from_millis(100));
        assert_eq!(s.count_at_least(Duration::from_millis(99)), 2);
        assert_eq!(s.count_at_least(Duration::from_millis(101)), 0);
    }
}
