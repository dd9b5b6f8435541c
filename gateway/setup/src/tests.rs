//! One test per rule of the wizard.

use super::*;

const FACTS: Facts = Facts {
    password_set: Some(false),
    pools_configured: false,
    mode: "home",
    circuit_limit_watt: 0.0,
    setup_hold: true,
};

fn accepted() -> Wizard {
    let mut w = Wizard::default();
    w.accept_safety(
        SafetyInput { accept: Some(true) },
        vec!["manual_fan".into()],
        1,
    )
    .unwrap();
    w
}

fn circuit(voltage_v: f64, breaker_a: f64) -> Result<Circuit> {
    CircuitInput {
        voltage_v,
        breaker_a,
        apply_cap: None,
    }
    .check()
}

fn economics(price: f64, currency: &str) -> Result<Economics> {
    EconomicsInput {
        electricity_price_per_kwh: price,
        currency: currency.into(),
    }
    .check()
}

fn invalid_field(r: Result<impl std::fmt::Debug>) -> &'static str {
    match r {
        Err(WizardError::Invalid { field, .. }) => field,
        other => panic!("expected an invalid field, got {other:?}"),
    }
}

#[test]
fn circuit_limit_is_eighty_percent_rounded_down() {
    for (volt, amp, watt) in [
        (240.0, 20.0, 3840.0),
        (120.0, 15.0, 1440.0),
        (230.0, 16.0, 2944.0),
        (120.0, 30.0, 2880.0),
        (110.0, 7.3, 642.0), // 642.4 W: never round up past the breaker
    ] {
        assert_eq!(circuit_limit_watt(volt, amp), watt, "{volt} V x {amp} A");
    }
}

#[test]
fn circuit_patch_applies_the_cap_unless_declined() {
    let c = circuit(240.0, 20.0).unwrap();
    assert_eq!(c.config_patch()["power"]["circuit_limit_watt"], 3840.0);
    let declined = CircuitInput {
        voltage_v: 240.0,
        breaker_a: 20.0,
        apply_cap: Some(false),
    }
    .check()
    .unwrap();
    assert_eq!(declined.config_patch()["power"]["circuit_limit_watt"], 0.0);
    assert_eq!(declined.config_patch()["power"]["circuit_breaker_a"], 20.0);
}

#[test]
fn bad_inputs_name_their_field() {
    assert_eq!(invalid_field(circuit(12.0, 20.0)), "voltage_v");
    assert_eq!(invalid_field(circuit(f64::NAN, 20.0)), "voltage_v");
    assert_eq!(invalid_field(circuit(240.0, 200.0)), "breaker_a");
    assert_eq!(
        invalid_field(economics(-0.1, "USD")),
        "electricity_price_per_kwh"
    );
    assert_eq!(
        invalid_field(economics(f64::INFINITY, "USD")),
        "electricity_price_per_kwh"
    );
    assert_eq!(invalid_field(economics(0.1, "US")), "currency");
    assert_eq!(invalid_field(economics(0.1, "U5D")), "currency");
    let mut w = Wizard::default();
    let refused = w.accept_safety(
        SafetyInput {
            accept: Some(false),
        },
        vec![],
        1,
    );
    assert_eq!(invalid_field(refused), "accept");
    let long = SkipInput {
        reason: Some("x".repeat(MAX_REASON_CHARS + 1)),
    };
    assert_eq!(invalid_field(w.skip_safety(long, 1)), "reason");
    assert_eq!(w, Wizard::default(), "a refused input changes nothing");
}

#[test]
fn currency_is_normalised() {
    assert_eq!(economics(0.12, " usd ").unwrap().currency, "USD");
    let e = economics(0.10, "EUR").unwrap();
    let est = e.estimate(3250.04);
    assert_eq!(est.power_watt, 3250.0);
    assert_eq!(est.cost_per_day, 7.8);
}

#[test]
fn every_step_but_safety_needs_safety_first() {
    let mut w = Wizard::default();
    let c = circuit(230.0, 16.0).unwrap();
    let attempts: [(&str, Result<()>); 5] = [
        ("circuit", w.clone().set_circuit(&c, 1)),
        ("password", w.clone().password_set(1)),
        (
            "skip-password",
            w.clone().keep_password(SkipInput::default(), Some(true), 1),
        ),
        (
            "economics",
            w.clone().set_economics(&economics(0.1, "CHF").unwrap(), 1),
        ),
        ("quiet hours", w.clone().set_quiet_hours(json!({}), 1)),
    ];
    for (name, r) in attempts {
        match r {
            Err(WizardError::Order {
                step: Step::Safety,
                missing: None,
                ..
            }) => {}
            other => panic!("{name}: expected an order error, got {other:?}"),
        }
    }
    w.skip_safety(SkipInput::default(), 2).unwrap();
    w.set_circuit(&c, 3).unwrap();
    assert_eq!(w.steps[&Step::Safety].status, StepStatus::Skipped);
}

#[test]
fn skipping_after_accepting_changes_nothing() {
    let mut w = accepted();
    let before = w.clone();
    w.skip_safety(
        SkipInput {
            reason: Some("later".into()),
        },
        9,
    )
    .unwrap();
    assert_eq!(w, before);
}

#[test]
fn reposting_a_step_replaces_its_values_also_after_completion() {
    let mut w = accepted();
    w.set_circuit(&circuit(120.0, 15.0).unwrap(), 2).unwrap();
    w.password_set(3).unwrap();
    w.complete(Some(true), 4).unwrap();
    w.set_circuit(&circuit(240.0, 30.0).unwrap(), 5).unwrap();
    let rec = &w.steps[&Step::Circuit];
    assert_eq!(
        (rec.at_ms, &rec.values["max_continuous_watt"]),
        (5, &json!(5760.0))
    );
    w.complete(Some(true), 6).unwrap();
    assert_eq!(
        w.completed_at_ms,
        Some(4),
        "the first completion time is kept"
    );
}

#[test]
fn completion_needs_safety_circuit_and_password() {
    let mut w = Wizard::default();
    assert_eq!(w.missing(Some(false)), ["safety", "circuit", "password"]);
    match w.complete(Some(false), 1) {
        Err(WizardError::Order {
            step: Step::Safety,
            how,
            missing: Some(missing),
        }) => {
            assert_eq!(how, Step::Safety.how());
            assert_eq!(missing, ["safety", "circuit", "password"]);
        }
        other => panic!("{other:?}"),
    }
    w.skip_safety(SkipInput::default(), 1).unwrap();
    w.set_circuit(&circuit(230.0, 16.0).unwrap(), 2).unwrap();
    assert!(matches!(
        w.complete(None, 3),
        Err(WizardError::Order {
            step: Step::Password,
            ..
        })
    ));
    assert_eq!(w.completed_at_ms, None);
    // A password set outside the wizard (POST /api/auth/setup) counts.
    w.complete(Some(true), 3).unwrap();
    assert_eq!(w.completed_at_ms, Some(3));
}

#[test]
fn keeping_a_password_needs_one() {
    let mut w = accepted();
    assert!(matches!(
        w.keep_password(SkipInput::default(), Some(false), 2),
        Err(WizardError::NoPasswordToKeep)
    ));
    w.keep_password(SkipInput::default(), Some(true), 2)
        .unwrap();
    assert_eq!(w.steps[&Step::Password].status, StepStatus::Skipped);
    // A password entered in the wizard stays "done" when skipped afterwards.
    let mut w = accepted();
    w.password_set(2).unwrap();
    w.keep_password(SkipInput::default(), Some(true), 3)
        .unwrap();
    assert_eq!(w.steps[&Step::Password].status, StepStatus::Done);
}

#[test]
fn status_lists_steps_and_the_next_one() {
    let s = Wizard::default().status(&FACTS);
    let names: Vec<_> = s.steps.iter().map(|s| s.step).collect();
    assert_eq!(
        names,
        [
            "safety",
            "circuit",
            "password",
            "economics",
            "quiet_hours",
            "mode",
            "pool"
        ]
    );
    assert!(s.first_boot && s.auth_reachable && !s.complete && !s.can_complete);
    assert_eq!(s.next_step, Some("safety"));
    assert_eq!(s.circuit_limit_watt, None);
    assert_eq!(
        s.setup_hold_watt,
        Some(svcos_common::config::SETUP_HOLD_WATT)
    );

    let mut w = accepted();
    w.set_circuit(&circuit(240.0, 15.0).unwrap(), 2).unwrap();
    let facts = Facts {
        password_set: Some(true),
        circuit_limit_watt: 2880.0,
        ..FACTS
    };
    let s = w.status(&facts);
    assert_eq!(s.steps[2].status, StepState::Done, "password set via auth");
    assert!(s.can_complete && s.missing.is_empty());
    assert_eq!(s.next_step, Some("economics"));
    assert_eq!(s.circuit_limit_watt, Some(2880.0));
    assert_eq!(s.safety_acknowledged_at_ms, Some(1));
    let released = w.status(&Facts {
        setup_hold: false,
        ..facts
    });
    assert_eq!(released.setup_hold_watt, None, "a config not held says so");
    // The auth service down: the password is unknown, so completion is not offered.
    let down = w.status(&Facts {
        password_set: None,
        ..FACTS
    });
    assert!(!down.auth_reachable && !down.first_boot && !down.can_complete);
}

#[test]
fn status_keeps_its_wire_shape() {
    let body = serde_json::to_value(accepted().saved(&FACTS, "safety")).unwrap();
    assert_eq!(body["schema"], "svcos.api.setup.status.v1");
    assert_eq!(body["saved_step"], "safety");
    assert!(body.get("estimate").is_none() && body.get("next").is_none());
    assert_eq!(
        body["steps"][0],
        json!({"step": "safety", "status": "done", "done": true, "required": true,
            "how": Step::Safety.how(), "at_ms": 1,
            "values": {"accepted": true, "warning_ids": ["manual_fan"]}})
    );
    assert_eq!(body["steps"][1]["status"], "pending");
    assert_eq!(body["steps"][1]["values"], Value::Null);
    assert_eq!(body["steps"][5]["values"], json!({"mode": "home"}));
}

#[test]
fn acknowledgements_check_ids_and_keep_the_last_twenty() {
    let mut w = Wizard::default();
    let current = vec!["hacker_mode".to_string(), "manual_fan".to_string()];
    let unknown = AcknowledgeInput {
        warning_ids: Some(vec!["no_such_warning".into()]),
    };
    assert_eq!(
        invalid_field(w.acknowledge(unknown, current.clone(), 1)),
        "warning_ids"
    );
    w.acknowledge(AcknowledgeInput::default(), current.clone(), 2)
        .unwrap();
    assert_eq!(w.acknowledgements[0].warning_ids, current);
    for at in 3..30 {
        let one = AcknowledgeInput {
            warning_ids: Some(vec!["manual_fan".into()]),
        };
        w.acknowledge(one, current.clone(), at).unwrap();
    }
    assert_eq!(w.acknowledgements.len(), MAX_ACKNOWLEDGEMENTS);
    let body = w.acknowledge_body();
    assert_eq!(body.acknowledgement.as_ref().map(|a| a.at_ms), Some(29));
    assert_eq!(w.acknowledgements[0].at_ms, 10, "oldest dropped first");
    assert_eq!(body.acknowledgement.unwrap().via, "api");
}

#[test]
fn quiet_hours_patch_keeps_unnamed_members() {
    let input: QuietHoursInput = serde_json::from_value(json!({
        "start": "22:00", "end": "07:00", "timezone": "Asia/Kolkata", "power_cap_watt": 1200.0
    }))
    .unwrap();
    let patch = input.config_patch(json!({"enabled": false, "fan_max_percent": 40, "start": "x"}));
    assert_eq!(
        patch,
        json!({"home": {"night_mode": {"enabled": true, "start": "22:00", "end": "07:00",
            "fan_max_percent": 40, "power_cap_watt": 1200.0}},
            "system": {"timezone": "Asia/Kolkata"}})
    );
    let unknown =
        serde_json::from_value::<QuietHoursInput>(json!({"start": "1", "end": "2", "x": 1}));
    assert!(unknown.is_err(), "unknown members are refused");
}

#[test]
fn state_survives_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    let store = WizardStore::in_dir(&dir.path().join("gateway"));
    assert_eq!(
        store.load(),
        Wizard::default(),
        "missing file: empty wizard"
    );
    let mut w = accepted();
    w.set_circuit(&circuit(230.0, 16.0).unwrap(), 2).unwrap();
    w.set_economics(&economics(0.3, "chf").unwrap(), 3).unwrap();
    w.password_set(4).unwrap();
    w.complete(Some(true), 5).unwrap();
    store.save(&w).unwrap();
    assert_eq!(store.load(), w);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(store.path())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let leftovers: Vec<_> = std::fs::read_dir(store.path().parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != WizardStore::FILE_NAME)
        .collect();
    assert!(leftovers.is_empty(), "no temp file left: {leftovers:?}");
}

#[test]
fn a_damaged_state_file_starts_over_and_is_kept_aside() {
    use svcos_common::statefile::{Damage, assert_quarantined};
    for damage in Damage::ALL {
        let dir = tempfile::tempdir().unwrap();
        let store = WizardStore::in_dir(&dir.path().join("gateway"));
        let mut w = accepted();
        w.set_circuit(&circuit(230.0, 16.0).unwrap(), 2).unwrap();
        store.save(&w).unwrap();
        let bad = damage.write(store.path());
        assert_eq!(store.load(), Wizard::default(), "{damage:?}");
        assert_quarantined(store.path(), &bad, &format!("{damage:?}"));
        // Listed for /api/safety/warnings.
        let recovered = svcos_common::statefile::recovered(dir.path());
        assert_eq!(recovered.len(), 1, "{damage:?}: {recovered:?}");
        assert_eq!(recovered[0].service, "gateway");
        assert_eq!(recovered[0].file, WizardStore::FILE_NAME);
        // The wizard goes on: the next save writes a fresh file.
        store.save(&accepted()).unwrap();
        assert_eq!(store.load(), accepted());
    }
}

#[test]
fn a_save_that_cannot_write_says_where() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("file");
    std::fs::write(&blocker, b"").unwrap();
    let store = WizardStore::in_dir(&blocker.join("gateway"));
    match store.save(&Wizard::default()) {
        Err(WizardError::Save { path, .. }) => assert_eq!(path, store.path()),
        other => panic!("{other:?}"),
    }
}
