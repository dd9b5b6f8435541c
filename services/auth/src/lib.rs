//! auth: the only holder of the password hash and the session table.
//!
//! # Design
//! - **Password.** First-boot setup stores an argon2id hash (m = 19456 KiB, t = 2, p = 1, see
//!   [`password::owasp_params`]) as a PHC string in `password.phc` under auth's state
//!   directory (dir 0700, file 0600). Setup is refused (`FAILED_PRECONDITION`) once a hash
//!   exists and is limited to 3 attempts per 60 s per client address (`RESOURCE_EXHAUSTED`,
//!   seconds to wait in the `retry-after` metadata key, [`error::RETRY_AFTER_METADATA`]).
//!   Only the physical reset (hw-agent's `ButtonEvent.reset_hold`) deletes it.
//! - **Hashing off the runtime.** argon2 runs on tokio's blocking pool behind a semaphore of
//!   `[auth].max_concurrent_hashes`, at nice 19, so the single runtime thread keeps validating
//!   tokens while logins hash, and a burst of logins does not starve the gateway.
//! - **Sessions.** 256-bit tokens from the OS RNG; only their SHA-256 is kept, compared in
//!   constant time. 30-day absolute and 8-hour idle expiry; at most 32, the 33rd evicts the
//!   oldest ([`sessions`]). Creation and revocation are written (atomically, by rename) before
//!   the call returns, so a crash logs nobody out and never revives a revoked token; idle
//!   touches only mark the table dirty and are flushed every [`TOUCH_FLUSH_INTERVAL`] and at
//!   shutdown, so validation does no I/O.
//! - **Revocations.** `StreamRevocations` announces every session that ends (revoked, evicted,
//!   expired when noticed, password_reset) so the gateway may cache validations until the
//!   `expires_at`/`idle_expires_at` it was given; a reader that lags gets `ABORTED` and must
//!   drop its cache and resubscribe.
//! - **WebSocket tickets.** One-time, `[auth].ws_ticket_ttl_s` long, in memory only.
//! - **Password change.** `ChangePassword` with the caller's owner session and the current
//!   password (wrong guesses count in the per-address login throttle); every other session is
//!   revoked and announced. **Failed logins** are throttled per client address: five free,
//!   then 1 s, 2 s, 4 s ... capped at 30 s ([`ratelimit::LoginThrottle`]).
//! - **API tokens.** Read-only, long-lived credentials an owner creates, lists and revokes
//!   ([`apitokens`], `api-tokens.json`, SHA-256 only, at most 16). `ValidateSession` accepts them
//!   with `read_only = true` and no expiry; the gateway refuses every write made with one.
//!
//! # gRPC status codes (the gateway's HTTP mapping in brackets)
//! | Call | Code | When |
//! |---|---|---|
//! | Setup | FAILED_PRECONDITION [409] | a password exists |
//! | Setup | RESOURCE_EXHAUSTED [429 + Retry-After from `retry-after`] | 4th attempt in 60 s |
//! | Setup | INVALID_ARGUMENT [400] | password rules |
//! | CreateSession | UNAUTHENTICATED [401] | wrong password |
//! | CreateSession | FAILED_PRECONDITION [409] | no password yet |
//! | Validate/Revoke/IssueWsTicket | UNAUTHENTICATED [401] | missing, expired, evicted, revoked |
//! | RedeemWsTicket | UNAUTHENTICATED [401] | unknown, used, expired ticket or ended session |
//! | CreateSession/ChangePassword | RESOURCE_EXHAUSTED [429 + Retry-After] | login throttle |
//! | ChangePassword/CreateApiToken | PERMISSION_DENIED [403] | presented with an API token |
//! | CreateApiToken | RESOURCE_EXHAUSTED [429] | 16 tokens exist |
//! | RevokeApiToken | NOT_FOUND [404] | unknown id |
//! | any | UNAVAILABLE | auth is shutting down |
//! | any | INTERNAL | state files unreadable or unwritable |

pub mod apitokens;
pub mod error;
pub mod grpc;
pub mod password;
pub mod ratelimit;
pub mod reset;
pub mod sessions;
pub mod state;
pub mod store;
pub mod tickets;

use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use svcos_common::entry::{Flavor, ServiceContext, run_service};
use svcos_common::time::SystemClock;
use svcos_common::{ServiceName, Shutdown, ipc};
use svcos_proto::auth::v1::auth_service_server::AuthServiceServer;
use tokio::net::UnixListener;

pub use error::{AuthError, RETRY_AFTER_METADATA, retry_after_s};
pub use grpc::AuthGrpc;
pub use state::{Auth, AuthOptions};

/// How often idle touches are written to disk at most. A crash loses at most this much of a
/// session's recorded activity: it may idle-expire this much earlier, never later.
pub const TOUCH_FLUSH_INTERVAL: Duration = Duration::from_secs(60);

impl AuthOptions {
    /// The production options for a service context: its state dir, hw-agent's socket, the
    /// `[auth]` section, the system clock and the OWASP argon2id parameters.
    pub fn from_context(ctx: &ServiceContext) -> Self {
        AuthOptions {
            state_dir: ctx.layout.service_state_dir(ServiceName::Auth),
            hw_agent_socket: ctx.layout.socket(ServiceName::HwAgent),
            config: ctx.config.auth.clone(),
            clock: Arc::new(SystemClock),
            hash_params: password::owasp_params(),
        }
    }
}

/// Run the service until `shutdown`, serving gRPC (with health) on `listener`.
pub async fn run(
    ctx: ServiceContext,
    listener: UnixListener,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    run_with(AuthOptions::from_context(&ctx), listener, shutdown).await
}

/// [`run`] with explicit options (tests inject a manual clock and cheaper hash parameters).
pub async fn run_with(
    options: AuthOptions,
    listener: UnixListener,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let hw_agent_socket = options.hw_agent_socket.clone();
    let auth = Auth::open(options).context("cannot open the auth state")?;
    let reset = reset::spawn(auth.clone(), hw_agent_socket, shutdown.clone());
    let flusher = tokio::spawn({
        let auth = auth.clone();
        let shutdown = shutdown.clone();
        async move {
            let mut tick = tokio::time::interval(TOUCH_FLUSH_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = shutdown.wait() => return,
                }
                if let Err(e) = auth.flush().await {
                    tracing::error!(error = %e, "cannot write session activity");
                }
            }
        }
    });
    let router = ipc::server().add_service(AuthServiceServer::new(AuthGrpc::new(
        auth.clone(),
        shutdown.clone(),
    )));
    let served = ipc::serve(router, listener, shutdown.clone()).await;
    shutdown.trigger();
    auth.close();
    let _ = reset.await;
    let _ = flusher.await;
    // The last idle touches, so a clean restart loses nothing.
    auth.flush()
        .await
        .context("cannot write the session table at shutdown")?;
    served.context("auth gRPC server failed")?;
    Ok(())
}

/// `svcos auth`: the process entry.
pub fn entry(args: Vec<OsString>) -> ExitCode {
    let args = match svcos_common::entry::parse_args(ServiceName::Auth, args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    run_service(ServiceName::Auth, args, Flavor::CurrentThread, run)
}
