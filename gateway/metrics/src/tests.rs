use std::collections::BTreeMap;

use svcos_proto::hwagent::v1::{ChainTelemetry, FanTelemetry, Hashrate, PsuTelemetry};
use svcos_proto::stratum::v1::PoolStatus;

use super::*;

/// Series (name with its labels, as written) → value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            (series.to_string(), value.parse().unwrap())
        })
        .collect()
}

fn value(text: &str, series: &str) -> f64 {
    *samples(text)
        .get(series)
        .unwrap_or_else(|| panic!("{series} missing in\n{text}"))
}

fn telemetry() -> Telemetry {
    Telemetry {
        state: MiningState::Mining as i32,
        hashrate: Some(Hashrate {
            ghs_1m: 13_500.0,
            ..Default::default()
        }),
        chains: vec![ChainTelemetry {
            chain_id: 6,
            chips_expected: 63,
            chips_detected: 62,
            frequency_mhz: 650.0,
            voltage_mv: 8_900.0,
            power_watt: 410.5,
            nonces: 1_234,
            hw_errors: 7,
            ..Default::default()
        }],
        fans: vec![FanTelemetry {
            fan_id: 0,
            rpm: 4_200,
            pwm_percent: 60,
            stalled: false,
        }],
        psu: Some(PsuTelemetry {
            voltage_v: 12.1,
            current_a: 105.5,
            power_watt: 1_350.0,
            ..Default::default()
        }),
        nonces: 1_234,
        hw_errors: 7,
        ..Default::default()
    }
}

fn service(name: &str, state: ServiceState, pid: u32, restarts: u32) -> ServiceInfo {
    ServiceInfo {
        name: name.into(),
        state: state as i32,
        pid,
        restarts,
        rss_bytes: if pid == 0 { 0 } else { 9_000_000 },
        cpu_seconds: if pid == 0 { 0.0 } else { 12.5 },
        start_time_unix_s: if pid == 0 { 0.0 } else { 1_790_000_000.25 },
        ..Default::default()
    }
}

fn pools() -> GetPoolsResponse {
    GetPoolsResponse {
        pools: vec![PoolStatus {
            index: 0,
            url: r#"stratum+tcp://a"b\c:3333"#.into(),
            state: PoolState::Alive as i32,
            active: true,
            accepted: 5,
            rejected: 1,
            ..Default::default()
        }],
        best_share: 4_096.0,
        ..Default::default()
    }
}

struct Owned {
    config: Config,
    telemetry: Telemetry,
    pools: GetPoolsResponse,
    services: Vec<ServiceInfo>,
    tuner: GetStateResponse,
    update: UpdateStatus,
}

fn owned() -> Owned {
    Owned {
        config: Config::default(),
        telemetry: telemetry(),
        pools: pools(),
        services: vec![
            service("hw-agent", ServiceState::Running, 100, 2),
            service("tuner", ServiceState::Backoff, 0, 5),
            service("gateway", ServiceState::Running, 102, 0),
        ],
        tuner: GetStateResponse {
            state: "tuning".into(),
            active: true,
            power_target_watt: 1_200.0,
            ..Default::default()
        },
        update: UpdateStatus {
            phase: UpdatePhase::Installing as i32,
            progress_percent: 40,
            ..Default::default()
        },
    }
}

fn full(o: &Owned) -> Scrape<'_> {
    Scrape {
        config: &o.config,
        telemetry: Some(&o.telemetry),
        pools: Some(&o.pools),
        services: Some(&o.services),
        tuner: Some(&o.tuner),
        update: Some(&o.update),
    }
}

#[test]
fn every_sample_has_help_and_type() {
    let o = owned();
    let text = render(&full(&o));
    for series in samples(&text).keys() {
        let name = series.split('{').next().unwrap();
        assert!(text.contains(&format!("# TYPE {name} ")), "{name}");
        assert!(text.contains(&format!("# HELP {name} ")), "{name}");
    }
}

#[test]
fn the_families_dashboards_use_keep_their_names() {
    let o = owned();
    let text = render(&full(&o));
    for name in [
        "svcos_up",
        "svcos_info",
        "svcos_hashrate_ghs",
        "svcos_mining_state",
        "svcos_power_watt",
        "svcos_temp_max_celsius",
        "svcos_temp_target_celsius",
        "svcos_mining_uptime_seconds",
        "svcos_nonces_total",
        "svcos_hw_errors_total",
        "svcos_shares_sent_total",
        "svcos_chain_hashrate_ghs",
        "svcos_chain_temp_celsius",
        "svcos_chain_chips",
        "svcos_fan_rpm",
        "svcos_fan_pwm_percent",
        "svcos_pool_shares_total",
        "svcos_pool_up",
        "svcos_pool_active",
        "svcos_best_share",
    ] {
        assert!(text.contains(&format!("# TYPE {name} ")), "{name}");
    }
    assert!(text.contains("# TYPE svcos_nonces_total counter"), "{text}");
    assert_eq!(value(&text, "svcos_nonces_total"), 1_234.0);
}

#[test]
fn per_chain_and_psu_readings() {
    let o = owned();
    let text = render(&full(&o));
    for (series, want) in [
        (r#"svcos_chain_frequency_mhz{chain="6"}"#, 650.0),
        (r#"svcos_chain_voltage_volts{chain="6"}"#, 8.9),
        (r#"svcos_chain_power_watt{chain="6"}"#, 410.5),
        (r#"svcos_chain_nonces_total{chain="6"}"#, 1_234.0),
        (r#"svcos_chain_hw_errors_total{chain="6"}"#, 7.0),
        (r#"svcos_chain_chips{chain="6",kind="detected"}"#, 62.0),
        (r#"svcos_chain_hashrate_ghs{chain="6"}"#, 0.0),
        ("svcos_psu_voltage_volts", 12.1),
        ("svcos_psu_current_amperes", 105.5),
        ("svcos_psu_power_watt", 1_350.0),
        (r#"svcos_fan_rpm{fan="0"}"#, 4_200.0),
        (r#"svcos_mining_state{state="mining"}"#, 1.0),
        (r#"svcos_mining_state{state="sleeping"}"#, 0.0),
        (r#"svcos_hashrate_ghs{window="1m"}"#, 13_500.0),
    ] {
        assert_eq!(value(&text, series), want, "{series}");
    }
}

#[test]
fn services_up_restarts_and_process_usage_from_the_supervisor() {
    let o = owned();
    let text = render(&full(&o));
    for (series, want) in [
        (r#"svcos_up{service="supervisor"}"#, 1.0),
        (r#"svcos_up{service="hw-agent"}"#, 1.0),
        (r#"svcos_up{service="tuner"}"#, 0.0),
        (r#"svcos_up{service="gateway"}"#, 1.0),
        (r#"svcos_service_restarts_total{service="hw-agent"}"#, 2.0),
        (r#"svcos_service_restarts_total{service="tuner"}"#, 5.0),
        (r#"svcos_service_restarts_total{service="gateway"}"#, 0.0),
        (
            r#"svcos_process_resident_memory_bytes{service="hw-agent"}"#,
            9_000_000.0,
        ),
        (
            r#"svcos_process_cpu_seconds_total{service="hw-agent"}"#,
            12.5,
        ),
        (
            r#"svcos_process_start_time_seconds{service="gateway"}"#,
            1_790_000_000.25,
        ),
    ] {
        assert_eq!(value(&text, series), want, "{series}");
    }
    // No process, no process metrics (a 0 would read as a measurement).
    assert!(
        !text.contains(r#"svcos_process_resident_memory_bytes{service="tuner"}"#),
        "{text}"
    );
}

#[test]
fn without_the_supervisor_up_falls_back_to_the_snapshots() {
    let o = owned();
    let scrape = Scrape {
        services: None,
        pools: None,
        ..full(&o)
    };
    let text = render(&scrape);
    assert_eq!(value(&text, r#"svcos_up{service="supervisor"}"#), 0.0);
    assert_eq!(value(&text, r#"svcos_up{service="hw-agent"}"#), 1.0);
    assert_eq!(value(&text, r#"svcos_up{service="stratum-agent"}"#), 0.0);
    for absent in [
        "svcos_service_restarts_total",
        "svcos_process_cpu_seconds_total",
        "svcos_pool_up",
    ] {
        assert!(!text.contains(absent), "{absent}");
    }
}

#[test]
fn tuner_and_update_states_are_one_hot() {
    let o = owned();
    let text = render(&full(&o));
    let ones = |family: &str| -> Vec<String> {
        samples(&text)
            .into_iter()
            .filter(|(s, v)| s.starts_with(&format!("{family}{{")) && *v == 1.0)
            .map(|(s, _)| s)
            .collect()
    };
    assert_eq!(
        ones("svcos_tuner_state"),
        [r#"svcos_tuner_state{state="tuning"}"#]
    );
    assert_eq!(
        ones("svcos_update_phase"),
        [r#"svcos_update_phase{phase="installing"}"#]
    );
    assert_eq!(
        samples(&text)
            .keys()
            .filter(|s| s.starts_with("svcos_tuner_state{"))
            .count(),
        TUNER_STATES.len()
    );
    assert_eq!(value(&text, "svcos_tuner_power_target_watt"), 1_200.0);
    assert_eq!(value(&text, "svcos_tuner_active"), 1.0);
    assert_eq!(value(&text, "svcos_update_progress_percent"), 40.0);

    let mut odd = owned();
    odd.tuner.state = "calibrating".into();
    let text = render(&full(&odd));
    assert_eq!(
        value(&text, r#"svcos_tuner_state{state="calibrating"}"#),
        1.0
    );
    assert_eq!(value(&text, r#"svcos_tuner_state{state="tuning"}"#), 0.0);
}

#[test]
fn label_values_are_escaped() {
    let o = owned();
    let text = render(&full(&o));
    assert!(
        text.contains(r#"svcos_pool_up{pool="0",url="stratum+tcp://a\"b\\c:3333"} 1"#),
        "{text}"
    );
}

#[test]
fn promtool_accepts_the_exposition() {
    use std::io::Write;
    let o = owned();
    for scrape in [
        full(&o),
        Scrape {
            telemetry: None,
            pools: None,
            services: None,
            tuner: None,
            update: None,
            ..full(&o)
        },
    ] {
        let text = render(&scrape);
        let Ok(mut child) = std::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
        else {
            println!("promtool not installed; skipping the exposition check");
            return;
        };
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "promtool: {}{}\n{text}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
