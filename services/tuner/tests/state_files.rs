//! Every state file the tuner reads at start, damaged every way: the tuner opens in the file's
//! safe state (no settings, no profiles, an empty history) and the bad bytes are moved aside.

use std::path::Path;
use std::sync::Arc;

use svcos_common::statefile::{Damage, assert_quarantined};
use svcos_common::time::ManualClock;
use svcos_tuner::history::History;
use svcos_tuner::history::store::{Point, Table};
use svcos_tuner::model::{Measured, Mode, Point as OperatingPoint, Profile};
use svcos_tuner::store::{Settings, Store, TouSchedule};

fn profile(id: &str) -> Profile {
    Profile {
        id: id.into(),
        mode: Mode::Power,
        target: 1000.0,
        point: OperatingPoint::uniform(8600.0, 3, 600.0),
        measured: Measured::default(),
        tuned_at_ms: 1,
        board_serial: "SN1".into(),
    }
}

fn settings() -> Settings {
    Settings {
        active: true,
        mode: Mode::Power,
        power_target_watt: 1000.0,
        operator_target_watt: 0.0,
        hashrate_target_ths: 0.0,
        fixed_profile: String::new(),
        tou: TouSchedule::default(),
        boards_off: vec![2],
    }
}

#[test]
fn damaged_tuner_files_start_from_defaults_and_are_moved_aside() {
    for damage in Damage::ALL {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        store.save_settings(&settings()).unwrap();
        store.put_tuned(profile("power-1000"), 5).unwrap();
        store.put_saved(profile("quiet")).unwrap();
        drop(store);

        let files = [
            dir.path().join("settings.json"),
            dir.path().join("saved.json"),
            dir.path().join("boards").join("SN1.json"),
        ];
        let bad: Vec<Vec<u8>> = files.iter().map(|f| damage.write(f)).collect();

        let store = Store::open(dir.path()).unwrap_or_else(|e| panic!("{damage:?}: {e}"));
        assert_eq!(store.load_settings().unwrap(), None, "{damage:?}");
        assert!(store.saved.is_empty(), "{damage:?}");
        assert!(store.tuned("SN1", "power-1000").is_none(), "{damage:?}");
        for (file, bytes) in files.iter().zip(&bad) {
            assert_quarantined(file, bytes, &format!("{} {damage:?}", file.display()));
        }
    }
}

fn history_with_points(path: &Path) {
    let clock = ManualClock::at(0);
    let h = History::open(path, Arc::new(clock)).unwrap();
    // Enough minutes for several database pages, so damage lands inside the data.
    for i in 0..600 {
        h.record(Point {
            t_ms: i * 60_000,
            state: 3,
            power_watt: 1000.0 + i as f64,
            samples: 1,
            ..Default::default()
        });
    }
    assert!(h.flush());
    assert!(!h.points(Some(Table::Minute), 0, 0, 0).unwrap().is_empty());
}

#[test]
fn a_damaged_history_is_moved_aside_and_a_new_one_started() {
    for damage in Damage::ALL {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.sqlite");
        history_with_points(&path);
        let bad = damage.write(&path);

        let h = History::open(&path, Arc::new(ManualClock::at(0)))
            .unwrap_or_else(|e| panic!("{damage:?}: {e}"));
        assert!(
            h.points(Some(Table::Minute), 0, 0, 0).unwrap().is_empty(),
            "{damage:?}"
        );
        // The new history works.
        h.record(Point {
            t_ms: 60_000,
            samples: 1,
            ..Default::default()
        });
        assert!(h.flush(), "{damage:?}");
        drop(h);
        // The new database took the old name; the bad bytes are beside it.
        let asides = svcos_common::statefile::asides(&path);
        assert_eq!(asides.len(), 1, "{damage:?}: {asides:?}");
        assert!(
            std::fs::read(&asides[0]).unwrap() == bad,
            "{damage:?}: the bad bytes are kept as they were"
        );
    }
}

#[test]
fn a_sound_history_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.sqlite");
    history_with_points(&path);
    let h = History::open(&path, Arc::new(ManualClock::at(0))).unwrap();
    assert!(!h.points(Some(Table::Minute), 0, 0, 0).unwrap().is_empty());
    assert!(svcos_common::statefile::asides(&path).is_empty());
}
