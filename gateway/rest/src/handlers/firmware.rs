//! Firmware update and restore-to-stock.
//!
//! The gateway's part is small on purpose: stream an uploaded RAUC bundle to disk (size-limited,
//! progress visible as phase `receiving`), then make one call to the supervisor's
//! `UpdateService`, which verifies, installs, reboots and rolls back (see the supervisor's
//! `update` module). Status routes report the supervisor's persisted state machine, with the
//! upload in flight layered on top.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use futures::StreamExt;
use serde::Deserialize;
use svcos_api_types::firmware::{PreflightBody, UpdateStatusBody};
use svcos_api_types::requests::RestoreToStockRequest;
use svcos_common::{ServiceName, ipc};
use svcos_proto::supervisor::v1 as pb;
use svcos_proto::supervisor::v1::update_service_client::UpdateServiceClient;
use tokio::io::AsyncWriteExt;

use super::{ApiResult, parse_body};
use crate::envelope::{ApiError, ErrorCode};
use crate::routing::{MAX_BUNDLE_BYTES, Route};
use crate::{AppState, route};

/// Deadline of the install call: verification plus writing the slot.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Deadline of status and preflight calls.
const STATUS_TIMEOUT: Duration = Duration::from_secs(20);
/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(POST "/api/system/restore-to-stock", Bearer, P, Identity, Full, "Restore the stock firmware (runs the preflight checks first)", restore, req: svcos_api_types::requests::RestoreToStockRequest, res: svcos_api_types::firmware::UpdateStatusBody),
        route!(POST "/api/system/restore-to-stock/preflight", Bearer, P, Identity, Full, "Run the restore-to-stock checks now", preflight, res: svcos_api_types::firmware::PreflightBody),
        route!(GET "/api/system/restore-to-stock/preflight-checks", Bearer, P, Identity, Full, "The restore-to-stock checks", preflight, res: svcos_api_types::firmware::PreflightBody),
        route!(GET "/api/system/restore-to-stock/status", Bearer, P, Identity, Full, "Restore-to-stock state machine", status, res: svcos_api_types::firmware::UpdateStatusBody),
        route!(GET "/api/system/update/status", Bearer, P, Identity, Full, "Firmware update state machine and slots", status, res: svcos_api_types::firmware::UpdateStatusBody),
        route!(POST "/api/system/upgrade", Bearer, P, Identity, Full, "Upload a signed RAUC bundle and install it", upload, res: svcos_api_types::firmware::UpdateStatusBody),
        route!(GET "/api/system/upgrade/status", Bearer, P, Identity, Full, "Firmware update state machine and slots", status, res: svcos_api_types::firmware::UpdateStatusBody),
        route!(POST "/api/v1/firmware/update", Bearer, P, Identity, Full, "Upload a signed RAUC bundle and install it", upload, res: svcos_api_types::firmware::UpdateStatusBody),
        route!(GET "/api/v1/firmware/update/status", Bearer, P, Identity, Full, "Firmware update state machine and slots", status, res: svcos_api_types::firmware::UpdateStatusBody),
        route!(POST "/api/v1/system/upgrade", Bearer, P, Identity, Full, "Upload a signed RAUC bundle and install it", upload, res: svcos_api_types::firmware::UpdateStatusBody),
        route!(GET "/api/v1/system/upgrade/status", Bearer, P, Identity, Full, "Firmware update state machine and slots", status, res: svcos_api_types::firmware::UpdateStatusBody),
    ]
}

/// The upload in flight, if any (one at a time).
#[derive(Debug, Default)]
pub struct Uploads {
    current: Mutex<Option<Receiving>>,
    next_id: std::sync::atomic::AtomicU64,
}

#[derive(Debug, Clone, Copy)]
struct Receiving {
    received: u64,
    expected: Option<u64>,
}

/// Clears the in-flight upload when the handler ends, however it ends.
struct Claim<'a>(&'a Uploads);

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        *self.0.current.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

impl Uploads {
    fn claim(&self, expected: Option<u64>) -> Option<Claim<'_>> {
        let mut cur = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if cur.is_some() {
            return None;
        }
        *cur = Some(Receiving {
            received: 0,
            expected,
        });
        Some(Claim(self))
    }

    fn progress(&self, received: u64) {
        if let Some(r) = self
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            r.received = received;
        }
    }

    fn snapshot(&self) -> Option<Receiving> {
        *self.current.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Where uploads land: the gateway's state directory (the supervisor only accepts bundles from
/// there).
pub fn upload_dir(state: &AppState) -> PathBuf {
    state
        .layout
        .service_state_dir(ServiceName::Gateway)
        .join("uploads")
}

fn client(state: &AppState, timeout: Duration) -> UpdateServiceClient<tonic::transport::Channel> {
    UpdateServiceClient::new(ipc::channel_with_timeout(
        state.layout.socket(ServiceName::Supervisor),
        timeout,
    ))
}

async fn status(State(state): State<AppState>) -> ApiResult {
    let s = crate::supervisor::update_status(&state).await?;
    let receiving = state
        .group_state(Uploads::default)
        .snapshot()
        .map(|r| (r.received, r.expected));
    Ok(Json(UpdateStatusBody::new(&s, receiving)).into_response())
}

/// A refusal from the supervisor, with its code as the envelope's `refusal` member.
fn refused(status: &tonic::Status) -> ApiError {
    let refusal = status
        .metadata()
        .get("svcos-refusal")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut e = ApiError::from_grpc("supervisor", status);
    if let Some(code) = refusal {
        e = e
            .code(ErrorCode::UnclassifiedError)
            .with("refusal", code.clone())
            .suggestion(match code.as_str() {
                "wrong_key" => "sign the bundle with a key whose certificate is in the keyring",
                "bad_digest" => "the bundle was altered after signing; rebuild and re-sign it",
                "truncated" => {
                    "the file ends early: upload the complete .raucb file again (check its size \
                     against the original)"
                }
                "not_a_bundle" => {
                    "this file is not a svcOS firmware bundle: choose the signed .raucb file \
                     built for this miner"
                }
                "unsafe_image" => "copy the image file into the bundle (a link is never followed)",
                "wrong_model" => "use the bundle built for this model",
                "downgrade" => "add ?force=true to install an older version on purpose",
                "busy" => {
                    "wait for the running update to finish (GET /api/v1/firmware/update/status)"
                }
                "preflight_failed" => {
                    "GET /api/system/restore-to-stock/preflight-checks shows what failed"
                }
                _ => "GET /api/v1/firmware/update/status for the state machine",
            });
    }
    e
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct UploadQuery {
    /// Allow a downgrade.
    #[serde(default)]
    force: Option<bool>,
}

fn upload_error(status: StatusCode, refusal: &str, error: impl Into<String>) -> ApiError {
    ApiError::new(status, error)
        .code(ErrorCode::UnclassifiedError)
        .with("refusal", refusal)
}

async fn upload(
    State(state): State<AppState>,
    Query(query): Query<UploadQuery>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    let force = query.force.unwrap_or(false);
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    if content_type.starts_with("multipart/") || content_type.starts_with("application/json") {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "send the .raucb file as the raw request body",
        )
        .code(ErrorCode::UnclassifiedError)
        .suggestion("Content-Type: application/octet-stream, body = the bundle"));
    }
    let expected = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if expected.is_some_and(|n| n > MAX_BUNDLE_BYTES) {
        return Err(upload_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("bundles are limited to {MAX_BUNDLE_BYTES} bytes"),
        ));
    }
    let uploads = state.group_state(Uploads::default);
    let Some(_claim) = uploads.claim(expected) else {
        return Err(upload_error(
            StatusCode::CONFLICT,
            "busy",
            "another bundle is being uploaded",
        ));
    };
    let dir = upload_dir(&state);
    let io = |e: std::io::Error| {
        if e.kind() == std::io::ErrorKind::StorageFull {
            upload_error(
                StatusCode::INSUFFICIENT_STORAGE,
                "no_space",
                "not enough space to receive the bundle",
            )
        } else {
            tracing::error!(error = %e, "cannot store an upload");
            ApiError::internal("cannot store the upload")
        }
    };
    tokio::fs::create_dir_all(&dir).await.map_err(io)?;
    let id = uploads
        .next_id
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let part = dir.join(format!("upload-{}-{id}.part", std::process::id()));
    let done = dir.join(format!("upload-{}-{id}.raucb", std::process::id()));
    let received = receive(&state, body, &part, expected).await;
    let received = match received {
        Ok(n) => n,
        Err(e) => {
            let _ = tokio::fs::remove_file(&part).await;
            return Err(e);
        }
    };
    tracing::info!(
        bytes = received,
        force,
        "bundle received; handing it to the supervisor"
    );
    tokio::fs::rename(&part, &done).await.map_err(io)?;
    drop(_claim);
    let answer = client(&state, INSTALL_TIMEOUT)
        .install_bundle(pb::InstallBundleRequest {
            bundle_path: done.to_string_lossy().into_owned(),
            force,
        })
        .await;
    // The supervisor moved it into its staging area; a leftover means it never got there.
    let _ = tokio::fs::remove_file(&done).await;
    let s = answer.map_err(|s| refused(&s))?.into_inner();
    Ok(Json(UpdateStatusBody::new(&s, None)).into_response())
}

/// Stream the body into `part`; refuses oversize and cut-short uploads.
async fn receive(
    state: &AppState,
    body: Body,
    part: &std::path::Path,
    expected: Option<u64>,
) -> ApiResult<u64> {
    let mut file = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(part)
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "cannot create the upload file");
            ApiError::internal("cannot store the upload")
        })?;
    let mut stream = body.into_data_stream();
    let mut total: u64 = 0;
    while let Some(chunk) = stream.next().await {
        let chunk: Bytes = chunk.map_err(|e| {
            upload_error(
                StatusCode::BAD_REQUEST,
                "truncated",
                format!("the upload was cut short after {total} bytes: {e}"),
            )
        })?;
        total += chunk.len() as u64;
        if total > MAX_BUNDLE_BYTES {
            return Err(upload_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!("bundles are limited to {MAX_BUNDLE_BYTES} bytes"),
            ));
        }
        file.write_all(&chunk).await.map_err(|e| {
            if e.kind() == std::io::ErrorKind::StorageFull {
                upload_error(
                    StatusCode::INSUFFICIENT_STORAGE,
                    "no_space",
                    "not enough space to receive the bundle",
                )
            } else {
                tracing::error!(error = %e, "cannot write the upload");
                ApiError::internal("cannot store the upload")
            }
        })?;
        state.group_state(Uploads::default).progress(total);
    }
    if total == 0 {
        return Err(upload_error(
            StatusCode::BAD_REQUEST,
            "truncated",
            "empty upload: send the .raucb file as the request body",
        ));
    }
    if let Some(n) = expected
        && n != total
    {
        return Err(upload_error(
            StatusCode::BAD_REQUEST,
            "truncated",
            format!("received {total} of {n} bytes"),
        ));
    }
    file.sync_all().await.map_err(|e| {
        tracing::error!(error = %e, "cannot sync the upload");
        ApiError::internal("cannot store the upload")
    })?;
    Ok(total)
}

async fn preflight(State(state): State<AppState>) -> ApiResult {
    let r = client(&state, STATUS_TIMEOUT)
        .restore_preflight(pb::RestorePreflightRequest {})
        .await
        .map_err(|s| ApiError::from_grpc("supervisor", &s))?
        .into_inner();
    Ok(Json(PreflightBody::from(&r)).into_response())
}

async fn restore(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: RestoreToStockRequest = parse_body(&headers, &body)?;
    if !b.confirm {
        return Err(
            ApiError::bad_request("restore to stock needs {\"confirm\": true}")
                .with("field", "confirm")
                .suggestion(
                    "GET /api/system/restore-to-stock/preflight-checks lists what will be lost",
                ),
        );
    }
    let s = client(&state, INSTALL_TIMEOUT)
        .restore_to_stock(pb::RestoreToStockRequest {})
        .await
        .map_err(|s| refused(&s))?
        .into_inner();
    Ok(Json(UpdateStatusBody::new(&s, None)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn status_json(s: &pb::UpdateStatus, receiving: Option<(u64, Option<u64>)>) -> Value {
        serde_json::to_value(UpdateStatusBody::new(s, receiving)).unwrap()
    }

    #[test]
    fn receiving_overlays_an_idle_record_only() {
        let idle = pb::UpdateStatus {
            phase: pb::UpdatePhase::Committed as i32,
            ..Default::default()
        };
        let v = status_json(&idle, Some((50, Some(200))));
        assert_eq!(v["phase"], "receiving");
        assert_eq!(v["progress"]["percent"], 25);
        assert_eq!(v["in_progress"], true);
        let busy = pb::UpdateStatus {
            phase: pb::UpdatePhase::Installing as i32,
            ..Default::default()
        };
        assert_eq!(status_json(&busy, Some((1, None)))["phase"], "installing");
        assert_eq!(status_json(&idle, None)["phase"], "committed");
        assert_eq!(status_json(&idle, None)["in_progress"], false);
    }

    #[test]
    fn a_non_bundle_and_a_cut_upload_get_different_advice() {
        let refusal = |code: &str, msg: &str| {
            let mut status = tonic::Status::invalid_argument(msg);
            status
                .metadata_mut()
                .insert("svcos-refusal", code.parse().unwrap());
            refused(&status).body()
        };
        let junk = refusal(
            "not_a_bundle",
            "not a RAUC bundle: the file (20480 bytes) does not start with a squashfs image",
        );
        assert_eq!(junk["refusal"], "not_a_bundle");
        let advice = junk["suggestion"].as_str().unwrap();
        assert!(advice.contains("not a svcOS firmware bundle"), "{advice}");
        assert!(!advice.contains("complete"), "{advice}");
        let cut = refusal("truncated", "the bundle is cut short: …");
        assert_eq!(cut["refusal"], "truncated");
        assert!(
            cut["suggestion"]
                .as_str()
                .unwrap()
                .contains("complete .raucb")
        );
    }

    #[test]
    fn the_latest_error_is_shown_beside_an_unchanged_phase() {
        let after_refusal = pb::UpdateStatus {
            phase: pb::UpdatePhase::Idle as i32,
            refusal: "not_a_bundle".into(),
            last_error: "not a RAUC bundle: …".into(),
            last_error_at_ms: 7,
            ..Default::default()
        };
        let v = status_json(&after_refusal, None);
        assert_eq!(v["phase"], "idle");
        assert_eq!(v["last_error"], "not a RAUC bundle: …");
        assert_eq!(v["last_error_at_ms"], 7);
        assert_eq!(v["history"], serde_json::json!([]));
    }
}
