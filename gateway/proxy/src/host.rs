//! The DNS-rebinding defence: answer only to names that can only mean this miner.
//!
//! A page on some other site can make a browser resolve the attacker's name to the miner's LAN
//! address; the browser then sends that name in `Host`. Refusing every name but an IP literal,
//! `localhost` (browsers resolve it to loopback themselves, RFC 6761), the configured hostname
//! and `<hostname>.local` leaves such a page talking to nothing.

use std::net::{Ipv4Addr, Ipv6Addr};

/// Which `Host` values the proxy accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPolicy {
    hostname: String,
}

impl HostPolicy {
    /// Accept IP literals, `localhost`, `hostname` and `hostname.local` (case-insensitive).
    pub fn new(hostname: &str) -> Self {
        HostPolicy {
            hostname: hostname.to_ascii_lowercase(),
        }
    }

    /// Whether a `Host` header value (with optional port) names this miner.
    pub fn allows(&self, host: &str) -> bool {
        let Some(name) = split_port(host) else {
            return false;
        };
        if let Some(v6) = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
            return v6.parse::<Ipv6Addr>().is_ok();
        }
        // Rust's IPv4 parser takes only dotted decimal, so `0x7f.1` or `2130706433` (which
        // browsers would also treat as addresses) fall through to the name check and fail.
        if name.parse::<Ipv4Addr>().is_ok() {
            return true;
        }
        let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
        name == "localhost"
            || name == self.hostname
            || name
                .strip_suffix(".local")
                .is_some_and(|n| n == self.hostname)
    }
}

/// The host part of `host[:port]` / `[v6][:port]`, or `None` when the port is malformed or
/// there is no host.
fn split_port(host: &str) -> Option<&str> {
    let (name, port) = if host.starts_with('[') {
        let end = host.find(']')?;
        let (name, rest) = host.split_at(end + 1);
        match rest {
            "" => (name, None),
            _ => (name, Some(rest.strip_prefix(':')?)),
        }
    } else {
        match host.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        }
    };
    if let Some(port) = port {
        // Digits only (no sign, no second colon of a bare IPv6), 1-65535.
        if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        port.parse::<u16>().ok().filter(|p| *p != 0)?;
    }
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_table() {
        let policy = HostPolicy::new("Rig-7");
        let table = [
            ("192.168.1.20", true),
            ("192.168.1.20:80", true),
            ("10.0.0.1:8080", true),
            ("[fe80::1]", true),
            ("[::1]:80", true),
            ("rig-7", true),
            ("RIG-7:80", true),
            ("rig-7.local", true),
            ("rig-7.local.", true),
            ("Rig-7.Local:80", true),
            ("localhost:80", true),
            // Rebinding names and lookalikes.
            ("evil.example", false),
            ("rig-7.evil.example", false),
            ("rig-7.local.evil.example", false),
            ("rig-77", false),
            ("xrig-7.local", false),
            // Not addresses a browser would not also resolve through DNS.
            ("0x7f.0.0.1", false),
            ("2130706433", false),
            // Malformed.
            ("", false),
            (":80", false),
            ("rig-7:", false),
            ("rig-7:http", false),
            ("rig-7:99999", false),
            ("rig-7:0", false),
            ("::1", false),
            ("[::1", false),
            ("[::1]x", false),
            ("[rig-7]", false),
            ("[fe80::1%25eth0]", false),
        ];
        for (host, want) in table {
            assert_eq!(policy.allows(host), want, "{host:?}");
        }
    }
}
