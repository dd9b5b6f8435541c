//! Address rules shared by every service that talks to the LAN.

use std::net::IpAddr;

/// Whether an address is on the LAN (private, loopback, link-local, unique-local): the only
/// places svcOS reaches out to (energy sources, fleet peers).
pub fn is_lan(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_private() || v4.is_loopback() || v4.is_link_local(),
        IpAddr::V6(v6) => {
            v6.is_loopback()
                || (v6.segments()[0] & 0xfe00) == 0xfc00
                || (v6.segments()[0] & 0xffc0) == 0xfe80
                || v6.to_ipv4_mapped().is_some_and(|v4| is_lan(IpAddr::V4(v4)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lan_addresses() {
        for ok in [
            "10.1.2.3",
            "192.168.1.1",
            "172.16.0.1",
            "127.0.0.5",
            "169.254.1.1",
            "fd00::1",
            "::1",
            "::ffff:192.168.1.9",
        ] {
            assert!(is_lan(ok.parse().unwrap()), "{ok}");
        }
        for bad in ["8.8.8.8", "1.1.1.1", "2001:db8::1", "::ffff:8.8.8.8"] {
            assert!(!is_lan(bad.parse().unwrap()), "{bad}");
        }
    }
}
