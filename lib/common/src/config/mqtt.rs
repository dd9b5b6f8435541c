use serde::{Deserialize, Serialize};

use super::ConfigError;

/// `[mqtt]`: publish state, events and Home Assistant discovery to an operator's broker.
/// Off by default: nothing leaves the miner unless an operator configures it.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct MqttConfig {
    /// Connect and publish at all. Default false.
    pub enabled: bool,
    /// Broker host name or IP address, without a scheme. Default empty.
    pub host: String,
    /// Broker TCP port (plain MQTT 3.1.1, no TLS). Default 1883.
    pub port: u16,
    /// User name; empty connects anonymously. Default empty.
    pub username: String,
    /// Password (never logged, masked in GET answers). Default empty.
    pub password: String,
    /// MQTT client id; empty means `svcos-<node id>`. Default empty.
    pub client_id: String,
    /// First topic level; topics are `<topic_prefix>/<node id>/…`. Default "svcos".
    pub topic_prefix: String,
    /// Node id (second topic level, Home Assistant node); empty means the sanitised
    /// `[system].hostname`. Default empty.
    pub node_id: String,
    /// Seconds between state messages. Default 10, 1-3600.
    pub publish_interval_s: u32,
    /// Publish state messages retained. Default true.
    pub retain: bool,
    /// QoS of state and event messages (0, 1 or 2). Default 0.
    pub qos: u8,
    /// MQTT keep-alive in seconds; the broker publishes the Last Will after 1.5 times this
    /// without traffic. Default 30, 5-3600.
    pub keep_alive_s: u32,
    /// Publish Home Assistant discovery config messages. Default true.
    pub discovery: bool,
    /// Home Assistant discovery prefix. Default "homeassistant".
    pub discovery_prefix: String,
    /// Accept commands on `<topic_prefix>/<node id>/<entity>/set` (mining on/off, power
    /// target, operating mode, restart) and announce them to Home Assistant. Each runs the REST
    /// write it mirrors, with its validation, mode rules and audit record. Anyone who may
    /// publish on the broker can then control the miner, so this is off unless the owner turns
    /// it on. Default false.
    pub commands: bool,
}

impl Default for MqttConfig {
    fn default() -> Self {
        MqttConfig {
            enabled: false,
            host: String::new(),
            port: 1883,
            username: String::new(),
            password: String::new(),
            client_id: String::new(),
            topic_prefix: "svcos".into(),
            node_id: String::new(),
            publish_interval_s: 10,
            retain: true,
            qos: 0,
            keep_alive_s: 30,
            discovery: true,
            discovery_prefix: "homeassistant".into(),
            commands: false,
        }
    }
}

// Hand-written so that a config printed with `{:?}` never shows the password.
impl std::fmt::Debug for MqttConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MqttConfig")
            .field("enabled", &self.enabled)
            .field("host", &self.host)
            .field("port", &self.port)
            .field("username", &self.username)
            .field("password_set", &!self.password.is_empty())
            .field("client_id", &self.client_id)
            .field("topic_prefix", &self.topic_prefix)
            .field("node_id", &self.node_id)
            .field("publish_interval_s", &self.publish_interval_s)
            .field("retain", &self.retain)
            .field("qos", &self.qos)
            .field("keep_alive_s", &self.keep_alive_s)
            .field("discovery", &self.discovery)
            .field("discovery_prefix", &self.discovery_prefix)
            .field("commands", &self.commands)
            .finish()
    }
}

/// A host name or IP literal: what a socket address may carry, nothing a URL would add.
pub fn is_valid_host(host: &str) -> bool {
    if host.is_empty() || host.len() > 253 {
        return false;
    }
    if host.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    host.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    })
}

/// A topic level or prefix usable for publishing: no wildcards, no empty levels at the ends.
fn valid_topic_prefix(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && !s.starts_with('/')
        && !s.ends_with('/')
        && !s.contains(['+', '#', '\0'])
        && !s.chars().any(char::is_whitespace)
}

impl MqttConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field: &str, msg: &str| Err(ConfigError::invalid(field, msg));
        if self.host.contains("://") {
            return invalid(
                "mqtt.host",
                "host name or IP address only, without a scheme such as mqtt:// (the port goes in mqtt.port)",
            );
        }
        if !self.host.is_empty() && !is_valid_host(&self.host) {
            return invalid("mqtt.host", "not a valid host name or IP address");
        }
        if self.enabled && self.host.is_empty() {
            return invalid("mqtt.host", "required when mqtt.enabled is true");
        }
        if self.port == 0 {
            return invalid("mqtt.port", "must be 1-65535");
        }
        if self.username.len() > 256 || self.password.len() > 256 {
            return invalid("mqtt.username", "user name and password: at most 256 bytes");
        }
        if self.client_id.len() > 128
            || self
                .client_id
                .chars()
                .any(|c| c.is_whitespace() || c.is_control())
        {
            return invalid("mqtt.client_id", "at most 128 characters, no spaces");
        }
        if !valid_topic_prefix(&self.topic_prefix) {
            return invalid(
                "mqtt.topic_prefix",
                "a non-empty topic without wildcards (+, #), spaces or leading/trailing '/'",
            );
        }
        if !self.node_id.is_empty()
            && !self
                .node_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return invalid(
                "mqtt.node_id",
                "letters, digits, '_' and '-' only (Home Assistant's node id rule)",
            );
        }
        if !(1..=3600).contains(&self.publish_interval_s) {
            return invalid("mqtt.publish_interval_s", "1-3600 s");
        }
        if self.qos > 2 {
            return invalid("mqtt.qos", "0, 1 or 2");
        }
        if !(5..=3600).contains(&self.keep_alive_s) {
            return invalid("mqtt.keep_alive_s", "5-3600 s");
        }
        if !valid_topic_prefix(&self.discovery_prefix) {
            return invalid(
                "mqtt.discovery_prefix",
                "a non-empty topic without wildcards (+, #), spaces or leading/trailing '/'",
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_name_the_field() {
        let ok = MqttConfig {
            enabled: true,
            host: "192.168.1.5".into(),
            ..Default::default()
        };
        ok.validate().unwrap();
        MqttConfig::default().validate().unwrap();
        for (edit, field) in [
            (
                (|c: &mut MqttConfig| c.host = "mqtt://x".into()) as fn(&mut MqttConfig),
                "mqtt.host",
            ),
            (|c| c.host = "bad host".into(), "mqtt.host"),
            (|c| c.host.clear(), "mqtt.host"),
            (|c| c.port = 0, "mqtt.port"),
            (|c| c.publish_interval_s = 0, "mqtt.publish_interval_s"),
            (|c| c.qos = 3, "mqtt.qos"),
            (|c| c.topic_prefix = "a/#".into(), "mqtt.topic_prefix"),
            (|c| c.node_id = "a b".into(), "mqtt.node_id"),
            (|c| c.keep_alive_s = 1, "mqtt.keep_alive_s"),
        ] {
            let mut c = ok.clone();
            edit(&mut c);
            assert_eq!(c.validate().unwrap_err().field(), Some(field), "{c:?}");
        }
    }

    #[test]
    fn debug_hides_the_password() {
        let c = MqttConfig {
            password: "hunter2".into(),
            ..Default::default()
        };
        assert!(!format!("{c:?}").contains("hunter2"));
    }
}
