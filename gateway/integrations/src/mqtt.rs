//! The MQTT publisher (rumqttc, MQTT 3.1.1 over plain TCP) and the connection test.
//!
//! One session per config: Last Will `offline` (retained) on `<base>/availability`, `online`
//! after every CONNACK, Home Assistant discovery configs (retained) after every CONNACK, after
//! Home Assistant's own `online` birth message and whenever the set of chains or fans changes,
//! the state message every `publish_interval_s`, events as they come. A stop (shutdown, MQTT
//! disabled, settings changed) publishes `offline` itself before disconnecting, because a clean
//! DISCONNECT suppresses the Last Will.
//!
//! Real data only: while hw-agent's telemetry or stratum-agent's pools are missing (the first
//! second after any of the three processes starts), the state message and the discovery configs
//! are held back, for at most [`MISSING_GRACE`]; they go out the moment both are there. So
//! after a gateway restart the first retained state carries real counters (never nulls that a
//! template could turn into 0) and the first discovery burst already has hw-agent's model. A
//! source away for longer is reported as null members, which every template maps to `None`
//! (Home Assistant: unknown).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rumqttc::{
    AsyncClient, ConnectReturnCode, ConnectionError, Event as MqttEvent, EventLoop, LastWill,
    MqttOptions, Outgoing, Packet, QoS,
};
use serde_json::json;
use svcos_api_types::integrations::{MqttTestBody, MqttTestStep};
use svcos_common::Shutdown;
use svcos_common::config::MqttConfig;
use svcos_common::ipc::Backoff;
use svcos_common::time::Clock;
use svcos_proto::hwagent::v1::Telemetry;
use svcos_proto::stratum::v1::GetPoolsResponse;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::time::Instant;

use crate::commands::{Command, CommandResult};
use crate::payload::{self, Topics};
use crate::{Event, Settings};

/// Requests (publishes) buffered towards the event loop; a full buffer drops the message.
pub const REQUEST_CAPACITY: usize = 64;
/// Largest message either way (discovery configs are ~700 bytes, state ~1-2 KiB).
const MAX_PACKET: usize = 64 * 1024;
/// TCP + CONNACK deadline of one connection attempt, seconds.
const CONNECT_TIMEOUT_S: u64 = 5;
/// Reconnect backoff bounds.
const BACKOFF_MIN: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// How long a stop waits for `offline` and DISCONNECT to leave.
const STOP_GRACE: Duration = Duration::from_secs(2);
/// Firmware version for the discovery device block.
const VERSION: &str = env!("CARGO_PKG_VERSION");
/// How long the state and discovery wait for a missing source before going out without it
/// (a restart of hw-agent, stratum-agent or the gateway takes about a second).
pub const MISSING_GRACE: Duration = Duration::from_secs(30);

pub use svcos_api_types::integrations::MqttStatus;

/// What the publisher task needs.
pub struct Ctx {
    /// Live settings.
    pub settings: watch::Receiver<Arc<Settings>>,
    /// Derived events.
    pub events: broadcast::Receiver<Arc<Event>>,
    /// Latest telemetry.
    pub telemetry: watch::Receiver<Option<Telemetry>>,
    /// Latest pools.
    pub pools: watch::Receiver<Option<GetPoolsResponse>>,
    /// The energy meter's saved total, kWh.
    pub energy: watch::Receiver<f64>,
    /// The LAN interface's MAC (discovery `connections`).
    pub mac: Option<String>,
    /// Shared status.
    pub status: Arc<Mutex<MqttStatus>>,
    /// Wall clock.
    pub clock: Arc<dyn Clock>,
    /// Stop.
    pub shutdown: Shutdown,
    /// Commands received, towards the gateway.
    pub commands: mpsc::Sender<Command>,
    /// Verdicts on commands, to publish.
    pub results: tokio::sync::Mutex<mpsc::Receiver<CommandResult>>,
}

enum End {
    Stop,
    Reconfigure,
}

fn qos(n: u8) -> QoS {
    match n {
        0 => QoS::AtMostOnce,
        1 => QoS::AtLeastOnce,
        _ => QoS::ExactlyOnce,
    }
}

/// An operator-readable reason for a failed connection or session.
pub fn describe(e: &ConnectionError) -> String {
    match e {
        ConnectionError::ConnectionRefused(code) => match code {
            ConnectReturnCode::BadUserNamePassword => {
                "broker refused the connection: bad user name or password".into()
            }
            ConnectReturnCode::NotAuthorized => {
                "broker refused the connection: not authorised (check user name and password)"
                    .into()
            }
            ConnectReturnCode::BadClientId => {
                "broker refused the connection: client id rejected".into()
            }
            ConnectReturnCode::ServiceUnavailable => {
                "broker refused the connection: service unavailable".into()
            }
            ConnectReturnCode::RefusedProtocolVersion => {
                "broker refused the connection: it does not accept MQTT 3.1.1".into()
            }
            ConnectReturnCode::Success => "unexpected CONNACK".into(),
        },
        ConnectionError::NetworkTimeout => "timed out connecting to the broker".into(),
        ConnectionError::FlushTimeout => "timed out writing to the broker".into(),
        ConnectionError::Io(io) => format!("network error: {io}"),
        ConnectionError::MqttState(s) => format!("connection lost: {s}"),
        other => other.to_string(),
    }
}

fn options(cfg: &MqttConfig, client_id: &str, will: Option<&Topics>) -> MqttOptions {
    let mut o = MqttOptions::new(client_id, cfg.host.clone(), cfg.port);
    o.set_keep_alive(Duration::from_secs(u64::from(cfg.keep_alive_s)))
        .set_clean_session(true)
        .set_max_packet_size(MAX_PACKET, MAX_PACKET)
        .set_inflight(32);
    if !cfg.username.is_empty() {
        o.set_credentials(cfg.username.clone(), cfg.password.clone());
    }
    if let Some(t) = will {
        o.set_last_will(LastWill::new(
            t.availability.clone(),
            "offline",
            QoS::AtLeastOnce,
            true,
        ));
    }
    o
}

fn new_client(o: MqttOptions) -> (AsyncClient, EventLoop) {
    let (client, mut eventloop) = AsyncClient::new(o, REQUEST_CAPACITY);
    eventloop
        .network_options
        .set_connection_timeout(CONNECT_TIMEOUT_S);
    (client, eventloop)
}

/// Run until shutdown: one broker session per applied `[mqtt]` config.
pub async fn run(mut ctx: Ctx) {
    loop {
        let settings = ctx.settings.borrow_and_update().clone();
        if !settings.mqtt.enabled {
            let counters = take_counters(&ctx.status);
            *ctx.status.lock().expect("mqtt status lock") = counters;
            tokio::select! {
                r = ctx.settings.changed() => if r.is_err() { return },
                _ = ctx.shutdown.wait() => return,
            }
            continue;
        }
        match session(&mut ctx, &settings).await {
            End::Stop => return,
            End::Reconfigure => continue,
        }
    }
}

/// Counters survive reconfiguration; connection facts do not.
fn take_counters(status: &Mutex<MqttStatus>) -> MqttStatus {
    let s = status.lock().expect("mqtt status lock");
    MqttStatus {
        connects: s.connects,
        messages_published: s.messages_published,
        messages_dropped: s.messages_dropped,
        last_publish_ms: s.last_publish_ms,
        ..Default::default()
    }
}

struct Session<'a> {
    ctx: &'a Ctx,
    settings: &'a Settings,
    topics: Topics,
    client: AsyncClient,
    /// Chain and fan ids the discovery configs were last published for.
    discovered: Option<(Vec<u32>, Vec<u32>, String)>,
    /// Since when telemetry or pools have been missing (`None` while both are there).
    missing_since: Option<Instant>,
    /// The last state was held back for a missing source: publish as soon as it is there.
    held: bool,
}

impl Session<'_> {
    fn status(&self) -> std::sync::MutexGuard<'_, MqttStatus> {
        self.ctx.status.lock().expect("mqtt status lock")
    }

    fn publish(&self, topic: &str, retain: bool, qos: QoS, payload: Vec<u8>) {
        if self
            .client
            .try_publish(topic, qos, retain, payload)
            .is_err()
        {
            self.status().messages_dropped += 1;
        }
    }

    /// Publish the state message (and first the discovery configs, when they are due), or hold
    /// it back while a source is missing (see the module doc).
    fn publish_state(&mut self) {
        let ctx = self.ctx;
        let body = {
            let t = ctx.telemetry.borrow();
            let p = ctx.pools.borrow();
            if t.is_some() && p.is_some() {
                self.missing_since = None;
            } else {
                let since = *self.missing_since.get_or_insert_with(Instant::now);
                if since.elapsed() < MISSING_GRACE {
                    self.held = true;
                    return;
                }
            }
            self.held = false;
            if self.settings.mqtt.discovery {
                let shape = t.as_ref().map(|t| {
                    (
                        t.chains.iter().map(|c| c.chain_id).collect::<Vec<_>>(),
                        t.fans.iter().map(|f| f.fan_id).collect::<Vec<_>>(),
                        t.model.clone(),
                    )
                });
                // Without telemetry past the grace, the board-independent sensors go out once,
                // with the model of the configured board (where hw-agent takes it from).
                if shape.is_some() && shape != self.discovered
                    || self.discovered.is_none() && shape.is_none()
                {
                    self.publish_discovery(t.as_ref());
                    self.discovered = shape.or(Some((
                        Vec::new(),
                        Vec::new(),
                        self.settings.board_model.clone(),
                    )));
                }
            }
            // Live settings: the mode changes without a new session.
            let live = ctx.settings.borrow().clone();
            payload::state(
                &self.settings.hostname,
                &live.mode,
                ctx.clock.now_ms(),
                t.as_ref(),
                p.as_ref(),
                *ctx.energy.borrow(),
            )
        };
        self.publish(
            &self.topics.state,
            self.settings.mqtt.retain,
            qos(self.settings.mqtt.qos),
            serde_json::to_vec(&body).expect("state serialises"),
        );
    }

    /// When a held-back state goes out without its missing source.
    fn grace_deadline(&self) -> Option<Instant> {
        self.held
            .then_some(self.missing_since)
            .flatten()
            .map(|since| since + MISSING_GRACE)
    }

    fn publish_discovery(&self, t: Option<&Telemetry>) {
        let info = payload::DeviceInfo {
            hostname: self.settings.hostname.clone(),
            version: VERSION.into(),
            model: t
                .map(|t| t.model.clone())
                .filter(|m| !m.is_empty())
                .unwrap_or_else(|| self.settings.board_model.clone()),
            configuration_url: Some(self.settings.dashboard_url.clone()),
            mac: self.ctx.mac.clone(),
        };
        for sensor in payload::discovery(&self.topics, &info, t) {
            self.publish(
                &self.topics.discovery(&sensor.object_id),
                true,
                QoS::AtLeastOnce,
                serde_json::to_vec(&sensor.config).expect("discovery serialises"),
            );
        }
        for control in payload::command_discovery(&self.topics, &info) {
            let topic = self
                .topics
                .discovery_for(control.entity.component(), control.entity.object());
            // With commands off, an empty retained config removes an entity announced before.
            let body = if self.settings.mqtt.commands {
                serde_json::to_vec(&control.config).expect("discovery serialises")
            } else {
                Vec::new()
            };
            self.publish(&topic, true, QoS::AtLeastOnce, body);
        }
    }

    /// A message on one of the command topics: queue it for the gateway, which runs the REST
    /// write it mirrors and answers through [`CommandResult`].
    fn on_command(&self, command: Command) {
        let entity = command.entity;
        if let Err(e) = self.ctx.commands.try_send(command) {
            let command = match e {
                mpsc::error::TrySendError::Full(c) | mpsc::error::TrySendError::Closed(c) => c,
            };
            tracing::warn!(entity = ?entity, "MQTT command refused: too many commands queued");
            let result = CommandResult {
                schema: crate::commands::RESULT_SCHEMA,
                entity,
                payload: command.payload,
                ok: false,
                status: 503,
                route: None,
                error: Some("too many commands queued; try again".into()),
                at_ms: self.ctx.clock.now_ms(),
            };
            self.publish_result(&result);
        }
    }

    fn publish_result(&self, result: &CommandResult) {
        self.publish(
            &self.topics.command_result(),
            false,
            QoS::AtLeastOnce,
            serde_json::to_vec(result).expect("command result serialises"),
        );
    }

    fn on_connected(&mut self) {
        {
            let now = self.ctx.clock.now_ms();
            let mut s = self.status();
            s.connected = true;
            s.connects += 1;
            s.connected_since_ms = Some(now);
        }
        tracing::info!(broker = %format!("{}:{}", self.settings.mqtt.host, self.settings.mqtt.port), "MQTT connected");
        self.publish(
            &self.topics.availability,
            true,
            QoS::AtLeastOnce,
            b"online".to_vec(),
        );
        if self.settings.mqtt.discovery {
            let _ = self
                .client
                .try_subscribe(self.topics.ha_status.clone(), QoS::AtMostOnce);
            self.discovered = None;
        }
        if self.settings.mqtt.commands {
            for entity in crate::commands::Entity::ALL {
                let _ = self
                    .client
                    .try_subscribe(self.topics.command(entity), QoS::AtLeastOnce);
            }
        }
        self.publish_state();
    }

    /// Publish `offline` and disconnect cleanly, waiting briefly for both to leave.
    async fn stop(&self, eventloop: &mut EventLoop, connected: bool) {
        if !connected {
            return;
        }
        let _ = self.client.try_publish(
            self.topics.availability.clone(),
            QoS::AtLeastOnce,
            true,
            b"offline".to_vec(),
        );
        let _ = self.client.try_disconnect();
        let _ = tokio::time::timeout(STOP_GRACE, async {
            loop {
                match eventloop.poll().await {
                    Ok(MqttEvent::Outgoing(Outgoing::Disconnect)) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        })
        .await;
        let mut s = self.status();
        s.connected = false;
        s.connected_since_ms = None;
    }
}

async fn session(ctx: &mut Ctx, settings: &Arc<Settings>) -> End {
    let ctx: &Ctx = ctx;
    let cfg = &settings.mqtt;
    let topics = Topics::new(cfg, &settings.hostname);
    let client_id = payload::client_id(cfg, &topics);
    let counters = take_counters(&ctx.status);
    *ctx.status.lock().expect("mqtt status lock") = MqttStatus {
        enabled: true,
        broker: Some(format!("{}:{}", cfg.host, cfg.port)),
        client_id: Some(client_id.clone()),
        base_topic: Some(topics.base.clone()),
        ..counters
    };
    let (client, mut eventloop) = new_client(options(cfg, &client_id, Some(&topics)));
    let mut events = ctx.events.resubscribe();
    let mut settings_rx = ctx.settings.clone();
    let shutdown = ctx.shutdown.clone();
    // Sessions run one after another, so this lock is only ever held by the current one.
    let mut results = ctx.results.lock().await;
    let mut telemetry = ctx.telemetry.clone();
    let mut pools = ctx.pools.clone();
    let mut s = Session {
        ctx,
        settings,
        topics,
        client,
        discovered: None,
        missing_since: None,
        held: false,
    };
    let interval = Duration::from_secs(u64::from(cfg.publish_interval_s));
    let mut next_state = Instant::now() + interval;
    let mut connected = false;
    let mut backoff = Backoff::new(BACKOFF_MIN, BACKOFF_MAX);
    loop {
        tokio::select! {
            _ = shutdown.wait() => {
                s.stop(&mut eventloop, connected).await;
                return End::Stop;
            }
            r = settings_rx.changed() => {
                if r.is_err() {
                    return End::Stop;
                }
                let new = settings_rx.borrow_and_update().clone();
                if new.mqtt == settings.mqtt && new.hostname == settings.hostname {
                    continue;
                }
                s.stop(&mut eventloop, connected).await;
                return End::Reconfigure;
            }
            ev = eventloop.poll() => match ev {
                Ok(MqttEvent::Incoming(Packet::ConnAck(_))) => {
                    connected = true;
                    backoff.reset();
                    s.on_connected();
                    next_state = Instant::now() + interval;
                }
                Ok(MqttEvent::Incoming(Packet::Publish(p))) => {
                    if p.topic == s.topics.ha_status && p.payload.as_ref() == b"online" {
                        // Home Assistant restarted: it wants the discovery configs again.
                        s.discovered = None;
                        s.publish_state();
                    } else if let Some(entity) = s.topics.command_entity(&p.topic)
                        && settings.mqtt.commands
                    {
                        if p.payload.is_empty() {
                            // How a retained command is cleared (Home Assistant and
                            // mosquitto_pub -r -n do this): not a command, nothing to answer.
                            tracing::debug!(?entity, "empty MQTT command payload ignored");
                        } else {
                            s.on_command(Command::new(entity, &p.payload, p.retain));
                        }
                    }
                }
                Ok(MqttEvent::Outgoing(Outgoing::Publish(_))) => {
                    let now = s.ctx.clock.now_ms();
                    let mut st = s.status();
                    st.messages_published += 1;
                    st.last_publish_ms = Some(now);
                }
                Ok(_) => {}
                Err(e) => {
                    let reason = describe(&e);
                    if connected {
                        tracing::warn!(%reason, "MQTT session lost; reconnecting");
                    } else {
                        tracing::debug!(%reason, "MQTT connection attempt failed");
                    }
                    connected = false;
                    {
                        let now = s.ctx.clock.now_ms();
                        let mut st = s.status();
                        st.connected = false;
                        st.connected_since_ms = None;
                        st.last_error = Some(reason);
                        st.last_error_at_ms = Some(now);
                    }
                    // Wait before the next attempt, but stay responsive to stop and reconfigure.
                    tokio::select! {
                        _ = tokio::time::sleep(backoff.next_delay()) => {}
                        _ = shutdown.wait() => return End::Stop,
                        r = settings_rx.changed() => {
                            if r.is_err() { return End::Stop; }
                            let new = settings_rx.borrow().clone();
                            if new.mqtt != settings.mqtt || new.hostname != settings.hostname {
                                return End::Reconfigure;
                            }
                        }
                    }
                }
            },
            _ = tokio::time::sleep_until(next_state), if connected => {
                next_state = Instant::now() + interval;
                s.publish_state();
            }
            // A held-back state goes out as soon as the missing source is there, or without it
            // once the grace is over.
            r = telemetry.changed(), if connected && s.held => {
                if r.is_err() { return End::Stop; }
                s.publish_state();
            }
            r = pools.changed(), if connected && s.held => {
                if r.is_err() { return End::Stop; }
                s.publish_state();
            }
            _ = tokio::time::sleep_until(s.grace_deadline().unwrap_or(next_state)),
                if connected && s.held => {
                s.publish_state();
            }
            Some(result) = results.recv() => {
                if connected {
                    s.publish_result(&result);
                    if result.ok {
                        // Show the new state now rather than at the next interval.
                        s.publish_state();
                    }
                } else {
                    s.status().messages_dropped += 1;
                }
            }
            ev = events.recv() => match ev {
                Ok(ev) if connected => {
                    let body = serde_json::to_vec(&*ev).expect("event serialises");
                    s.publish(&s.topics.event, false, qos(settings.mqtt.qos), body);
                }
                Ok(_) => s.status().messages_dropped += 1,
                Err(broadcast::error::RecvError::Lagged(n)) => s.status().messages_dropped += n,
                Err(broadcast::error::RecvError::Closed) => return End::Stop,
            },
        }
    }
}

fn step(name: &'static str, started: Instant, result: Result<(), String>) -> MqttTestStep {
    MqttTestStep {
        name,
        ok: result.is_ok(),
        elapsed_ms: started.elapsed().as_millis() as u64,
        error: result.err(),
    }
}

/// The connection test: resolve, TCP connect, MQTT CONNECT with the given credentials,
/// a QoS 1 publish to `<base>/test` acknowledged by the broker, clean disconnect. Stops at the
/// first failing step. Uses its own client id (`<client id>-test`) so that the live session is
/// not displaced.
pub async fn test(cfg: &MqttConfig, hostname: &str, now_ms: i64) -> MqttTestBody {
    let topics = Topics::new(cfg, hostname);
    let client_id = format!("{}-test", payload::client_id(cfg, &topics));
    let broker = format!("{}:{}", cfg.host, cfg.port);
    let deadline = Duration::from_secs(CONNECT_TIMEOUT_S);
    let mut steps = Vec::new();
    let report = |steps: Vec<MqttTestStep>| {
        MqttTestBody::of(
            broker.clone(),
            client_id.clone(),
            topics.test.clone(),
            steps,
        )
    };

    let t = Instant::now();
    let addrs = match tokio::time::timeout(
        deadline,
        tokio::net::lookup_host((cfg.host.as_str(), cfg.port)),
    )
    .await
    {
        Ok(Ok(a)) => a.collect::<Vec<_>>(),
        Ok(Err(e)) => {
            steps.push(step(
                "resolve",
                t,
                Err(format!("cannot resolve {}: {e}", cfg.host)),
            ));
            return report(steps);
        }
        Err(_) => {
            steps.push(step(
                "resolve",
                t,
                Err("timed out resolving the host".into()),
            ));
            return report(steps);
        }
    };
    if addrs.is_empty() {
        steps.push(step("resolve", t, Err("no address for the host".into())));
        return report(steps);
    }
    steps.push(step("resolve", t, Ok(())));

    let t = Instant::now();
    match tokio::time::timeout(deadline, tokio::net::TcpStream::connect(&addrs[..])).await {
        Ok(Ok(_probe)) => steps.push(step("tcp_connect", t, Ok(()))),
        Ok(Err(e)) => {
            steps.push(step(
                "tcp_connect",
                t,
                Err(format!("cannot connect to {broker}: {e}")),
            ));
            return report(steps);
        }
        Err(_) => {
            steps.push(step(
                "tcp_connect",
                t,
                Err(format!("timed out connecting to {broker}")),
            ));
            return report(steps);
        }
    }

    let t = Instant::now();
    let (client, mut eventloop) = new_client(options(cfg, &client_id, None));
    let connected = tokio::time::timeout(deadline, async {
        loop {
            match eventloop.poll().await {
                Ok(MqttEvent::Incoming(Packet::ConnAck(_))) => return Ok(()),
                Ok(_) => {}
                Err(e) => return Err(describe(&e)),
            }
        }
    })
    .await
    .unwrap_or_else(|_| Err("timed out waiting for CONNACK".into()));
    let failed = connected.is_err();
    steps.push(step("mqtt_connect", t, connected));
    if failed {
        return report(steps);
    }

    let t = Instant::now();
    let body = json!({
        "schema": "svcos.mqtt.test.v1",
        "message": "svcOS MQTT test",
        "hostname": hostname,
        "at_ms": now_ms,
    });
    let published = async {
        client
            .try_publish(
                topics.test.clone(),
                QoS::AtLeastOnce,
                false,
                serde_json::to_vec(&body).expect("test body serialises"),
            )
            .map_err(|e| e.to_string())?;
        loop {
            match eventloop.poll().await {
                Ok(MqttEvent::Incoming(Packet::PubAck(_))) => return Ok(()),
                Ok(_) => {}
                Err(e) => return Err(describe(&e)),
            }
        }
    };
    let published = tokio::time::timeout(deadline, published)
        .await
        .unwrap_or_else(|_| Err("timed out waiting for PUBACK".into()));
    let failed = published.is_err();
    steps.push(step("publish", t, published));
    if failed {
        return report(steps);
    }

    let t = Instant::now();
    let _ = client.try_disconnect();
    let closed = tokio::time::timeout(deadline, async {
        loop {
            match eventloop.poll().await {
                Ok(MqttEvent::Outgoing(Outgoing::Disconnect)) => return Ok(()),
                Ok(_) => {}
                Err(e) => return Err(describe(&e)),
            }
        }
    })
    .await
    .unwrap_or_else(|_| Err("timed out disconnecting".into()));
    steps.push(step("disconnect", t, closed));
    report(steps)
}
