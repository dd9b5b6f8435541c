//! `svcos <command> [args]`: one binary for the image, one process per service.
//!
//! The supervisor starts each service as `svcos <service> ...`; the service names its process
//! after itself, so `ps` and `top` show `hw-agent`, `gateway`, and so on.
//!
//! The simulator (`sim`, `hw-sim`, `test-pool`) is the default feature `sim`; the image is built
//! without it (`--no-default-features`), which keeps the simulated board, the test pool and its
//! Stratum V2 upstream out of the binary a miner runs.

use std::ffi::OsString;
use std::process::ExitCode;

#[cfg(feature = "sim")]
const USAGE: &str = "usage: svcos <command> [args]

run the whole firmware:
  supervisor      start and supervise every service (production)
  sim             run the whole stack on simulated hardware under --dir DIR
  ctl             talk to a running supervisor (status, restart)

services (normally started by the supervisor):
  hw-sim hw-agent stratum-agent tuner auth legacy-tcp gateway proxy test-pool
";

#[cfg(not(feature = "sim"))]
const USAGE: &str = "usage: svcos <command> [args]

run the whole firmware:
  supervisor      start and supervise every service (production)
  ctl             talk to a running supervisor (status, restart)

services (normally started by the supervisor):
  hw-agent stratum-agent tuner auth legacy-tcp gateway proxy

(built without the simulator: `sim`, `hw-sim` and `test-pool` need the `sim` feature)
";

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(command) = args.next() else {
        eprint!("{USAGE}");
        return ExitCode::from(64);
    };
    let rest: Vec<OsString> = args.collect();
    match command.to_string_lossy().as_ref() {
        "supervisor" => svcos_supervisor::entry(rest),
        "ctl" => svcos_supervisor::ctl_entry(rest),
        "hw-agent" => svcos_hw_agent::entry(rest),
        "stratum-agent" => svcos_stratum_agent::entry(rest),
        "tuner" => svcos_tuner::entry(rest),
        "auth" => svcos_auth::entry(rest),
        "legacy-tcp" => svcos_legacy_tcp::entry(rest),
        "gateway" => svcos_gateway::entry(rest),
        "proxy" => svcos_proxy::entry(rest),
        #[cfg(feature = "sim")]
        "sim" => svcos_supervisor::sim_entry(rest),
        #[cfg(feature = "sim")]
        "hw-sim" => svcos_hw_sim::entry(rest),
        #[cfg(feature = "sim")]
        "test-pool" => svcos_stratum_agent::test_pool_entry(rest),
        #[cfg(not(feature = "sim"))]
        sim @ ("sim" | "hw-sim" | "test-pool") => {
            eprintln!(
                "svcos: {sim}: this build has no simulator (built without the `sim` feature)"
            );
            ExitCode::from(64)
        }
        "-h" | "--help" | "help" => {
            print!("{USAGE}");
            ExitCode::SUCCESS
        }
        "--version" | "version" => {
            println!("svcos {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        other => {
            eprintln!("svcos: unknown command {other:?}\n\n{USAGE}");
            ExitCode::from(64)
        }
    }
}
