//! `svcos.supervisor.v1.SupervisorService` on the supervisor's Unix socket, for `svcos ctl` and
//! the gateway's lifecycle actions.

use tonic::{Request, Response, Status};

use svcos_proto::supervisor::v1 as pb;
use svcos_proto::supervisor::v1::supervisor_service_server::{
    SupervisorService, SupervisorServiceServer,
};

use crate::manager::{ControlError, Handle, ServiceInfo, State};
use crate::procfs;

/// The gRPC face of the manager.
#[derive(Debug, Clone)]
pub struct ControlService {
    handle: Handle,
}

impl ControlService {
    /// Serve the manager behind `handle`.
    pub fn new(handle: Handle) -> SupervisorServiceServer<Self> {
        SupervisorServiceServer::new(ControlService { handle })
    }
}

/// The wire form of a state.
pub fn state_to_pb(state: State) -> pb::ServiceState {
    match state {
        State::Starting => pb::ServiceState::Starting,
        State::Running => pb::ServiceState::Running,
        State::Backoff => pb::ServiceState::Backoff,
        State::Stopping => pb::ServiceState::Stopping,
        State::Stopped => pb::ServiceState::Stopped,
        State::Failed => pb::ServiceState::Failed,
    }
}

/// The wire form of a service snapshot, with its process's usage read from `/proc` now.
pub fn info_to_pb(info: &ServiceInfo) -> pb::ServiceInfo {
    let usage = info.pid.and_then(procfs::usage).unwrap_or_default();
    pb::ServiceInfo {
        name: info.name.to_string(),
        state: state_to_pb(info.state) as i32,
        pid: info.pid.unwrap_or(0),
        restarts: info.restarts,
        uptime_s: info.uptime_s,
        last_exit: info.last_exit.clone().unwrap_or_default(),
        backoff_ms: info.backoff_ms,
        escalation: info.escalation.as_str().to_string(),
        recent_restarts: info.recent_restarts,
        rss_bytes: usage.rss_bytes,
        cpu_seconds: usage.cpu_seconds,
        start_time_unix_s: usage.start_time_unix_s,
    }
}

/// One exhaustive mapping from control errors to gRPC codes.
pub fn to_status(err: ControlError) -> Status {
    let msg = format!("svcos: {err}");
    match err {
        ControlError::UnknownService(_) => Status::not_found(msg),
        ControlError::Failed { .. } => Status::failed_precondition(msg),
        ControlError::Superseded { .. } => Status::aborted(msg),
        ControlError::ShuttingDown => Status::unavailable(msg),
        ControlError::Timeout(_) => Status::deadline_exceeded(msg),
    }
}

fn reply(r: Result<ServiceInfo, ControlError>) -> Result<Response<pb::ServiceResponse>, Status> {
    r.map(|info| {
        Response::new(pb::ServiceResponse {
            service: Some(info_to_pb(&info)),
        })
    })
    .map_err(to_status)
}

#[tonic::async_trait]
impl SupervisorService for ControlService {
    async fn list_services(
        &self,
        _request: Request<pb::ListServicesRequest>,
    ) -> Result<Response<pb::ListServicesResponse>, Status> {
        let services = self.handle.list().await.map_err(to_status)?;
        Ok(Response::new(pb::ListServicesResponse {
            services: services.iter().map(info_to_pb).collect(),
        }))
    }

    async fn restart(
        &self,
        request: Request<pb::ServiceRequest>,
    ) -> Result<Response<pb::ServiceResponse>, Status> {
        reply(self.handle.restart(&request.into_inner().name).await)
    }

    async fn stop(
        &self,
        request: Request<pb::ServiceRequest>,
    ) -> Result<Response<pb::ServiceResponse>, Status> {
        reply(self.handle.stop(&request.into_inner().name).await)
    }

    async fn start(
        &self,
        request: Request<pb::ServiceRequest>,
    ) -> Result<Response<pb::ServiceResponse>, Status> {
        reply(self.handle.start(&request.into_inner().name).await)
    }

    async fn restart_stack(
        &self,
        _request: Request<pb::RestartStackRequest>,
    ) -> Result<Response<pb::RestartStackResponse>, Status> {
        let services = self.handle.restart_stack().await.map_err(to_status)?;
        Ok(Response::new(pb::RestartStackResponse {
            services: services.iter().map(ToString::to_string).collect(),
        }))
    }
}
