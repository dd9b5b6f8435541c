//! MQTT payloads: the periodic state message, Home Assistant discovery configs and topic names.
//! Pure functions of the snapshots, so tests can check them without a broker.

use serde_json::{Value, json};
use svcos_common::config::MqttConfig;
use svcos_proto::hwagent::v1::Telemetry;
use svcos_proto::stratum::v1::GetPoolsResponse;

use crate::commands::Entity;

/// Schema tag of the state message.
pub const STATE_SCHEMA: &str = "svcos.mqtt.state.v1";

/// Round as `/api/status` does, so the two agree digit for digit.
fn round(x: f64, digits: i32) -> f64 {
    let p = 10f64.powi(digits);
    (x * p).round() / p
}

/// Home Assistant's node-id alphabet: letters, digits, `_` and `-`.
pub fn sanitise_node_id(s: &str) -> String {
    let id: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    if id.is_empty() { "svcos".into() } else { id }
}

/// The topics of one miner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topics {
    /// Node id (second level, Home Assistant node id).
    pub node_id: String,
    /// `<prefix>/<node>`.
    pub base: String,
    /// Retained `online` / `offline`; the Last Will sets `offline`.
    pub availability: String,
    /// The periodic state message.
    pub state: String,
    /// Events, not retained.
    pub event: String,
    /// Where the test endpoint publishes.
    pub test: String,
    /// `<discovery_prefix>`.
    pub discovery_prefix: String,
    /// Home Assistant's birth message topic (`<discovery_prefix>/status`).
    pub ha_status: String,
}

impl Topics {
    /// Topics for a config and hostname.
    pub fn new(cfg: &MqttConfig, hostname: &str) -> Self {
        let node_id = if cfg.node_id.is_empty() {
            sanitise_node_id(hostname)
        } else {
            cfg.node_id.clone()
        };
        let base = format!("{}/{}", cfg.topic_prefix, node_id);
        Topics {
            availability: format!("{base}/availability"),
            state: format!("{base}/state"),
            event: format!("{base}/event"),
            test: format!("{base}/test"),
            discovery_prefix: cfg.discovery_prefix.clone(),
            ha_status: format!("{}/status", cfg.discovery_prefix),
            node_id,
            base,
        }
    }

    /// `<discovery_prefix>/sensor/<node>/<object>/config`.
    pub fn discovery(&self, object_id: &str) -> String {
        self.discovery_for("sensor", object_id)
    }

    /// `<discovery_prefix>/<component>/<node>/<object>/config`.
    pub fn discovery_for(&self, component: &str, object_id: &str) -> String {
        format!(
            "{}/{}/{}/{}/config",
            self.discovery_prefix, component, self.node_id, object_id
        )
    }

    /// `<base>/<entity>/set`: where a command entity listens.
    pub fn command(&self, entity: Entity) -> String {
        format!("{}/{}/set", self.base, entity.object())
    }

    /// `<base>/command/result`: the verdict on each command.
    pub fn command_result(&self) -> String {
        format!("{}/command/result", self.base)
    }

    /// The command entity a topic addresses, if it is one of this miner's command topics.
    pub fn command_entity(&self, topic: &str) -> Option<Entity> {
        let object = topic
            .strip_prefix(self.base.as_str())?
            .strip_prefix('/')?
            .strip_suffix("/set")?;
        Entity::from_object(object)
    }
}

/// The client id used when the config leaves it empty.
pub fn client_id(cfg: &MqttConfig, topics: &Topics) -> String {
    if cfg.client_id.is_empty() {
        format!("svcos-{}", topics.node_id)
    } else {
        cfg.client_id.clone()
    }
}

/// The state message (`svcos.mqtt.state.v1`). Numbers are rounded; power is hw-agent's
/// calibrated reading, the same watts `/api/status` reports; `energy_kwh` is the gateway's
/// saved meter reading ([`crate::energy`]).
pub fn state(
    hostname: &str,
    mode: &str,
    now_ms: i64,
    t: Option<&Telemetry>,
    p: Option<&GetPoolsResponse>,
    energy_kwh: f64,
) -> Value {
    let watt = t.map_or(0.0, |t| t.power_watt);
    let active = p.and_then(|p| {
        p.pools
            .iter()
            .find(|x| p.active_index >= 0 && x.index == p.active_index as u32)
    });
    let hr = t.and_then(|t| t.hashrate).unwrap_or_default();
    // hw-agent's figure; only rounded here, as REST rounds it.
    let efficiency =
        t.and_then(|t| (t.efficiency_j_per_th > 0.0).then(|| round(t.efficiency_j_per_th, 2)));
    json!({
        "schema": STATE_SCHEMA,
        "hostname": hostname,
        "mode": mode,
        "timestamp_ms": now_ms,
        "hw_agent_up": t.is_some(),
        "stratum_agent_up": p.is_some(),
        "telemetry_seq": t.map(|t| t.seq),
        "state": t.map(|t| t.state().as_str_name().trim_start_matches("MINING_STATE_").to_ascii_lowercase()),
        "state_reason": t.map(|t| t.state_reason.clone()),
        "model": t.map(|t| t.model.clone()),
        "uptime_s": t.map(|t| t.mining_uptime_s),
        "hashrate_ghs": t.map(|_| round(hr.ghs_1m, 3)),
        "hashrate_ghs_5s": t.map(|_| round(hr.ghs_5s, 3)),
        "hashrate_ghs_15m": t.map(|_| round(hr.ghs_15m, 3)),
        "hashrate_ghs_expected": t.map(|_| round(hr.ghs_expected, 3)),
        "temp_max_c": t.map(|t| round(t.temp_max_c, 1)),
        "temp_target_c": t.map(|t| round(t.temp_target_c, 1)),
        "power_watt": t.map(|_| round(watt, 1)),
        "power_target_watt": t.map(|t| round(t.power_target_watt, 1)),
        "efficiency_j_per_th": efficiency,
        "energy_kwh": round(energy_kwh, 3),
        "chains": t.map(|t| t.chains.iter().map(|c| json!({
            "chain_id": c.chain_id,
            "state": c.state().as_str_name().trim_start_matches("CHAIN_STATE_").to_ascii_lowercase(),
            "hashrate_ghs": round(c.hashrate.as_ref().map_or(0.0, |h| h.ghs_1m), 3),
            "temp_chip_c": round(c.temp_chip_c, 1),
            "temp_board_c": round(c.temp_board_c, 1),
            "power_watt": round(c.power_watt, 1),
            "chips_detected": c.chips_detected,
            "chips_expected": c.chips_expected,
        })).collect::<Vec<_>>()),
        "fans": t.map(|t| t.fans.iter().map(|f| json!({
            "fan_id": f.fan_id, "rpm": f.rpm, "pwm_percent": f.pwm_percent, "stalled": f.stalled,
        })).collect::<Vec<_>>()),
        "pool": active.map(|a| json!({
            "index": a.index,
            "url": a.url,
            "user": a.user,
            "state": a.state().as_str_name().trim_start_matches("POOL_STATE_").to_ascii_lowercase(),
        })),
        "shares": p.map(|p| json!({
            "accepted": p.accepted, "rejected": p.rejected, "stale": p.stale,
            "best_share": p.best_share,
        })),
    })
}

/// One discovery sensor: object id and its config body.
#[derive(Debug, Clone, PartialEq)]
pub struct Sensor {
    /// Object id (last-but-one topic level, part of `unique_id`).
    pub object_id: String,
    /// The retained config message.
    pub config: Value,
}

/// Who the device is, for the `device` and `origin` blocks of every discovery config.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceInfo {
    /// `[system].hostname` (the device name).
    pub hostname: String,
    /// Firmware version.
    pub version: String,
    /// hw-agent's model (or, when hw-agent never answered, the `[hardware].board` preset's,
    /// which is where hw-agent takes it from).
    pub model: String,
    /// The dashboard's address (`configuration_url`).
    pub configuration_url: Option<String>,
    /// The LAN interface's MAC (`connections`), when the system shows one.
    pub mac: Option<String>,
}

struct Spec<'a> {
    object: String,
    name: String,
    template: String,
    unit: Option<&'a str>,
    device_class: Option<&'a str>,
    state_class: Option<&'a str>,
    icon: Option<&'a str>,
}

/// The template of a member of the chain (or fan) whose id is `id`, `None` (Home Assistant:
/// unknown) when the list is null or has no such entry: matched by id, not position, so a chain
/// that goes missing never shifts another chain's values.
fn item_template(list: &str, key: &str, id: u32, member: &str) -> String {
    format!(
        "{{% set x = (value_json.{list} or []) | selectattr('{key}', 'eq', {id}) | list %}}\
         {{{{ x[0].{member} if x else None }}}}"
    )
}

/// Home Assistant discovery configs for the sensors this telemetry has (chains and fans vary
/// by board, so the set is rebuilt when they change).
///
/// Every template renders `None` for a null member (Home Assistant shows `unknown`), never 0:
/// a `total_increasing` counter that read 0 while stratum-agent restarts would count as a reset
/// and add its whole value again.
pub fn discovery(topics: &Topics, info: &DeviceInfo, t: Option<&Telemetry>) -> Vec<Sensor> {
    let spec = |object: &str, name: &str, template: &str| Spec {
        object: object.into(),
        name: name.into(),
        template: template.into(),
        unit: None,
        device_class: None,
        state_class: None,
        icon: None,
    };
    let mut specs = vec![
        Spec {
            icon: Some("mdi:state-machine"),
            ..spec("state", "State", "{{ value_json.state }}")
        },
        Spec {
            unit: Some("GH/s"),
            state_class: Some("measurement"),
            icon: Some("mdi:pickaxe"),
            ..spec("hashrate", "Hashrate", "{{ value_json.hashrate_ghs }}")
        },
        Spec {
            unit: Some("°C"),
            device_class: Some("temperature"),
            state_class: Some("measurement"),
            ..spec("temp_max", "Hottest chip", "{{ value_json.temp_max_c }}")
        },
        Spec {
            unit: Some("W"),
            device_class: Some("power"),
            state_class: Some("measurement"),
            ..spec("power", "Power", "{{ value_json.power_watt }}")
        },
        Spec {
            unit: Some("kWh"),
            device_class: Some("energy"),
            state_class: Some("total_increasing"),
            ..spec("energy", "Energy", "{{ value_json.energy_kwh }}")
        },
        Spec {
            unit: Some("J/TH"),
            state_class: Some("measurement"),
            icon: Some("mdi:flash"),
            ..spec(
                "efficiency",
                "Efficiency",
                "{{ value_json.efficiency_j_per_th }}",
            )
        },
        Spec {
            icon: Some("mdi:server-network"),
            ..spec(
                "pool",
                "Active pool",
                "{{ (value_json.pool.url if value_json.pool else 'none') \
                 if value_json.stratum_agent_up else None }}",
            )
        },
        Spec {
            state_class: Some("total_increasing"),
            icon: Some("mdi:check-circle"),
            ..spec(
                "shares_accepted",
                "Accepted shares",
                "{{ value_json.shares.accepted if value_json.shares else None }}",
            )
        },
        Spec {
            state_class: Some("total_increasing"),
            icon: Some("mdi:close-circle"),
            ..spec(
                "shares_rejected",
                "Rejected shares",
                "{{ value_json.shares.rejected if value_json.shares else None }}",
            )
        },
    ];
    if let Some(t) = t {
        for c in &t.chains {
            let id = c.chain_id;
            specs.push(Spec {
                unit: Some("°C"),
                device_class: Some("temperature"),
                state_class: Some("measurement"),
                ..spec(
                    &format!("chain_{id}_temp"),
                    &format!("Chain {id} chip temperature"),
                    &item_template("chains", "chain_id", id, "temp_chip_c"),
                )
            });
            specs.push(Spec {
                unit: Some("GH/s"),
                state_class: Some("measurement"),
                icon: Some("mdi:pickaxe"),
                ..spec(
                    &format!("chain_{id}_hashrate"),
                    &format!("Chain {id} hashrate"),
                    &item_template("chains", "chain_id", id, "hashrate_ghs"),
                )
            });
        }
        for f in &t.fans {
            let id = f.fan_id;
            specs.push(Spec {
                unit: Some("RPM"),
                state_class: Some("measurement"),
                icon: Some("mdi:fan"),
                ..spec(
                    &format!("fan_{id}_rpm"),
                    &format!("Fan {id}"),
                    &item_template("fans", "fan_id", id, "rpm"),
                )
            });
        }
    }
    let device = device(topics, info);
    let origin = origin(info);
    specs
        .into_iter()
        .map(|s| {
            let mut config = json!({
                "name": s.name,
                "unique_id": format!("svcos_{}_{}", topics.node_id, s.object),
                "default_entity_id": format!("sensor.{}_{}", topics.node_id, s.object),
                "state_topic": topics.state,
                "value_template": s.template,
                "availability_topic": topics.availability,
                "payload_available": "online",
                "payload_not_available": "offline",
                "device": device,
                "origin": origin,
            });
            let obj = config.as_object_mut().expect("object");
            for (k, v) in [
                ("unit_of_measurement", s.unit),
                ("device_class", s.device_class),
                ("state_class", s.state_class),
                ("icon", s.icon),
            ] {
                if let Some(v) = v {
                    obj.insert(k.into(), v.into());
                }
            }
            Sensor {
                object_id: s.object,
                config,
            }
        })
        .collect()
}

/// The device block every entity of this miner shares.
fn device(topics: &Topics, info: &DeviceInfo) -> Value {
    let mut device = json!({
        "identifiers": [format!("svcos_{}", topics.node_id)],
        "name": info.hostname,
        "manufacturer": "svcOS",
        "model": info.model,
        "sw_version": info.version,
    });
    let obj = device.as_object_mut().expect("object");
    if let Some(url) = &info.configuration_url {
        obj.insert("configuration_url".into(), url.clone().into());
    }
    if let Some(mac) = &info.mac {
        obj.insert("connections".into(), json!([["mac", mac]]));
    }
    device
}

/// The origin block: what published the discovery config.
fn origin(info: &DeviceInfo) -> Value {
    json!({"name": "svcOS", "sw_version": info.version})
}

/// One discovery config of a command entity.
#[derive(Debug, Clone, PartialEq)]
pub struct Control {
    /// The entity.
    pub entity: Entity,
    /// The retained config message.
    pub config: Value,
}

/// Home Assistant discovery configs of the command entities (`[mqtt].commands`): a switch for
/// mining on/off, a number for the power target, a select for the operating mode and a button
/// to restart mining. Their state comes from the state message.
pub fn command_discovery(topics: &Topics, info: &DeviceInfo) -> Vec<Control> {
    let device = device(topics, info);
    let origin = origin(info);
    Entity::ALL
        .into_iter()
        .map(|entity| {
            let object = entity.object();
            let mut config = json!({
                "unique_id": format!("svcos_{}_{object}", topics.node_id),
                "default_entity_id": format!("{}.{}_{object}", entity.component(), topics.node_id),
                "command_topic": topics.command(entity),
                "availability_topic": topics.availability,
                "payload_available": "online",
                "payload_not_available": "offline",
                "device": device,
                "origin": origin,
            });
            let extra = match entity {
                Entity::Mining => json!({
                    "name": "Mining",
                    "icon": "mdi:pickaxe",
                    "state_topic": topics.state,
                    // No state (hw-agent away): unknown, never ON.
                    "value_template": "{{ None if not value_json.state \
                                       else 'OFF' if value_json.state == 'sleeping' else 'ON' }}",
                    "payload_on": "ON",
                    "payload_off": "OFF",
                }),
                Entity::PowerTarget => json!({
                    "name": "Power target",
                    "device_class": "power",
                    "unit_of_measurement": "W",
                    "state_topic": topics.state,
                    "value_template": "{{ value_json.power_target_watt }}",
                    "min": 0,
                    "max": svcos_common::config::MAX_WATT,
                    "step": 10,
                    "mode": "box",
                }),
                Entity::Mode => json!({
                    "name": "Operating mode",
                    "icon": "mdi:tune-variant",
                    "state_topic": topics.state,
                    "value_template": "{{ value_json.mode }}",
                    "options": ["home", "standard", "hacker"],
                }),
                Entity::Restart => json!({
                    "name": "Restart mining",
                    "device_class": "restart",
                    "payload_press": "PRESS",
                }),
            };
            let obj = config.as_object_mut().expect("object");
            for (k, v) in extra.as_object().expect("object") {
                obj.insert(k.clone(), v.clone());
            }
            Control { entity, config }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use svcos_proto::hwagent::v1::{ChainTelemetry, FanTelemetry, Hashrate};

    use super::*;

    #[test]
    fn topics_and_discovery() {
        let cfg = MqttConfig::default();
        let topics = Topics::new(&cfg, "Rig 7.local");
        assert_eq!(topics.node_id, "rig_7_local");
        assert_eq!(topics.availability, "svcos/rig_7_local/availability");
        assert_eq!(client_id(&cfg, &topics), "svcos-rig_7_local");
        let t = Telemetry {
            chains: vec![ChainTelemetry {
                chain_id: 3,
                ..Default::default()
            }],
            fans: vec![FanTelemetry {
                fan_id: 1,
                ..Default::default()
            }],
            ..Default::default()
        };
        let info = DeviceInfo {
            hostname: "Rig 7.local".into(),
            version: "0.1.0".into(),
            model: "Antminer S9".into(),
            configuration_url: Some("http://rig7.local/".into()),
            mac: Some("02:ab:cd:00:00:01".into()),
        };
        let sensors = discovery(&topics, &info, Some(&t));
        let ids: Vec<&str> = sensors.iter().map(|s| s.object_id.as_str()).collect();
        assert!(
            ids.contains(&"chain_3_temp") && ids.contains(&"fan_1_rpm"),
            "{ids:?}"
        );
        let temp = sensors
            .iter()
            .find(|s| s.object_id == "chain_3_temp")
            .unwrap();
        assert_eq!(
            temp.config["value_template"],
            "{% set x = (value_json.chains or []) | selectattr('chain_id', 'eq', 3) | list %}\
             {{ x[0].temp_chip_c if x else None }}"
        );
        let energy = sensors.iter().find(|s| s.object_id == "energy").unwrap();
        assert_eq!(energy.config["device_class"], "energy");
        assert_eq!(energy.config["state_class"], "total_increasing");
        assert_eq!(energy.config["unit_of_measurement"], "kWh");
        for counter in ["shares_accepted", "shares_rejected"] {
            let s = sensors.iter().find(|s| s.object_id == counter).unwrap();
            let template = s.config["value_template"].as_str().unwrap();
            assert!(template.ends_with("else None }}"), "{template}");
        }
        assert_eq!(temp.config["device_class"], "temperature");
        assert_eq!(
            temp.config["default_entity_id"],
            "sensor.rig_7_local_chain_3_temp"
        );
        assert!(temp.config.get("object_id").is_none(), "deprecated key");
        let device = &temp.config["device"];
        assert_eq!(device["model"], "Antminer S9");
        assert_eq!(device["configuration_url"], "http://rig7.local/");
        assert_eq!(device["connections"], json!([["mac", "02:ab:cd:00:00:01"]]));
        assert_eq!(temp.config["origin"]["name"], "svcOS");
        let bare = discovery(
            &topics,
            &DeviceInfo {
                configuration_url: None,
                mac: None,
                ..info.clone()
            },
            None,
        );
        assert!(bare.iter().all(|s| !s.object_id.starts_with("chain_")));
        assert!(bare[0].config["device"].get("connections").is_none());
        let controls = command_discovery(&topics, &info);
        let components: Vec<&str> = controls.iter().map(|c| c.entity.component()).collect();
        assert_eq!(components, ["switch", "number", "select", "button"]);
        for c in &controls {
            assert_eq!(c.config["device"], *device);
            let topic = c.config["command_topic"].as_str().unwrap();
            assert_eq!(topics.command_entity(topic), Some(c.entity));
            assert!(
                c.config["default_entity_id"]
                    .as_str()
                    .unwrap()
                    .starts_with(c.entity.component())
            );
        }
        assert_eq!(topics.command_entity("svcos/rig_7_local/state"), None);
        assert_eq!(topics.command_entity("svcos/other/mining/set"), None);
        assert_eq!(topics.command_result(), "svcos/rig_7_local/command/result");
        assert_eq!(
            topics.discovery("hashrate"),
            "homeassistant/sensor/rig_7_local/hashrate/config"
        );
    }

    #[test]
    fn state_rounds_like_status() {
        let t = Telemetry {
            hashrate: Some(Hashrate {
                ghs_1m: 13_500.123_456,
                ..Default::default()
            }),
            temp_max_c: 71.26,
            power_watt: 1350.0,
            // hw-agent's figure, rounded as REST rounds it (not re-derived from the two above).
            efficiency_j_per_th: 99.996,
            ..Default::default()
        };
        let v = state("h", "home", 1, Some(&t), None, 1.23456);
        assert_eq!(v["energy_kwh"], 1.235);
        assert_eq!(v["mode"], "home");
        assert_eq!(v["hashrate_ghs"], 13_500.123);
        assert_eq!(v["temp_max_c"], 71.3);
        assert_eq!(v["efficiency_j_per_th"], 100.0);
        assert_eq!(v["stratum_agent_up"], false);
        assert!(v["pool"].is_null());
    }
}
