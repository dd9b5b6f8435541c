//! The pool client: Stratum V1 with failover and failback, donation scheduling, Stratum V2 behind a gate, and the sim's test pool.

pub mod testpool;
pub mod v1;

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

/// `svcos stratum-agent`: the process entry.
pub fn entry(args: Vec<OsString>) -> ExitCode {
    let args = match svcos_common::entry::parse_args(ServiceName::StratumAgent, args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    run_service(ServiceName::StratumAgent, args, Flavor::CurrentThread, run)
}

/// `svcos test-pool`: the Stratum V1 test pool (sim and tests).
pub fn test_pool_entry(args: Vec<OsString>) -> ExitCode {
    let args = match svcos_common::entry::parse_args(ServiceName::TestPool, args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    run_service(
        ServiceName::TestPool,
        args,
        Flavor::CurrentThread,
        run_test_pool,
    )
}

/// Run the test pool until `shutdown`.
pub async fn run_test_pool(
    ctx: ServiceContext,
    listener: UnixListener,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let _ = ctx;
    svcos_common::entry::serve_health_only(listener, shutdown).await
}
