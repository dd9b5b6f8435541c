//! Home Assistant control: runs the MQTT commands (`[mqtt].commands`) the integrations task
//! receives.
//!
//! A command does not touch hardware or config by itself: [`svcos_integrations::commands::plan`]
//! names the REST write it mirrors, and this task runs that registry row in process
//! ([`crate::dispatch::call_internal`]) behind the row's own guard, as the internal caller
//! `mqtt`. So the command gets the route's validation, the mode rules and an audit entry
//! (session `internal:mqtt`), and the REST and MQTT paths cannot drift apart. A payload refused
//! before any route (not ON/OFF, a retained replay) is logged and audited as method `MQTT`.
//! Commands run one at a time, in arrival order.

use axum::http::Method;
use serde_json::Value;
use svcos_integrations::commands::{self, Command, CommandResult, Plan};

use crate::AppState;
use crate::dispatch;
use crate::guard::InternalCaller;
use crate::state::AuditEntry;

/// The caller name in the audit log (`internal:mqtt`).
const CALLER: InternalCaller = InternalCaller("mqtt");

/// Start the task (once per gateway state).
pub fn spawn(state: AppState) {
    let Some(mut rx) = state.integrations.take_commands() else {
        return;
    };
    let shutdown = state.shutdown.clone();
    tokio::spawn(async move {
        loop {
            let command = tokio::select! {
                _ = shutdown.wait() => return,
                c = rx.recv() => match c {
                    Some(c) => c,
                    None => return,
                },
            };
            let result = execute(&state, command).await;
            state.integrations.command_done(result);
        }
    });
}

/// Carry out one command and say how it went.
pub async fn execute(state: &AppState, command: Command) -> CommandResult {
    let at_ms = state.clock.now_ms();
    let mut result = CommandResult {
        schema: commands::RESULT_SCHEMA,
        entity: command.entity,
        payload: command.payload.clone(),
        ok: false,
        status: 400,
        route: None,
        error: None,
        at_ms,
    };
    match commands::plan(&command) {
        Plan::Refuse(reason) => {
            tracing::warn!(entity = ?command.entity, payload = %command.payload, %reason, "MQTT command refused");
            state
                .record_audit(AuditEntry {
                    timestamp_ms: at_ms,
                    method: "MQTT",
                    path: command.entity.audit_path(),
                    status: 400,
                    session_id: Some(format!("internal:{}", CALLER.0)),
                })
                .await;
            result.error = Some(reason);
        }
        Plan::Rest { method, path, body } => {
            let method = Method::from_bytes(method.as_bytes()).expect("a valid method name");
            let (status, answer) =
                dispatch::call_internal(state, CALLER, method, path, Some(&body)).await;
            result.status = status.as_u16();
            result.route = Some(path);
            match answer {
                Ok(_) => {
                    tracing::info!(entity = ?command.entity, payload = %command.payload, route = path, "MQTT command carried out");
                    result.ok = true;
                }
                Err(envelope) => {
                    let error = describe(&envelope);
                    tracing::warn!(entity = ?command.entity, payload = %command.payload, route = path, status = status.as_u16(), %error, "MQTT command refused by its route");
                    result.error = Some(error);
                }
            }
        }
    }
    result
}

/// The envelope's message and detail in one line.
fn describe(envelope: &Value) -> String {
    let error = envelope["error"].as_str().unwrap_or("refused");
    match envelope["detail"].as_str() {
        Some(detail) => format!("{error}: {detail}"),
        None => error.to_string(),
    }
}
