//! Connection seam: opening and closing pool connections and turning their events (lines,
//! frames, handshakes, closes) into session events the agent acts on.

use super::*;

impl Agent {
    // ---------------------------------------------------------------- connections

    pub(super) fn open(&mut self, uid: u64) {
        let conn = self.next_conn;
        self.next_conn += 1;
        let stratum = self.settings.stratum.clone();
        let tls = self.settings.tls.clone();
        let events = self.events_tx.clone();
        let Some(slot) = self.slot_mut(uid) else {
            return;
        };
        let Some(mut url) = slot.url.clone() else {
            return;
        };
        if let Some(p) = slot.redirect_port {
            url.port = p;
        }
        if url.scheme == Scheme::V2 {
            if !stratum.sv2_enabled {
                slot.state = PoolState::Dead;
                slot.last_error =
                    "Stratum V2 is behind the readiness gate ([stratum].sv2_enabled = false)"
                        .into();
                slot.retry_at = Instant::now() + MAX_BACKOFF;
                return;
            }
            let key = url
                .authority_key
                .clone()
                .ok_or_else(|| {
                    "a stratum2+tcp:// pool URL needs the pool's authority key: stratum2+tcp://host:port/<base58 key>".to_string()
                })
                .and_then(|b58| crate::v2::parse_authority_key(&b58).map(|k| (k, b58)));
            let (key, b58) = match key {
                Ok(k) => k,
                Err(e) => {
                    slot.state = PoolState::Dead;
                    slot.last_error = e;
                    slot.retry_at = Instant::now() + MAX_BACKOFF;
                    return;
                }
            };
            let params = Sv2Params {
                user: slot.cfg.user.clone(),
                version_rolling: stratum.version_rolling,
                endpoint_host: url.host.clone(),
                endpoint_port: url.port,
                device_id: String::new(),
                work_selection: stratum.sv2_enabled && stratum.jd.enabled,
            };
            let link = Sv2Link {
                endpoint: url.addr(),
                authority_b58: b58.clone(),
                fingerprint: crate::v2::fingerprint(&key),
                handshake: "in_progress",
                handshake_log: vec![LoggedMessage {
                    at_ms: unix_ms(),
                    direction: "out",
                    message_type: "NoiseHandshake".into(),
                    summary: "act 1: -> e (ElligatorSwift ephemeral key, 64 bytes)".into(),
                }],
                ..Default::default()
            };
            slot.conn = Some(conn);
            if slot.state != PoolState::AuthFailed && slot.state != PoolState::Silent {
                slot.state = PoolState::Connecting;
            }
            tracing::debug!(pool = %mask_url_userinfo(&slot.cfg.url), conn, "connecting (Stratum V2)");
            let handle = crate::v2::conn::spawn(
                conn,
                url,
                (key, b58),
                Duration::from_secs(stratum.connect_timeout_s.into()),
                events,
            );
            self.conns.insert(
                conn,
                ConnState {
                    uid,
                    handle,
                    session: PoolSession::V2(Box::new(Sv2Session::new(params)), Box::new(link)),
                    opened: Instant::now(),
                    connected: false,
                    authorized_at: None,
                    last_notify: None,
                    last_job: None,
                },
            );
            self.publish_sv2(conn, None);
            self.pools_dirty = true;
            return;
        }
        let session = Session::new(SessionParams {
            user: slot.cfg.user.clone(),
            password: PoolUrl::login_password(&slot.cfg.url, &slot.cfg.password).to_string(),
            version_rolling: stratum.version_rolling,
            suggest_difficulty: stratum.suggest_difficulty,
            resume: slot.session_id.clone(),
        });
        slot.conn = Some(conn);
        if slot.state != PoolState::AuthFailed && slot.state != PoolState::Silent {
            slot.state = PoolState::Connecting;
        }
        tracing::debug!(pool = %mask_url_userinfo(&slot.cfg.url), conn, "connecting");
        let handle = conn::spawn(
            conn,
            url,
            tls,
            Duration::from_secs(stratum.connect_timeout_s.into()),
            events,
        );
        self.conns.insert(
            conn,
            ConnState {
                uid,
                handle,
                session: PoolSession::V1(Box::new(session)),
                opened: Instant::now(),
                connected: false,
                authorized_at: None,
                last_notify: None,
                last_job: None,
            },
        );
        self.pools_dirty = true;
    }

    /// Close a slot's connection; `failure` marks it failed with that state and error.
    pub(super) fn close(&mut self, uid: u64, failure: Option<(PoolState, String, Duration)>) {
        let Some(slot) = self.slot_mut(uid) else {
            return;
        };
        let Some(conn) = slot.conn.take() else { return };
        slot.healthy_since = None;
        slot.connected_since_ms = 0;
        if let Some((state, error, retry)) = failure {
            slot.state = state;
            slot.last_error = error;
            slot.retry_at = Instant::now() + retry;
        } else if slot.cfg.enabled || uid == DONATION_UID {
            slot.state = PoolState::Connecting;
        } else {
            slot.state = PoolState::Disabled;
        }
        self.conns.remove(&conn);
        if self.epoch_conn == Some(conn) {
            self.epoch_conn = None;
        }
        self.pools_dirty = true;
    }

    pub(super) fn conn_event(&mut self, ev: ConnEvent) {
        match ev {
            ConnEvent::Connected(conn) => {
                let Some(c) = self.conns.get_mut(&conn) else {
                    return;
                };
                c.connected = true;
                let uid = c.uid;
                let events = match &mut c.session {
                    PoolSession::V1(session) => {
                        for l in session.start() {
                            c.handle.send(l);
                        }
                        Vec::new()
                    }
                    PoolSession::V2(session, _) => session.start(unix_ms()),
                };
                if let Some(s) = self.slot_mut(uid) {
                    s.connected_since_ms = unix_ms();
                }
                for ev in events {
                    self.on_session_event(conn, uid, ev, svcos_common::time::unix_us());
                }
                self.publish_sv2(conn, None);
            }
            ConnEvent::Line {
                conn,
                line,
                at_us,
                read_ns,
            } => self.on_line(conn, &line, at_us, read_ns),
            ConnEvent::Sv2Handshake {
                conn,
                ok,
                detail,
                at_ms,
            } => {
                if let Some(PoolSession::V2(_, link)) =
                    self.conns.get_mut(&conn).map(|c| &mut c.session)
                {
                    link.handshake = if ok { "ok" } else { "failed" };
                    link.handshake_detail = detail.clone();
                    link.handshake_at_ms = at_ms;
                    link.handshake_log.push(LoggedMessage {
                        at_ms,
                        direction: "in",
                        message_type: "NoiseHandshake".into(),
                        summary: if ok {
                            "act 2: <- e, ee, s, es, certificate (verified)".into()
                        } else {
                            format!("act 2 failed: {detail}")
                        },
                    });
                }
                if !ok {
                    tracing::warn!(conn, error = %detail, "Stratum V2 handshake failed");
                }
                self.publish_sv2(conn, None);
            }
            ConnEvent::Frame { conn, frame, at_us } => self.on_frame(conn, &frame, at_us),
            ConnEvent::Jd(run_id, ev) => self.on_jd_event(run_id, ev),
            ConnEvent::Closed { conn, error } => {
                let Some(c) = self.conns.get(&conn) else {
                    return;
                };
                let uid = c.uid;
                let (connected, was_alive) = (c.connected, c.authorized_at.is_some());
                tracing::info!(pool = self.index_of(uid), error = %error, "pool connection closed");
                if matches!(c.session, PoolSession::V2(..)) {
                    self.publish_sv2(conn, Some(&error));
                }
                {
                    let counters = self.counters(uid);
                    if connected {
                        counters.remote_failures += 1
                    } else {
                        counters.get_failures += 1
                    }
                }
                let Some(slot) = self.slot_mut(uid) else {
                    return;
                };
                // A session that worked is retried at once (to resume it); failures back off.
                let retry = if was_alive {
                    slot.backoff.reset();
                    Duration::ZERO
                } else {
                    slot.backoff.next_delay()
                };
                let state = if slot.state == PoolState::AuthFailed {
                    PoolState::AuthFailed
                } else {
                    PoolState::Dead
                };
                self.close(uid, Some((state, error, retry)));
            }
        }
    }

    /// `read_ns` is when the connection task read the line on the share-path trace clock (0
    /// with the trace off).
    pub(super) fn on_line(&mut self, conn: ConnId, line: &[u8], at_us: i64, read_ns: u64) {
        let msg = match parse_line(line) {
            Ok(m) => m,
            Err(e) => {
                // Garbage is skipped, not fatal: the silence timeout catches a pool that sends
                // nothing else.
                tracing::debug!(conn, error = %e, "unparseable line from pool");
                return;
            }
        };
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let uid = c.uid;
        let PoolSession::V1(session) = &mut c.session else {
            return;
        };
        let events = session.handle(msg);
        for ev in events {
            // Share-path trace: a clean notify read by the connection task, parsed here, and
            // published to the job stream's readers.
            let clean_prev = match &ev {
                SessionEvent::Job(n) if read_ns != 0 && n.clean_jobs => Some(n.prev_hash),
                _ => None,
            };
            let parsed_ns = clean_prev.map_or(0, |_| svcos_common::trace::mono_ns());
            self.on_session_event(conn, uid, ev, at_us);
            if let Some(prev) = clean_prev {
                svcos_common::trace::record(
                    "sa.notify",
                    format_args!(
                        "{} {read_ns} {parsed_ns} {}",
                        hex::encode(prev),
                        svcos_common::trace::mono_ns()
                    ),
                );
            }
            if !self.conns.contains_key(&conn) {
                return;
            }
        }
    }

    pub(super) fn on_frame(&mut self, conn: ConnId, frame: &[u8], at_us: i64) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let uid = c.uid;
        let PoolSession::V2(session, _) = &mut c.session else {
            return;
        };
        let jobs_before = session.jobs_received;
        let events = session.handle(frame, at_us / 1000);
        // While a declared job is mined the pool's own jobs raise no Job event, yet they show
        // the pool is alive.
        if session.jobs_received != jobs_before {
            c.last_notify = Some(Instant::now());
        }
        for ev in events {
            self.on_session_event(conn, uid, ev, at_us);
            if !self.conns.contains_key(&conn) {
                return;
            }
        }
        self.publish_sv2(conn, None);
    }

    pub(super) fn on_session_event(
        &mut self,
        conn: ConnId,
        uid: u64,
        ev: SessionEvent,
        at_us: i64,
    ) {
        let now = Instant::now();
        match ev {
            SessionEvent::Send(line) => {
                if let Some(c) = self.conns.get(&conn) {
                    c.handle.send(line);
                }
            }
            SessionEvent::SendFrame(frame) => {
                if let Some(c) = self.conns.get(&conn) {
                    c.handle.send_bytes(frame);
                }
            }
            SessionEvent::Subscribed { resumed } => {
                let sid = self.conns.get(&conn).and_then(|c| c.session.session_id());
                if let Some(s) = self.slot_mut(uid) {
                    s.session_id = sid;
                }
                tracing::debug!(conn, resumed, "subscribed");
            }
            SessionEvent::Authorized => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.authorized_at = Some(now);
                }
                if let Some(s) = self.slot_mut(uid) {
                    s.backoff.reset();
                    s.last_error.clear();
                }
                if self.epoch_uid == Some(uid)
                    && self.epoch_conn.is_none()
                    && self.active == Some(uid)
                {
                    self.try_resume(uid);
                }
                self.pools_dirty = true;
            }
            SessionEvent::Refused(reason) => {
                tracing::warn!(pool = self.index_of(uid), reason = %reason, "pool refused us");
                self.counters(uid).remote_failures += 1;
                self.close(uid, Some((PoolState::AuthFailed, reason, AUTH_RETRY)));
            }
            SessionEvent::Job(n) => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.last_notify = Some(now);
                    c.last_job = Some((n.clone(), at_us));
                }
                if let Some(s) = self.slot_mut(uid) {
                    s.state = PoolState::Alive;
                    s.healthy_since.get_or_insert(now);
                }
                if self.epoch_conn == Some(conn) {
                    let index = self.index_of(uid) as u32;
                    let epoch = self.epoch.as_mut().expect("epoch of epoch_conn");
                    let t = epoch.add_job(&n, index, at_us, uid == DONATION_UID);
                    let clean = n.clean_jobs;
                    if clean {
                        self.drop_queue("clean jobs");
                    }
                    self.publish_job(t, clean);
                    self.dirty = true;
                }
                self.pools_dirty = true;
            }
            SessionEvent::Difficulty(d) => {
                if self.epoch_conn == Some(conn)
                    && let Some(e) = self.epoch.as_mut()
                {
                    e.difficulty = d;
                    if let Some(t) = e.refresh_current() {
                        self.publish_job(t, false);
                    }
                }
                self.pools_dirty = true;
            }
            SessionEvent::VersionMask(mask) => {
                if self.epoch_conn == Some(conn)
                    && let Some(e) = self.epoch.as_mut()
                {
                    e.version_mask = mask.unwrap_or(0);
                    if let Some(t) = e.refresh_current() {
                        self.publish_job(t, false);
                    }
                }
                self.pools_dirty = true;
            }
            SessionEvent::ExtranonceChanged => {
                if self.epoch_conn == Some(conn) {
                    // The coinbase changes under every job: a new epoch from the latest job.
                    self.epoch_uid = None;
                    self.begin_epoch(uid, "");
                }
            }
            SessionEvent::ShareResult {
                ticket,
                accepted,
                reason,
            } => self.on_share_result(ticket, accepted, reason.map(|r| r.message)),
            SessionEvent::Reconnect { host, port, wait_s } => {
                let Some(slot) = self.slot_mut(uid) else {
                    return;
                };
                // Only a port change on the same host is followed: a pool must not be able to
                // send the miner's hashrate to an arbitrary host.
                let same_host = host
                    .as_deref()
                    .is_none_or(|h| slot.url.as_ref().is_some_and(|u| u.host == h));
                if same_host {
                    slot.redirect_port = port;
                } else {
                    tracing::warn!(pool = %mask_url_userinfo(&slot.cfg.url), "client.reconnect to another host ignored; reconnecting to the configured one");
                }
                let error = "pool asked to reconnect".to_string();
                self.close(
                    uid,
                    Some((PoolState::Connecting, error, Duration::from_secs(wait_s))),
                );
            }
            SessionEvent::Message(m) => {
                tracing::info!(pool = self.index_of(uid), message = %m, "message from pool");
            }
        }
    }
}
