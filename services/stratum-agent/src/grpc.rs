//! The gRPC face of stratum-agent: handlers turn requests into agent commands or read its
//! published views, and [`AgentError`] maps to a status in one place.

use std::pin::Pin;
use std::time::Duration;

use futures::Stream;
use svcos_common::config::PoolConfig;
use svcos_common::status::ToStatus;
use svcos_proto::stratum::v1 as pb;
use svcos_proto::stratum::v1::stratum_service_server::StratumService;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::WatchStream;
use tonic::{Request, Response, Status};

use crate::agent::{AgentError, Command, Views};
use crate::pooltest;
use crate::transport::Tls;

impl ToStatus for AgentError {
    fn to_status(&self) -> Status {
        match self {
            AgentError::NoSuchPool(_) => Status::not_found(self.to_string()),
            AgentError::Invalid(_) | AgentError::BadOrder | AgentError::MalformedShare(_) => {
                Status::invalid_argument(self.to_string())
            }
            AgentError::ConfigWrite(e) => {
                tracing::error!(error = %e, "pool configuration not persisted");
                Status::internal(self.to_string())
            }
            AgentError::Gone => Status::unavailable(self.to_string()),
        }
    }
}

/// The StratumService implementation.
#[derive(Debug, Clone)]
pub struct StratumApi {
    commands: mpsc::Sender<Command>,
    views: Views,
    tls: Tls,
    version_rolling: bool,
    sv2_enabled: bool,
}

impl StratumApi {
    /// A service over an agent's command channel and views.
    pub fn new(
        commands: mpsc::Sender<Command>,
        views: Views,
        tls: Tls,
        version_rolling: bool,
        sv2_enabled: bool,
    ) -> Self {
        StratumApi {
            commands,
            views,
            tls,
            version_rolling,
            sv2_enabled,
        }
    }

    /// Hand one share to the agent (both submit RPCs come here).
    async fn submit(&self, req: pb::SubmitShareRequest) -> Result<pb::ShareDisposition, Status> {
        let (nonce, received_ns) = (req.nonce, svcos_common::trace::stamp());
        let d = self.ask(|tx| Command::Submit(req, tx)).await?;
        if received_ns != 0 {
            // Share-path trace: the request decoded, and the agent's answer back.
            svcos_common::trace::record(
                "sa.share",
                format_args!(
                    "{nonce:08x} {received_ns} {}",
                    svcos_common::trace::mono_ns()
                ),
            );
        }
        Ok(d)
    }

    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, AgentError>>) -> Command,
    ) -> Result<T, Status> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(make(tx))
            .await
            .map_err(|_| AgentError::Gone.to_status())?;
        rx.await
            .map_err(|_| AgentError::Gone.to_status())?
            .map_err(|e| e.to_status())
    }
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl StratumService for StratumApi {
    type StreamJobsStream = BoxStream<pb::JobTemplate>;
    type StreamPoolsStream = BoxStream<pb::GetPoolsResponse>;

    async fn stream_jobs(
        &self,
        _: Request<pb::StreamJobsRequest>,
    ) -> Result<Response<Self::StreamJobsStream>, Status> {
        // The first job a reader sees is clean (it has nothing of ours); after that a job is
        // clean when any clean job or epoch change happened since the reader's last one, so a
        // reader that lagged behind cannot keep void work.
        let mut seen: Option<u64> = None;
        let stream = WatchStream::new(self.views.jobs.clone()).filter_map(move |p| {
            let p = p?;
            let clean = seen != Some(p.clean_seq);
            seen = Some(p.clean_seq);
            let mut t = (*p.template).clone();
            t.clean_jobs = clean;
            if clean && svcos_common::trace::enabled() {
                // Share-path trace: the job leaves the watch for tonic's encoder.
                svcos_common::trace::record(
                    "sa.stream",
                    format_args!(
                        "{} {}",
                        hex::encode(&t.prev_hash),
                        svcos_common::trace::mono_ns()
                    ),
                );
            }
            Some(Ok(t))
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn submit_share(
        &self,
        r: Request<pb::SubmitShareRequest>,
    ) -> Result<Response<pb::SubmitShareResponse>, Status> {
        let d = self.submit(r.into_inner()).await?;
        Ok(Response::new(pb::SubmitShareResponse {
            disposition: d as i32,
            refused: String::new(),
        }))
    }

    type SubmitSharesStream = BoxStream<pb::SubmitShareResponse>;

    async fn submit_shares(
        &self,
        r: Request<tonic::Streaming<pb::SubmitShareRequest>>,
    ) -> Result<Response<Self::SubmitSharesStream>, Status> {
        let api = self.clone();
        // `then` takes one share at a time, so the answers keep the order of the shares.
        let answers = futures::StreamExt::then(r.into_inner(), move |item| {
            let api = api.clone();
            async move {
                match api.submit(item?).await {
                    Ok(d) => Ok(pb::SubmitShareResponse {
                        disposition: d as i32,
                        refused: String::new(),
                    }),
                    // One bad share must not close the link the good ones use.
                    Err(s) if s.code() == tonic::Code::InvalidArgument => {
                        Ok(pb::SubmitShareResponse {
                            disposition: pb::ShareDisposition::Unspecified as i32,
                            refused: s.message().to_string(),
                        })
                    }
                    Err(s) => Err(s),
                }
            }
        });
        // Ended when the agent stops, so a shutting-down stratum-agent does not wait out its
        // drain grace for a stream hw-agent would keep open forever; hw-agent re-opens it.
        let commands = self.commands.clone();
        let answers =
            futures::StreamExt::take_until(answers, async move { commands.closed().await });
        Ok(Response::new(Box::pin(answers)))
    }

    async fn get_pools(
        &self,
        _: Request<pb::GetPoolsRequest>,
    ) -> Result<Response<pb::GetPoolsResponse>, Status> {
        Ok(Response::new(self.views.pools.borrow().clone()))
    }

    async fn stream_pools(
        &self,
        _: Request<pb::StreamPoolsRequest>,
    ) -> Result<Response<Self::StreamPoolsStream>, Status> {
        Ok(Response::new(Box::pin(
            WatchStream::new(self.views.pools.clone()).map(Ok),
        )))
    }

    async fn switch_pool(
        &self,
        r: Request<pb::SwitchPoolRequest>,
    ) -> Result<Response<pb::SwitchPoolResponse>, Status> {
        let index = r.into_inner().index;
        self.ask(|tx| Command::SwitchPool(index, tx)).await?;
        Ok(Response::new(pb::SwitchPoolResponse {}))
    }

    async fn set_pool_enabled(
        &self,
        r: Request<pb::SetPoolEnabledRequest>,
    ) -> Result<Response<pb::SetPoolEnabledResponse>, Status> {
        let r = r.into_inner();
        self.ask(|tx| Command::SetPoolEnabled(r.index, r.enabled, tx))
            .await?;
        Ok(Response::new(pb::SetPoolEnabledResponse {}))
    }

    async fn add_pool(
        &self,
        r: Request<pb::AddPoolRequest>,
    ) -> Result<Response<pb::AddPoolResponse>, Status> {
        let r = r.into_inner();
        let cfg = PoolConfig {
            url: r.url,
            user: r.user,
            password: if r.password.is_empty() {
                "x".into()
            } else {
                r.password
            },
            ..Default::default()
        };
        let index = self.ask(|tx| Command::AddPool(cfg, tx)).await?;
        Ok(Response::new(pb::AddPoolResponse { index }))
    }

    async fn remove_pool(
        &self,
        r: Request<pb::RemovePoolRequest>,
    ) -> Result<Response<pb::RemovePoolResponse>, Status> {
        let index = r.into_inner().index;
        self.ask(|tx| Command::RemovePool(index, tx)).await?;
        Ok(Response::new(pb::RemovePoolResponse {}))
    }

    async fn set_pool_priority(
        &self,
        r: Request<pb::SetPoolPriorityRequest>,
    ) -> Result<Response<pb::SetPoolPriorityResponse>, Status> {
        let order = r.into_inner().order;
        self.ask(|tx| Command::SetPoolPriority(order, tx)).await?;
        Ok(Response::new(pb::SetPoolPriorityResponse {}))
    }

    async fn test_pool(
        &self,
        r: Request<pb::TestPoolRequest>,
    ) -> Result<Response<pb::TestPoolResponse>, Status> {
        let r = r.into_inner();
        let timeout = if r.timeout_ms == 0 {
            pooltest::DEFAULT_TIMEOUT
        } else {
            Duration::from_millis(r.timeout_ms.min(60_000).into())
        };
        let password = if r.password.is_empty() {
            "x".to_string()
        } else {
            r.password
        };
        let resp = pooltest::test_pool(
            &r.url,
            &r.user,
            &password,
            timeout,
            &self.tls,
            self.version_rolling,
            self.sv2_enabled,
        )
        .await;
        Ok(Response::new(resp))
    }

    async fn get_donation(
        &self,
        _: Request<pb::GetDonationRequest>,
    ) -> Result<Response<pb::GetDonationResponse>, Status> {
        Ok(Response::new(self.views.donation.borrow().clone()))
    }

    async fn get_sv2_status(
        &self,
        _: Request<pb::GetSv2StatusRequest>,
    ) -> Result<Response<pb::GetSv2StatusResponse>, Status> {
        // Live state from the agent; the gate is the configured one (it may change on reload).
        Ok(Response::new(self.views.sv2.borrow().clone()))
    }

    async fn reload_config(
        &self,
        _: Request<pb::ReloadConfigRequest>,
    ) -> Result<Response<pb::ReloadConfigResponse>, Status> {
        self.ask(Command::ReloadConfig).await?;
        Ok(Response::new(pb::ReloadConfigResponse {}))
    }
}
