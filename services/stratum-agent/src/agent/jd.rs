//! Job declaration seam: one JD client task for the SV2 connection hw-agent mines on, its
//! declared jobs put on that connection with SetCustomMiningJob, and the status
//! `GetJdStatus` serves. The task follows the mining connection: when the agent mines another
//! pool, reloads `[stratum.jd]` or the connection closes, the task is dropped (aborted) and, if
//! the new state calls for one, a new one starts for the new connection.

use super::*;
use crate::jd::client::{Endpoint, JdParams};
use crate::jd::{DeclaredJob, JdEvent};
use svcos_proto::stratum::v1::{DeclaredJob as DeclaredJobPb, GetJdStatusResponse};

/// The running JD client and the connection its jobs are for.
#[derive(Debug)]
pub(super) struct JdRun {
    conn: ConnId,
    id: u64,
    /// `None` when the configured endpoints are unusable (the reason is in the status).
    task: Option<tokio::task::AbortHandle>,
}

impl Drop for JdRun {
    fn drop(&mut self) {
        if let Some(t) = &self.task {
            t.abort();
        }
    }
}

/// What the status reports beyond the session's own counters.
#[derive(Debug, Default)]
pub(super) struct JdView {
    connected: bool,
    last_declared: Option<Box<DeclaredJob>>,
    jobs_declared: u64,
    failures: u64,
    /// Why the JD client has no job (its last failure), empty while it declares.
    client_error: String,
    /// Runs started (the next run's id).
    runs: u64,
}

impl Agent {
    /// The SV2 connection declared jobs should be mined on, if job declaration applies: the
    /// mining connection, an SV2 one with its channel open.
    fn jd_target(&self) -> Option<ConnId> {
        let jd = &self.settings.stratum.jd;
        if !(jd.enabled && self.settings.stratum.sv2_enabled) {
            return None;
        }
        let conn = self.epoch_conn?;
        let c = self.conns.get(&conn)?;
        matches!(&c.session, PoolSession::V2(s, _) if s.authorized).then_some(conn)
    }

    /// Start, keep or drop the JD client so it serves [`Self::jd_target`]. Cheap when nothing
    /// changed; called after every event.
    pub(super) fn jd_sync(&mut self) {
        let target = self.jd_target();
        if self.jd_run.as_ref().map(|r| r.conn) == target {
            return;
        }
        self.jd_run = None;
        self.jd_view.connected = false;
        let Some(conn) = target else {
            self.publish_jd();
            return;
        };
        self.jd_view.runs += 1;
        let id = self.jd_view.runs;
        let jd = &self.settings.stratum.jd;
        let endpoints = Endpoint::parse(&jd.server)
            .map_err(|e| format!("stratum.jd.server: {e}"))
            .and_then(|s| {
                Endpoint::parse(&jd.template_provider)
                    .map(|t| (s, t))
                    .map_err(|e| format!("stratum.jd.template_provider: {e}"))
            });
        let task = match endpoints {
            Err(e) => {
                self.jd_view.client_error = e;
                None
            }
            Ok((server, template_provider)) => {
                let c = &self.conns[&conn];
                let (user, extranonce_len) = match &c.session {
                    PoolSession::V2(s, _) => (
                        self.slot(c.uid)
                            .map(|s| s.cfg.user.clone())
                            .unwrap_or_default(),
                        s.extranonce1.len() + s.extranonce2_size,
                    ),
                    PoolSession::V1(_) => return,
                };
                let params = JdParams {
                    server,
                    template_provider,
                    user,
                    extranonce_len,
                    timeout: Duration::from_secs(self.settings.stratum.connect_timeout_s.into()),
                };
                self.jd_view.client_error = "connecting to the job declaration server".into();
                let events = self.events_tx.clone();
                Some(tokio::spawn(crate::jd::client::run(id, params, events)).abort_handle())
            }
        };
        self.jd_run = Some(JdRun { conn, id, task });
        self.publish_jd();
    }

    /// News from JD client run `run_id` (late news of a dropped run is ignored).
    pub(super) fn on_jd_event(&mut self, run_id: u64, ev: JdEvent) {
        let Some(conn) = self
            .jd_run
            .as_ref()
            .filter(|r| r.id == run_id)
            .map(|r| r.conn)
        else {
            return;
        };
        let at_ms = unix_ms();
        let events = {
            let Some(PoolSession::V2(session, _)) =
                self.conns.get_mut(&conn).map(|c| &mut c.session)
            else {
                return;
            };
            match ev {
                JdEvent::Connected => {
                    self.jd_view.connected = true;
                    Vec::new()
                }
                JdEvent::Declared(job) => {
                    self.jd_view.jobs_declared += 1;
                    self.jd_view.client_error.clear();
                    self.jd_view.last_declared = Some(job.clone());
                    session.set_custom_job(*job, at_ms)
                }
                JdEvent::Failed(reason) => {
                    self.jd_view.connected = false;
                    self.jd_view.failures += 1;
                    self.jd_view.client_error = reason.clone();
                    session.drop_custom_job(&reason)
                }
            }
        };
        let uid = self.conns[&conn].uid;
        for ev in events {
            self.on_session_event(conn, uid, ev, svcos_common::time::unix_us());
            if !self.conns.contains_key(&conn) {
                break;
            }
        }
        self.publish_jd();
        self.publish_sv2(conn, None);
    }

    /// Rebuild the `GetJdStatus` view.
    pub(super) fn publish_jd(&mut self) {
        let stratum = &self.settings.stratum;
        let mut status = GetJdStatusResponse {
            sv2_enabled: stratum.sv2_enabled,
            enabled: stratum.jd.enabled,
            server: stratum.jd.server.clone(),
            template_provider: stratum.jd.template_provider.clone(),
            jobs_declared: self.jd_view.jobs_declared,
            failures: self.jd_view.failures,
            pool_index: -1,
            ..Default::default()
        };
        let mining = self.epoch_conn.and_then(|c| self.conns.get(&c));
        let session = mining.and_then(|c| match &c.session {
            PoolSession::V2(s, _) => Some(s),
            PoolSession::V1(_) => None,
        });
        status.template_source = match (mining, session) {
            (None, _) => "none",
            (Some(_), Some(s)) if s.custom_job.is_some() => "jd",
            (Some(_), _) => "pool",
        }
        .into();
        if let (Some(c), Some(s)) = (mining, session) {
            status.pool_index = self.index_of(c.uid);
            status.shares_accepted = s.custom_accepted;
            status.shares_rejected = s.custom_rejected;
        }
        status.connected = self.jd_run.is_some() && self.jd_view.connected;
        if let Some(job) = &self.jd_view.last_declared {
            let mut prev = job.prev_hash;
            prev.reverse();
            let value = crate::jd::coinbase::decode_outputs(&job.coinbase.outputs)
                .map(|o| o.iter().map(|o| o.value.to_sat()).sum())
                .unwrap_or(0);
            status.last_declared_job = Some(DeclaredJobPb {
                template_id: job.template_id,
                prev_hash: hex::encode(prev),
                tx_count: job.tx_count,
                declared_at_ms: job.declared_at_ms,
                token: hex::encode(&job.token),
                pool_job_id: session
                    .and_then(|s| s.custom_job.as_ref())
                    .filter(|(_, j)| j.token == job.token)
                    .map_or(0, |(id, _)| *id),
                coinbase_value_sat: value,
            });
        }
        status.fallback_reason = if !stratum.jd.enabled || status.template_source == "jd" {
            String::new()
        } else if !stratum.sv2_enabled {
            "Stratum V2 is disabled ([stratum].sv2_enabled = false)".into()
        } else if session.is_none() {
            "the pool being mined is not a stratum2+tcp:// pool".into()
        } else if let Some(e) = session
            .map(|s| s.custom_error.as_str())
            .filter(|e| !e.is_empty())
            .filter(|_| self.jd_view.client_error.is_empty())
        {
            e.to_string()
        } else if !self.jd_view.client_error.is_empty() {
            self.jd_view.client_error.clone()
        } else {
            "waiting for the pool to accept the declared job".into()
        };
        self.jd_tx.send_replace(status);
    }

    /// After a reload: a changed `[stratum.jd]` restarts the client; turning job declaration
    /// on or off reconnects SV2 pools, whose SetupConnection must (or must no longer) ask for
    /// work selection.
    pub(super) fn jd_reloaded(&mut self, before: &svcos_common::config::StratumConfig) {
        let now = &self.settings.stratum;
        if before.jd == now.jd && before.sv2_enabled == now.sv2_enabled {
            return;
        }
        let work_selection_changed =
            (before.jd.enabled && before.sv2_enabled) != (now.jd.enabled && now.sv2_enabled);
        self.jd_run = None;
        // Run ids keep counting: a dropped run's late news must not match a new one.
        self.jd_view = JdView {
            runs: self.jd_view.runs,
            ..JdView::default()
        };
        if work_selection_changed {
            let v2: Vec<u64> = self
                .conns
                .values()
                .filter(|c| matches!(c.session, PoolSession::V2(..)))
                .map(|c| c.uid)
                .collect();
            for uid in v2 {
                let reason = "job declaration setting changed; reconnecting".to_string();
                self.close(uid, Some((PoolState::Connecting, reason, Duration::ZERO)));
            }
        }
        self.publish_jd();
    }
}
