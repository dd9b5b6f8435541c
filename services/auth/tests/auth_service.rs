//! The auth service library on a Unix socket in a temp dir, driven over gRPC exactly as the
//! gateway drives it, with a manual clock for every expiry.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use argon2::Params;
use svcos_auth::{AuthOptions, password, retry_after_s};
use svcos_common::config::AuthConfig;
use svcos_common::time::ManualClock;
use svcos_common::{Shutdown, ipc};
use svcos_proto::auth::v1 as pb;
use svcos_proto::auth::v1::auth_service_client::AuthServiceClient;
use svcos_proto::hwagent::v1 as hw;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status};

const T0: i64 = 1_750_000_000_000;
const HOUR_MS: i64 = 3600 * 1000;
const PASSWORD: &str = "correct horse battery";
/// How long a test waits for something asynchronous before failing (a bound, not a timing
/// assertion: on a loaded machine things simply take longer).
const PATIENCE: Duration = Duration::from_secs(20);

/// argon2id with tiny memory: most tests are about session rules and would otherwise spend
/// seconds hashing. `owasp_setup_and_login` covers the production parameters.
fn light() -> Params {
    Params::new(64, 1, 1, None).unwrap()
}

struct Running {
    client: AuthServiceClient<Channel>,
    shutdown: Shutdown,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Running {
    async fn stop(self) {
        self.shutdown.trigger();
        self.task.await.unwrap().unwrap();
    }
}

fn state_dir(root: &Path) -> PathBuf {
    root.join("state").join("auth")
}

fn hw_socket(root: &Path) -> PathBuf {
    root.join("run").join("hw-agent.sock")
}

async fn start_with(root: &Path, clock: &ManualClock, params: Params) -> Running {
    let socket = root.join("run").join("auth.sock");
    let listener = ipc::bind(&socket).unwrap();
    let shutdown = Shutdown::new();
    let options = AuthOptions {
        state_dir: state_dir(root),
        hw_agent_socket: hw_socket(root),
        config: AuthConfig::default(),
        clock: Arc::new(clock.clone()),
        hash_params: params,
    };
    let task = tokio::spawn(svcos_auth::run_with(options, listener, shutdown.clone()));
    // A patient deadline: with the production parameters one hash of a debug build on a busy
    // CI machine can outlast the usual 2 s call deadline, which is not what these tests test.
    let client = AuthServiceClient::new(ipc::channel_with_timeout(socket, PATIENCE));
    Running {
        client,
        shutdown,
        task,
    }
}

async fn start(root: &Path, clock: &ManualClock) -> Running {
    start_with(root, clock, light()).await
}

async fn setup(c: &mut AuthServiceClient<Channel>, password: &str, ip: &str) -> Result<(), Status> {
    c.setup(pb::SetupRequest {
        password: password.into(),
        client_ip: ip.into(),
    })
    .await
    .map(|_| ())
}

async fn login(
    c: &mut AuthServiceClient<Channel>,
    password: &str,
) -> Result<pb::CreateSessionResponse, Status> {
    c.create_session(pb::CreateSessionRequest {
        password: password.into(),
        client_ip: "192.168.1.20".into(),
        user_agent: "test".into(),
    })
    .await
    .map(Response::into_inner)
}

async fn validate(
    c: &mut AuthServiceClient<Channel>,
    token: &str,
) -> Result<pb::ValidateSessionResponse, Status> {
    c.validate_session(pb::ValidateSessionRequest {
        token: token.into(),
    })
    .await
    .map(Response::into_inner)
}

async fn password_set(c: &mut AuthServiceClient<Channel>) -> bool {
    c.get_status(pb::GetStatusRequest {})
        .await
        .unwrap()
        .into_inner()
        .password_set
}

fn code<T: std::fmt::Debug>(r: Result<T, Status>) -> Code {
    r.expect_err("expected an error").code()
}

#[tokio::test]
async fn owasp_setup_once_and_login_and_private_hash_file() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(T0);
    let mut auth = start_with(dir.path(), &clock, password::owasp_params()).await;
    let c = &mut auth.client;
    assert!(!password_set(c).await);
    assert_eq!(
        code(login(c, PASSWORD).await),
        Code::FailedPrecondition,
        "no password yet"
    );
    setup(c, PASSWORD, "10.0.0.1").await.unwrap();
    assert!(password_set(c).await);
    assert_eq!(
        code(setup(c, "another password", "10.0.0.1").await),
        Code::FailedPrecondition
    );

    let session = login(c, PASSWORD).await.unwrap();
    assert_eq!(session.expires_at_unix, (T0 + 30 * 24 * HOUR_MS) / 1000);
    assert_eq!(session.idle_expires_at_unix, (T0 + 8 * HOUR_MS) / 1000);
    assert_eq!(
        validate(c, &session.token).await.unwrap().session_id,
        session.session_id
    );
    assert_eq!(
        code(login(c, "correct horse battery!").await),
        Code::Unauthenticated
    );

    let phc_path = state_dir(dir.path()).join("password.phc");
    let phc = std::fs::read_to_string(&phc_path).unwrap();
    assert!(phc.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{phc}");
    assert!(!phc.contains(PASSWORD));
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&phc_path), 0o600);
    assert_eq!(mode(&state_dir(dir.path())), 0o700);
    assert_eq!(mode(&state_dir(dir.path()).join("sessions.json")), 0o600);
    let sessions = std::fs::read_to_string(state_dir(dir.path()).join("sessions.json")).unwrap();
    assert!(
        !sessions.contains(&session.token),
        "only token hashes are stored"
    );
    auth.stop().await;
}

#[tokio::test]
async fn setup_is_limited_to_three_per_minute_per_address() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(T0);
    let mut auth = start(dir.path(), &clock).await;
    let c = &mut auth.client;
    // Three rejected attempts (too short) still count.
    for _ in 0..3 {
        assert_eq!(
            code(setup(c, "short", "10.0.0.1").await),
            Code::InvalidArgument
        );
    }
    clock.advance_ms(15_000);
    let refused = setup(c, PASSWORD, "10.0.0.1").await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert_eq!(retry_after_s(&refused), Some(45));
    // Another address has its own budget.
    assert_eq!(
        code(setup(c, "short", "10.0.0.2").await),
        Code::InvalidArgument
    );
    // Once the window has passed the first address may try again.
    clock.advance_ms(45_000);
    setup(c, PASSWORD, "10.0.0.1").await.unwrap();
    assert!(password_set(c).await);
    auth.stop().await;
}

#[tokio::test]
async fn idle_expiry_and_use_moving_it() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(T0);
    let mut auth = start(dir.path(), &clock).await;
    let c = &mut auth.client;
    setup(c, PASSWORD, "10.0.0.1").await.unwrap();
    let used = login(c, PASSWORD).await.unwrap().token;
    let idle = login(c, PASSWORD).await.unwrap().token;
    clock.advance_ms(7 * HOUR_MS);
    let v = validate(c, &used).await.unwrap();
    assert_eq!(
        v.idle_expires_at_unix,
        (T0 + 15 * HOUR_MS) / 1000,
        "use moved idle expiry"
    );
    clock.advance_ms(HOUR_MS);
    // 8 h without use: gone; 1 h since its last use: fine.
    assert_eq!(code(validate(c, &idle).await), Code::Unauthenticated);
    validate(c, &used).await.unwrap();
    clock.advance_ms(8 * HOUR_MS);
    assert_eq!(code(validate(c, &used).await), Code::Unauthenticated);
    auth.stop().await;
}

#[tokio::test]
async fn absolute_expiry_after_thirty_days_however_active() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(T0);
    let mut auth = start(dir.path(), &clock).await;
    let c = &mut auth.client;
    setup(c, PASSWORD, "10.0.0.1").await.unwrap();
    let token = login(c, PASSWORD).await.unwrap().token;
    let end = T0 + 30 * 24 * HOUR_MS;
    let mut now = T0;
    while now + 6 * HOUR_MS < end {
        clock.advance_ms(6 * HOUR_MS);
        now += 6 * HOUR_MS;
        validate(c, &token).await.unwrap();
    }
    clock.advance_ms(end - now);
    assert_eq!(code(validate(c, &token).await), Code::Unauthenticated);
    auth.stop().await;
}

#[tokio::test]
async fn thirty_third_session_evicts_the_oldest_and_is_announced() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(T0);
    let mut auth = start(dir.path(), &clock).await;
    let c = &mut auth.client;
    setup(c, PASSWORD, "10.0.0.1").await.unwrap();
    let mut revocations = c
        .stream_revocations(pb::StreamRevocationsRequest {})
        .await
        .unwrap()
        .into_inner();
    let mut sessions = Vec::new();
    for _ in 0..32 {
        sessions.push(login(c, PASSWORD).await.unwrap());
        clock.advance_ms(1000);
    }
    let status = c
        .get_status(pb::GetStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(status.active_sessions, 32);
    let newest = login(c, PASSWORD).await.unwrap();
    assert_eq!(
        code(validate(c, &sessions[0].token).await),
        Code::Unauthenticated
    );
    validate(c, &sessions[1].token).await.unwrap();
    validate(c, &newest.token).await.unwrap();
    let event = revocations.message().await.unwrap().unwrap();
    assert_eq!(event.session_id, sessions[0].session_id);
    assert_eq!(event.reason, "evicted");
    auth.stop().await;
}

#[tokio::test]
async fn revoke_ends_only_that_session() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(T0);
    let mut auth = start(dir.path(), &clock).await;
    let c = &mut auth.client;
    setup(c, PASSWORD, "10.0.0.1").await.unwrap();
    let a = login(c, PASSWORD).await.unwrap();
    let b = login(c, PASSWORD).await.unwrap();
    let mut revocations = c
        .stream_revocations(pb::StreamRevocationsRequest {})
        .await
        .unwrap()
        .into_inner();
    c.revoke_session(pb::RevokeSessionRequest {
        token: a.token.clone(),
    })
    .await
    .unwrap();
    assert_eq!(code(validate(c, &a.token).await), Code::Unauthenticated);
    validate(c, &b.token).await.unwrap();
    let again = c
        .revoke_session(pb::RevokeSessionRequest {
            token: a.token.clone(),
        })
        .await;
    assert_eq!(code(again), Code::Unauthenticated);
    let event = revocations.message().await.unwrap().unwrap();
    assert_eq!(
        (event.session_id.as_str(), event.reason.as_str()),
        (a.session_id.as_str(), "revoked")
    );
    assert_eq!(code(validate(c, "").await), Code::Unauthenticated);
    assert_eq!(
        code(validate(c, "not-a-token").await),
        Code::Unauthenticated
    );
    auth.stop().await;
}

#[tokio::test]
async fn sessions_survive_a_restart_and_revocations_stay_revoked() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(T0);
    let mut auth = start(dir.path(), &clock).await;
    let c = &mut auth.client;
    setup(c, PASSWORD, "10.0.0.1").await.unwrap();
    let kept = login(c, PASSWORD).await.unwrap();
    let revoked = login(c, PASSWORD).await.unwrap();
    c.revoke_session(pb::RevokeSessionRequest {
        token: revoked.token.clone(),
    })
    .await
    .unwrap();
    clock.advance_ms(7 * HOUR_MS);
    validate(c, &kept.token).await.unwrap();
    auth.stop().await;

    let mut auth = start(dir.path(), &clock).await;
    let c = &mut auth.client;
    assert!(password_set(c).await);
    // 14 h after login, 7 h after the last use: alive only if the touch was persisted.
    clock.advance_ms(7 * HOUR_MS);
    let v = validate(c, &kept.token).await.unwrap();
    assert_eq!(v.session_id, kept.session_id);
    assert_eq!(
        code(validate(c, &revoked.token).await),
        Code::Unauthenticated
    );
    login(c, PASSWORD).await.unwrap();
    auth.stop().await;
}

#[tokio::test]
async fn session_file_is_only_ever_replaced_by_rename() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(T0);
    let sdir = state_dir(dir.path());
    // The temp file of a write interrupted by a crash: half a JSON document.
    std::fs::create_dir_all(&sdir).unwrap();
    std::fs::write(
        sdir.join(".sessions.json.tmp.4242"),
        b"{\"version\":1,\"sessions\":[{\"id\"",
    )
    .unwrap();

    let mut auth = start(dir.path(), &clock).await;
    let c = &mut auth.client;
    setup(c, PASSWORD, "10.0.0.1").await.unwrap();
    let first = login(c, PASSWORD).await.unwrap();
    let path = sdir.join("sessions.json");
    let before = std::fs::read(&path).unwrap();
    let inode_before = std::fs::metadata(&path).unwrap().ino();
    let mut held = std::fs::File::open(&path).unwrap();

    login(c, PASSWORD).await.unwrap();
    let inode_after = std::fs::metadata(&path).unwrap().ino();
    assert_ne!(
        inode_before, inode_after,
        "a new file was renamed into place"
    );
    // The old file was never written in place: a reader that opened it still sees it whole.
    let mut old = Vec::new();
    std::io::Read::read_to_end(&mut held, &mut old).unwrap();
    assert_eq!(old, before);
    let now: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(now["sessions"].as_array().unwrap().len(), 2);
    let leftovers: Vec<String> = std::fs::read_dir(&sdir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp."))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    validate(c, &first.token).await.unwrap();
    auth.stop().await;
}

#[tokio::test]
async fn ws_tickets_are_single_use_and_short_lived() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(T0);
    let mut auth = start(dir.path(), &clock).await;
    let c = &mut auth.client;
    setup(c, PASSWORD, "10.0.0.1").await.unwrap();
    let s = login(c, PASSWORD).await.unwrap();
    let issue = |c: &mut AuthServiceClient<Channel>, token: String| {
        let mut c = c.clone();
        async move {
            c.issue_ws_ticket(pb::IssueWsTicketRequest { token })
                .await
                .map(Response::into_inner)
        }
    };
    let redeem = |c: &mut AuthServiceClient<Channel>, ticket: String| {
        let mut c = c.clone();
        async move {
            c.redeem_ws_ticket(pb::RedeemWsTicketRequest { ticket })
                .await
                .map(Response::into_inner)
        }
    };
    assert_eq!(
        code(issue(c, "garbage".into()).await),
        Code::Unauthenticated
    );
    let t = issue(c, s.token.clone()).await.unwrap();
    assert_eq!(
        t.expires_at_unix,
        T0 / 1000 + i64::from(AuthConfig::default().ws_ticket_ttl_s)
    );
    assert_ne!(t.ticket, s.token);
    assert_eq!(
        redeem(c, t.ticket.clone()).await.unwrap().session_id,
        s.session_id
    );
    assert_eq!(
        code(redeem(c, t.ticket).await),
        Code::Unauthenticated,
        "second use"
    );

    let late = issue(c, s.token.clone()).await.unwrap();
    clock.advance_ms(i64::from(AuthConfig::default().ws_ticket_ttl_s) * 1000);
    assert_eq!(
        code(redeem(c, late.ticket).await),
        Code::Unauthenticated,
        "expired"
    );

    let orphan = issue(c, s.token.clone()).await.unwrap();
    c.revoke_session(pb::RevokeSessionRequest {
        token: s.token.clone(),
    })
    .await
    .unwrap();
    assert_eq!(
        code(redeem(c, orphan.ticket).await),
        Code::Unauthenticated,
        "session ended"
    );
    auth.stop().await;
}

/// A stand-in hw-agent that streams whatever the test sends on `events`.
#[derive(Clone)]
struct FakeHwAgent {
    events: broadcast::Sender<hw::HwEvent>,
}

type Stream<T> = Pin<Box<dyn futures::Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl hw::hw_agent_service_server::HwAgentService for FakeHwAgent {
    async fn get_telemetry(
        &self,
        _: Request<hw::GetTelemetryRequest>,
    ) -> Result<Response<hw::GetTelemetryResponse>, Status> {
        Err(Status::unimplemented("not in this fake"))
    }
    type StreamTelemetryStream = Stream<hw::Telemetry>;
    async fn stream_telemetry(
        &self,
        _: Request<hw::StreamTelemetryRequest>,
    ) -> Result<Response<Self::StreamTelemetryStream>, Status> {
        Err(Status::unimplemented("not in this fake"))
    }
    async fn get_inventory(
        &self,
        _: Request<hw::GetInventoryRequest>,
    ) -> Result<Response<hw::GetInventoryResponse>, Status> {
        Err(Status::unimplemented("not in this fake"))
    }
    type StreamEventsStream = Stream<hw::HwEvent>;
    async fn stream_events(
        &self,
        _: Request<hw::StreamEventsRequest>,
    ) -> Result<Response<Self::StreamEventsStream>, Status> {
        let mut rx = self.events.subscribe();
        let (tx, out) = tokio::sync::mpsc::channel(8);
        tokio::spawn(async move {
            while let Ok(ev) = rx.recv().await {
                if tx.send(Ok(ev)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(out))))
    }
    async fn set_fan(
        &self,
        _: Request<hw::SetFanRequest>,
    ) -> Result<Response<hw::SetFanResponse>, Status> {
        Err(Status::unimplemented("not in this fake"))
    }
    async fn set_frequency(
        &self,
        _: Request<hw::SetFrequencyRequest>,
    ) -> Result<Response<hw::SetFrequencyResponse>, Status> {
        Err(Status::unimplemented("not in this fake"))
    }
    async fn set_voltage(
        &self,
        _: Request<hw::SetVoltageRequest>,
    ) -> Result<Response<hw::SetVoltageResponse>, Status> {
        Err(Status::unimplemented("not in this fake"))
    }
    async fn set_power_target(
        &self,
        _: Request<hw::SetPowerTargetRequest>,
    ) -> Result<Response<hw::SetPowerTargetResponse>, Status> {
        Err(Status::unimplemented("not in this fake"))
    }
    async fn set_sleep(
        &self,
        _: Request<hw::SetSleepRequest>,
    ) -> Result<Response<hw::SetSleepResponse>, Status> {
        Err(Status::unimplemented("not in this fake"))
    }
    async fn set_led(
        &self,
        _: Request<hw::SetLedRequest>,
    ) -> Result<Response<hw::SetLedResponse>, Status> {
        Err(Status::unimplemented("not in this fake"))
    }
    async fn set_chain_enabled(
        &self,
        _: Request<hw::SetChainEnabledRequest>,
    ) -> Result<Response<hw::SetChainEnabledResponse>, Status> {
        Err(Status::unimplemented("not in this fake"))
    }
    async fn reload_config(
        &self,
        _: Request<hw::ReloadConfigRequest>,
    ) -> Result<Response<hw::ReloadConfigResponse>, Status> {
        Err(Status::unimplemented("not in this fake"))
    }
}

fn button(held_ms: u64, reset_hold: bool) -> hw::HwEvent {
    hw::HwEvent {
        timestamp_ms: T0,
        event: Some(hw::hw_event::Event::Button(hw::ButtonEvent {
            held_ms,
            released: false,
            reset_hold,
        })),
    }
}

async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let waited = tokio::time::timeout(PATIENCE, async {
        while !check().await {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "never happened: {what}");
}

#[tokio::test]
async fn reset_hold_from_hw_agent_clears_password_and_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(T0);
    // auth starts before hw-agent, as it may on a real boot: it must keep retrying.
    let mut auth = start(dir.path(), &clock).await;
    let c = &mut auth.client;
    setup(c, PASSWORD, "10.0.0.1").await.unwrap();
    let s = login(c, PASSWORD).await.unwrap();
    let mut revocations = c
        .stream_revocations(pb::StreamRevocationsRequest {})
        .await
        .unwrap()
        .into_inner();

    let (events, _) = broadcast::channel(8);
    let fake = FakeHwAgent {
        events: events.clone(),
    };
    let hw_shutdown = Shutdown::new();
    let hw_listener = ipc::bind(&hw_socket(dir.path())).unwrap();
    let hw_task = tokio::spawn(ipc::serve(
        ipc::server().add_service(hw::hw_agent_service_server::HwAgentServiceServer::new(fake)),
        hw_listener,
        hw_shutdown.clone(),
    ));
    eventually("auth subscribed to hw-agent events", || {
        let n = events.receiver_count();
        async move { n > 0 }
    })
    .await;

    // A short press and a hold still short of 15 s change nothing.
    events.send(button(2_000, false)).unwrap();
    events.send(button(14_000, false)).unwrap();
    events.send(button(15_000, true)).unwrap();
    let sdir = state_dir(dir.path());
    eventually("password cleared in memory and on disk", || {
        let mut c = c.clone();
        let phc = sdir.join("password.phc");
        async move { !password_set(&mut c).await && !phc.exists() }
    })
    .await;
    assert_eq!(code(validate(c, &s.token).await), Code::Unauthenticated);
    let event = revocations.message().await.unwrap().unwrap();
    assert_eq!(
        (event.session_id.as_str(), event.reason.as_str()),
        (s.session_id.as_str(), "password_reset")
    );
    let file: serde_json::Value =
        serde_json::from_slice(&std::fs::read(sdir.join("sessions.json")).unwrap()).unwrap();
    assert!(file["sessions"].as_array().unwrap().is_empty());
    // First-boot setup is possible again, with a new password.
    clock.advance_ms(60_000);
    setup(c, "a brand new password", "10.0.0.1").await.unwrap();
    assert_eq!(code(login(c, PASSWORD).await), Code::Unauthenticated);
    login(c, "a brand new password").await.unwrap();

    hw_shutdown.trigger();
    drop(events);
    hw_task.await.unwrap().unwrap();
    auth.stop().await;
}

#[tokio::test]
async fn validations_are_answered_while_a_burst_of_logins_hashes() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(T0);
    // Production parameters and one hash at a time, so the burst takes a while.
    let mut auth = start_with(dir.path(), &clock, password::owasp_params()).await;
    let c = &mut auth.client;
    setup(c, PASSWORD, "10.0.0.1").await.unwrap();
    let s = login(c, PASSWORD).await.unwrap();
    // One address each: parallel attempts from one address count as failures until their hash
    // is checked (the login throttle), which is not what this test is about. The logins wait
    // in line for eight hash-times, longer than the usual call deadline on a busy machine.
    let queued = AuthServiceClient::new(ipc::channel_with_timeout(
        dir.path().join("run").join("auth.sock"),
        Duration::from_secs(600),
    ));
    let logins: Vec<_> = (0..8)
        .map(|i| {
            let mut c = queued.clone();
            tokio::spawn(async move {
                login_from(&mut c, PASSWORD, &format!("10.0.1.{i}"))
                    .await
                    .map(|_| ())
            })
        })
        .collect();
    // Let the burst reach auth before validating.
    tokio::task::yield_now().await;
    for _ in 0..20 {
        validate(c, &s.token).await.unwrap();
    }
    // Ordering, not timing: the validations came back while hashes were still queued
    // (default max_concurrent_hashes is 1, so eight hashes take eight hash-times).
    let pending = logins.iter().filter(|h| !h.is_finished()).count();
    assert!(pending > 0, "all logins finished before 20 validations did");
    for h in logins {
        h.await.unwrap().unwrap();
    }
    auth.stop().await;
}

async fn login_from(
    c: &mut AuthServiceClient<Channel>,
    password: &str,
    ip: &str,
) -> Result<pb::CreateSessionResponse, Status> {
    c.create_session(pb::CreateSessionRequest {
        password: password.into(),
        client_ip: ip.into(),
        user_agent: "test".into(),
    })
    .await
    .map(Response::into_inner)
}

#[tokio::test]
async fn failed_logins_wait_longer_per_address_and_the_owner_gets_back_in() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(T0);
    let mut auth = start(dir.path(), &clock).await;
    let c = &mut auth.client;
    setup(c, PASSWORD, "10.0.0.1").await.unwrap();
    for _ in 0..5 {
        assert_eq!(
            code(login_from(c, "guess", "10.6.6.6").await),
            Code::Unauthenticated
        );
    }
    // The sixth failure starts a 1 s wait; during it even the right password is not checked.
    assert_eq!(
        code(login_from(c, "guess", "10.6.6.6").await),
        Code::Unauthenticated
    );
    let refused = login_from(c, PASSWORD, "10.6.6.6").await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert_eq!(retry_after_s(&refused), Some(1));
    // Another address is not affected.
    login_from(c, PASSWORD, "10.0.0.7").await.unwrap();
    // The waits grow and stop at 30 s.
    let mut waits = Vec::new();
    for _ in 0..7 {
        clock.advance_ms(30_000);
        assert_eq!(
            code(login_from(c, "guess", "10.6.6.6").await),
            Code::Unauthenticated
        );
        waits.push(retry_after_s(
            &login_from(c, "guess", "10.6.6.6").await.unwrap_err(),
        ));
    }
    assert_eq!(
        waits,
        [2, 4, 8, 16, 30, 30, 30].map(Some),
        "growing, capped"
    );
    // After the wait the owner's password works and clears the record.
    clock.advance_ms(30_000);
    login_from(c, PASSWORD, "10.6.6.6").await.unwrap();
    assert_eq!(
        code(login_from(c, "guess", "10.6.6.6").await),
        Code::Unauthenticated
    );
    login_from(c, PASSWORD, "10.6.6.6").await.unwrap();
    auth.stop().await;
}

#[tokio::test]
async fn a_damaged_hash_file_refuses_logins_with_503_across_restarts() {
    use svcos_common::statefile::{Damage, assert_quarantined};
    for damage in Damage::ALL {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::at(T0);
        let auth = start(dir.path(), &clock).await;
        let mut c = auth.client.clone();
        setup(&mut c, PASSWORD, "10.0.0.1").await.unwrap();
        auth.stop().await;
        let phc = state_dir(dir.path()).join("password.phc");
        let bad = damage.write(&phc);

        // Twice: the start that moves the file aside, and the restart after it.
        for start_no in 0..2 {
            let mut auth = start(dir.path(), &clock).await;
            let c = &mut auth.client;
            let err = login(c, PASSWORD).await.unwrap_err();
            assert_eq!(
                err.code(),
                Code::Unavailable,
                "{damage:?} #{start_no}: {err:?}"
            );
            assert!(
                !svcos_common::status::is_unavailable(&err),
                "{damage:?}: auth answered; this is not an outage"
            );
            let root = dir.path().to_string_lossy().to_string();
            assert!(
                !err.message().contains(&root) && !err.message().contains('/'),
                "{}",
                err.message()
            );
            assert!(err.message().contains("reset button"), "{}", err.message());
            // A damaged hash never reopens first-boot setup to whoever asks first.
            assert!(password_set(c).await, "{damage:?}");
            assert_eq!(
                code(setup(c, PASSWORD, "10.0.0.1").await),
                Code::FailedPrecondition,
                "{damage:?}"
            );
            auth.stop().await;
            assert_quarantined(&phc, &bad, &format!("{damage:?} #{start_no}"));
        }
    }
}

#[tokio::test]
async fn password_change_revokes_other_sessions_and_api_tokens_only_read() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(T0);
    let mut auth = start(dir.path(), &clock).await;
    let c = &mut auth.client;
    setup(c, PASSWORD, "10.0.0.1").await.unwrap();
    let mine = login(c, PASSWORD).await.unwrap();
    let other = login(c, PASSWORD).await.unwrap();

    let created = c
        .create_api_token(pb::CreateApiTokenRequest {
            token: mine.token.clone(),
            name: "home-assistant".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let ro = created.api_token.clone();
    let info = created.info.unwrap();
    assert!(ro.starts_with("svcro_"));
    let v = validate(c, &ro).await.unwrap();
    assert!(v.read_only && v.session_id == info.id, "{v:?}");
    assert!(!validate(c, &mine.token).await.unwrap().read_only);
    // An API token cannot make tokens or change the password.
    let denied = c
        .create_api_token(pb::CreateApiTokenRequest {
            token: ro.clone(),
            name: "more".into(),
        })
        .await;
    assert_eq!(code(denied), Code::PermissionDenied);
    let change = |token: &str, current: &str, new: &str| pb::ChangePasswordRequest {
        token: token.into(),
        current_password: current.into(),
        new_password: new.into(),
        client_ip: "10.0.0.1".into(),
    };
    assert_eq!(
        code(
            c.change_password(change(&ro, PASSWORD, "new password 1"))
                .await
        ),
        Code::PermissionDenied
    );
    assert_eq!(
        code(
            c.change_password(change(&mine.token, "wrong", "new password 1"))
                .await
        ),
        Code::Unauthenticated
    );
    assert_eq!(
        code(
            c.change_password(change(&mine.token, PASSWORD, "short"))
                .await
        ),
        Code::InvalidArgument
    );

    let mut revocations = c
        .stream_revocations(pb::StreamRevocationsRequest {})
        .await
        .unwrap()
        .into_inner();
    let r = c
        .change_password(change(&mine.token, PASSWORD, "new password 1"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.sessions_revoked, 1);
    let announced = tokio::time::timeout(PATIENCE, revocations.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(announced.session_id, validate_id(&other));
    assert_eq!(code(validate(c, &other.token).await), Code::Unauthenticated);
    validate(c, &mine.token).await.unwrap();
    validate(c, &ro).await.unwrap();
    assert_eq!(code(login(c, PASSWORD).await), Code::Unauthenticated);
    login(c, "new password 1").await.unwrap();

    // Tokens survive a restart (hashed on disk) and stop at revocation.
    auth.stop().await;
    let stored = std::fs::read_to_string(state_dir(dir.path()).join("api-tokens.json")).unwrap();
    assert!(!stored.contains(&ro[6..]), "only the hash is stored");
    let mut auth = start(dir.path(), &clock).await;
    let c = &mut auth.client;
    assert!(validate(c, &ro).await.unwrap().read_only);
    let listed = c
        .list_api_tokens(pb::ListApiTokensRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.tokens.len(), 1);
    c.revoke_api_token(pb::RevokeApiTokenRequest {
        id: info.id.clone(),
    })
    .await
    .unwrap();
    assert_eq!(code(validate(c, &ro).await), Code::Unauthenticated);
    assert_eq!(
        code(
            c.revoke_api_token(pb::RevokeApiTokenRequest { id: info.id })
                .await
        ),
        Code::NotFound
    );
    auth.stop().await;
}

fn validate_id(s: &pb::CreateSessionResponse) -> String {
    s.session_id.clone()
}
