use serde::{Deserialize, Serialize};

use super::ConfigError;

/// Most interface names `[network.mdns].interfaces` may list.
pub const MAX_MDNS_INTERFACES: usize = 16;

/// `[network]`: how the unit makes itself known on the LAN.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct NetworkConfig {
    /// The mDNS/DNS-SD responder (`<hostname>.local`, `_http._tcp`, `_cgminer._tcp`).
    pub mdns: MdnsConfig,
    /// The SSH server (dropbear on TCP 22; keys through `PUT /api/network/ssh`).
    pub ssh: SshConfig,
}

/// `[network.ssh]`: the image's SSH server (dropbear, TCP 22, docs/DESIGN.md "SSH").
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct SshConfig {
    /// Accept password logins besides the authorised keys. Default false (keys only); takes
    /// effect from the next connection.
    pub password_login: bool,
}

/// `[network.mdns]`: the mDNS/DNS-SD responder the gateway runs (docs/DESIGN.md "mDNS").
///
/// When on, it answers for `<system.hostname>.local` (A/AAAA) and announces `_http._tcp` on
/// `api.http_port` (dashboard, `/api` behind it) and, while `legacy.enabled`, `_cgminer._tcp` on
/// `legacy.port`. Turning it off sends goodbye packets (TTL 0) for every record, then leaves the
/// multicast group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct MdnsConfig {
    /// Answer and announce at all. Default true; `svcos sim` writes false (the responder would
    /// join the multicast group on every interface of the host it runs on).
    pub enabled: bool,
    /// Interface names to answer on ("eth0"); empty = every interface with an address, loopback
    /// included. At most 16 names of 1-15 characters without '/', ':' or white space. Default
    /// empty.
    pub interfaces: Vec<String>,
}

impl Default for MdnsConfig {
    fn default() -> Self {
        MdnsConfig {
            enabled: true,
            interfaces: Vec::new(),
        }
    }
}

impl NetworkConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        self.mdns.validate()
    }
}

impl MdnsConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.interfaces.len() > MAX_MDNS_INTERFACES {
            return Err(ConfigError::invalid(
                "network.mdns.interfaces",
                format!("at most {MAX_MDNS_INTERFACES} interface names"),
            ));
        }
        for (i, name) in self.interfaces.iter().enumerate() {
            if !is_valid_interface_name(name) {
                return Err(ConfigError::invalid(
                    format!("network.mdns.interfaces[{i}]"),
                    "an interface name: 1-15 characters, not \".\" or \"..\", without '/', ':' \
                     or white space",
                ));
            }
        }
        Ok(())
    }
}

/// Whether Linux would accept `name` as a network interface name (`dev_valid_name`: shorter
/// than IFNAMSIZ, not "." or "..", no '/', ':' or white space).
pub fn is_valid_interface_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() < 16
        && name != "."
        && name != ".."
        && !name
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace() || c.is_control())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names_follow_the_kernel_rule() {
        for (name, ok) in [
            ("eth0", true),
            ("lo", true),
            ("wlan0.100", true),
            ("br-lan", true),
            ("123456789012345", true),
            ("1234567890123456", false),
            ("", false),
            (".", false),
            ("..", false),
            ("eth0:1", false),
            ("a/b", false),
            ("eth 0", false),
            ("eth\t0", false),
        ] {
            assert_eq!(is_valid_interface_name(name), ok, "{name:?}");
        }
    }

    #[test]
    fn validation_names_the_entry() {
        let mut c = NetworkConfig::default();
        assert!(c.validate().is_ok());
        c.mdns.interfaces = vec!["eth0".into(), "bad name".into()];
        let e = c.validate().unwrap_err();
        assert_eq!(e.field(), Some("network.mdns.interfaces[1]"));
        c.mdns.interfaces = (0..=MAX_MDNS_INTERFACES)
            .map(|i| format!("eth{i}"))
            .collect();
        assert_eq!(
            c.validate().unwrap_err().field(),
            Some("network.mdns.interfaces")
        );
    }

    #[test]
    fn unknown_keys_are_refused() {
        let bad: Result<NetworkConfig, _> = toml::from_str("[mdns]\nenable = true\n");
        assert!(bad.is_err());
        let good: NetworkConfig = toml::from_str("[mdns]\nenabled = false\n").unwrap();
        assert!(!good.mdns.enabled);
        assert!(good.mdns.interfaces.is_empty());
    }
}
