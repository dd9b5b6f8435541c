//! Fuzz the JSON request bodies of every write the REST gateway accepts, through the real router:
//! the guard (body limit, bearer, mode gating, the debug confirm rule), `parse_body` into each
//! handler's body type, and the handler's own validation and config writes.
//!
//! The gateway runs in process on a current-thread runtime, with a fake auth service that
//! accepts one token; every other peer (hw-agent, stratum-agent, tuner, supervisor) is absent,
//! so a handler that passes validation and calls one gets `Unavailable` (503). Routes whose
//! handler itself dials the network (fleet scan, solar/off-grid source tests, MQTT/webhook
//! tests) are left out: a fuzzer must not probe the LAN.
//!
//! Input: a first line naming the route (`POST /api/config`; any other line picks a route by
//! its byte sum, so mutations still land somewhere), then the body. Before each input the
//! config goes back to the same base (Hacker mode, so every route is reachable), so a finding
//! reproduces from its input alone.
//!
//! Invariants: nothing panics; no 5xx except 501 on planned routes and 503 (a peer is down);
//! whenever the gateway saved a config, the file on disk loads with `Config::load` (what every
//! service does at start) and equals the gateway's in-memory copy.
#![no_main]

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::OnceLock;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use libfuzzer_sys::fuzz_target;
use svcos_common::config::{Config, Mode};
use svcos_common::time::{Clock, SystemClock};
use svcos_common::{Layout, ServiceName, Shutdown, ipc};
use svcos_gateway::registry::{self, Support};
use svcos_proto::auth::v1 as auth;
use tonic::{Request as GrpcRequest, Response as GrpcResponse, Status};
use tower::ServiceExt;

const TOKEN: &str = "fuzz-token";

/// Routes whose handler reaches out to the network by itself.
const DIALS_OUT: &[&str] = &[
    "/api/fleet/discover",
    "/api/solar/test",
    "/api/offgrid/test",
    "/api/config/mqtt/test",
    "/api/config/webhook/test",
];

struct Stack {
    rt: tokio::runtime::Runtime,
    app: axum::Router,
    state: svcos_gateway::AppState,
    base: Config,
    writes: Vec<(Method, String, Support)>,
    _dir: tempfile::TempDir,
}

#[derive(Clone)]
struct FakeAuth;

type Revocations =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<auth::Revocation, Status>> + Send>>;

#[tonic::async_trait]
impl auth::auth_service_server::AuthService for FakeAuth {
    async fn get_status(
        &self,
        _: GrpcRequest<auth::GetStatusRequest>,
    ) -> Result<GrpcResponse<auth::GetStatusResponse>, Status> {
        Ok(GrpcResponse::new(auth::GetStatusResponse {
            password_set: true,
            active_sessions: 1,
        }))
    }
    async fn setup(
        &self,
        _: GrpcRequest<auth::SetupRequest>,
    ) -> Result<GrpcResponse<auth::SetupResponse>, Status> {
        Err(Status::failed_precondition("a password is already set"))
    }
    async fn create_session(
        &self,
        _: GrpcRequest<auth::CreateSessionRequest>,
    ) -> Result<GrpcResponse<auth::CreateSessionResponse>, Status> {
        Err(Status::unauthenticated("wrong password"))
    }
    async fn validate_session(
        &self,
        r: GrpcRequest<auth::ValidateSessionRequest>,
    ) -> Result<GrpcResponse<auth::ValidateSessionResponse>, Status> {
        if r.get_ref().token != TOKEN {
            return Err(Status::unauthenticated("unknown token"));
        }
        let now = SystemClock.now_ms() / 1000;
        Ok(GrpcResponse::new(auth::ValidateSessionResponse {
            session_id: "fuzz-session".into(),
            expires_at_unix: now + 86_400,
            idle_expires_at_unix: now + 86_400,
            read_only: false,
        }))
    }
    async fn revoke_session(
        &self,
        _: GrpcRequest<auth::RevokeSessionRequest>,
    ) -> Result<GrpcResponse<auth::RevokeSessionResponse>, Status> {
        Ok(GrpcResponse::new(auth::RevokeSessionResponse {}))
    }
    async fn issue_ws_ticket(
        &self,
        _: GrpcRequest<auth::IssueWsTicketRequest>,
    ) -> Result<GrpcResponse<auth::IssueWsTicketResponse>, Status> {
        Ok(GrpcResponse::new(auth::IssueWsTicketResponse {
            ticket: "fuzz-ticket".into(),
            expires_at_unix: SystemClock.now_ms() / 1000 + 30,
        }))
    }
    async fn redeem_ws_ticket(
        &self,
        _: GrpcRequest<auth::RedeemWsTicketRequest>,
    ) -> Result<GrpcResponse<auth::RedeemWsTicketResponse>, Status> {
        Err(Status::unauthenticated("unknown ticket"))
    }
    async fn change_password(
        &self,
        _: GrpcRequest<auth::ChangePasswordRequest>,
    ) -> Result<GrpcResponse<auth::ChangePasswordResponse>, Status> {
        Err(Status::unauthenticated("wrong password"))
    }
    async fn create_api_token(
        &self,
        _: GrpcRequest<auth::CreateApiTokenRequest>,
    ) -> Result<GrpcResponse<auth::CreateApiTokenResponse>, Status> {
        Err(Status::resource_exhausted(
            "at most 16 API tokens may exist",
        ))
    }
    async fn list_api_tokens(
        &self,
        _: GrpcRequest<auth::ListApiTokensRequest>,
    ) -> Result<GrpcResponse<auth::ListApiTokensResponse>, Status> {
        Ok(GrpcResponse::new(auth::ListApiTokensResponse {
            tokens: vec![],
        }))
    }
    async fn revoke_api_token(
        &self,
        _: GrpcRequest<auth::RevokeApiTokenRequest>,
    ) -> Result<GrpcResponse<auth::RevokeApiTokenResponse>, Status> {
        Err(Status::not_found("no API token with that id"))
    }
    type StreamStatusStream =
        Pin<Box<dyn tokio_stream::Stream<Item = Result<auth::GetStatusResponse, Status>> + Send>>;
    async fn stream_status(
        &self,
        _: GrpcRequest<auth::StreamStatusRequest>,
    ) -> Result<GrpcResponse<Self::StreamStatusStream>, Status> {
        // No snapshot: the gateway then asks GetStatus, as while auth restarts.
        Ok(GrpcResponse::new(Box::pin(tokio_stream::pending())))
    }
    type StreamRevocationsStream = Revocations;
    async fn stream_revocations(
        &self,
        _: GrpcRequest<auth::StreamRevocationsRequest>,
    ) -> Result<GrpcResponse<Self::StreamRevocationsStream>, Status> {
        Ok(GrpcResponse::new(Box::pin(tokio_stream::pending())))
    }
}

fn stack() -> &'static Stack {
    static STACK: OnceLock<Stack> = OnceLock::new();
    STACK.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        // tmpfs when there is one: config writes fsync, and the fuzzer makes thousands.
        let dir = tempfile::tempdir_in("/dev/shm")
            .or_else(|_| tempfile::tempdir())
            .expect("temp dir");
        let layout = Layout::sim(dir.path());
        std::fs::create_dir_all(&layout.runtime_dir).expect("runtime dir");
        std::fs::create_dir_all(&layout.state_dir).expect("state dir");
        let mut base = Config::default();
        base.system.mode = Mode::Hacker;
        let (app, state) = rt.block_on(async {
            let shutdown = Shutdown::new();
            let listener = ipc::bind(&layout.socket(ServiceName::Auth)).expect("auth socket");
            let svc = auth::auth_service_server::AuthServiceServer::new(FakeAuth);
            tokio::spawn(ipc::serve(
                ipc::server().add_service(svc),
                listener,
                shutdown.clone(),
            ));
            let clock: std::sync::Arc<dyn Clock> = std::sync::Arc::new(SystemClock);
            let state = svcos_gateway::state::Inner::start(layout, base.clone(), clock, shutdown);
            // Let the revocation stream connect, so validations are cached like in production.
            for _ in 0..200 {
                if state.sessions.is_live() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            (svcos_gateway::router(state.clone()), state)
        });
        let writes = registry::metas()
            .iter()
            .filter(|m| m.mutates() && !DIALS_OUT.contains(&m.path))
            .map(|m| {
                let path = m
                    .path
                    .split('/')
                    .map(|s| if s.starts_with(':') { "0" } else { s })
                    .collect::<Vec<_>>()
                    .join("/");
                (m.method.clone(), path, m.support)
            })
            .collect();
        Stack {
            rt,
            app,
            state,
            base,
            writes,
            _dir: dir,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let stack = stack();
    let (head, body) = match data.iter().position(|b| *b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let named = stack
        .writes
        .iter()
        .position(|(m, p, _)| head == format!("{m} {p}").as_bytes());
    let pick = named.unwrap_or_else(|| {
        head.iter().map(|b| usize::from(*b)).sum::<usize>() % stack.writes.len()
    });
    let (method, path, support) = &stack.writes[pick];
    let generation = stack.state.config_at().1;
    stack.state.set_config(stack.base.clone(), generation);
    // A file on disk afterwards means this input saved it.
    let _ = std::fs::remove_file(&stack.state.layout.config_path);
    let mut req = Request::builder()
        .method(method.clone())
        .uri(path.as_str())
        .header(header::HOST, "127.0.0.1")
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_vec()))
        .expect("request");
    req.extensions_mut()
        .insert(ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40000))));
    let (status, text) = stack.rt.block_on(async {
        let resp = stack.app.clone().oneshot(req).await.expect("infallible");
        let status = resp.status();
        let bytes = resp.into_body().collect().await.map(|b| b.to_bytes());
        (
            status,
            bytes.map(|b| String::from_utf8_lossy(&b).into_owned()),
        )
    });
    let text = text.unwrap_or_else(|e| panic!("{method} {path}: body error {e}"));
    let allowed_5xx = status == StatusCode::SERVICE_UNAVAILABLE
        || (status == StatusCode::NOT_IMPLEMENTED && *support == Support::Planned);
    assert!(
        !status.is_server_error() || allowed_5xx,
        "{method} {path} answered {status}: {text}\nbody: {}",
        String::from_utf8_lossy(body)
    );
    if status.is_success() {
        let path = &stack.state.layout.config_path;
        if path.exists() {
            let on_disk = Config::load(path)
                .unwrap_or_else(|e| panic!("{method} {path:?}: saved config does not load: {e}"));
            assert_eq!(
                on_disk.to_toml(),
                stack.state.config().to_toml(),
                "the saved file is what the gateway uses"
            );
        }
    }
});
