//! Password hash (argon2id), sessions and WebSocket tickets.

use std::ffi::OsString;
use std::process::ExitCode;

use svcos_common::entry::{Flavor, ServiceContext, run_service};
use svcos_common::{ServiceName, Shutdown};
use tokio::net::UnixListener;

/// Run the service until `shutdown`, serving gRPC (with health) on `listener`.
pub async fn run(
    ctx: ServiceContext,
    listener: UnixListener,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let _ = ctx;
    svcos_common::entry::serve_health_only(listener, shutdown).await
}

/// `svcos auth`: the process entry.
pub fn entry(args: Vec<OsString>) -> ExitCode {
    let args = match svcos_common::entry::parse_args(ServiceName::Auth, args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    run_service(ServiceName::Auth, args, Flavor::CurrentThread, run)
}
