//! The autotuner routes over real HTTP, backed by the real tuner service (its production entry)
//! driving the fake hw-agent: shapes, state changes, persistence round trips and the envelope on
//! bad input.

mod common;

use std::time::Duration;

use common::{GOOD, Harness, Options};
use serde_json::{Value, json};

async fn until_ok(h: &Harness, method: &str, path: &str, body: &Value) -> Value {
    for _ in 0..500 {
        let r = h.send_json(method, path, Some(GOOD), body).await;
        if r.status == 200 {
            return r.json();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{method} {path} never answered 200");
}

fn assert_error(r: &common::Reply, status: u16, what: &str) -> Value {
    assert_eq!(
        r.status,
        status,
        "{what}: {}",
        String::from_utf8_lossy(&r.body)
    );
    r.envelope()
}

#[tokio::test]
async fn active_and_targets_change_the_tuner_and_bad_input_gets_the_envelope() {
    let h = Harness::start(Options::default()).await;
    let v = h
        .send_json(
            "PUT",
            "/api/autotuner/active",
            Some(GOOD),
            &json!({"active": true}),
        )
        .await;
    assert_eq!(v.status, 200);
    let v = v.json();
    assert_eq!(v["schema"], "svcos.api.autotuner.run_state.v1");
    assert_eq!(v["active"], true);

    // The board is learnt asynchronously: the first step may answer 409 until then.
    let before = until_ok(
        &h,
        "POST",
        "/api/autotuner/increment_power_target",
        &json!({}),
    )
    .await;
    let w0 = before["configured_power_target_watt"].as_f64().unwrap();
    let after = h
        .send_json(
            "POST",
            "/api/autotuner/decrement_power_target",
            Some(GOOD),
            &json!({"amount": 100}),
        )
        .await
        .json();
    assert_eq!(
        after["configured_power_target_watt"].as_f64().unwrap(),
        w0 - 100.0
    );
    assert_eq!(after["mode"], "power");
    let r = h
        .send_json(
            "POST",
            "/api/autotuner/increment_hashrate_target",
            Some(GOOD),
            &json!({}),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["mode"], "hashrate");
    let r = h
        .send_json(
            "POST",
            "/api/autotuner/set_default_hashrate_target",
            Some(GOOD),
            &json!({}),
        )
        .await;
    assert_eq!(r.status, 200);

    let e = assert_error(
        &h.send_json(
            "POST",
            "/api/autotuner/increment_power_target",
            Some(GOOD),
            &json!({"amount": -5}),
        )
        .await,
        400,
        "negative step",
    );
    assert_eq!(e["field"], "amount");
    assert_error(
        &h.send_json(
            "PUT",
            "/api/autotuner/active",
            Some(GOOD),
            &json!({"active": "yes"}),
        )
        .await,
        422,
        "mistyped active",
    );
    assert_error(
        &h.request(
            "PUT",
            "/api/autotuner/active",
            Some(GOOD),
            Some("application/json"),
            "",
        )
        .await,
        400,
        "no body",
    );
    assert_error(
        &h.request(
            "PUT",
            "/api/autotuner/active",
            Some(GOOD),
            Some("application/json"),
            "{",
        )
        .await,
        400,
        "malformed",
    );

    // Recalibration searches the current target again; refused (409) while the tuner is off.
    let r = h
        .send_json("POST", "/api/perf/calibrate", Some(GOOD), &json!({}))
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["reason"], "recalibration requested");

    // Off: the state says so.
    let v = h
        .send_json(
            "PUT",
            "/api/autotuner/active",
            Some(GOOD),
            &json!({"active": false}),
        )
        .await
        .json();
    assert_eq!(v["active"], false);
    assert_error(
        &h.send_json("POST", "/api/perf/calibrate", Some(GOOD), &json!({}))
            .await,
        409,
        "calibrate while off",
    );
    let s = h.get("/api/autotuner/saved-status", Some(GOOD)).await;
    assert_eq!(s.status, 200);
    assert_eq!(s.json()["schema"], "svcos.api.autotuner.saved_status.v1");
}

/// The tuner's configured power target as `/api/power/dps` reports it, once it equals `watt`.
async fn tuner_target_becomes(h: &Harness, watt: f64) {
    for _ in 0..500 {
        let v = h.get("/api/power/dps", Some(GOOD)).await.json();
        if v["configured_power_target_watt"].as_f64() == Some(watt) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the tuner's configured target never became {watt} W");
}

/// `POST /api/config` setting `[hardware].power_target_watt`; the write report.
async fn write_power_target(h: &Harness, watt: f64) -> Value {
    let r = h
        .send_json(
            "POST",
            "/api/config",
            Some(GOOD),
            &json!({"hardware": {"power_target_watt": watt}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

#[tokio::test]
async fn a_power_target_moved_by_step_is_the_config_figure_so_a_later_write_can_restore_it() {
    let h = Harness::start(Options::default()).await;
    write_power_target(&h, 1100.0).await;
    tuner_target_becomes(&h, 1100.0).await;

    let v = until_ok(
        &h,
        "POST",
        "/api/autotuner/decrement_power_target",
        &json!({"amount": 100}),
    )
    .await;
    assert_eq!(v["configured_power_target_watt"], 1000.0);
    // Every surface that shows the configured figure now shows the tuner's.
    let t = h.get("/api/autotuner/target", Some(GOOD)).await.json();
    assert_eq!(t["configured_power_target_watt"], 1000.0);
    let file = std::fs::read_to_string(&h.layout.config_path).unwrap();
    assert!(file.contains("power_target_watt = 1000"), "{file}");

    // Writing the earlier figure is a change again, so the tuner follows it back.
    let r = write_power_target(&h, 1100.0).await;
    assert!(
        r["changed"]
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k == "hardware.power_target_watt"),
        "{r}"
    );
    tuner_target_becomes(&h, 1100.0).await;

    // A hashrate step leaves the power key alone.
    until_ok(
        &h,
        "POST",
        "/api/autotuner/increment_hashrate_target",
        &json!({}),
    )
    .await;
    let t = h.get("/api/autotuner/target", Some(GOOD)).await.json();
    assert_eq!(t["configured_power_target_watt"], 1100.0);
}

#[tokio::test]
async fn time_of_use_schedule_round_trips_and_rejects_bad_windows() {
    let h = Harness::start(Options::default()).await;
    let body = json!({"enabled": true, "windows": [
        {"start": "17:00", "end": "21:00", "power_target_watt": 900, "label": "peak"},
        {"start": "23:00", "end": "06:00", "power_target_watt": 1200},
    ]});
    let v = until_ok(&h, "POST", "/api/tou/schedule", &body).await;
    assert_eq!(v["schema"], "svcos.api.tou.schedule.v1");
    let g = h.get("/api/tou/schedule", Some(GOOD)).await.json();
    assert_eq!(g["enabled"], true);
    assert_eq!(g["windows"][0]["start"], "17:00");
    assert_eq!(g["windows"][1]["end"], "06:00");
    assert_eq!(g["windows"][0]["label"], "peak");
    // Read in the configured zone (default UTC); the next start or end with its offset.
    assert_eq!(g["timezone"], "UTC");
    let next = g["next_change"]
        .as_str()
        .expect("enabled windows have a next change");
    assert!(next.ends_with("+00:00") && next.len() == 25, "{next}");

    let overlap = json!({"enabled": true, "windows": [
        {"start": "17:00", "end": "21:00", "power_target_watt": 900},
        {"start": "20:00", "end": "22:00", "power_target_watt": 900},
    ]});
    let e = assert_error(
        &h.send_json("POST", "/api/tou/schedule", Some(GOOD), &overlap)
            .await,
        400,
        "overlap",
    );
    assert!(e["error"].as_str().unwrap().contains("overlaps"), "{e}");
    let e = assert_error(
        &h.send_json(
            "POST",
            "/api/tou/schedule",
            Some(GOOD),
            &json!({"enabled": true, "windows": [{"start": "25:00", "end": "26:00", "power_target_watt": 1}]}),
        )
        .await,
        400,
        "bad time",
    );
    assert_eq!(e["field"], "windows[0].start");
    assert_error(
        &h.send_json(
            "POST",
            "/api/tou/schedule",
            Some(GOOD),
            &json!({"enabled": true, "windows": [{"start": "01:00", "end": "02:00", "power_target_watt": -3}]}),
        )
        .await,
        400,
        "negative target",
    );
    assert_error(
        &h.send_json(
            "POST",
            "/api/tou/schedule",
            Some(GOOD),
            &json!({"enabled": 1}),
        )
        .await,
        422,
        "mistyped",
    );
    // Above the PSU limit (125 % of nominal).
    assert_error(
        &h.send_json(
            "POST",
            "/api/tou/schedule",
            Some(GOOD),
            &json!({"enabled": true, "windows": [{"start": "01:00", "end": "02:00", "power_target_watt": 5000}]}),
        )
        .await,
        400,
        "above the PSU limit",
    );
    // Nothing bad was stored.

    let g = h.get("/api/tou/schedule", Some(GOOD)).await.json();
    assert_eq!(g["windows"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn profiles_save_apply_export_import_and_silicon_views() {
    let h = Harness::start(Options::default()).await;
    h.send_json(
        "PUT",
        "/api/autotuner/active",
        Some(GOOD),
        &json!({"active": true}),
    )
    .await;
    // Saving needs a point in force, which the tuner has once it has seen the board mine.
    let saved = until_ok(&h, "POST", "/api/profiles", &json!({"name": "quiet night"})).await;
    assert_eq!(saved["profile"]["id"], "quiet night");
    let list = h.get("/api/profiles", Some(GOOD)).await.json();
    assert_eq!(list["schema"], "svcos.api.profiles.v1");
    assert!(
        list["saved"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["id"] == "quiet night"),
        "{list}"
    );
    let e = assert_error(
        &h.send_json(
            "POST",
            "/api/profiles",
            Some(GOOD),
            &json!({"name": "../etc"}),
        )
        .await,
        400,
        "bad name",
    );
    assert!(e["error"].as_str().unwrap().contains("name"), "{e}");
    assert_error(
        &h.send_json(
            "POST",
            "/api/profiles",
            Some(GOOD),
            &json!({"name": "nope", "action": "apply"}),
        )
        .await,
        404,
        "unknown profile",
    );
    assert_error(
        &h.send_json(
            "POST",
            "/api/profiles",
            Some(GOOD),
            &json!({"name": "x", "action": "burn"}),
        )
        .await,
        400,
        "bad action",
    );
    // Applying turns the tuner on, and the switch's one home says so (issue 31 defect 6: the
    // Tuner screen showed "on" while `[tuner].enabled` stayed false).
    let off = h
        .send_json(
            "PUT",
            "/api/autotuner/active",
            Some(GOOD),
            &json!({"active": false}),
        )
        .await;
    assert_eq!(off.status, 200);
    let enabled = |c: Value| c["config"]["tuner"]["enabled"].clone();
    assert_eq!(
        enabled(h.get("/api/config", Some(GOOD)).await.json()),
        json!(false)
    );
    let applied = h
        .send_json(
            "POST",
            "/api/profiles",
            Some(GOOD),
            &json!({"name": "quiet night", "action": "apply"}),
        )
        .await;
    assert_eq!(applied.status, 200);
    let applied = applied.json();
    assert_eq!(applied["mode"], "fixed");
    assert_eq!(applied["active"], true);
    assert_eq!(
        enabled(h.get("/api/config", Some(GOOD)).await.json()),
        json!(true)
    );

    // Export, then import into the same tuner: the document is accepted as is.
    let d = h.get("/api/profile/download", Some(GOOD)).await;
    assert_eq!(d.status, 200);
    assert!(
        d.headers["content-disposition"]
            .to_str()
            .unwrap()
            .contains("attachment")
    );
    let doc = d.json();
    assert_eq!(doc["schema"], "svcos.tuner.export.v1");
    let fleet = h
        .send_json(
            "POST",
            "/api/autotuner/fleet-profile/export",
            Some(GOOD),
            &json!({}),
        )
        .await
        .json();
    assert_eq!(fleet["saved"], doc["saved"]);
    let up = h
        .send_json("POST", "/api/profile/upload", Some(GOOD), &doc)
        .await;
    assert_eq!(up.status, 200, "{}", String::from_utf8_lossy(&up.body));
    assert_eq!(up.json()["profiles"], 1);
    let wrapped = h
        .send_json(
            "POST",
            "/api/profiles/silicon/import-json",
            Some(GOOD),
            &json!({"document": doc}),
        )
        .await;
    assert_eq!(wrapped.status, 200);
    assert_error(
        &h.send_json(
            "POST",
            "/api/profile/upload",
            Some(GOOD),
            &json!({"schema": "other"}),
        )
        .await,
        400,
        "foreign document",
    );
    assert_error(
        &h.send_json(
            "POST",
            "/api/profiles/silicon/import-json",
            Some(GOOD),
            &json!({"document": 5}),
        )
        .await,
        400,
        "not a document",
    );

    // A board file imported by hand shows in the silicon views and can be removed.
    let board = json!({"schema": "svcos.tuner.board.v1", "board_serial": "OTHER-7", "updated_at_ms": 1,
        "profiles": [{"id": "power-900", "mode": "power", "target": 900.0,
            "point": {"voltage_mv": 8400.0, "chains": [{"chain_id": 0, "frequency_mhz": 575.0, "chips": [{"chip": 3, "frequency_mhz": 550.0}]}]},
            "measured": {"power_watt": 901.0, "hashrate_ths": 9.1, "efficiency_j_per_th": 99.0, "hw_error_rate": 0.001, "temp_max_c": 70.0},
            "tuned_at_ms": 1, "board_serial": "OTHER-7"}]});
    let r = h
        .send_json("POST", "/api/profiles/silicon/import", Some(GOOD), &board)
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let boards = h.get("/api/profiles/silicon", Some(GOOD)).await.json();
    assert!(
        boards["boards"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["id"] == "OTHER-7"),
        "{boards}"
    );
    let table = h
        .get("/api/profiles/silicon-table", Some(GOOD))
        .await
        .json();
    let row = table["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["board_serial"] == "OTHER-7")
        .cloned()
        .unwrap();
    assert_eq!(row["trimmed_chips"], 1);
    let one = h
        .get("/api/profiles/silicon/OTHER-7", Some(GOOD))
        .await
        .json();
    assert_eq!(one["profiles"][0]["id"], "power-900");
    let reload = h
        .send_json(
            "POST",
            "/api/profiles/silicon/reload",
            Some(GOOD),
            &json!({}),
        )
        .await
        .json();
    assert!(reload["boards"].as_u64().unwrap() >= 1);
    // Not this board's point: cannot be made active here.
    assert_error(
        &h.send_json(
            "PUT",
            "/api/profiles/silicon/active",
            Some(GOOD),
            &json!({"profile_id": "power-900"}),
        )
        .await,
        404,
        "other board's profile",
    );
    let del = h
        .request(
            "DELETE",
            "/api/profiles/silicon/OTHER-7",
            Some(GOOD),
            None,
            "",
        )
        .await;
    assert_eq!(del.status, 200);
    assert_error(
        &h.get("/api/profiles/silicon/OTHER-7", Some(GOOD)).await,
        404,
        "deleted board",
    );
    assert_error(
        &h.request(
            "DELETE",
            "/api/profiles/silicon/OTHER-7",
            Some(GOOD),
            None,
            "",
        )
        .await,
        404,
        "deleted twice",
    );
    // A bad frequency in an imported file is refused.
    let mut bad = board.clone();
    bad["profiles"][0]["point"]["chains"][0]["frequency_mhz"] = json!(5000.0);
    assert_error(
        &h.send_json("POST", "/api/profiles/silicon/import", Some(GOOD), &bad)
            .await,
        400,
        "bad frequency",
    );
}

#[tokio::test]
async fn read_views_csv_chip_health_dps_and_profitability() {
    let h = Harness::start(Options::default()).await;
    h.send_json(
        "PUT",
        "/api/autotuner/active",
        Some(GOOD),
        &json!({"active": true}),
    )
    .await;
    // The CSV has a header row, then one row per telemetry sample the tuner took.
    let mut rows = 0;
    for _ in 0..500 {
        let r = h.get("/api/autotuner/telemetry/csv", Some(GOOD)).await;
        assert_eq!(r.status, 200);
        assert!(
            r.headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/csv")
        );
        let text = String::from_utf8(r.body.to_vec()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("at_ms,state,power_watt,"), "{text}");
        rows = lines.len() - 1;
        if rows > 0 {
            assert!(lines[1].contains(",1320,"), "{text}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(rows > 0);
    let c = h.get("/api/autotuner/chip-health", Some(GOOD)).await;
    assert_eq!(c.status, 200);
    assert_eq!(c.json()["schema"], "svcos.api.autotuner.chip_health.v1");
    let s = h.get("/api/autotuner/silicon-report", Some(GOOD)).await;
    assert_eq!(s.status, 200);
    let tp = h.get("/api/autotuner/tuned_profiles", Some(GOOD)).await;
    assert_eq!(tp.status, 200);
    assert!(tp.json()["profiles"].is_array());
    let d = h.get("/api/power/dps", Some(GOOD)).await.json();
    assert_eq!(d["schema"], "svcos.api.power.dps.v1");
    assert_eq!(d["enabled"], true);
    assert_eq!(d["reduction_watt"], 0.0);

    let p = h
        .send_json(
            "POST",
            "/api/autotuner/profitability",
            Some(GOOD),
            &json!({"btc_price": 100000, "network_difficulty": 1.0e14, "electricity_price_per_kwh": 0.1}),
        )
        .await;
    assert_eq!(p.status, 200);
    let p = p.json();
    // 13.4 TH/s for a day at difficulty 1e14: 13.4e12 * 86400 / (1e14 * 2^32) blocks.
    let blocks = 13.4e12 * 86_400.0 / (1.0e14 * 4_294_967_296.0);
    let btc = p["btc_per_day"].as_f64().unwrap();
    assert!((btc - blocks * 3.125).abs() < 1e-12, "{p}");
    assert!(
        (p["cost_per_day"].as_f64().unwrap() - 1.32 * 24.0 * 0.1).abs() < 1e-3,
        "{p}"
    );
    let e = assert_error(
        &h.send_json(
            "POST",
            "/api/autotuner/profitability",
            Some(GOOD),
            &json!({"btc_price": 1, "network_difficulty": 0}),
        )
        .await,
        400,
        "zero difficulty",
    );
    assert_eq!(e["field"], "network_difficulty");
    assert_error(
        &h.send_json(
            "POST",
            "/api/autotuner/profitability",
            Some(GOOD),
            &json!({}),
        )
        .await,
        422,
        "missing prices",
    );
}

/// POST the same body until the governor has had telemetry to act on (`ready` says when).
async fn until_governed(
    h: &Harness,
    path: &str,
    body: &Value,
    ready: impl Fn(&Value) -> bool,
) -> Value {
    let mut last = Value::Null;
    for _ in 0..200 {
        let r = h.send_json("POST", path, Some(GOOD), body).await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        last = r.json();
        if ready(&last) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{path}: the governor never acted: {last}");
}

#[tokio::test]
async fn noise_profile_lowers_the_power_limit_while_the_fans_run_above_the_ceiling() {
    let h = Harness::start(Options::default()).await;
    let path = "/api/autotuner/noise-profile";
    for (body, field) in [
        (json!({}), "fan_max_percent"),
        (json!({"fan_max_percent": 5}), "fan_max_percent"),
        (json!({"fan_max_percent": 55.5}), "fan_max_percent"),
        (
            json!({"fan_max_percent": 50, "step_watt": 5000}),
            "step_watt",
        ),
        (json!({"interval_s": 1}), "interval_s"),
    ] {
        let r = h.send_json("POST", path, Some(GOOD), &body).await;
        let e = assert_error(&r, 400, &body.to_string());
        assert_eq!(e["field"], field, "{body}");
    }
    // Nothing refused was written.
    let c = h.get("/api/config", Some(GOOD)).await.json();
    assert_eq!(c["config"]["governor"]["noise"]["enabled"], false, "{c}");

    // The fake's fans run at 60 % in auto mode, drawing 1320 W: a 50 % ceiling takes one step
    // (50 W) off the draw at once, then waits interval_s before the next.
    let v = until_governed(&h, path, &json!({"fan_max_percent": 50}), |v| {
        !v["limit"]["limit_watt"].is_null()
    })
    .await;
    assert_eq!(v["schema"], "svcos.api.autotuner.noise_profile.v1");
    assert_eq!(v["settings"]["enabled"], true);
    assert_eq!(v["settings"]["fan_max_percent"], 50);
    assert_eq!(v["fan_percent"], 60);
    assert_eq!(v["last_action"], "lower");
    assert_eq!(v["limit"]["limit_watt"], 1270.0, "{v}");
    assert_eq!(v["limit"]["binding"], true);
    assert_eq!(v["governor"]["binding"], "noise");
    assert_eq!(v["governor"]["target_watt"], 1270.0);
    assert!(v["last_step_ms"].as_i64().unwrap() > 0);
    let c = h.get("/api/config", Some(GOOD)).await.json();
    assert_eq!(
        c["config"]["governor"]["noise"]["fan_max_percent"], 50,
        "{c}"
    );
    // The controller's state is the governor's file.
    let saved = h
        .layout
        .service_state_dir(svcos_common::ServiceName::Tuner)
        .join("power/noise.json");
    let saved: Value = serde_json::from_slice(&std::fs::read(&saved).unwrap()).unwrap();
    assert_eq!(saved["limit_watt"], 1270.0);

    // Off: the limit goes at once.
    let v = h
        .send_json("POST", path, Some(GOOD), &json!({"enabled": false}))
        .await
        .json();
    assert_eq!(v["settings"]["enabled"], false);
    assert_eq!(v["settings"]["fan_max_percent"], 50);
    assert!(v["limit"]["limit_watt"].is_null(), "{v}");
    assert_ne!(v["governor"]["binding"], "noise");
}

#[tokio::test]
async fn quota_spreads_the_days_energy_as_a_limit() {
    let h = Harness::start(Options::default()).await;
    let path = "/api/autotuner/quota";
    for (body, field) in [
        (json!({}), "daily_kwh"),
        (json!({"daily_kwh": 0}), "daily_kwh"),
        (json!({"daily_kwh": 1000}), "daily_kwh"),
        (json!({"daily_kwh": 10, "min_watt": 1}), "min_watt"),
    ] {
        let r = h.send_json("POST", path, Some(GOOD), &body).await;
        let e = assert_error(&r, 400, &body.to_string());
        assert_eq!(e["field"], field, "{body}");
    }
    let v = until_governed(&h, path, &json!({"daily_kwh": 24}), |v| !v["day"].is_null()).await;
    assert_eq!(v["schema"], "svcos.api.autotuner.quota.v1");
    assert_eq!(v["settings"]["daily_kwh"], 24.0);
    assert_eq!(v["spent"], false);
    // 24 kWh spread over at most 24 h left: at least 1000 W, and it binds only when below
    // the others (there are none here).
    let limit = v["limit"]["limit_watt"].as_f64().unwrap();
    assert!(limit >= 1000.0, "{v}");
    assert_eq!(v["governor"]["binding"], "quota");
    let used = v["used_kwh"].as_f64().unwrap();
    assert!((0.0..0.01).contains(&used), "{v}");
    assert!(
        (v["remaining_kwh"].as_f64().unwrap() + used - 24.0).abs() < 1e-3,
        "{v}"
    );
    let day = v["day"].as_str().unwrap();
    assert_eq!(day.len(), 10, "{day}");
    // The operator's target below the pace wins over it.
    write_power_target(&h, 900.0).await;
    let v = h
        .send_json("POST", path, Some(GOOD), &json!({"daily_kwh": 24}))
        .await
        .json();
    assert_eq!(v["governor"]["binding"], "operator", "{v}");
    assert_eq!(v["limit"]["binding"], false);
}

#[tokio::test]
async fn room_temp_factor_compensates_the_operators_target_for_the_room() {
    let mut opts = Options::default();
    opts.config.hardware.power_target_watt = 1000.0;
    let h = Harness::start(opts).await;
    let path = "/api/autotuner/room-temp-factor";
    for (body, field) in [
        (json!({}), "watt_per_c"),
        (json!({"watt_per_c": 600}), "watt_per_c"),
        (json!({"reference_room_c": 50}), "reference_room_c"),
        (json!({"base_watt": 10}), "base_watt"),
    ] {
        let r = h.send_json("POST", path, Some(GOOD), &body).await;
        let e = assert_error(&r, 400, &body.to_string());
        assert_eq!(e["field"], field, "{body}");
    }
    // No room reading yet: nothing to compensate.
    let body = json!({"watt_per_c": 25, "reference_room_c": 20});
    let v = h.send_json("POST", path, Some(GOOD), &body).await.json();
    assert_eq!(v["schema"], "svcos.api.autotuner.room_temp_factor.v1");
    assert_eq!(v["settings"]["enabled"], true);
    assert_eq!(v["base_watt"], 1000.0);
    assert!(v["room_c"].is_null(), "{v}");
    assert!(v["limit"]["limit_watt"].is_null(), "{v}");
    // A 24 °C room: 4 °C over the reference at 25 W/°C takes 100 W off the operator's 1000 W.
    let r = h
        .send_json(
            "POST",
            "/api/home/room-temp",
            Some(GOOD),
            &json!({"room_c": 24}),
        )
        .await;
    assert_eq!(r.status, 200);
    let v = until_governed(&h, path, &body, |v| !v["limit"]["limit_watt"].is_null()).await;
    assert_eq!(v["room_c"], 24.0);
    assert_eq!(v["limit"]["limit_watt"], 900.0, "{v}");
    assert_eq!(v["governor"]["binding"], "room_temp");
    assert_eq!(v["governor"]["target_watt"], 900.0);
    // A stronger factor, written and in force at once.
    let v = h
        .send_json("POST", path, Some(GOOD), &json!({"watt_per_c": 50}))
        .await
        .json();
    assert_eq!(v["limit"]["limit_watt"], 800.0, "{v}");
    let c = h.get("/api/config", Some(GOOD)).await.json();
    assert_eq!(c["config"]["governor"]["room_factor"]["watt_per_c"], 50.0);
}

#[tokio::test]
async fn cold_environment_reports_the_fan_floor_and_caps_power_until_the_chips_are_warm() {
    let h = Harness::start(Options::default()).await;
    let v = h.get("/api/thermal/cold_environment", Some(GOOD)).await;
    assert_eq!(v.status, 200);
    let v = v.json();
    assert_eq!(v["schema"], "svcos.api.thermal.cold_environment.v1");
    assert_eq!(v["settings"]["enabled"], false);
    assert_eq!(v["phase"], "off");
    assert_eq!(v["fan_min_percent"], 10);
    assert!(v["limit"]["limit_watt"].is_null());

    // Cold chips (20 °C) with the warm-up on: capped at the warm-up power.
    h.hw.telemetry.send_modify(|t| t.temp_max_c = 20.0);
    let r = h
        .send_json(
            "POST",
            "/api/config",
            Some(GOOD),
            &json!({"governor": {"cold_environment": {"enabled": true, "warmup_watt": 600, "warmup_temp_c": 45}}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let mut v = Value::Null;
    for _ in 0..200 {
        v = h
            .get("/api/thermal/cold_environment", Some(GOOD))
            .await
            .json();
        if v["phase"] == "warming_up" && v["governor"]["binding"] == "warmup" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(v["phase"], "warming_up", "{v}");
    assert_eq!(v["limit"]["limit_watt"], 600.0);
    assert_eq!(v["governor"]["target_watt"], 600.0);
    assert!(v["warming_since_ms"].as_i64().unwrap() > 0);
    // Warm: the cap goes, and stays gone while the miner hashes.
    h.hw.telemetry.send_modify(|t| t.temp_max_c = 50.0);
    for _ in 0..200 {
        v = h
            .get("/api/thermal/cold_environment", Some(GOOD))
            .await
            .json();
        if v["phase"] == "done" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(v["phase"], "done", "{v}");
    assert!(v["limit"]["limit_watt"].is_null(), "{v}");
    assert_eq!(v["temp_max_c"], 50.0);
}

#[tokio::test]
async fn visibility_shows_each_chip_with_its_chain_and_the_tuners_progress() {
    let h = Harness::start(Options::default()).await;
    // Per-chip counters on chain 0, growing each second as a hashing board's do.
    let chips = |seq: u64| {
        (0..4)
            .map(|i| svcos_proto::hwagent::v1::ChipTelemetry {
                index: i,
                frequency_mhz: 650.0,
                nonces: seq * 10,
                hw_errors: if i == 3 { seq * 5 } else { 0 },
                temp_c: 70.0,
                alive: i != 2,
                ..Default::default()
            })
            .collect::<Vec<_>>()
    };
    h.hw.telemetry.send_modify(|t| t.chains[0].chips = chips(1));
    h.send_json(
        "PUT",
        "/api/autotuner/active",
        Some(GOOD),
        &json!({"active": true}),
    )
    .await;
    let mut v = Value::Null;
    for seq in 2..400 {
        h.hw.telemetry.send_modify(|t| {
            t.seq = seq;
            t.chains[0].chips = chips(seq);
        });
        let r = h.get("/api/autotuner/visibility", Some(GOOD)).await;
        assert_eq!(r.status, 200);
        v = r.json();
        if v["chips"].as_array().is_some_and(|c| !c.is_empty()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(v["schema"], "svcos.api.autotuner.visibility.v1");
    assert_eq!(v["tuner"]["schema"], "svcos.api.autotuner.run_state.v1");
    assert_eq!(v["tuner"]["active"], true);
    assert!(
        v["tuner"]["steps"].is_u64() && v["tuner"]["voltage_mv"].is_f64(),
        "{v}"
    );
    assert!(!v["tuner"]["state"].as_str().unwrap().is_empty());
    let chips = v["chips"].as_array().expect("chips");
    assert!(
        !chips.is_empty(),
        "no chips after the tuner applied a point: {v}"
    );
    for c in chips {
        assert_eq!(c["chain_id"], 0, "{c}");
        assert!(!c["why"].as_str().unwrap().is_empty(), "{c}");
    }
    let dead: Vec<_> = chips.iter().filter(|c| c["verdict"] == "dead").collect();
    assert!(
        dead.iter()
            .all(|c| c["why"].as_str().unwrap().starts_with("silent")),
        "{v}"
    );
    let counted = v["summary"]["ok"].as_u64().unwrap()
        + v["summary"]["weak"].as_u64().unwrap()
        + v["summary"]["dead"].as_u64().unwrap();
    assert_eq!(counted as usize, chips.len());
}
