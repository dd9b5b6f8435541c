//! Home Assistant control over MQTT: the command entities, their topics and payloads, and what
//! REST write each command stands for.
//!
//! The MQTT session only receives: it turns a message on `<base>/<entity>/set` into a
//! [`Command`] and hands it to the gateway through a bounded channel. The gateway runs the REST
//! write that [`plan`] names, in process and behind that route's own guard, so a command gets
//! exactly the validation, mode rules and audit record of the REST call; the verdict comes back
//! as a [`CommandResult`] and is published on `<base>/command/result`.
//!
//! A message with an empty payload is not a command: it is how a retained command is cleared
//! from the broker (Home Assistant, `mosquitto_pub -r -n`), so the session drops it without a
//! warning or a result.

use serde::Serialize;
use serde_json::{Value, json};

/// Longest payload kept (a command is a word or a number; the rest is noise).
pub const MAX_PAYLOAD: usize = 64;
/// Commands queued towards the gateway; a full queue refuses the command.
pub const QUEUE: usize = 16;

/// One command entity of the miner's Home Assistant device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Entity {
    /// Switch: `ON` wakes the miner, `OFF` puts it to sleep (the control board stays up).
    Mining,
    /// Number: the power target in W (`[hardware].power_target_watt`).
    PowerTarget,
    /// Select: the operating mode (`home`, `standard`, `hacker`).
    Mode,
    /// Button: restart the mining services (`PRESS`).
    Restart,
}

impl Entity {
    /// Every command entity.
    pub const ALL: [Entity; 4] = [
        Entity::Mining,
        Entity::PowerTarget,
        Entity::Mode,
        Entity::Restart,
    ];

    /// The topic level and object id (`<base>/<object>/set`).
    pub fn object(self) -> &'static str {
        match self {
            Entity::Mining => "mining",
            Entity::PowerTarget => "power_target",
            Entity::Mode => "mode",
            Entity::Restart => "restart",
        }
    }

    /// The Home Assistant component (discovery topic level and entity-id domain).
    pub fn component(self) -> &'static str {
        match self {
            Entity::Mining => "switch",
            Entity::PowerTarget => "number",
            Entity::Mode => "select",
            Entity::Restart => "button",
        }
    }

    /// How a refused command appears in the audit log (method `MQTT`).
    pub fn audit_path(self) -> &'static str {
        match self {
            Entity::Mining => "mqtt:mining/set",
            Entity::PowerTarget => "mqtt:power_target/set",
            Entity::Mode => "mqtt:mode/set",
            Entity::Restart => "mqtt:restart/set",
        }
    }

    /// The entity for a topic object level.
    pub fn from_object(object: &str) -> Option<Entity> {
        Entity::ALL.into_iter().find(|e| e.object() == object)
    }
}

/// A command as received.
#[derive(Debug, Clone, PartialEq)]
pub struct Command {
    /// Which entity.
    pub entity: Entity,
    /// The payload as text (lossy UTF-8, trimmed, at most [`MAX_PAYLOAD`] bytes).
    pub payload: String,
    /// The broker delivered it as a retained message (an old command replayed on subscribe).
    pub retained: bool,
}

impl Command {
    /// Build from a raw MQTT message.
    pub fn new(entity: Entity, payload: &[u8], retained: bool) -> Self {
        let mut text = String::from_utf8_lossy(payload).trim().to_string();
        if text.len() > MAX_PAYLOAD {
            let mut cut = MAX_PAYLOAD;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
        }
        Command {
            entity,
            payload: text,
            retained,
        }
    }
}

/// What to do with a command.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Run this REST write (a registry row) with this JSON body.
    Rest {
        /// `POST` (every mirrored write is one).
        method: &'static str,
        /// The registry path.
        path: &'static str,
        /// The body.
        body: Value,
    },
    /// Refuse without touching anything.
    Refuse(String),
}

/// The REST write a command stands for, or why it is refused. Only the payload's shape is
/// checked here (which word, or number vs text); values go to the REST route as they are, so
/// its validation decides (a text power target reaches `POST /api/config` and is refused there
/// naming the field).
pub fn plan(cmd: &Command) -> Plan {
    if cmd.retained {
        return Plan::Refuse(
            "retained command ignored: commands act once, when published (clear the retained \
             message on the broker)"
                .into(),
        );
    }
    let rest = |path, body| Plan::Rest {
        method: "POST",
        path,
        body,
    };
    match cmd.entity {
        Entity::Mining => match cmd.payload.as_str() {
            "ON" => rest("/api/action/wake", json!({})),
            "OFF" => rest("/api/action/sleep", json!({})),
            other => Plan::Refuse(format!("expected ON or OFF, not {other:?}")),
        },
        Entity::PowerTarget => {
            let value = match cmd.payload.parse::<f64>() {
                Ok(w) if w.is_finite() => json!(w),
                Ok(_) => return Plan::Refuse("the power target must be a finite number".into()),
                Err(_) => Value::String(cmd.payload.clone()),
            };
            rest(
                "/api/config",
                json!({"hardware": {"power_target_watt": value}}),
            )
        }
        Entity::Mode => rest("/api/setup/step4-mode", json!({"mode": cmd.payload})),
        Entity::Restart => match cmd.payload.as_str() {
            "PRESS" => rest("/api/action/restart", json!({})),
            other => Plan::Refuse(format!("expected PRESS, not {other:?}")),
        },
    }
}

/// The verdict on one command, published on `<base>/command/result` (not retained).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommandResult {
    /// Schema tag (`svcos.mqtt.command_result.v1`).
    pub schema: &'static str,
    /// Which entity.
    pub entity: Entity,
    /// The payload as received (trimmed, truncated).
    pub payload: String,
    /// The command was carried out.
    pub ok: bool,
    /// The HTTP status of the mirrored REST write (400 for a payload refused before it).
    pub status: u16,
    /// The REST route that ran, if any.
    pub route: Option<&'static str>,
    /// Why it failed: the envelope's message (and detail), or the refusal.
    pub error: Option<String>,
    /// When, Unix ms.
    pub at_ms: i64,
}

/// Schema tag of [`CommandResult`].
pub const RESULT_SCHEMA: &str = "svcos.mqtt.command_result.v1";

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(entity: Entity, payload: &str) -> Command {
        Command::new(entity, payload.as_bytes(), false)
    }

    #[test]
    fn plans() {
        let cases = [
            (cmd(Entity::Mining, "ON"), Some("/api/action/wake")),
            (cmd(Entity::Mining, " OFF\n"), Some("/api/action/sleep")),
            (cmd(Entity::Mining, "on"), None),
            (cmd(Entity::Mining, "SLEEP"), None),
            (cmd(Entity::PowerTarget, "900"), Some("/api/config")),
            (cmd(Entity::PowerTarget, "banana"), Some("/api/config")),
            (cmd(Entity::PowerTarget, "inf"), None),
            (cmd(Entity::Mode, "home"), Some("/api/setup/step4-mode")),
            (cmd(Entity::Restart, "PRESS"), Some("/api/action/restart")),
            (cmd(Entity::Restart, ""), None),
            (
                Command::new(Entity::Mining, b"ON", true),
                None, // retained
            ),
        ];
        for (c, want) in cases {
            match (plan(&c), want) {
                (Plan::Rest { path, .. }, Some(p)) => assert_eq!(path, p, "{c:?}"),
                (Plan::Refuse(_), None) => {}
                (got, _) => panic!("{c:?}: {got:?}"),
            }
        }
    }

    #[test]
    fn power_target_body_keeps_text_for_rest_to_refuse() {
        let Plan::Rest { body, .. } = plan(&cmd(Entity::PowerTarget, "1200.5")) else {
            panic!()
        };
        assert_eq!(body, json!({"hardware": {"power_target_watt": 1200.5}}));
        let Plan::Rest { body, .. } = plan(&cmd(Entity::PowerTarget, "lots")) else {
            panic!()
        };
        assert_eq!(body, json!({"hardware": {"power_target_watt": "lots"}}));
    }

    #[test]
    fn payload_is_trimmed_and_bounded() {
        let long = "é".repeat(100);
        let c = Command::new(Entity::Mode, long.as_bytes(), false);
        assert!(c.payload.len() <= MAX_PAYLOAD);
        assert!(c.payload.chars().all(|ch| ch == 'é'));
        for e in Entity::ALL {
            assert_eq!(Entity::from_object(e.object()), Some(e));
        }
    }
}
