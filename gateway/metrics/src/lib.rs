//! The Prometheus exposition of `GET /metrics`, written with `prometheus-client` in the text
//! format 0.0.4 (what `promtool check metrics` and every Prometheus version read).
//!
//! The gateway gathers a [`Scrape`] (its telemetry and pool snapshots, plus one answer each from
//! the supervisor and the tuner) and [`render`] turns it into text. Nothing here does I/O, so the
//! tests feed it tables. A source that did not answer leaves its families out rather than
//! showing zeros that would read as measurements; `svcos_up` says which sources were there.
//!
//! Every family is documented in docs/API-SHAPES.md ("/metrics"). Counters are registered
//! without their `_total` suffix: the encoder appends it, so the series names
//! (`svcos_nonces_total`, …) stay those dashboards already query.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;
use svcos_api_types::enum_word;
use svcos_common::config::Config;
use svcos_proto::hwagent::v1::{MiningState, Telemetry};
use svcos_proto::stratum::v1::{GetPoolsResponse, PoolState};
use svcos_proto::supervisor::v1::{ServiceInfo, ServiceState, UpdatePhase, UpdateStatus};
use svcos_proto::tuner::v1::GetStateResponse;

/// The `Content-Type` of the exposition.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// The tuner's states (`GetStateResponse.state`), one `svcos_tuner_state` series each.
pub const TUNER_STATES: [&str; 6] = ["disabled", "idle", "tuning", "tuned", "backoff", "error"];

/// What one scrape shows. `None` means that source did not answer (or has no snapshot yet).
#[derive(Debug, Clone, Copy)]
pub struct Scrape<'a> {
    /// The config in force (hostname and mode of `svcos_info`).
    pub config: &'a Config,
    /// hw-agent's latest telemetry snapshot.
    pub telemetry: Option<&'a Telemetry>,
    /// stratum-agent's latest pool snapshot.
    pub pools: Option<&'a GetPoolsResponse>,
    /// The supervisor's `ListServices` answer: state, restarts and process usage per service.
    pub services: Option<&'a [ServiceInfo]>,
    /// The tuner's `GetState` answer.
    pub tuner: Option<&'a GetStateResponse>,
    /// The supervisor's `GetUpdateStatus` answer.
    pub update: Option<&'a UpdateStatus>,
}

type Labels = Vec<(&'static str, String)>;
type GaugeFamily = Family<Labels, Gauge<f64, AtomicU64>>;
type CounterFamily = Family<Labels, Counter<u64>>;
type FloatCounterFamily = Family<Labels, Counter<f64, AtomicU64>>;

/// The exposition of `scrape`, text format 0.0.4.
pub fn render(scrape: &Scrape<'_>) -> String {
    let mut registry = Registry::default();
    services(&mut registry, scrape);
    info(&mut registry, scrape.config);
    if let Some(t) = scrape.telemetry {
        telemetry(&mut registry, t);
    }
    if let Some(p) = scrape.pools {
        pools(&mut registry, p);
    }
    if let Some(t) = scrape.tuner {
        tuner(&mut registry, t);
    }
    if let Some(u) = scrape.update {
        update(&mut registry, u);
    }
    let mut out = String::with_capacity(8192);
    prometheus_text::encode(&mut out, &registry).expect("writing to a String cannot fail");
    out
}

fn labels<const N: usize>(pairs: [(&'static str, String); N]) -> Labels {
    pairs.into_iter().collect()
}

fn gauge(registry: &mut Registry, name: &str, help: &str, value: f64) {
    registry.register(name, help, ConstGauge::new(value));
}

fn counter(registry: &mut Registry, name: &str, help: &str, value: u64) {
    registry.register(name, help, ConstCounter::new(value));
}

fn set(family: &GaugeFamily, l: Labels, value: f64) {
    family.get_or_create(&l).set(value);
}

fn bool_value(b: bool) -> f64 {
    f64::from(u8::from(b))
}

/// `svcos_up` for every supervised service and the supervisor, restarts and process usage.
fn services(registry: &mut Registry, scrape: &Scrape<'_>) {
    let up = GaugeFamily::default();
    set(
        &up,
        labels([("service", "supervisor".into())]),
        bool_value(scrape.services.is_some()),
    );
    match scrape.services {
        Some(list) => {
            for s in list {
                let running = s.state() == ServiceState::Running;
                set(
                    &up,
                    labels([("service", s.name.clone())]),
                    bool_value(running),
                );
            }
        }
        None => {
            // Without the supervisor, the snapshots are the best evidence there is.
            set(
                &up,
                labels([("service", "hw-agent".into())]),
                bool_value(scrape.telemetry.is_some()),
            );
            set(
                &up,
                labels([("service", "stratum-agent".into())]),
                bool_value(scrape.pools.is_some()),
            );
        }
    }
    registry.register(
        "svcos_up",
        "1 when the supervisor reports the service running (the supervisor: 1 when it answered; without it, hw-agent and stratum-agent by the gateway's live snapshots)",
        up,
    );
    let Some(list) = scrape.services else { return };
    let restarts = CounterFamily::default();
    let rss = GaugeFamily::default();
    let cpu = FloatCounterFamily::default();
    let start = GaugeFamily::default();
    for s in list {
        let l = labels([("service", s.name.clone())]);
        restarts.get_or_create(&l).inc_by(u64::from(s.restarts));
        // Process metrics only for a live process: zeros would read as a measurement.
        if s.pid != 0 && s.start_time_unix_s > 0.0 {
            set(&rss, l.clone(), s.rss_bytes as f64);
            cpu.get_or_create(&l).inc_by(s.cpu_seconds);
            set(&start, l, s.start_time_unix_s);
        }
    }
    registry.register(
        "svcos_service_restarts",
        "Restarts of the service (automatic and requested), kept across supervisor restarts",
        restarts,
    );
    registry.register(
        "svcos_process_resident_memory_bytes",
        "Resident memory of the service's process in bytes",
        rss,
    );
    registry.register(
        "svcos_process_cpu_seconds",
        "User and system CPU time of the service's current process in seconds",
        cpu,
    );
    registry.register(
        "svcos_process_start_time_seconds",
        "Start time of the service's current process in Unix seconds",
        start,
    );
}

fn info(registry: &mut Registry, config: &Config) {
    let family = GaugeFamily::default();
    set(
        &family,
        labels([
            ("hostname", config.system.hostname.clone()),
            ("mode", config.system.mode.as_str().to_string()),
            ("version", env!("CARGO_PKG_VERSION").to_string()),
        ]),
        1.0,
    );
    registry.register("svcos_info", "Constant 1 labelled with identity", family);
}

fn telemetry(registry: &mut Registry, t: &Telemetry) {
    let h = t.hashrate.unwrap_or_default();
    let hashrate = GaugeFamily::default();
    for (w, v) in [
        ("5s", h.ghs_5s),
        ("1m", h.ghs_1m),
        ("15m", h.ghs_15m),
        ("expected", h.ghs_expected),
    ] {
        set(&hashrate, labels([("window", w.into())]), v);
    }
    registry.register(
        "svcos_hashrate_ghs",
        "Hashrate in GH/s by averaging window",
        hashrate,
    );
    let state = GaugeFamily::default();
    for s in [
        MiningState::Bringup,
        MiningState::Mining,
        MiningState::NoWork,
        MiningState::Sleeping,
        MiningState::Overheat,
        MiningState::Fault,
    ] {
        let word = enum_word(s.as_str_name(), "MINING_STATE_");
        set(
            &state,
            labels([("state", word)]),
            bool_value(t.state() == s),
        );
    }
    registry.register(
        "svcos_mining_state",
        "1 for the current mining state",
        state,
    );
    gauge(
        registry,
        "svcos_power_watt",
        "Input power in watts",
        t.power_watt,
    );
    gauge(
        registry,
        "svcos_temp_max_celsius",
        "Hottest chip temperature",
        t.temp_max_c,
    );
    gauge(
        registry,
        "svcos_temp_target_celsius",
        "Fan controller target temperature",
        t.temp_target_c,
    );
    gauge(
        registry,
        "svcos_mining_uptime_seconds",
        "Seconds since mining started",
        t.mining_uptime_s as f64,
    );
    counter(registry, "svcos_nonces", "Nonces that verified", t.nonces);
    counter(
        registry,
        "svcos_hw_errors",
        "Nonces that did not verify",
        t.hw_errors,
    );
    counter(
        registry,
        "svcos_shares_sent",
        "Shares handed to the pool client",
        t.shares_sent,
    );
    chains(registry, t);
    fans(registry, t);
    if let Some(psu) = &t.psu {
        gauge(
            registry,
            "svcos_psu_voltage_volts",
            "PSU output voltage in volts",
            psu.voltage_v,
        );
        gauge(
            registry,
            "svcos_psu_current_amperes",
            "PSU output current in amperes",
            psu.current_a,
        );
        gauge(
            registry,
            "svcos_psu_power_watt",
            "PSU input power in watts",
            psu.power_watt,
        );
    }
}

fn chains(registry: &mut Registry, t: &Telemetry) {
    let hashrate = GaugeFamily::default();
    let temp = GaugeFamily::default();
    let chips = GaugeFamily::default();
    let frequency = GaugeFamily::default();
    let voltage = GaugeFamily::default();
    let power = GaugeFamily::default();
    let nonces = CounterFamily::default();
    let errors = CounterFamily::default();
    for c in &t.chains {
        let chain = || labels([("chain", c.chain_id.to_string())]);
        let with = |k: &'static str, v: &str| {
            labels([("chain", c.chain_id.to_string()), (k, v.to_string())])
        };
        set(
            &hashrate,
            chain(),
            c.hashrate.as_ref().map_or(0.0, |h| h.ghs_1m),
        );
        set(&temp, with("sensor", "chip"), c.temp_chip_c);
        set(&temp, with("sensor", "board"), c.temp_board_c);
        set(
            &chips,
            with("kind", "detected"),
            f64::from(c.chips_detected),
        );
        set(
            &chips,
            with("kind", "expected"),
            f64::from(c.chips_expected),
        );
        set(&frequency, chain(), c.frequency_mhz);
        set(&voltage, chain(), c.voltage_mv / 1000.0);
        set(&power, chain(), c.power_watt);
        nonces.get_or_create(&chain()).inc_by(c.nonces);
        errors.get_or_create(&chain()).inc_by(c.hw_errors);
    }
    registry.register(
        "svcos_chain_hashrate_ghs",
        "Per-chain 1-minute hashrate in GH/s",
        hashrate,
    );
    registry.register("svcos_chain_temp_celsius", "Per-chain temperatures", temp);
    registry.register(
        "svcos_chain_chips",
        "Chips per chain, detected and expected",
        chips,
    );
    registry.register(
        "svcos_chain_frequency_mhz",
        "Per-chain base chip frequency in MHz",
        frequency,
    );
    registry.register(
        "svcos_chain_voltage_volts",
        "Per-chain chip supply voltage in volts",
        voltage,
    );
    registry.register("svcos_chain_power_watt", "Per-chain power in watts", power);
    registry.register(
        "svcos_chain_nonces",
        "Per-chain nonces that verified",
        nonces,
    );
    registry.register(
        "svcos_chain_hw_errors",
        "Per-chain nonces that did not verify",
        errors,
    );
}

fn fans(registry: &mut Registry, t: &Telemetry) {
    let rpm = GaugeFamily::default();
    let pwm = GaugeFamily::default();
    for f in &t.fans {
        let l = labels([("fan", f.fan_id.to_string())]);
        set(&rpm, l.clone(), f64::from(f.rpm));
        set(&pwm, l, f64::from(f.pwm_percent));
    }
    registry.register("svcos_fan_rpm", "Fan speed in RPM", rpm);
    registry.register("svcos_fan_pwm_percent", "Fan duty in percent", pwm);
}

fn pools(registry: &mut Registry, p: &GetPoolsResponse) {
    let shares = CounterFamily::default();
    let up = GaugeFamily::default();
    let active = GaugeFamily::default();
    for pool in &p.pools {
        for (result, v) in [
            ("accepted", pool.accepted),
            ("rejected", pool.rejected),
            ("stale", pool.stale),
        ] {
            let l = labels([
                ("pool", pool.index.to_string()),
                ("url", pool.url.clone()),
                ("result", result.into()),
            ]);
            shares.get_or_create(&l).inc_by(v);
        }
        set(
            &up,
            labels([("pool", pool.index.to_string()), ("url", pool.url.clone())]),
            bool_value(pool.state() == PoolState::Alive),
        );
        set(
            &active,
            labels([("pool", pool.index.to_string())]),
            bool_value(pool.active),
        );
    }
    registry.register("svcos_pool_shares", "Shares per pool and result", shares);
    registry.register("svcos_pool_up", "1 when the pool connection is alive", up);
    registry.register(
        "svcos_pool_active",
        "1 for the pool currently mined on",
        active,
    );
    gauge(
        registry,
        "svcos_best_share",
        "Best share difficulty since counters began",
        p.best_share,
    );
}

fn tuner(registry: &mut Registry, t: &GetStateResponse) {
    let state = GaugeFamily::default();
    for s in TUNER_STATES {
        set(
            &state,
            labels([("state", s.into())]),
            bool_value(t.state == s),
        );
    }
    // A state added to the tuner before this list still shows, as the one that is 1.
    if !TUNER_STATES.contains(&t.state.as_str()) && !t.state.is_empty() {
        set(&state, labels([("state", t.state.clone())]), 1.0);
    }
    registry.register(
        "svcos_tuner_state",
        "1 for the autotuner's current state",
        state,
    );
    gauge(
        registry,
        "svcos_tuner_active",
        "1 when autotuning is switched on",
        bool_value(t.active),
    );
    gauge(
        registry,
        "svcos_tuner_power_target_watt",
        "Effective power target of the tuner in watts (after time-of-use and dynamic power scaling)",
        t.power_target_watt,
    );
}

fn update(registry: &mut Registry, u: &UpdateStatus) {
    let phase = GaugeFamily::default();
    let current = u.phase();
    for p in [
        UpdatePhase::Idle,
        UpdatePhase::Receiving,
        UpdatePhase::Verifying,
        UpdatePhase::Installing,
        UpdatePhase::PendingReboot,
        UpdatePhase::BootingNewSlot,
        UpdatePhase::Committed,
        UpdatePhase::RolledBack,
        UpdatePhase::Failed,
    ] {
        let word = enum_word(p.as_str_name(), "UPDATE_PHASE_");
        set(&phase, labels([("phase", word)]), bool_value(current == p));
    }
    registry.register(
        "svcos_update_phase",
        "1 for the firmware update's current (or last) phase",
        phase,
    );
    gauge(
        registry,
        "svcos_update_progress_percent",
        "Progress of the current firmware update operation in percent",
        f64::from(u.progress_percent),
    );
}

#[cfg(test)]
mod tests;
