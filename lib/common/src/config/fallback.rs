//! Reading the config file in a running service: a bad value never stops a process.
//!
//! The writer ([`Config::save`]) refuses any invalid file, but the file on disk can still go bad:
//! a hand edit, a zone the tz database lost in an OS update, a rule a firmware update tightened.
//! A service that refused to start over it would stop mining for good (exit 78 is never
//! restarted), so every process reads the file through [`Config::load_or_fallback`], which never
//! fails and replaces what it cannot use, smallest piece first:
//!
//! | What is wrong | What is used instead | [`Fallback`] |
//! |---|---|---|
//! | a value breaks a rule (`system.timezone = "Mars/Olympus"`) | that value as in force | `value_in_force` |
//! | an entry of a list breaks a rule (`pools[1].url`) | the list without that entry (the list in force when none would be left) | `entry_dropped` (`value_in_force`) |
//! | a section has an unknown key or a mistyped value, or a rule still fails after its field fell back | the section as in force | `section_in_force` |
//! | the file is unreadable, not UTF-8 or not TOML | the whole config in force | `config_in_force` |
//!
//! "In force" is what the process runs on: its last good config after a reload; at start
//! [`Config::start_fallback`], the config the image ships when the file in use is the writable
//! copy over it (the board's driver and UARTs: the built-in defaults drive the simulator), else
//! the defaults. So an invalid `[hardware]` value at start runs on that safe value. Each
//! [`ConfigProblem`] names its field and the service that owns it
//! ([`key_effect`](super::change::key_effect)); [`ProblemLog`] reports them, a given problem at
//! most once a minute, so a service that re-reads the file every tick does not flood the log.
//! Every process applies this one rule, so a bad value is replaced the same way everywhere.
//! The gateway reports the problems of the file on disk in `GET /api/system/health`; its next
//! config write saves the values in force, so that is when a bad value leaves the file.
//! Exit 78 remains only for what cannot run at all (no board), never for a value.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use serde::Serialize;

use super::{Config, ConfigError, change::key_effect};
use crate::Layout;

/// How a [`ConfigProblem`] was worked around.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Fallback {
    /// The field keeps the value in force (at start: the shipped config's, else the default).
    ValueInForce,
    /// The bad entry was left out of its list.
    EntryDropped,
    /// The whole section keeps the values in force.
    SectionInForce,
    /// The whole file was unusable; the whole config in force is kept.
    ConfigInForce,
}

/// One thing in the file a process could not use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ConfigProblem {
    /// Dotted field (`system.timezone`, `pools[1].url`), a section (`hardware`), or empty for
    /// the whole file.
    pub field: String,
    /// The service that owns the field.
    pub owner: &'static str,
    /// What is wrong and what is allowed.
    pub message: String,
    /// What is used instead.
    pub fallback: Fallback,
}

/// A config that can be run on, and what had to be replaced to get it.
#[derive(Debug, Clone, PartialEq)]
pub struct Sanitised {
    /// Valid by construction.
    pub config: Config,
    /// Empty when the file was good.
    pub problems: Vec<ConfigProblem>,
}

/// Most repairs one read makes before it falls back to the whole config in force; each repair
/// removes or replaces a piece, so real files need a handful.
const MAX_REPAIRS: usize = 256;

impl Config {
    /// What a process falls back to at start, before anything is in force (module doc).
    pub fn start_fallback(layout: &Layout) -> Config {
        fallback_under(layout.base_config_path().as_deref())
    }

    /// Read the file for a running process: never fails. A missing file is the defaults;
    /// anything unusable falls back to `in_force` as the [module table](self) says.
    pub fn load_or_fallback(path: &Path, in_force: &Config) -> Sanitised {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Sanitised {
                    config: Config::default(),
                    problems: Vec::new(),
                };
            }
            Err(e) => {
                return whole_file(
                    in_force,
                    ConfigError::Read {
                        path: path.to_path_buf(),
                        source: e,
                    },
                );
            }
        };
        match String::from_utf8(bytes) {
            Ok(text) => Config::sanitise_toml(&text, path, in_force),
            Err(e) => whole_file(
                in_force,
                ConfigError::Parse {
                    path: path.to_path_buf(),
                    message: format!("not UTF-8: {e}"),
                },
            ),
        }
    }

    /// [`Config::load_or_fallback`] on text; `origin` names the source in messages.
    pub fn sanitise_toml(text: &str, origin: &Path, in_force: &Config) -> Sanitised {
        let table: toml::Table = match toml::from_str(text) {
            Ok(t) => t,
            Err(e) => {
                return whole_file(
                    in_force,
                    ConfigError::Parse {
                        path: origin.to_path_buf(),
                        message: e.to_string(),
                    },
                );
            }
        };
        let Ok(in_force_doc) = table_of(in_force) else {
            // Serialising a valid config cannot fail; if it ever does, the config in force runs.
            return Sanitised {
                config: in_force.clone(),
                problems: Vec::new(),
            };
        };
        let mut problems = Vec::new();
        let mut doc = toml::Table::new();
        // Type errors first, one section at a time, so one mistyped key costs only its section.
        for (section, value) in table {
            let mut alone = toml::Table::new();
            alone.insert(section.clone(), value.clone());
            match config_of(alone) {
                Ok(_) => {
                    doc.insert(section, value);
                }
                Err(e) => {
                    problems.push(problem(&section, e.to_string(), Fallback::SectionInForce));
                    if let Some(v) = in_force_doc.get(&section) {
                        doc.insert(section, v.clone());
                    }
                }
            }
        }
        let Ok(mut config) = config_of(doc) else {
            return whole_file(
                in_force,
                ConfigError::Parse {
                    path: origin.to_path_buf(),
                    message: "sections that parse alone do not parse together".into(),
                },
            );
        };
        // Then the rules, one broken field at a time, widening when a repair does not hold.
        let mut fields_tried = BTreeSet::new();
        let mut sections_tried = BTreeSet::new();
        for _ in 0..MAX_REPAIRS {
            let (field, message) = match config.validate() {
                Ok(()) => return Sanitised { config, problems },
                Err(ConfigError::Invalid { field, message }) => (field, message),
                Err(other) => return whole_file(in_force, other),
            };
            let Ok(mut doc) = table_of(&config) else {
                return whole_file(in_force, ConfigError::invalid(field, message));
            };
            let section = section_of(&field).to_string();
            let repaired = if fields_tried.insert(field.clone()) {
                repair_field(&mut doc, &in_force_doc, &field)
            } else {
                None
            };
            if repaired == Some(Fallback::EntryDropped) {
                // The list is shorter now: the same path names the next entry, which may be
                // bad too. Each drop shrinks the list, so this ends.
                fields_tried.remove(&field);
            }
            let fallback = match repaired {
                Some(f) => f,
                None if sections_tried.insert(section.clone()) => {
                    match in_force_doc.get(&section) {
                        Some(v) => doc.insert(section.clone(), v.clone()),
                        None => doc.remove(&section),
                    };
                    Fallback::SectionInForce
                }
                None => return whole_file(in_force, ConfigError::invalid(field, message)),
            };
            problems.push(problem(&field, message.clone(), fallback));
            config = match config_of(doc) {
                Ok(c) => c,
                Err(_) => return whole_file(in_force, ConfigError::invalid(field, message)),
            };
        }
        whole_file(
            in_force,
            ConfigError::invalid("", "too many invalid values to repair one by one"),
        )
    }
}

fn fallback_under(base: Option<&Path>) -> Config {
    match base {
        // The shipped file is read-only and checked by a test; a value of it that a newer rule
        // refuses still takes its default.
        Some(base) => Config::load_or_fallback(base, &Config::default()).config,
        None => Config::default(),
    }
}

fn problem(field: &str, message: String, fallback: Fallback) -> ConfigProblem {
    ConfigProblem {
        field: field.to_string(),
        owner: key_effect(field).0,
        message,
        fallback,
    }
}

/// A table as a config, through the text parser the config file is read with: deserialising
/// straight from a `toml::Value` would compile a second copy of every section's deserialiser
/// into the image binary (about 250 KB).
fn config_of(table: toml::Table) -> Result<Config, String> {
    let text = toml::to_string(&table).map_err(|e| e.to_string())?;
    toml::from_str(&text).map_err(|e: toml::de::Error| e.to_string())
}

/// A config as a table, through the value serialiser `Config::validate` already uses.
fn table_of(config: &Config) -> Result<toml::Table, String> {
    match toml::Value::try_from(config) {
        Ok(toml::Value::Table(t)) => Ok(t),
        Ok(_) => Err("a config serialises to a table".into()),
        Err(e) => Err(e.to_string()),
    }
}

fn whole_file(in_force: &Config, error: ConfigError) -> Sanitised {
    let field = error.field().unwrap_or_default().to_string();
    Sanitised {
        config: in_force.clone(),
        problems: vec![ConfigProblem {
            // The config writer owns the file as a whole.
            owner: if field.is_empty() {
                "gateway"
            } else {
                key_effect(&field).0
            },
            field,
            message: error.to_string(),
            fallback: Fallback::ConfigInForce,
        }],
    }
}

fn section_of(field: &str) -> &str {
    field.split(['.', '[']).next().unwrap_or(field)
}

/// One step of a dotted field path.
#[derive(Debug, PartialEq)]
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

fn steps(field: &str) -> Option<Vec<Step<'_>>> {
    let mut out = Vec::new();
    for part in field.split('.') {
        let (key, mut rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !key.is_empty() {
            out.push(Step::Key(key));
        }
        while let Some(stripped) = rest.strip_prefix('[') {
            let end = stripped.find(']')?;
            out.push(Step::Index(stripped[..end].parse().ok()?));
            rest = &stripped[end + 1..];
        }
    }
    (!out.is_empty()).then_some(out)
}

fn child<'v>(value: &'v mut toml::Value, step: &Step) -> Option<&'v mut toml::Value> {
    match (value, step) {
        (toml::Value::Table(t), Step::Key(k)) => t.get_mut(*k),
        (toml::Value::Array(a), Step::Index(i)) => a.get_mut(*i),
        _ => None,
    }
}

fn lookup<'v>(value: &'v toml::Value, steps: &[Step]) -> Option<&'v toml::Value> {
    steps.iter().try_fold(value, |v, step| match (v, step) {
        (toml::Value::Table(t), Step::Key(k)) => t.get(*k),
        (toml::Value::Array(a), Step::Index(i)) => a.get(*i),
        _ => None,
    })
}

/// Replace `field` in `doc`: a field inside a list entry drops that entry (mixing an old entry's
/// values into a new one would make a pool nobody wrote); any other field takes its value in
/// force. `None` when the path does not resolve.
fn repair_field(doc: &mut toml::Table, in_force: &toml::Table, field: &str) -> Option<Fallback> {
    let steps = steps(field)?;
    let mut root = toml::Value::Table(std::mem::take(doc));
    let outcome = (|| {
        if let Some(last_index) = steps.iter().rposition(|s| matches!(s, Step::Index(_))) {
            let Step::Index(i) = steps[last_index] else {
                return None;
            };
            let list = steps[..last_index]
                .iter()
                .try_fold(&mut root, |v, s| child(v, s))?;
            let toml::Value::Array(items) = list else {
                return None;
            };
            if i >= items.len() {
                return None;
            }
            // Dropping the last entry would leave nothing (no pool: the chips idle) where the
            // list in force has entries: keep that list instead.
            if items.len() == 1
                && let Some(toml::Value::Array(kept)) =
                    lookup(&toml::Value::Table(in_force.clone()), &steps[..last_index])
                && !kept.is_empty()
            {
                *items = kept.clone();
                return Some(Fallback::ValueInForce);
            }
            items.remove(i);
            return Some(Fallback::EntryDropped);
        }
        let (last, parents) = steps.split_last()?;
        let Step::Key(key) = last else {
            return None;
        };
        let parent = parents.iter().try_fold(&mut root, |v, s| child(v, s))?;
        let toml::Value::Table(parent) = parent else {
            return None;
        };
        match lookup(&toml::Value::Table(in_force.clone()), &steps) {
            Some(v) => parent.insert((*key).to_string(), v.clone()),
            // Absent in force means "unset" (an optional value): unset it here too.
            None => parent.remove(*key),
        };
        Some(Fallback::ValueInForce)
    })();
    if let toml::Value::Table(t) = root {
        *doc = t;
    }
    outcome
}

/// Logs [`ConfigProblem`]s for one process: its own at `warn`, the others' as "elsewhere", and
/// a given problem at most once per [`ProblemLog::EVERY_MS`].
#[derive(Debug)]
pub struct ProblemLog {
    service: &'static str,
    last_logged_ms: HashMap<(String, String), i64>,
}

impl ProblemLog {
    /// The least time between two log lines about one problem, ms.
    pub const EVERY_MS: i64 = 60_000;

    /// A log for the process `service` (as in [`key_effect`]: `hw-agent`, `tuner`, ...).
    pub fn new(service: &'static str) -> Self {
        ProblemLog {
            service,
            last_logged_ms: HashMap::new(),
        }
    }

    /// Log what is due at `now_ms`; returns the problems logged (for tests).
    pub fn report<'p>(
        &mut self,
        problems: &'p [ConfigProblem],
        now_ms: i64,
    ) -> Vec<&'p ConfigProblem> {
        // Problems that went away may be logged again at once if they come back.
        self.last_logged_ms.retain(|(field, message), _| {
            problems
                .iter()
                .any(|p| &p.field == field && &p.message == message)
        });
        let mut logged = Vec::new();
        for p in problems {
            let key = (p.field.clone(), p.message.clone());
            if let Some(at) = self.last_logged_ms.get(&key)
                && now_ms.saturating_sub(*at) < Self::EVERY_MS
            {
                continue;
            }
            self.last_logged_ms.insert(key, now_ms);
            if p.owner == self.service {
                tracing::warn!(
                    event = "config_value_refused",
                    field = %p.field,
                    fallback = ?p.fallback,
                    problem = %p.message,
                    "a value of this service's config is invalid; running on the fallback"
                );
            } else {
                tracing::warn!(
                    event = "config_value_refused_elsewhere",
                    field = %p.field,
                    owner = p.owner,
                    fallback = ?p.fallback,
                    problem = %p.message,
                    "an invalid config value of another service; not stopping over it"
                );
            }
            logged.push(p);
        }
        logged
    }
}

/// A running process's config: the values in force, and the reporter of what the file on disk
/// gets wrong. Each reload falls back to the values in force, so a refused update keeps the
/// last good values.
#[derive(Debug)]
pub struct LiveConfig {
    config: Config,
    problems: Vec<ConfigProblem>,
    log: ProblemLog,
}

impl LiveConfig {
    /// The config `service` started on (already sanitised by its entry).
    pub fn new(service: &'static str, config: Config) -> Self {
        LiveConfig {
            config,
            problems: Vec::new(),
            log: ProblemLog::new(service),
        }
    }

    /// Re-read `path` at `now_ms` (Unix ms; for the log's rate limit) and return the config now
    /// in force.
    pub fn reload(&mut self, path: &Path, now_ms: i64) -> &Config {
        let loaded = Config::load_or_fallback(path, &self.config);
        self.log.report(&loaded.problems, now_ms);
        self.config = loaded.config;
        self.problems = loaded.problems;
        &self.config
    }

    /// The config in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// What the latest reload had to replace.
    pub fn problems(&self) -> &[ConfigProblem] {
        &self.problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sanitise(text: &str, in_force: &Config) -> Sanitised {
        Config::sanitise_toml(text, Path::new("c.toml"), in_force)
    }

    fn fields(s: &Sanitised) -> Vec<(&str, Fallback)> {
        s.problems
            .iter()
            .map(|p| (p.field.as_str(), p.fallback))
            .collect()
    }

    #[test]
    fn a_good_file_has_no_problems() {
        let c = Config::default();
        let s = sanitise(&c.to_toml(), &c);
        assert_eq!(s.config, c);
        assert!(s.problems.is_empty());
    }

    #[test]
    fn a_bad_time_zone_costs_only_the_zone() {
        let text = "[system]\nhostname = \"rig-7\"\ntimezone = \"Mars/Olympus\"\n\
                    [thermal]\ntarget_temp_c = 71.0\n";
        let mut in_force = Config::default();
        in_force.system.timezone = "Europe/Berlin".into();
        let s = sanitise(text, &in_force);
        assert_eq!(fields(&s), [("system.timezone", Fallback::ValueInForce)]);
        assert_eq!(s.problems[0].owner, "tuner");
        assert!(s.problems[0].message.contains("Mars/Olympus"), "{s:?}");
        assert_eq!(s.config.system.timezone, "Europe/Berlin", "last good kept");
        assert_eq!(
            s.config.system.hostname, "rig-7",
            "the rest of the section kept"
        );
        assert_eq!(s.config.thermal.target_temp_c, 71.0, "other sections kept");
        // At start the value in force is the default.
        let s = sanitise(text, &Config::default());
        assert_eq!(s.config.system.timezone, "UTC");
    }

    #[test]
    fn a_bad_pool_is_dropped_and_the_others_mine() {
        let text = "[[pools]]\nurl = \"stratum+tcp://a:3333\"\nuser = \"w\"\n\
                    [[pools]]\nurl = \"http://nope\"\nuser = \"w\"\n\
                    [[pools]]\nurl = \"stratum+tcp://c:3333\"\nuser = \"w\"\n";
        let s = sanitise(text, &Config::default());
        assert_eq!(fields(&s), [("pools[1].url", Fallback::EntryDropped)]);
        assert_eq!(s.problems[0].owner, "stratum-agent");
        let urls: Vec<&str> = s.config.pools.iter().map(|p| p.url.as_str()).collect();
        assert_eq!(urls, ["stratum+tcp://a:3333", "stratum+tcp://c:3333"]);
    }

    #[test]
    fn a_list_left_empty_keeps_the_list_in_force() {
        let in_force = sanitise(
            "[[pools]]\nurl = \"stratum+tcp://a:3333\"\nuser = \"w\"\n",
            &Config::default(),
        )
        .config;
        assert_eq!(in_force.pools.len(), 1);
        let text = "[[pools]]\nurl = \"http://x\"\nuser = \"w\"\n\
                    [[pools]]\nurl = \"http://y\"\nuser = \"w\"\n";
        let s = sanitise(text, &in_force);
        assert_eq!(
            fields(&s),
            [
                ("pools[0].url", Fallback::EntryDropped),
                ("pools[0].url", Fallback::ValueInForce)
            ]
        );
        assert_eq!(
            s.config.pools, in_force.pools,
            "still mining on the pool in force"
        );
        // With nothing in force (at start) the bad entries are dropped.
        assert!(sanitise(text, &Config::default()).config.pools.is_empty());
    }

    #[test]
    fn unknown_or_mistyped_keys_cost_their_section() {
        let mut in_force = Config::default();
        in_force.api.port = 9000;
        let text = "[api]\nport = 8123\nbogus = 1\n[system]\nhostname = \"rig-7\"\n";
        let s = sanitise(text, &in_force);
        assert_eq!(fields(&s), [("api", Fallback::SectionInForce)]);
        assert!(s.problems[0].message.contains("bogus"), "{s:?}");
        assert_eq!(s.config.api.port, 9000);
        assert_eq!(s.config.system.hostname, "rig-7");

        let s = sanitise("[thermal]\ntarget_temp_c = \"hot\"\n", &Config::default());
        assert_eq!(fields(&s), [("thermal", Fallback::SectionInForce)]);
        assert_eq!(s.config.thermal, Config::default().thermal);

        let s = sanitise("[mars]\nx = 1\n", &Config::default());
        assert_eq!(fields(&s), [("mars", Fallback::SectionInForce)]);
        assert_eq!(s.config, Config::default());
    }

    #[test]
    fn non_finite_numbers_fall_back() {
        let s = sanitise("[hardware]\npower_target_watt = nan\n", &Config::default());
        assert_eq!(
            fields(&s),
            [("hardware.power_target_watt", Fallback::ValueInForce)]
        );
        assert_eq!(s.problems[0].owner, "hw-agent");
        assert_eq!(
            s.config.hardware.power_target_watt,
            Config::default().hardware.power_target_watt
        );
    }

    #[test]
    fn an_unusable_file_keeps_the_config_in_force() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        let mut in_force = Config::default();
        in_force.system.hostname = "rig-7".into();
        for bytes in [
            b"[system\nhostname = 1".to_vec(),
            b"[system]\nhostname = \"r\xffig\"\n".to_vec(),
        ] {
            std::fs::write(&path, &bytes).unwrap();
            let s = Config::load_or_fallback(&path, &in_force);
            assert_eq!(s.config, in_force);
            assert_eq!(s.problems.len(), 1, "{s:?}");
            assert_eq!(s.problems[0].fallback, Fallback::ConfigInForce);
            assert_eq!(s.problems[0].owner, "gateway");
        }
        std::fs::remove_file(&path).unwrap();
        let s = Config::load_or_fallback(&path, &in_force);
        assert_eq!(s.config, Config::default(), "no file is the defaults");
        assert!(s.problems.is_empty());
    }

    #[test]
    fn an_unusable_writable_copy_falls_back_to_the_shipped_board_config() {
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../rootfs/board/svcos/rootfs-overlay/etc/svcos/config.toml");
        let s = Config::load_or_fallback(&shipped, &Config::default());
        assert!(s.problems.is_empty(), "the image's config is valid: {s:?}");
        assert_eq!(
            s.config.hardware.driver,
            super::super::HardwareDriver::Linux
        );

        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("config.toml");
        std::fs::write(&copy, "[hardware\n").unwrap();
        let at_start = fallback_under(Some(&shipped));
        let loaded = Config::load_or_fallback(&copy, &at_start);
        assert_eq!(loaded.problems[0].fallback, Fallback::ConfigInForce);
        assert_eq!(
            loaded.config.hardware.driver,
            super::super::HardwareDriver::Linux,
            "the board's driver, not the simulator of the built-in defaults"
        );
        assert_eq!(fallback_under(None), Config::default());

        let production = Layout {
            config_path: crate::paths::PROD_CONFIG_OVERRIDE.into(),
            ..Layout::production()
        };
        assert_eq!(
            production.base_config_path().as_deref(),
            Some(Path::new(crate::paths::PROD_CONFIG))
        );
        assert_eq!(Layout::sim(dir.path()).base_config_path(), None);
    }

    #[test]
    fn every_result_validates() {
        // Cross-field rules whose named field cannot be repaired alone widen to the section.
        for text in [
            "[system]\nhostname = \"-bad-\"\ntimezone = \"Nowhere\"\n",
            "[[pools]]\nurl = \"http://x\"\nuser = \"\"\n",
            "[hardware]\npower_target_watt = -5.0\nchains = 99\n",
            "[thermal]\ntarget_temp_c = 500.0\nhot_temp_c = -3.0\n",
            "[supervisor]\nbogus = true\n[auth]\nws_ticket_ttl_s = 0\n",
        ] {
            let s = sanitise(text, &Config::default());
            s.config
                .validate()
                .unwrap_or_else(|e| panic!("{text}: {e}"));
            assert!(!s.problems.is_empty(), "{text}");
        }
    }

    #[test]
    fn field_paths_parse() {
        assert_eq!(
            steps("pools[1].url").unwrap(),
            [Step::Key("pools"), Step::Index(1), Step::Key("url")]
        );
        assert_eq!(
            steps("hardware.uarts[0]").unwrap(),
            [Step::Key("hardware"), Step::Key("uarts"), Step::Index(0)]
        );
        assert!(steps("pools[x]").is_none());
    }

    #[test]
    fn a_problem_is_logged_at_most_once_a_minute() {
        let s = sanitise(
            "[system]\ntimezone = \"Mars/Olympus\"\n",
            &Config::default(),
        );
        let mut log = ProblemLog::new("tuner");
        assert_eq!(log.report(&s.problems, 0).len(), 1);
        // The tuner re-reads every tick: silent until a minute has passed.
        for t in (100..ProblemLog::EVERY_MS).step_by(250) {
            assert!(log.report(&s.problems, t).is_empty(), "at {t} ms");
        }
        assert_eq!(log.report(&s.problems, ProblemLog::EVERY_MS).len(), 1);
        // Fixed, then broken again: reported at once.
        assert!(log.report(&[], ProblemLog::EVERY_MS + 1).is_empty());
        assert_eq!(log.report(&s.problems, ProblemLog::EVERY_MS + 2).len(), 1);
    }

    #[test]
    fn a_refused_update_keeps_the_last_good_values() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, "[thermal]\ntarget_temp_c = 70.0\n").unwrap();
        let mut live = LiveConfig::new("hw-agent", Config::default());
        assert_eq!(live.reload(&path, 0).thermal.target_temp_c, 70.0);
        assert!(live.problems().is_empty());
        std::fs::write(
            &path,
            "[thermal]\ntarget_temp_c = 500.0\nfan_min_percent = 40\n",
        )
        .unwrap();
        let c = live.reload(&path, 1).clone();
        assert_eq!(c.thermal.target_temp_c, 70.0, "last good, not the default");
        assert_eq!(
            c.thermal.fan_min_percent, 40,
            "the good part of the update applies"
        );
        assert_eq!(live.problems()[0].field, "thermal.target_temp_c");
        std::fs::write(&path, "not toml [").unwrap();
        assert_eq!(live.reload(&path, 2), &c);
    }
}
