//! Address rules shared by every service that talks to the LAN.

use std::net::IpAddr;
use std::path::Path;

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

/// The MAC address of this unit's LAN interface, lower case `aa:bb:cc:dd:ee:ff`: the interface
/// that carries the IPv4 default route, else the first other interface by name with a real
/// address (loopback, all-zero and broadcast addresses are not real). `None` when there is none.
pub fn primary_mac() -> Option<String> {
    primary_mac_in(Path::new("/proc/net/route"), Path::new("/sys/class/net"))
}

/// [`primary_mac`] over another route table and interface directory (tests).
pub fn primary_mac_in(route_table: &Path, sys_class_net: &Path) -> Option<String> {
    let mac_of = |iface: &str| {
        std::fs::read_to_string(sys_class_net.join(iface).join("address"))
            .ok()
            .and_then(|a| parse_mac(&a))
    };
    let routed = std::fs::read_to_string(route_table)
        .ok()
        .and_then(|t| default_route_interface(&t));
    if let Some(mac) = routed.as_deref().and_then(mac_of) {
        return Some(mac);
    }
    let mut names: Vec<String> = std::fs::read_dir(sys_class_net)
        .ok()?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n != "lo")
        .collect();
    names.sort();
    names.iter().find_map(|n| mac_of(n))
}

/// The interface of the IPv4 default route in a `/proc/net/route` table (destination and mask
/// 0; the first one listed when there are several).
fn default_route_interface(table: &str) -> Option<String> {
    table.lines().skip(1).find_map(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        // Iface Destination Gateway Flags RefCnt Use Metric Mask ...
        (cols.len() >= 8 && cols[1] == "00000000" && cols[7] == "00000000")
            .then(|| cols[0].to_string())
    })
}

/// A MAC as the kernel prints it, normalised; `None` for anything else and for the all-zero
/// and broadcast addresses (loopback, tunnels).
fn parse_mac(text: &str) -> Option<String> {
    let text = text.trim().to_ascii_lowercase();
    let octets: Vec<&str> = text.split(':').collect();
    let well_formed = octets.len() == 6
        && octets
            .iter()
            .all(|o| o.len() == 2 && o.bytes().all(|b| b.is_ascii_hexdigit()));
    (well_formed && text != "00:00:00:00:00:00" && text != "ff:ff:ff:ff:ff:ff").then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primary_mac_prefers_the_default_route() {
        let dir = tempfile::tempdir().unwrap();
        let net = dir.path().join("net");
        for (iface, mac) in [
            ("lo", "00:00:00:00:00:00"),
            ("eth0", "02:AB:cd:00:00:01"),
            ("wlan0", "02:ab:cd:00:00:02"),
            ("tun0", ""),
        ] {
            std::fs::create_dir_all(net.join(iface)).unwrap();
            std::fs::write(net.join(iface).join("address"), format!("{mac}\n")).unwrap();
        }
        let route = dir.path().join("route");
        std::fs::write(
            &route,
            "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
             wlan0\t0001A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
             wlan0\t00000000\t0101A8C0\t0003\t0\t0\t600\t00000000\t0\t0\t0\n",
        )
        .unwrap();
        assert_eq!(
            primary_mac_in(&route, &net).as_deref(),
            Some("02:ab:cd:00:00:02")
        );
        // No default route: the first real address by interface name.
        std::fs::write(&route, "Iface\tDestination\n").unwrap();
        assert_eq!(
            primary_mac_in(&route, &net).as_deref(),
            Some("02:ab:cd:00:00:01")
        );
        assert_eq!(primary_mac_in(&route, &dir.path().join("none")), None);
        for bad in [
            "",
            "ff:ff:ff:ff:ff:ff",
            "02:ab:cd:00:00",
            "zz:ab:cd:00:00:01",
        ] {
            assert_eq!(parse_mac(bad), None, "{bad}");
        }
    }

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
