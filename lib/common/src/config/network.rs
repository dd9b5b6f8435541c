use std::net::{IpAddr, Ipv4Addr};
use std::str::FromStr;

use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};

use super::ConfigError;

/// Most interface names `[network.mdns].interfaces` may list.
pub const MAX_MDNS_INTERFACES: usize = 16;
/// Most DNS servers `[network.ipv4].dns` may list: the resolver reads three (glibc's `MAXNS`).
pub const MAX_DNS_SERVERS: usize = 3;
/// Shortest and longest prefix of a static address: /31 and /32 leave no room for a gateway
/// in the subnet, /0 is no subnet.
pub const STATIC_PREFIX_LEN: std::ops::RangeInclusive<u8> = 1..=30;

/// `[network]`: how the unit makes itself known on the LAN.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct NetworkConfig {
    /// The mDNS/DNS-SD responder (`<hostname>.local`, `_http._tcp`, `_cgminer._tcp`).
    pub mdns: MdnsConfig,
    /// The SSH server (dropbear on TCP 22; keys through `PUT /api/network/ssh`).
    pub ssh: SshConfig,
    /// The LAN interface's IPv4 settings (DHCP or a static address; `PUT /api/network/config`).
    pub ipv4: Ipv4Config,
}

/// How the LAN interface gets its IPv4 address.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Ipv4Method {
    /// From the LAN's DHCP server (the default).
    #[default]
    Dhcp,
    /// The address, gateway and DNS servers of `[network.ipv4]`.
    Static,
}

impl Ipv4Method {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Ipv4Method::Dhcp => "dhcp",
            Ipv4Method::Static => "static",
        }
    }
}

impl FromStr for Ipv4Method {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        match s {
            "dhcp" => Ok(Ipv4Method::Dhcp),
            "static" => Ok(Ipv4Method::Static),
            _ => Err(()),
        }
    }
}

/// `[network.ipv4]`: the LAN interface's IPv4 settings, applied by the image's
/// systemd-networkd from the `.network` file the gateway writes (`svcos_common::networkd`;
/// docs/DESIGN.md "Network settings"). The simulator only writes that file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct Ipv4Config {
    /// "dhcp" (default) or "static".
    pub method: Ipv4Method,
    /// The LAN interface (1-15 characters, the kernel's name rule). Default "eth0".
    pub interface: String,
    /// Static only (empty with DHCP): the address with its prefix length, "192.168.1.50/24";
    /// a unicast address that is neither the subnet's network nor its broadcast address,
    /// prefix 1-30. Default empty.
    pub address: String,
    /// Static only (empty with DHCP): the default gateway, an address inside the subnet of
    /// `address` other than `address` itself. Default empty.
    pub gateway: String,
    /// DNS servers (IPv4 or IPv6 unicast addresses, at most 3, no repeats). Static: at least
    /// one. DHCP: empty uses the DHCP server's; a list replaces them. Default empty.
    pub dns: Vec<String>,
}

impl Default for Ipv4Config {
    fn default() -> Self {
        Ipv4Config {
            method: Ipv4Method::Dhcp,
            interface: "eth0".into(),
            address: String::new(),
            gateway: String::new(),
            dns: Vec::new(),
        }
    }
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
        self.mdns.validate()?;
        self.ipv4.validate()
    }
}

impl Ipv4Config {
    /// The static address and its subnet (`None` with DHCP or when `address` is not valid).
    pub fn address_net(&self) -> Option<Ipv4Net> {
        (self.method == Ipv4Method::Static)
            .then(|| Ipv4Net::from_str(&self.address).ok())
            .flatten()
    }

    /// The rules of the section; an error names the field (`network.ipv4.gateway`,
    /// `network.ipv4.dns[1]`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        const F: &str = "network.ipv4";
        if !is_valid_interface_name(&self.interface) {
            return Err(ConfigError::invalid(
                format!("{F}.interface"),
                "an interface name: 1-15 characters, not \".\" or \"..\", without '/', ':' or \
                 white space",
            ));
        }
        if self.dns.len() > MAX_DNS_SERVERS {
            return Err(ConfigError::invalid(
                format!("{F}.dns"),
                format!("at most {MAX_DNS_SERVERS} DNS servers"),
            ));
        }
        for (i, text) in self.dns.iter().enumerate() {
            let field = format!("{F}.dns[{i}]");
            let ip = IpAddr::from_str(text).map_err(|_| {
                ConfigError::invalid(&field, "an IPv4 or IPv6 address (\"192.168.1.1\")")
            })?;
            if !is_unicast(ip) {
                return Err(ConfigError::invalid(
                    &field,
                    "a unicast address (not 0.0.0.0, ::, a multicast or broadcast address)",
                ));
            }
            if self.dns[..i]
                .iter()
                .any(|d| IpAddr::from_str(d).is_ok_and(|d| d == ip))
            {
                return Err(ConfigError::invalid(&field, "listed twice"));
            }
        }
        match self.method {
            Ipv4Method::Dhcp => {
                for (name, value) in [("address", &self.address), ("gateway", &self.gateway)] {
                    if !value.is_empty() {
                        return Err(ConfigError::invalid(
                            format!("{F}.{name}"),
                            "empty with method = \"dhcp\" (the DHCP server assigns it)",
                        ));
                    }
                }
                Ok(())
            }
            Ipv4Method::Static => self.validate_static(),
        }
    }

    fn validate_static(&self) -> Result<(), ConfigError> {
        const F: &str = "network.ipv4";
        let address_rule = "an IPv4 address with its prefix length, \"192.168.1.50/24\"";
        // Only the usual spelling: the parser's leniencies (leading zeros) never reach the file.
        let net = Ipv4Net::from_str(&self.address)
            .ok()
            .filter(|n| n.to_string() == self.address)
            .ok_or_else(|| ConfigError::invalid(format!("{F}.address"), address_rule))?;
        if !STATIC_PREFIX_LEN.contains(&net.prefix_len()) {
            return Err(ConfigError::invalid(
                format!("{F}.address"),
                format!(
                    "a prefix length from {} to {} (/{} leaves no room for a gateway)",
                    STATIC_PREFIX_LEN.start(),
                    STATIC_PREFIX_LEN.end(),
                    net.prefix_len()
                ),
            ));
        }
        let ip = net.addr();
        if !is_host_address(ip) {
            return Err(ConfigError::invalid(
                format!("{F}.address"),
                "a unicast host address (not 0.x.x.x, loopback, multicast or reserved)",
            ));
        }
        if ip == net.network() || ip == net.broadcast() {
            return Err(ConfigError::invalid(
                format!("{F}.address"),
                format!(
                    "a host of {}, not its network ({}) or broadcast ({}) address",
                    net.trunc(),
                    net.network(),
                    net.broadcast()
                ),
            ));
        }
        let gateway = Ipv4Addr::from_str(&self.gateway).map_err(|_| {
            ConfigError::invalid(
                format!("{F}.gateway"),
                "the router's IPv4 address (\"192.168.1.1\"); a static address needs one",
            )
        })?;
        if !net.contains(&gateway) || gateway == net.network() || gateway == net.broadcast() {
            return Err(ConfigError::invalid(
                format!("{F}.gateway"),
                format!(
                    "an address inside {} (from {} to {}), the subnet of the address",
                    net.trunc(),
                    hosts_first(net),
                    hosts_last(net)
                ),
            ));
        }
        if gateway == ip {
            return Err(ConfigError::invalid(
                format!("{F}.gateway"),
                "the router's address, not the miner's own",
            ));
        }
        if self.dns.is_empty() {
            return Err(ConfigError::invalid(
                format!("{F}.dns"),
                "at least one DNS server with a static address (pool names must resolve)",
            ));
        }
        Ok(())
    }
}

fn hosts_first(net: Ipv4Net) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(net.network()) + 1)
}

fn hosts_last(net: Ipv4Net) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(net.broadcast()) - 1)
}

/// An address a host may be given: not in 0.0.0.0/8, loopback, multicast or 240.0.0.0/4
/// (reserved, the limited broadcast included).
fn is_host_address(ip: Ipv4Addr) -> bool {
    let first = ip.octets()[0];
    first != 0 && !ip.is_loopback() && !ip.is_multicast() && first < 240
}

/// A unicast address a resolver can be asked at.
fn is_unicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => !v4.is_unspecified() && !v4.is_multicast() && !v4.is_broadcast(),
        IpAddr::V6(v6) => !v6.is_unspecified() && !v6.is_multicast(),
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

    fn static_v4(address: &str, gateway: &str, dns: &[&str]) -> Ipv4Config {
        Ipv4Config {
            method: Ipv4Method::Static,
            address: address.into(),
            gateway: gateway.into(),
            dns: dns.iter().map(|d| d.to_string()).collect(),
            ..Ipv4Config::default()
        }
    }

    #[test]
    fn ipv4_rules_name_the_field() {
        let ok = ["192.168.1.1"];
        for (c, field) in [
            (static_v4("192.168.1.50/24", "192.168.1.1", &ok), None),
            (
                static_v4(
                    "10.0.0.2/8",
                    "10.255.255.254",
                    &["1.1.1.1", "2606:4700::1111"],
                ),
                None,
            ),
            (static_v4("192.168.1.2/30", "192.168.1.1", &ok), None),
            (static_v4("169.254.3.4/16", "169.254.0.1", &ok), None),
            // Address: shape, prefix, kind, network and broadcast addresses.
            (
                static_v4("192.168.1.50", "192.168.1.1", &ok),
                Some("address"),
            ),
            (
                static_v4("192.168.1.50/33", "192.168.1.1", &ok),
                Some("address"),
            ),
            (
                static_v4("192.168.1.50/31", "192.168.1.51", &ok),
                Some("address"),
            ),
            (
                static_v4("192.168.1.50/32", "192.168.1.1", &ok),
                Some("address"),
            ),
            (
                static_v4("192.168.1.50/0", "192.168.1.1", &ok),
                Some("address"),
            ),
            (
                static_v4("192.168.001.50/24", "192.168.1.1", &ok),
                Some("address"),
            ),
            (static_v4("", "192.168.1.1", &ok), Some("address")),
            (static_v4("fd00::5/64", "fd00::1", &ok), Some("address")),
            (static_v4("127.0.0.5/8", "127.0.0.1", &ok), Some("address")),
            (static_v4("224.0.0.5/24", "224.0.0.1", &ok), Some("address")),
            (static_v4("0.1.2.3/8", "0.1.2.1", &ok), Some("address")),
            (static_v4("250.1.2.3/8", "250.1.2.1", &ok), Some("address")),
            (
                static_v4("192.168.1.0/24", "192.168.1.1", &ok),
                Some("address"),
            ),
            (
                static_v4("192.168.1.255/24", "192.168.1.1", &ok),
                Some("address"),
            ),
            // Gateway: present, in the subnet, a host of it, not the miner.
            (static_v4("192.168.1.50/24", "", &ok), Some("gateway")),
            (
                static_v4("192.168.1.50/24", "192.168.2.1", &ok),
                Some("gateway"),
            ),
            (
                static_v4("192.168.1.50/25", "192.168.1.200", &ok),
                Some("gateway"),
            ),
            (
                static_v4("192.168.1.50/24", "192.168.1.255", &ok),
                Some("gateway"),
            ),
            (
                static_v4("192.168.1.50/24", "192.168.1.0", &ok),
                Some("gateway"),
            ),
            (
                static_v4("192.168.1.50/24", "192.168.1.50", &ok),
                Some("gateway"),
            ),
            (static_v4("192.168.1.50/24", "router", &ok), Some("gateway")),
            // DNS: needed with a static address, addresses, unicast, no repeats, at most 3.
            (
                static_v4("192.168.1.50/24", "192.168.1.1", &[]),
                Some("dns"),
            ),
            (
                static_v4("192.168.1.50/24", "192.168.1.1", &["dns.example"]),
                Some("dns[0]"),
            ),
            (
                static_v4("192.168.1.50/24", "192.168.1.1", &["1.1.1.1", "0.0.0.0"]),
                Some("dns[1]"),
            ),
            (
                static_v4("192.168.1.50/24", "192.168.1.1", &["224.0.0.251"]),
                Some("dns[0]"),
            ),
            (
                static_v4("192.168.1.50/24", "192.168.1.1", &["1.1.1.1", "1.1.1.1"]),
                Some("dns[1]"),
            ),
            (
                static_v4(
                    "192.168.1.50/24",
                    "192.168.1.1",
                    &["1.1.1.1", "1.0.0.1", "8.8.8.8", "9.9.9.9"],
                ),
                Some("dns"),
            ),
        ] {
            let got = c.validate().err();
            assert_eq!(
                got.as_ref().and_then(|e| e.field()),
                field.map(|f| format!("network.ipv4.{f}")).as_deref(),
                "{c:?}: {got:?}"
            );
        }
    }

    #[test]
    fn dhcp_takes_no_address_and_any_dns() {
        let mut c = Ipv4Config::default();
        assert!(c.validate().is_ok());
        c.dns = vec!["192.168.1.1".into()];
        assert!(c.validate().is_ok());
        c.address = "192.168.1.50/24".into();
        assert_eq!(
            c.validate().unwrap_err().field(),
            Some("network.ipv4.address")
        );
        c.address.clear();
        c.gateway = "192.168.1.1".into();
        assert_eq!(
            c.validate().unwrap_err().field(),
            Some("network.ipv4.gateway")
        );
        c.gateway.clear();
        c.interface = "eth 0".into();
        assert_eq!(
            c.validate().unwrap_err().field(),
            Some("network.ipv4.interface")
        );
        let parsed: NetworkConfig =
            toml::from_str("[ipv4]\nmethod = \"static\"\naddress = \"10.0.0.9/24\"\n").unwrap();
        assert_eq!(parsed.ipv4.method, Ipv4Method::Static);
        assert_eq!(parsed.ipv4.interface, "eth0");
        assert!(toml::from_str::<NetworkConfig>("[ipv4]\nmethod = \"auto\"\n").is_err());
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
