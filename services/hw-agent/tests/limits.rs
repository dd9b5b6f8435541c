//! Hard limits and calibration at the source: a power target sent straight to hw-agent over
//! gRPC (no gateway, no governor) is clamped to the circuit and PSU limits, the clamp is in the
//! reply and in telemetry, and the PSU reading every reader sees is calibrated once, here.

mod common;

use std::time::Duration;

use common::*;
use svcos_proto::hwagent::v1::{GetEnvRecipeRequest, ReloadConfigRequest, SetPowerTargetRequest};

const LONG: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_above_the_circuit_limit_is_clamped_and_reported() {
    let _serial = SERIAL.lock().await;
    let mut config = small_config();
    config.power.circuit_limit_watt = 900.0;
    config.power.calibration_factor = 1.1;
    config.power.calibration_offset_watt = 5.0;
    let bench = Bench::start(config.clone()).await;
    let agent = bench.start_agent();
    bench.send_job(job(1, 1, true, 0.001));
    // No target asked yet: the hard limit is the target in force from the start.
    let t = bench
        .wait_for("telemetry with the limit", LONG, |t| {
            t.power_limit_watt > 0.0
        })
        .await;
    assert_eq!(t.power_limit_watt, 900.0);
    assert_eq!(t.power_limit_source, "circuit");
    assert_eq!(t.power_target_watt, 900.0);

    let mut hw = bench.agent_client();
    let r = hw
        .set_power_target(SetPowerTargetRequest {
            watt: 5000.0,
            backstop_share: 0.0,
            source: "governor:thermostat".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.clamped, "{r:?}");
    assert_eq!((r.requested_watt, r.applied_watt), (5000.0, 900.0));
    assert_eq!((r.limit_watt, r.limit_source.as_str()), (900.0, "circuit"));
    let t = bench
        .wait_for("the clamp in telemetry", LONG, |t| {
            t.power_target_requested_watt == 5000.0
        })
        .await;
    assert_eq!(t.power_target_watt, 900.0);
    // The environment recipe names who asked and which limit bound.
    let recipe = bench
        .diagnostics_client()
        .get_env_recipe(GetEnvRecipeRequest {})
        .await
        .unwrap()
        .into_inner();
    let entry = |name: &str| {
        recipe
            .entries
            .iter()
            .find(|e| e.name == name)
            .cloned()
            .unwrap()
    };
    assert_eq!(entry("requested_target_watt").source, "governor:thermostat");
    let target = entry("target_watt");
    assert_eq!(
        (target.value, target.source.as_str()),
        (Some(900.0), "config:power.circuit_limit_watt")
    );

    // Below the limit: taken as asked.
    let r = hw
        .set_power_target(SetPowerTargetRequest {
            watt: 700.0,
            backstop_share: 0.0,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!r.clamped, "{r:?}");
    assert_eq!(r.applied_watt, 700.0);

    // Calibration is applied once, at the source: every power figure is the calibrated one.
    let t = bench
        .wait_for("a PSU reading", LONG, |t| t.power_raw_watt > 50.0)
        .await;
    let want = t.power_raw_watt * 1.1 + 5.0;
    assert!(
        (t.power_watt - want).abs() < 0.01,
        "{} vs {want}",
        t.power_watt
    );
    let psu = t.psu.as_ref().unwrap();
    assert!((psu.power_watt - t.power_watt).abs() < 1e-9);

    // A declared PSU below the circuit limit binds after a reload, and re-clamps the target.
    let mut lower = config.clone();
    lower.power.psu_override.enabled = true;
    lower.power.psu_override.max_watt = 600.0;
    std::fs::write(&bench.layout.config_path, lower.to_toml()).unwrap();
    hw.reload_config(ReloadConfigRequest {}).await.unwrap();
    let t = bench
        .wait_for("the PSU limit", LONG, |t| {
            t.power_limit_source == "psu_override"
        })
        .await;
    assert_eq!((t.power_limit_watt, t.power_target_watt), (600.0, 600.0));
    agent.stop().await;
    bench.stop().await;
}
