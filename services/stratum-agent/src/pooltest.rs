//! The TestPool RPC: connect, subscribe, authorise and wait for a job on a connection of its
//! own, timing each step, without touching the running pool connections.

use std::time::Duration;

use svcos_proto::stratum::v1::{TestPoolResponse, TestPoolStep};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::time::Instant;

use crate::transport::{PoolUrl, Scheme, Tls, connect};
use crate::v1::codec::{MAX_LINE, parse_line};
use crate::v1::session::{Session, SessionEvent, SessionParams};

/// Default overall budget when the request gives none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

struct Steps {
    started: Instant,
    steps: Vec<TestPoolStep>,
}

impl Steps {
    fn done(&mut self, name: &str, error: Option<String>) {
        let elapsed_ms = self.started.elapsed().as_secs_f64() * 1000.0;
        self.started = Instant::now();
        self.steps.push(TestPoolStep {
            name: name.into(),
            ok: error.is_none(),
            elapsed_ms,
            error: error.unwrap_or_default(),
        });
    }
}

/// Run the test. Never fails as an RPC: every problem is a failed step with a clear error.
pub async fn test_pool(
    url: &str,
    user: &str,
    password: &str,
    timeout: Duration,
    tls: &Tls,
    version_rolling: bool,
    sv2_enabled: bool,
) -> TestPoolResponse {
    let mut steps = Steps {
        started: Instant::now(),
        steps: Vec::new(),
    };
    let deadline = Instant::now() + timeout;
    let result = match PoolUrl::parse(url) {
        Ok(u) if u.scheme == Scheme::V2 && sv2_enabled => {
            run_v2(&mut steps, u, user, deadline, version_rolling).await
        }
        _ => {
            run(
                &mut steps,
                url,
                user,
                password,
                deadline,
                tls,
                version_rolling,
            )
            .await
        }
    };
    let error = result.err().unwrap_or_default();
    TestPoolResponse {
        ok: error.is_empty(),
        steps: steps.steps,
        error,
    }
}

async fn run(
    steps: &mut Steps,
    url: &str,
    user: &str,
    password: &str,
    deadline: Instant,
    tls: &Tls,
    version_rolling: bool,
) -> Result<(), String> {
    let parsed = match PoolUrl::parse(url) {
        Ok(u) if u.scheme != Scheme::V2 => u,
        Ok(_) => {
            let e = "stratum2 urls need the Stratum V2 stack, which is behind its readiness gate ([stratum].sv2_enabled = false)"
                .to_string();
            steps.done("connect", Some(e.clone()));
            return Err(e);
        }
        Err(e) => {
            steps.done("connect", Some(e.to_string()));
            return Err(e.to_string());
        }
    };
    let left = deadline.saturating_duration_since(Instant::now());
    let stream = match connect(&parsed, tls, left).await {
        Ok(s) => {
            steps.done("connect", None);
            s
        }
        Err(e) => {
            steps.done("connect", Some(e.to_string()));
            return Err(e.to_string());
        }
    };
    let (read, mut write) = tokio::io::split(stream);
    let mut reader = BufReader::new(read);
    let mut session = Session::new(SessionParams {
        user: user.into(),
        password: PoolUrl::login_password(url, password).into(),
        version_rolling,
        suggest_difficulty: 0.0,
        resume: None,
    });
    let mut out = String::new();
    for l in session.start() {
        out.push_str(&l);
    }
    if let Err(e) = write.write_all(out.as_bytes()).await {
        let e = format!("write: {e}");
        steps.done("subscribe", Some(e.clone()));
        return Err(e);
    }
    let mut phase = "subscribe";
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let read = tokio::time::timeout_at(deadline, async {
            let mut limited = tokio::io::AsyncReadExt::take(&mut reader, MAX_LINE as u64 + 1);
            limited.read_until(b'\n', &mut buf).await
        })
        .await;
        let error = match read {
            Err(_) => Some(format!(
                "no answer within the timeout while waiting for {phase}"
            )),
            Ok(Err(e)) => Some(format!("read: {e}")),
            Ok(Ok(0)) => Some(format!("pool closed the connection during {phase}")),
            Ok(Ok(_)) => None,
        };
        if let Some(e) = error {
            steps.done(phase, Some(e.clone()));
            return Err(e);
        }
        let Ok(msg) = parse_line(buf.trim_ascii()) else {
            continue;
        };
        for ev in session.handle(msg) {
            match ev {
                SessionEvent::Send(l) => {
                    let _ = write.write_all(l.as_bytes()).await;
                }
                SessionEvent::Subscribed { .. } if phase == "subscribe" => {
                    steps.done("subscribe", None);
                    phase = "authorize";
                }
                SessionEvent::Authorized if phase == "authorize" => {
                    steps.done("authorize", None);
                    phase = "job";
                }
                SessionEvent::Refused(reason) => {
                    steps.done(phase, Some(reason.clone()));
                    return Err(reason);
                }
                SessionEvent::Job(_) if phase == "job" => {
                    steps.done("job", None);
                    return Ok(());
                }
                _ => {}
            }
        }
    }
}

/// The Stratum V2 test: connect, Noise handshake against the URL's authority key,
/// SetupConnection, open an extended channel, wait for an active job.
async fn run_v2(
    steps: &mut Steps,
    url: PoolUrl,
    user: &str,
    deadline: Instant,
    version_rolling: bool,
) -> Result<(), String> {
    let fail = |steps: &mut Steps, name: &str, e: String| {
        steps.done(name, Some(e.clone()));
        Err(e)
    };
    let key = url
        .authority_key
        .clone()
        .ok_or_else(|| {
            "a stratum2+tcp:// URL needs the pool's authority key after the port".to_string()
        })
        .and_then(|b58| crate::v2::parse_authority_key(&b58).map(|k| (k, b58)));
    let (key, b58) = match key {
        Ok(k) => k,
        Err(e) => return fail(steps, "connect", e),
    };
    let addr = url.addr();
    let stream =
        match tokio::time::timeout_at(deadline, tokio::net::TcpStream::connect(&addr)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return fail(steps, "connect", format!("connect to {addr}: {e}")),
            Err(_) => return fail(steps, "connect", format!("connect to {addr}: timed out")),
        };
    steps.done("connect", None);
    let (read, write) = stream.into_split();
    let left = deadline.saturating_duration_since(Instant::now());
    let (mut reader, mut writer) =
        match crate::v2::noise::initiate(read, write, key, &b58, left).await {
            Ok(h) => h,
            Err(e) => return fail(steps, "handshake", e.to_string()),
        };
    steps.done("handshake", None);
    let mut session = crate::v2::session::Sv2Session::new(crate::v2::session::Sv2Params {
        user: user.into(),
        version_rolling,
        endpoint_host: url.host.clone(),
        endpoint_port: url.port,
        device_id: String::new(),
        work_selection: false,
    });
    let mut phase = "setup";
    let mut events = session.start(svcos_common::time::unix_ms());
    loop {
        for ev in events {
            match ev {
                SessionEvent::SendFrame(f) => {
                    if let Err(e) = writer.send(&f).await {
                        return fail(steps, phase, format!("write: {e}"));
                    }
                }
                SessionEvent::Authorized if phase == "open_channel" => {
                    steps.done("open_channel", None);
                    phase = "job";
                }
                SessionEvent::Refused(reason) => return fail(steps, phase, reason),
                SessionEvent::Job(_) if phase == "job" => {
                    steps.done("job", None);
                    return Ok(());
                }
                _ => {}
            }
        }
        if phase == "setup" && session.setup.is_some() {
            steps.done("setup", None);
            phase = "open_channel";
        }
        let frame = match tokio::time::timeout_at(deadline, reader.next()).await {
            Ok(Ok(f)) => f,
            Ok(Err(e)) => return fail(steps, phase, e.to_string()),
            Err(_) => {
                return fail(
                    steps,
                    phase,
                    format!("no answer within the timeout while waiting for {phase}"),
                );
            }
        };
        events = session.handle(&frame, svcos_common::time::unix_ms());
    }
}
