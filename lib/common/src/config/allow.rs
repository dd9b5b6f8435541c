//! Who may run privileged commands over TCP 4028: cgminer's `--api-allow` with its `W:` group.
//!
//! The parser lives with the config so that the one validator ([`super::Config::validate`]) and
//! legacy-tcp read an entry the same way: an entry the gateway accepts can never make legacy-tcp
//! refuse to start.
//!
//! cgminer grants privileged (write) access to addresses listed with a `W:` prefix; entries
//! without a group letter get read access only. On svcOS everyone may read (the port serves
//! monitoring), so only `W:` entries change anything. The default list is empty: nobody may
//! switch pools or restart anything over 4028 until the operator opts in.

use std::net::IpAddr;

/// One allowlist entry: a network and whether it is privileged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowEntry {
    /// `W:` entries grant privileged commands.
    pub privileged: bool,
    /// Network address (host bits ignored).
    pub network: IpAddr,
    /// Prefix length; a bare address means the host itself.
    pub prefix: u8,
}

/// An entry that is not `[W:]ADDRESS[/PREFIX]`.
#[derive(Debug, thiserror::Error)]
#[error("invalid legacy.allow entry {entry:?}: expected [W:]ADDRESS[/PREFIX]")]
pub struct AllowError {
    /// The offending entry.
    pub entry: String,
}

impl AllowEntry {
    /// Parse `W:192.168.1.0/24`, `10.0.0.5`, `W:::1`.
    pub fn parse(entry: &str) -> Result<Self, AllowError> {
        let err = || AllowError {
            entry: entry.to_string(),
        };
        let trimmed = entry.trim();
        let (privileged, spec) = match trimmed.strip_prefix("W:").or(trimmed.strip_prefix("w:")) {
            Some(rest) => (true, rest),
            None => (false, trimmed),
        };
        let (addr, prefix) = match spec.split_once('/') {
            Some((a, p)) => (a, Some(p.parse::<u8>().map_err(|_| err())?)),
            None => (spec, None),
        };
        let network: IpAddr = addr.parse().map_err(|_| err())?;
        let network = canonical(network);
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = prefix.unwrap_or(max);
        if prefix > max {
            return Err(err());
        }
        Ok(AllowEntry {
            privileged,
            network,
            prefix,
        })
    }

    /// Whether `addr` lies in this entry's network.
    pub fn contains(&self, addr: IpAddr) -> bool {
        match (self.network, canonical(addr)) {
            (IpAddr::V4(net), IpAddr::V4(a)) => prefix_eq(&net.octets(), &a.octets(), self.prefix),
            (IpAddr::V6(net), IpAddr::V6(a)) => prefix_eq(&net.octets(), &a.octets(), self.prefix),
            _ => false,
        }
    }
}

/// IPv4-mapped IPv6 clients (a dual-stack listener) are matched as IPv4.
fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        v4 => v4,
    }
}

fn prefix_eq(a: &[u8], b: &[u8], prefix: u8) -> bool {
    let full = usize::from(prefix / 8);
    let rest = prefix % 8;
    if a[..full] != b[..full] {
        return false;
    }
    if rest == 0 {
        return true;
    }
    let mask = 0xffu8 << (8 - rest);
    (a[full] & mask) == (b[full] & mask)
}

/// The parsed `[legacy].allow` list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList(Vec<AllowEntry>);

impl AllowList {
    /// Parse every entry; the first bad one is the error.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Self, AllowError> {
        entries
            .iter()
            .map(|e| AllowEntry::parse(e.as_ref()))
            .collect::<Result<_, _>>()
            .map(AllowList)
    }

    /// Whether `addr` may run privileged commands.
    pub fn privileged(&self, addr: IpAddr) -> bool {
        self.0.iter().any(|e| e.privileged && e.contains(addr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn w_semantics_table() {
        let list = AllowList::parse(&[
            "W:192.168.1.0/24",
            "10.0.0.0/8",
            "W:127.0.0.2",
            "W:fd00::/8",
        ])
        .unwrap();
        let cases = [
            ("192.168.1.77", true),
            ("192.168.2.1", false),
            ("10.1.2.3", false), // listed without W: = read only
            ("127.0.0.2", true),
            ("127.0.0.1", false),
            ("::ffff:192.168.1.9", true), // dual-stack listener
            ("fd12::1", true),
            ("fe80::1", false),
        ];
        for (addr, want) in cases {
            assert_eq!(list.privileged(addr.parse().unwrap()), want, "{addr}");
        }
    }

    #[test]
    fn default_allows_nobody_and_odd_prefixes_work() {
        assert!(!AllowList::default().privileged("127.0.0.1".parse().unwrap()));
        let list = AllowList::parse(&["W:172.16.0.0/12", "W:0.0.0.0/0"][..1]).unwrap();
        assert!(list.privileged("172.31.255.255".parse().unwrap()));
        assert!(!list.privileged("172.32.0.0".parse().unwrap()));
        let all = AllowList::parse(&["W:0.0.0.0/0"]).unwrap();
        assert!(all.privileged("8.8.8.8".parse().unwrap()));
    }

    #[test]
    fn bad_entries_are_rejected() {
        for bad in ["W:", "W:1.2.3.4/33", "nonsense", "R:1.2.3.4", "W:::1/129"] {
            assert!(AllowEntry::parse(bad).is_err(), "{bad}");
        }
    }
}
