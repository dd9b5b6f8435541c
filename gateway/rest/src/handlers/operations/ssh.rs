//! SSH access: the authorised keys and the password rule. Parsing and the files live in
//! `svcos_common::sshkeys`; these handlers parse, call and map.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use svcos_api_types::discovery::{SshBody, SshKey};
use svcos_api_types::requests::SshKeysRequest;
use svcos_common::sshkeys;

use crate::envelope::ApiError;
use crate::handlers::{ApiResult, ok, parse_body};
use crate::routing::Route;
use crate::{AppState, route};

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(GET "/api/network/ssh", Bearer, U, Fleet, Full, "SSH access: the authorised keys and whether passwords are accepted", get_ssh, res: svcos_api_types::discovery::SshBody),
        route!(PUT "/api/network/ssh", Bearer, U, Fleet, Full, "Replace the SSH authorised keys (validated, written atomically, 0600)", put_ssh, req: svcos_api_types::requests::SshKeysRequest, res: svcos_api_types::discovery::SshBody),
    ]
}

fn answer(state: &AppState) -> ApiResult {
    let path = sshkeys::authorized_keys_path(&state.layout);
    let keys = sshkeys::load(&path).map_err(|e| {
        tracing::error!(error = %e, "cannot read the SSH authorised keys");
        ApiError::internal("the stored SSH keys cannot be read")
    })?;
    ok(SshBody {
        schema: "svcos.api.network.ssh.v1",
        port: sshkeys::SSH_PORT,
        password_login: state.config().network.ssh.password_login,
        authorized_keys_path: path.display().to_string(),
        keys: keys
            .iter()
            .map(|k| SshKey {
                key_type: k.key_type.name(),
                fingerprint: k.fingerprint(),
                comment: k.comment.clone(),
                line: k.line(),
            })
            .collect(),
        note: "the image's dropbear reads these keys (copied to root's ~/.ssh by systemd); a \
               build without dropbear (the simulator) only stores them",
    })
}

async fn get_ssh(State(state): State<AppState>) -> ApiResult {
    answer(&state)
}

async fn put_ssh(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let req: SshKeysRequest = parse_body(&headers, &body)?;
    let keys = sshkeys::parse_all(&req.authorized_keys).map_err(|(i, message)| {
        ApiError::bad_request("invalid SSH public key")
            .detail(message)
            .with("field", format!("authorized_keys[{i}]"))
    })?;
    sshkeys::save(&sshkeys::authorized_keys_path(&state.layout), &keys).map_err(|e| {
        tracing::error!(error = %e, "cannot write the SSH authorised keys");
        ApiError::internal("the SSH keys could not be saved")
    })?;
    tracing::info!(keys = keys.len(), "SSH authorised keys replaced");
    if let Some(password_login) = req.password_login {
        // The rule is config; its one writer also rewrites dropbear.env (`state::set_config`).
        let patch = serde_json::json!({"network": {"ssh": {"password_login": password_login}}});
        crate::config_write::patch_write(&state, patch).await?;
    }
    answer(&state)
}
