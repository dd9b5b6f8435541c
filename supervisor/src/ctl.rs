//! `svcos ctl [--dir DIR] status [--json] | restart NAME | stop NAME | start NAME`: talks to the
//! supervisor over its Unix socket.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use serde::Serialize;

use svcos_common::{Layout, ServiceName, ipc};
use svcos_proto::supervisor::v1 as pb;
use svcos_proto::supervisor::v1::supervisor_service_client::SupervisorServiceClient;

/// Exit code when no supervisor answers (EX_UNAVAILABLE).
pub const EXIT_NOT_RUNNING: u8 = 69;
/// Exit code when the supervisor refused or failed the request.
pub const EXIT_FAILED: u8 = 1;

/// Deadline of a ctl call: a restart waits for the grace period and the new start.
const CTL_TIMEOUT: Duration = Duration::from_secs(60);

/// Command line of `svcos ctl`.
#[derive(Debug, Parser)]
#[command(name = "svcos ctl", about = "Control a running svcOS supervisor")]
pub struct CtlArgs {
    /// A sim instance's directory (as given to `svcos sim --dir`); production when absent.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub action: Action,
}

/// A ctl action.
#[derive(Debug, Subcommand)]
pub enum Action {
    /// Show every service.
    Status {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Restart a service (waits until it serves again).
    Restart {
        /// Service name, e.g. hw-agent.
        name: String,
    },
    /// Stop a service and keep it stopped.
    Stop {
        /// Service name.
        name: String,
    },
    /// Start a stopped or failed service.
    Start {
        /// Service name.
        name: String,
    },
}

/// One service in `status --json`.
#[derive(Debug, Serialize)]
pub struct StatusRow {
    /// Service name.
    pub name: String,
    /// starting, running, backoff, stopping, stopped or failed.
    pub state: &'static str,
    /// Current pid, null without a process.
    pub pid: Option<u32>,
    /// Restarts (automatic and requested), kept across supervisor restarts.
    pub restarts: u32,
    /// Seconds the current process has run.
    pub uptime_s: u64,
    /// How the previous process ended, null if none did.
    pub last_exit: Option<String>,
    /// Delay of the latest automatic restart, ms.
    pub backoff_ms: u64,
    /// Rung of the escalation ladder: none, restart-dependants, reboot, slow-retry.
    pub escalation: String,
    /// Automatic restarts inside the intensity window.
    pub recent_restarts: u32,
}

fn state_name(state: i32) -> &'static str {
    match pb::ServiceState::try_from(state).unwrap_or(pb::ServiceState::Unspecified) {
        pb::ServiceState::Starting => "starting",
        pb::ServiceState::Running => "running",
        pb::ServiceState::Backoff => "backoff",
        pb::ServiceState::Stopping => "stopping",
        pb::ServiceState::Stopped => "stopped",
        pb::ServiceState::Failed => "failed",
        pb::ServiceState::Unspecified => "unknown",
    }
}

/// Convert the wire form to a status row.
pub fn row(info: &pb::ServiceInfo) -> StatusRow {
    StatusRow {
        name: info.name.clone(),
        state: state_name(info.state),
        pid: (info.pid != 0).then_some(info.pid),
        restarts: info.restarts,
        uptime_s: info.uptime_s,
        last_exit: (!info.last_exit.is_empty()).then(|| info.last_exit.clone()),
        backoff_ms: info.backoff_ms,
        escalation: if info.escalation.is_empty() {
            "none".into()
        } else {
            info.escalation.clone()
        },
        recent_restarts: info.recent_restarts,
    }
}

/// Render rows as an aligned table.
pub fn table(rows: &[StatusRow]) -> String {
    let mut out = format!(
        "{:<14} {:<9} {:>8} {:>8} {:>9} {:>8}  {:<18} {}\n",
        "SERVICE", "STATE", "PID", "RESTARTS", "UPTIME", "BACKOFF", "ESCALATION", "LAST EXIT"
    );
    for r in rows {
        let pid = r.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into());
        out.push_str(&format!(
            "{:<14} {:<9} {:>8} {:>8} {:>8}s {:>6}ms  {:<18} {}\n",
            r.name,
            r.state,
            pid,
            r.restarts,
            r.uptime_s,
            r.backoff_ms,
            r.escalation,
            r.last_exit.as_deref().unwrap_or("-")
        ));
    }
    out
}

/// Run ctl with parsed arguments; returns the process exit code.
pub async fn run(args: CtlArgs) -> u8 {
    let layout = match &args.dir {
        Some(d) => Layout::sim(d),
        None => Layout::production(),
    };
    let socket = layout.socket(ServiceName::Supervisor);
    let not_running = || {
        eprintln!(
            "svcos ctl: no supervisor is running (nothing answers on {})",
            socket.display()
        );
        EXIT_NOT_RUNNING
    };
    if !socket.exists() {
        return not_running();
    }
    let mut client =
        SupervisorServiceClient::new(ipc::channel_with_timeout(socket.clone(), CTL_TIMEOUT));
    let (verb, name, result) = match &args.action {
        Action::Status { json } => {
            let resp = client.list_services(pb::ListServicesRequest {}).await;
            return match resp {
                Ok(r) => {
                    let rows: Vec<StatusRow> = r.into_inner().services.iter().map(row).collect();
                    let text = if *json {
                        serde_json::to_string_pretty(&rows).expect("rows serialise") + "\n"
                    } else {
                        table(&rows)
                    };
                    let _ = std::io::stdout().write_all(text.as_bytes());
                    0
                }
                Err(s) if s.code() == tonic::Code::Unavailable => not_running(),
                Err(s) => {
                    eprintln!("svcos ctl: {}", s.message());
                    EXIT_FAILED
                }
            };
        }
        Action::Restart { name } => (
            "restarted",
            name,
            client
                .restart(pb::ServiceRequest { name: name.clone() })
                .await,
        ),
        Action::Stop { name } => (
            "stopped",
            name,
            client.stop(pb::ServiceRequest { name: name.clone() }).await,
        ),
        Action::Start { name } => (
            "started",
            name,
            client
                .start(pb::ServiceRequest { name: name.clone() })
                .await,
        ),
    };
    match result {
        Ok(r) => {
            let info = r.into_inner().service.unwrap_or_default();
            match info.pid {
                0 => println!("{name}: {verb}"),
                pid => println!("{name}: {verb} (pid {pid})"),
            }
            0
        }
        Err(s) if s.code() == tonic::Code::Unavailable && !s.message().starts_with("svcos:") => {
            not_running()
        }
        Err(s) => {
            let msg = s.message().strip_prefix("svcos: ").unwrap_or(s.message());
            eprintln!("svcos ctl: {msg}");
            EXIT_FAILED
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_map_zero_pid_and_empty_exit_to_null() {
        let r = row(&pb::ServiceInfo {
            name: "auth".into(),
            state: pb::ServiceState::Stopped as i32,
            pid: 0,
            restarts: 2,
            uptime_s: 0,
            last_exit: String::new(),
            ..Default::default()
        });
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["pid"], serde_json::Value::Null);
        assert_eq!(v["last_exit"], serde_json::Value::Null);
        assert_eq!(v["state"], "stopped");
        assert_eq!(v["restarts"], 2);
        assert_eq!(v["escalation"], "none");
        assert_eq!(v["backoff_ms"], 0);
        assert!(table(&[r]).contains("auth"));
    }
}
