//! The gRPC face of stratum-agent: handlers turn requests into agent commands or read its
//! published views, and [`AgentError`] maps to a status in one place.
//!
//! Pool-list changes (switch, enable, add, remove, order) are config changes: a handler reads
//! the list and its generation from the config writer (the gateway's ConfigService), applies
//! the rule in [`crate::pooledit`], and writes the result back as a compare-and-set, retrying
//! when another write came first. The writer saves `config.toml` and pushes the change back here
//! as a `ReloadConfig`, so cgminer, REST and the file always show the same list.

use std::pin::Pin;
use std::time::Duration;

use futures::Stream;
use svcos_common::config::{Config, PoolConfig};
use svcos_common::status::ToStatus;
use svcos_proto::config::v1 as cfgpb;
use svcos_proto::config::v1::config_service_client::ConfigServiceClient;
use svcos_proto::stratum::v1 as pb;
use svcos_proto::stratum::v1::stratum_service_server::StratumService;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::WatchStream;
use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status};

use crate::agent::{AgentError, Command, Views};
use crate::pooledit::{self, PoolEdit};
use crate::pooltest;
use crate::transport::Tls;

impl ToStatus for AgentError {
    fn to_status(&self) -> Status {
        match self {
            AgentError::NoSuchPool(_) => Status::not_found(self.to_string()),
            AgentError::Invalid(_) | AgentError::BadOrder | AgentError::MalformedShare(_) => {
                Status::invalid_argument(self.to_string())
            }
            // The pool owner's rule: the miner keeps somewhere to send work.
            AgentError::LastPool(_) => Status::failed_precondition(self.to_string()),
            AgentError::Writer(s) if svcos_common::status::is_unavailable(s) => {
                Status::unavailable(
                    "the config writer (gateway) is not reachable right now; nothing changed",
                )
            }
            // The writer's verdict (a refused field, a write that kept losing the race) as it
            // gave it.
            AgentError::Writer(s) => Status::new(s.code(), s.message()),
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
    /// The config writer (the gateway's ConfigService).
    writer: Channel,
}

/// Most tries of one pool edit while other writes keep coming first.
const EDIT_ATTEMPTS: usize = 3;

impl StratumApi {
    /// A service over an agent's command channel and views, writing pool changes through
    /// `writer`.
    pub fn new(
        commands: mpsc::Sender<Command>,
        views: Views,
        tls: Tls,
        version_rolling: bool,
        sv2_enabled: bool,
        writer: Channel,
    ) -> Self {
        StratumApi {
            commands,
            views,
            tls,
            version_rolling,
            sv2_enabled,
            writer,
        }
    }

    /// Apply one pool-list edit through the config writer (compare-and-set on the generation
    /// read with the list); the index the edit concerns.
    async fn edit_pools(&self, edit: PoolEdit) -> Result<u32, Status> {
        let mut writer = ConfigServiceClient::new(self.writer.clone());
        let writer_error = |s: Status| AgentError::Writer(s).to_status();
        let mut attempt = 1;
        let index = loop {
            let current = writer
                .get_config(cfgpb::GetConfigRequest {})
                .await
                .map_err(writer_error)?
                .into_inner();
            // Only the pool list is ours to read: another section's value is not our concern.
            let pools = configured_pools(&current.config_toml)?;
            let (pools, index) = pooledit::apply(&pools, &edit).map_err(|e| e.to_status())?;
            let patch = serde_json::json!({ "pools": pools }).to_string();
            match writer
                .patch_config(cfgpb::PatchConfigRequest {
                    generation: current.generation,
                    patch_json: patch,
                })
                .await
            {
                Ok(_) => break index,
                Err(s) if s.code() == Code::Aborted && attempt < EDIT_ATTEMPTS => attempt += 1,
                Err(s) => return Err(writer_error(s)),
            }
        };
        // The writer pushed the change here already; reloading again makes the answer true even
        // when that push failed (a reload is idempotent).
        self.ask(Command::ReloadConfig).await?;
        Ok(index)
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

/// The `[[pools]]` of the writer's config text, without judging the other sections.
fn configured_pools(config_toml: &str) -> Result<Vec<PoolConfig>, Status> {
    let doc = Config::toml_document(config_toml, std::path::Path::new("the writer's config"))
        .map_err(|e| Status::internal(format!("the config writer's answer: {e}")))?;
    match doc.get("pools") {
        None => Ok(Vec::new()),
        Some(pools) => serde_json::from_value(pools.clone())
            .map_err(|e| Status::internal(format!("the config writer's pools: {e}"))),
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
        self.edit_pools(PoolEdit::Switch(index)).await?;
        self.ask(|tx| Command::SwitchPool(index, tx)).await?;
        Ok(Response::new(pb::SwitchPoolResponse {}))
    }

    async fn set_pool_enabled(
        &self,
        r: Request<pb::SetPoolEnabledRequest>,
    ) -> Result<Response<pb::SetPoolEnabledResponse>, Status> {
        let r = r.into_inner();
        self.edit_pools(PoolEdit::SetEnabled(r.index, r.enabled))
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
        let index = self.edit_pools(PoolEdit::Add(cfg)).await?;
        Ok(Response::new(pb::AddPoolResponse { index }))
    }

    async fn remove_pool(
        &self,
        r: Request<pb::RemovePoolRequest>,
    ) -> Result<Response<pb::RemovePoolResponse>, Status> {
        let index = r.into_inner().index;
        self.edit_pools(PoolEdit::Remove(index)).await?;
        Ok(Response::new(pb::RemovePoolResponse {}))
    }

    async fn set_pool_priority(
        &self,
        r: Request<pb::SetPoolPriorityRequest>,
    ) -> Result<Response<pb::SetPoolPriorityResponse>, Status> {
        let order = r.into_inner().order;
        self.edit_pools(PoolEdit::Order(order)).await?;
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

    async fn get_jd_status(
        &self,
        _: Request<pb::GetJdStatusRequest>,
    ) -> Result<Response<pb::GetJdStatusResponse>, Status> {
        Ok(Response::new(self.views.jd.borrow().clone()))
    }

    async fn test_jd_connection(
        &self,
        r: Request<pb::TestJdConnectionRequest>,
    ) -> Result<Response<pb::TestJdConnectionResponse>, Status> {
        let r = r.into_inner();
        let (gate, server, template_provider) = {
            let live = self.views.jd.borrow();
            let pick = |given: String, configured: &str| {
                if given.is_empty() {
                    configured.to_string()
                } else {
                    given
                }
            };
            (
                live.sv2_enabled,
                pick(r.server, &live.server),
                pick(r.template_provider, &live.template_provider),
            )
        };
        if !gate {
            return Err(Status::failed_precondition(
                "Stratum V2 is disabled ([stratum].sv2_enabled = false); job declaration is behind the same gate",
            ));
        }
        let parse = |field: &str, url: &str| {
            crate::jd::client::Endpoint::parse(url)
                .map_err(|e| Status::invalid_argument(format!("{field}: {e}")))
        };
        let server = parse("server", &server)?;
        let template_provider = parse("template_provider", &template_provider)?;
        let timeout = if r.timeout_ms == 0 {
            Duration::from_secs(10)
        } else {
            Duration::from_millis(r.timeout_ms.min(60_000).into())
        };
        let (jds, tp) = crate::jd::client::test_connection(
            &server,
            &template_provider,
            "svcos-connection-test",
            timeout,
        )
        .await;
        let role = |c: crate::jd::client::RoleCheck| pb::JdRoleCheck {
            ok: c.ok,
            latency_ms: c.latency_ms,
            detail: c.detail,
        };
        Ok(Response::new(pb::TestJdConnectionResponse {
            ok: jds.ok && tp.ok,
            server: Some(role(jds)),
            template_provider: Some(role(tp)),
        }))
    }

    async fn reload_config(
        &self,
        _: Request<pb::ReloadConfigRequest>,
    ) -> Result<Response<pb::ReloadConfigResponse>, Status> {
        self.ask(Command::ReloadConfig).await?;
        Ok(Response::new(pb::ReloadConfigResponse {}))
    }
}
