//! The DNS-rebinding defence of both HTTP ports: answer only to names that mean this miner.
//!
//! A page on some other site can make a browser resolve the attacker's name to the miner's LAN
//! address; the browser then sends that name in `Host`. Refusing every name but an IP literal,
//! `localhost` (browsers resolve it to loopback themselves, RFC 6761), the configured hostname,
//! `<hostname>.local` and the names the owner lists in `[api].allowed_hosts` (router names such
//! as `miner.lan`, a reverse proxy's name, or a suffix such as `*.home.arpa`) leaves such a page
//! talking to nothing. The proxy (port 80) and the gateway (8080) use this one policy and answer
//! a refused name with the same status, [`REFUSED_STATUS`].

use std::net::{Ipv4Addr, Ipv6Addr};

/// The HTTP status both ports answer a refused `Host` with: 421 Misdirected Request ("this
/// server is not the one for that name").
pub const REFUSED_STATUS: u16 = 421;
/// The envelope `detail` of that refusal, the same on both ports.
pub const REFUSED_DETAIL: &str = "this miner answers only to its IP address, its hostname, <hostname>.local and the names in [api].allowed_hosts";

/// Which `Host` values the HTTP ports accept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPolicy {
    hostname: String,
    /// Extra exact names, lower case, without a trailing dot.
    names: Vec<String>,
    /// Extra suffixes from `*.suffix` entries, lower case, with the leading dot (`.home.arpa`).
    suffixes: Vec<String>,
}

impl HostPolicy {
    /// Accept IP literals, `localhost`, `hostname` and `hostname.local` (case-insensitive).
    pub fn new(hostname: &str) -> Self {
        Self::with_extra(hostname, &[] as &[String])
    }

    /// [`HostPolicy::new`] plus the owner's extra names: `name` matches exactly, `*.suffix`
    /// matches any name ending in `.suffix` (not `suffix` itself).
    pub fn with_extra<S: AsRef<str>>(hostname: &str, extra: &[S]) -> Self {
        let mut names = Vec::new();
        let mut suffixes = Vec::new();
        for entry in extra {
            let e = entry
                .as_ref()
                .trim()
                .trim_end_matches('.')
                .to_ascii_lowercase();
            match e.strip_prefix('*') {
                Some(suffix) if suffix.starts_with('.') && suffix.len() > 1 => {
                    suffixes.push(suffix.to_string());
                }
                Some(_) => {}
                None if !e.is_empty() => names.push(e),
                None => {}
            }
        }
        HostPolicy {
            hostname: hostname.to_ascii_lowercase(),
            names,
            suffixes,
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
            || self.names.contains(&name)
            || self
                .suffixes
                .iter()
                .any(|s| name.len() > s.len() && name.ends_with(s.as_str()))
    }
}

/// Whether `[api].allowed_hosts` entry `entry` is well formed: a DNS name, or `*.` and a DNS
/// name with at least one dot-separated label (`*.home.arpa`, not `*` or `*.`).
pub fn is_valid_extra_name(entry: &str) -> bool {
    let name = entry.strip_prefix("*.").unwrap_or(entry);
    let name = name.strip_suffix('.').unwrap_or(name);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
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

    #[test]
    fn extra_names_and_wildcard_suffixes() {
        let policy = HostPolicy::with_extra("rig", &["Miner.LAN", "*.home.arpa", "proxy.example."]);
        let table = [
            ("miner.lan", true),
            ("MINER.lan:8080", true),
            ("garage.home.arpa", true),
            ("a.b.home.arpa:80", true),
            ("home.arpa", false),
            ("xhome.arpa", false),
            ("proxy.example", true),
            ("miner.lan.evil.example", false),
            ("evil.example", false),
            ("rig.local", true),
        ];
        for (host, want) in table {
            assert_eq!(policy.allows(host), want, "{host:?}");
        }
    }

    #[test]
    fn extra_name_syntax() {
        for (entry, ok) in [
            ("miner.lan", true),
            ("*.home.arpa", true),
            ("rig", true),
            ("*", false),
            ("*.", false),
            ("*.*.x", false),
            ("a..b", false),
            ("-a.b", false),
            ("a b", false),
            ("", false),
        ] {
            assert_eq!(is_valid_extra_name(entry), ok, "{entry:?}");
        }
    }
}
