//! REST API, /ws, /mcp and /metrics on TCP 8080.

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

/// `svcos gateway`: the process entry.
pub fn entry(args: Vec<OsString>) -> ExitCode {
    let args = match svcos_common::entry::parse_args(ServiceName::Gateway, args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    run_service(ServiceName::Gateway, args, Flavor::CurrentThread, run)
}
