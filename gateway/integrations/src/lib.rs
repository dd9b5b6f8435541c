//! MQTT and webhook integrations, run as background tasks inside the gateway process.
//!
//! Design:
//! - **Nothing is sent unless configured**: `[mqtt]` and `[webhook]` are off by default; there
//!   is no cloud endpoint anywhere in the firmware.
//! - **Never in the request path**: handlers only read a status snapshot or push new settings
//!   into a `watch` channel. Publishing runs in its own tasks fed by bounded channels: a dead
//!   broker or receiver costs a reconnect timer, never a blocked request or growing memory
//!   (events reach the tasks through a `broadcast` channel of [`EVENT_BUFFER`] that drops the
//!   oldest for a slow reader; each hook's queue drops its oldest past `[webhook].queue_len`;
//!   the MQTT request channel is [`mqtt::REQUEST_CAPACITY`] and full means "dropped", counted).
//! - **Events are derived, not invented**: [`events::Deriver`] compares consecutive snapshots
//!   of the streams the gateway already follows (hw-agent telemetry, stratum-agent pools) and
//!   the supervisor's restart counters.
//! - **Live reconfiguration**: [`Integrations::apply`] takes every saved config; a change of the
//!   `[mqtt]` section (or the hostname) closes the broker session gracefully and opens a new one;
//!   a change of `[webhook]` rebuilds the hook workers.

pub mod commands;
pub mod energy;
pub mod events;
pub mod mqtt;
pub mod payload;
pub mod webhook;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use svcos_common::Shutdown;
use svcos_common::config::{Config, MqttConfig, WebhookConfig};
use svcos_common::time::Clock;
use svcos_proto::hwagent::v1::Telemetry;
use svcos_proto::stratum::v1::GetPoolsResponse;
use svcos_proto::supervisor::v1::ListServicesRequest;
use svcos_proto::supervisor::v1::supervisor_service_client::SupervisorServiceClient;
use tokio::sync::{broadcast, mpsc, watch};
use tonic::transport::Channel;

pub use commands::{Command, CommandResult};
pub use events::Event;

/// Events buffered for the publishing tasks; a slower reader loses the oldest.
pub const EVENT_BUFFER: usize = 256;
/// How often the supervisor's restart counters are read while an integration is enabled.
const SERVICE_POLL: Duration = Duration::from_secs(5);
/// Deadline of that read.
const SERVICE_POLL_DEADLINE: Duration = Duration::from_secs(2);

/// What the integration tasks need from the config.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// `[mqtt]`.
    pub mqtt: MqttConfig,
    /// `[webhook]`.
    pub webhook: WebhookConfig,
    /// `[system].hostname` (node id and payloads).
    pub hostname: String,
    /// `[system].mode` (the state message carries it for the mode select).
    pub mode: String,
    /// The model of the `[hardware].board` preset (the discovery `device` block's model when
    /// hw-agent has not answered; hw-agent reports the same name).
    pub board_model: String,
    /// The dashboard's address (discovery `configuration_url`).
    pub dashboard_url: String,
}

impl Settings {
    /// The integration-relevant part of a config.
    pub fn from_config(c: &Config) -> Self {
        Settings {
            mqtt: c.mqtt.clone(),
            webhook: c.webhook.clone(),
            hostname: c.system.hostname.clone(),
            mode: c.system.mode.as_str().to_string(),
            board_model: c.hardware.board.preset().4.to_string(),
            dashboard_url: dashboard_url(c),
        }
    }

    fn any_enabled(&self) -> bool {
        self.mqtt.enabled || (self.webhook.enabled && !self.webhook.hooks.is_empty())
    }
}

/// The dashboard's address as a browser on the LAN reaches it: the bind address when the ports
/// are bound to one, else `<hostname>.local`; the port when it is not 80.
pub fn dashboard_url(c: &Config) -> String {
    let host = match c.api.bind {
        ip if ip.is_unspecified() => format!("{}.local", c.system.hostname),
        std::net::IpAddr::V4(v4) => v4.to_string(),
        std::net::IpAddr::V6(v6) => format!("[{v6}]"),
    };
    match c.api.http_port {
        80 => format!("http://{host}/"),
        port => format!("http://{host}:{port}/"),
    }
}

/// The live data the integrations read (the gateway's own followers; nothing new is opened
/// towards hw-agent or stratum-agent).
#[derive(Debug, Clone)]
pub struct Sources {
    /// Latest hw-agent telemetry (`None` while hw-agent is away).
    pub telemetry: watch::Receiver<Option<Telemetry>>,
    /// Latest stratum-agent pool snapshot.
    pub pools: watch::Receiver<Option<GetPoolsResponse>>,
    /// The supervisor, for restart counters.
    pub supervisor: SupervisorServiceClient<Channel>,
    /// Where the energy meter is kept (`<state>/gateway/energy.json`); `None` keeps it in
    /// memory only (tests).
    pub energy_file: Option<std::path::PathBuf>,
    /// The LAN interface's MAC for the discovery `connections` ([`svcos_common::net::primary_mac`]).
    pub mac: Option<String>,
}

/// Handle held by the gateway's state: status snapshots, live settings, tests.
#[derive(Debug, Clone)]
pub struct Integrations {
    settings: watch::Sender<Arc<Settings>>,
    mqtt_status: Arc<Mutex<mqtt::MqttStatus>>,
    hooks: webhook::HookStatuses,
    http: webhook::HttpClient,
    clock: Arc<dyn Clock>,
    /// MQTT commands towards the gateway, taken once by whoever executes them.
    commands: Arc<Mutex<Option<mpsc::Receiver<Command>>>>,
    /// Verdicts back to the MQTT session.
    results: mpsc::Sender<CommandResult>,
}

impl Integrations {
    /// Start the event deriver, the MQTT publisher and the webhook dispatcher.
    pub fn start(
        config: &Config,
        sources: Sources,
        clock: Arc<dyn Clock>,
        shutdown: Shutdown,
    ) -> Self {
        let (settings, settings_rx) = watch::channel(Arc::new(Settings::from_config(config)));
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        let (commands_tx, commands_rx) = mpsc::channel(commands::QUEUE);
        let (results_tx, results_rx) = mpsc::channel(commands::QUEUE);
        let this = Integrations {
            settings,
            mqtt_status: Arc::default(),
            hooks: webhook::HookStatuses::default(),
            http: webhook::http_client(),
            clock: clock.clone(),
            commands: Arc::new(Mutex::new(Some(commands_rx))),
            results: results_tx,
        };
        tokio::spawn(derive_events(
            sources.clone(),
            settings_rx.clone(),
            events.clone(),
            clock.clone(),
            shutdown.clone(),
        ));
        let energy = energy::spawn(
            sources.energy_file.clone(),
            sources.telemetry.clone(),
            clock.clone(),
            shutdown.clone(),
        );
        tokio::spawn(mqtt::run(mqtt::Ctx {
            settings: settings_rx.clone(),
            events: events.subscribe(),
            telemetry: sources.telemetry.clone(),
            pools: sources.pools.clone(),
            energy,
            mac: sources.mac.clone(),
            status: this.mqtt_status.clone(),
            clock: clock.clone(),
            shutdown: shutdown.clone(),
            commands: commands_tx,
            results: tokio::sync::Mutex::new(results_rx),
        }));
        tokio::spawn(webhook::run(webhook::Ctx {
            settings: settings_rx,
            events: events.subscribe(),
            statuses: this.hooks.clone(),
            http: this.http.clone(),
            clock,
            shutdown,
        }));
        this
    }

    /// Take a newly saved config; the tasks react only when their section changed.
    pub fn apply(&self, config: &Config) {
        let new = Settings::from_config(config);
        self.settings.send_if_modified(|cur| {
            if **cur == new {
                false
            } else {
                *cur = Arc::new(new);
                true
            }
        });
    }

    /// The MQTT commands (`[mqtt].commands`), for the one task that executes them; `None`
    /// after the first call.
    pub fn take_commands(&self) -> Option<mpsc::Receiver<Command>> {
        self.commands.lock().expect("commands lock").take()
    }

    /// Publish the verdict on a command (dropped when the session is down or the queue full).
    pub fn command_done(&self, result: CommandResult) {
        let _ = self.results.try_send(result);
    }

    /// `/api/mqtt/status` members.
    pub fn mqtt_status(&self) -> mqtt::MqttStatus {
        self.mqtt_status.lock().expect("mqtt status lock").clone()
    }

    /// Per-hook delivery status, in config order.
    pub fn webhook_status(&self) -> Vec<webhook::HookStatus> {
        let settings = self.settings.borrow().clone();
        self.hooks.snapshot(&settings.webhook)
    }

    /// Connect to a broker with `cfg`, publish one test message, report every step.
    pub async fn test_mqtt(&self, cfg: &MqttConfig) -> svcos_api_types::integrations::MqttTestBody {
        let hostname = self.settings.borrow().hostname.clone();
        mqtt::test(cfg, &hostname, self.clock.now_ms()).await
    }

    /// Send a signed `test` event to each target now (no queue, one attempt).
    pub async fn test_webhook(
        &self,
        targets: &[webhook::Target],
        timeout: Duration,
    ) -> svcos_api_types::integrations::WebhookTestBody {
        let hostname = self.settings.borrow().hostname.clone();
        let event = Event::new(
            "test",
            serde_json::json!({"message": "svcOS webhook test"}),
            &hostname,
            self.clock.now_ms(),
        );
        webhook::test(&self.http, targets, &event, timeout, self.clock.as_ref()).await
    }
}

async fn derive_events(
    sources: Sources,
    settings: watch::Receiver<Arc<Settings>>,
    events: broadcast::Sender<Arc<Event>>,
    clock: Arc<dyn Clock>,
    shutdown: Shutdown,
) {
    let Sources {
        mut telemetry,
        mut pools,
        mut supervisor,
        ..
    } = sources;
    let mut deriver = events::Deriver::default();
    let mut poll = tokio::time::interval(SERVICE_POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let derived = tokio::select! {
            _ = shutdown.wait() => return,
            r = telemetry.changed() => {
                if r.is_err() { return; }
                deriver.on_telemetry(telemetry.borrow_and_update().as_ref())
            }
            r = pools.changed() => {
                if r.is_err() { return; }
                deriver.on_pools(pools.borrow_and_update().as_ref())
            }
            _ = poll.tick() => {
                if !settings.borrow().any_enabled() {
                    continue;
                }
                // A slow supervisor must not hold back the telemetry-derived events.
                let list = tokio::time::timeout(
                    SERVICE_POLL_DEADLINE,
                    supervisor.list_services(ListServicesRequest {}),
                )
                .await;
                match list {
                    Ok(Ok(list)) => deriver.on_services(&list.into_inner().services),
                    _ => continue,
                }
            }
        };
        if derived.is_empty() {
            continue;
        }
        let hostname = settings.borrow().hostname.clone();
        for (name, data) in derived {
            tracing::info!(event = name, "integration event");
            // No receiver (both integrations off) is fine: the event is simply not sent.
            let _ = events.send(Arc::new(Event::new(name, data, &hostname, clock.now_ms())));
        }
    }
}
