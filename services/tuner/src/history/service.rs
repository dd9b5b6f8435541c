//! HistoryService: reads go to the memory ring or the store; audit entries are queued for the
//! next batch. Store reads run on a blocking thread.

use std::sync::Arc;

use svcos_proto::tuner::v1::history_service_server::HistoryService;
use svcos_proto::tuner::v1::{
    AuditEntry, GetHistoryInfoRequest, GetHistoryInfoResponse, HistoryPoint, ListAuditRequest,
    ListAuditResponse, ListSamplesRequest, ListSamplesResponse, RecordAuditRequest,
    RecordAuditResponse, Resolution,
};
use tonic::{Request, Response, Status};

use super::store::{
    Audit, DISK_BOUND_BYTES, HOUR_MS, HOUR_RETENTION_MS, MINUTE_MS, MINUTE_RETENTION_MS, Point,
    StoreError, Table,
};
use super::{History, SECOND_CAP};

/// Audit entries answered when no limit is asked.
const AUDIT_DEFAULT: u32 = 256;

/// The gRPC face of the history.
#[derive(Debug, Clone)]
pub struct HistoryApi {
    history: Arc<History>,
}

impl HistoryApi {
    /// Serve a history.
    pub fn new(history: Arc<History>) -> HistoryApi {
        HistoryApi { history }
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&History) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, Status> {
        let h = Arc::clone(&self.history);
        tokio::task::spawn_blocking(move || f(&h))
            .await
            .map_err(|e| Status::internal(format!("history worker: {e}")))?
            .map_err(|e| svcos_common::status::internal("history store", &e))
    }
}

fn point_pb(p: Point) -> HistoryPoint {
    HistoryPoint {
        t_ms: p.t_ms,
        state: p.state,
        ghs_1m: p.ghs_1m,
        ghs_5s: p.ghs_5s,
        power_watt: p.power_watt,
        temp_max_c: p.temp_max_c,
        accepted: p.accepted,
        rejected: p.rejected,
        stale: p.stale,
        active_pool: p.active_pool,
        samples: p.samples,
    }
}

fn audit_pb(a: Audit) -> AuditEntry {
    AuditEntry {
        timestamp_ms: a.timestamp_ms,
        method: a.method,
        path: a.path,
        status: a.status,
        session_id: a.session_id,
    }
}

#[tonic::async_trait]
impl HistoryService for HistoryApi {
    async fn list_samples(
        &self,
        request: Request<ListSamplesRequest>,
    ) -> Result<Response<ListSamplesResponse>, Status> {
        let r = request.into_inner();
        let (table, interval_ms, retention_ms) =
            match Resolution::try_from(r.resolution).unwrap_or(Resolution::Unspecified) {
                Resolution::Second => (None, 1000, SECOND_CAP as i64 * 1000),
                Resolution::Minute => (Some(Table::Minute), MINUTE_MS, MINUTE_RETENTION_MS),
                Resolution::Hour => (Some(Table::Hour), HOUR_MS, HOUR_RETENTION_MS),
                Resolution::Unspecified => {
                    return Err(Status::invalid_argument(
                        "resolution: RESOLUTION_SECOND, RESOLUTION_MINUTE or RESOLUTION_HOUR",
                    ));
                }
            };
        let points = self
            .blocking(move |h| h.points(table, r.from_ms, r.to_ms, r.limit))
            .await?;
        Ok(Response::new(ListSamplesResponse {
            points: points.into_iter().map(point_pb).collect(),
            interval_s: (interval_ms / 1000) as u32,
            retention_s: (retention_ms / 1000) as u64,
        }))
    }

    async fn record_audit(
        &self,
        request: Request<RecordAuditRequest>,
    ) -> Result<Response<RecordAuditResponse>, Status> {
        let e = request
            .into_inner()
            .entry
            .ok_or_else(|| Status::invalid_argument("entry: required"))?;
        let clip = |s: String, n: usize| s.chars().take(n).collect::<String>();
        let a = Audit {
            timestamp_ms: e.timestamp_ms,
            method: clip(e.method, 16),
            path: clip(e.path, 256),
            status: e.status,
            session_id: clip(e.session_id, 128),
        };
        self.blocking(move |h| {
            h.audit(a);
            Ok(())
        })
        .await?;
        Ok(Response::new(RecordAuditResponse {}))
    }

    async fn list_audit(
        &self,
        request: Request<ListAuditRequest>,
    ) -> Result<Response<ListAuditResponse>, Status> {
        let limit = match request.into_inner().limit {
            0 => AUDIT_DEFAULT,
            n => n.min(super::store::AUDIT_CAP as u32),
        };
        let entries = self.blocking(move |h| h.audit_entries(limit)).await?;
        Ok(Response::new(ListAuditResponse {
            entries: entries.into_iter().map(audit_pb).collect(),
        }))
    }

    async fn get_history_info(
        &self,
        _request: Request<GetHistoryInfoRequest>,
    ) -> Result<Response<GetHistoryInfoResponse>, Status> {
        let (info, pending) = self
            .blocking(|h| Ok((h.store().info()?, h.pending())))
            .await?;
        Ok(Response::new(GetHistoryInfoResponse {
            disk_bytes: info.disk_bytes,
            disk_bound_bytes: DISK_BOUND_BYTES,
            minute_rows: info.minute_rows,
            hour_rows: info.hour_rows,
            audit_rows: info.audit_rows,
            oldest_minute_ms: info.minute_span.0,
            newest_minute_ms: info.minute_span.1,
            oldest_hour_ms: info.hour_span.0,
            newest_hour_ms: info.hour_span.1,
            pending_rows: pending as u32,
        }))
    }
}
