//! `svcos.auth.v1.AuthService` over [`Auth`]: conversion only, no rules.

use std::pin::Pin;

use svcos_common::Shutdown;
use svcos_common::status::ToStatus;
use svcos_proto::auth::v1 as pb;
use svcos_proto::auth::v1::auth_service_server::AuthService;
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::apitokens::ApiToken;
use crate::error::AuthError;
use crate::sessions::SessionView;
use crate::state::Auth;

/// Revocations queued per stream towards a slow reader.
const STREAM_QUEUE: usize = 64;

/// The gRPC face of [`Auth`].
#[derive(Debug, Clone)]
pub struct AuthGrpc {
    auth: Auth,
    shutdown: Shutdown,
}

impl AuthGrpc {
    /// Serve `auth`; open revocation streams end when `shutdown` triggers, so a graceful
    /// shutdown never waits on a subscriber.
    pub fn new(auth: Auth, shutdown: Shutdown) -> Self {
        AuthGrpc { auth, shutdown }
    }
}

fn unix_s(ms: i64) -> i64 {
    ms.div_euclid(1000)
}

fn validate_response(view: SessionView) -> pb::ValidateSessionResponse {
    pb::ValidateSessionResponse {
        session_id: view.id.0,
        expires_at_unix: unix_s(view.expires_at_ms),
        idle_expires_at_unix: unix_s(view.idle_expires_at_ms),
        read_only: view.read_only,
    }
}

fn api_token_info(t: &ApiToken) -> pb::ApiToken {
    pb::ApiToken {
        id: t.id.clone(),
        name: t.name.clone(),
        scope: t.scope.clone(),
        created_at_unix: unix_s(t.created_ms),
        last_used_at_unix: unix_s(t.last_used_ms),
    }
}

type StatusStream =
    Pin<Box<dyn futures::Stream<Item = Result<pb::GetStatusResponse, Status>> + Send>>;

fn status_response(auth: &Auth) -> pb::GetStatusResponse {
    let status = auth.status();
    pb::GetStatusResponse {
        password_set: status.password_set,
        active_sessions: status.active_sessions as u32,
    }
}

type RevocationStream = Pin<Box<dyn futures::Stream<Item = Result<pb::Revocation, Status>> + Send>>;

#[tonic::async_trait]
impl AuthService for AuthGrpc {
    async fn get_status(
        &self,
        _request: Request<pb::GetStatusRequest>,
    ) -> Result<Response<pb::GetStatusResponse>, Status> {
        Ok(Response::new(status_response(&self.auth)))
    }

    type StreamStatusStream = StatusStream;

    async fn stream_status(
        &self,
        _request: Request<pb::StreamStatusRequest>,
    ) -> Result<Response<Self::StreamStatusStream>, Status> {
        let mut changes = self.auth.watch_password_set();
        changes.mark_changed();
        let auth = self.auth.clone();
        let (tx, rx) = mpsc::channel(1);
        let shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    r = changes.changed() => if r.is_err() { return },
                    _ = tx.closed() => return,
                    _ = shutdown.wait() => return,
                }
                changes.mark_unchanged();
                if tx.send(Ok(status_response(&auth))).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn setup(
        &self,
        request: Request<pb::SetupRequest>,
    ) -> Result<Response<pb::SetupResponse>, Status> {
        let req = request.into_inner();
        self.auth
            .setup(req.password, &req.client_ip)
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(pb::SetupResponse {}))
    }

    async fn create_session(
        &self,
        request: Request<pb::CreateSessionRequest>,
    ) -> Result<Response<pb::CreateSessionResponse>, Status> {
        let req = request.into_inner();
        let issued = self
            .auth
            .create_session(req.password, &req.client_ip, &req.user_agent)
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(pb::CreateSessionResponse {
            token: issued.token,
            session_id: issued.view.id.0,
            expires_at_unix: unix_s(issued.view.expires_at_ms),
            idle_expires_at_unix: unix_s(issued.view.idle_expires_at_ms),
        }))
    }

    async fn validate_session(
        &self,
        request: Request<pb::ValidateSessionRequest>,
    ) -> Result<Response<pb::ValidateSessionResponse>, Status> {
        let view = self
            .auth
            .validate(&request.get_ref().token)
            .map_err(|e| e.to_status())?;
        Ok(Response::new(validate_response(view)))
    }

    async fn revoke_session(
        &self,
        request: Request<pb::RevokeSessionRequest>,
    ) -> Result<Response<pb::RevokeSessionResponse>, Status> {
        self.auth
            .revoke(&request.get_ref().token)
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(pb::RevokeSessionResponse {}))
    }

    async fn issue_ws_ticket(
        &self,
        request: Request<pb::IssueWsTicketRequest>,
    ) -> Result<Response<pb::IssueWsTicketResponse>, Status> {
        let issued = self
            .auth
            .issue_ticket(&request.get_ref().token)
            .map_err(|e| e.to_status())?;
        Ok(Response::new(pb::IssueWsTicketResponse {
            ticket: issued.ticket,
            expires_at_unix: unix_s(issued.expires_at_ms),
        }))
    }

    async fn redeem_ws_ticket(
        &self,
        request: Request<pb::RedeemWsTicketRequest>,
    ) -> Result<Response<pb::RedeemWsTicketResponse>, Status> {
        let view = self
            .auth
            .redeem_ticket(&request.get_ref().ticket)
            .map_err(|e| e.to_status())?;
        Ok(Response::new(pb::RedeemWsTicketResponse {
            session_id: view.id.0,
        }))
    }

    async fn change_password(
        &self,
        request: Request<pb::ChangePasswordRequest>,
    ) -> Result<Response<pb::ChangePasswordResponse>, Status> {
        let req = request.into_inner();
        let revoked = self
            .auth
            .change_password(
                &req.token,
                req.current_password,
                req.new_password,
                &req.client_ip,
            )
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(pb::ChangePasswordResponse {
            sessions_revoked: revoked as u32,
        }))
    }

    async fn create_api_token(
        &self,
        request: Request<pb::CreateApiTokenRequest>,
    ) -> Result<Response<pb::CreateApiTokenResponse>, Status> {
        let req = request.into_inner();
        let (api_token, record) = self
            .auth
            .create_api_token(&req.token, &req.name)
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(pb::CreateApiTokenResponse {
            api_token,
            info: Some(api_token_info(&record)),
        }))
    }

    async fn list_api_tokens(
        &self,
        _request: Request<pb::ListApiTokensRequest>,
    ) -> Result<Response<pb::ListApiTokensResponse>, Status> {
        Ok(Response::new(pb::ListApiTokensResponse {
            tokens: self
                .auth
                .list_api_tokens()
                .iter()
                .map(api_token_info)
                .collect(),
        }))
    }

    async fn revoke_api_token(
        &self,
        request: Request<pb::RevokeApiTokenRequest>,
    ) -> Result<Response<pb::RevokeApiTokenResponse>, Status> {
        self.auth
            .revoke_api_token(&request.get_ref().id)
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(pb::RevokeApiTokenResponse {}))
    }

    type StreamRevocationsStream = RevocationStream;

    async fn stream_revocations(
        &self,
        _request: Request<pb::StreamRevocationsRequest>,
    ) -> Result<Response<Self::StreamRevocationsStream>, Status> {
        let mut source = self.auth.subscribe_revocations();
        let (tx, rx) = mpsc::channel(STREAM_QUEUE);
        let shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            loop {
                let item = tokio::select! {
                    r = source.recv() => r,
                    _ = tx.closed() => return,
                    _ = shutdown.wait() => return,
                };
                let message = match item {
                    Ok(ended) => Ok(pb::Revocation {
                        session_id: ended.id.0,
                        reason: ended.reason.as_str().to_string(),
                    }),
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        // Missing a revocation would let a cache accept a dead token: end the
                        // stream with an error so the reader flushes and resubscribes.
                        Err(AuthError::RevocationsLagged { missed }.to_status())
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                let last = message.is_err();
                if tx.send(message).await.is_err() || last {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}
