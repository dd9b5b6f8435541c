//! Address rules shared by every service that talks to the LAN, and what the kernel says about
//! this unit's own interfaces, routes and resolver (read, never changed: the LAN settings are
//! applied by networkd, see [`crate::networkd`]).

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

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
    default_route_in(table).map(|(iface, _)| iface)
}

/// The IPv4 default route of a `/proc/net/route` table: its interface and its gateway (`None`
/// for a route without one, straight onto the link).
fn default_route_in(table: &str) -> Option<(String, Option<Ipv4Addr>)> {
    table.lines().skip(1).find_map(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        // Iface Destination Gateway Flags RefCnt Use Metric Mask ...
        if cols.len() < 8 || cols[1] != "00000000" || cols[7] != "00000000" {
            return None;
        }
        // The kernel prints the network-order bytes read as a native number (`%08X`).
        let gateway = u32::from_str_radix(cols[2], 16)
            .ok()
            .map(|n| Ipv4Addr::from(n.to_ne_bytes()))
            .filter(|g| !g.is_unspecified());
        Some((cols[0].to_string(), gateway))
    })
}

/// The IPv4 default route: (interface, gateway), from `/proc/net/route`.
pub fn default_route() -> Option<(String, Option<Ipv4Addr>)> {
    default_route_in(&std::fs::read_to_string("/proc/net/route").ok()?)
}

/// One network interface with its addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// Kernel name (`eth0`).
    pub name: String,
    /// Link-layer address, lower case; `None` for loopback and tunnels.
    pub mac: Option<String>,
    /// Administratively up and with carrier (`IFF_UP` and `IFF_RUNNING`).
    pub up: bool,
    /// IPv4 addresses with their prefix length.
    pub ipv4: Vec<Ipv4Net>,
    /// IPv6 addresses with their prefix length.
    pub ipv6: Vec<Ipv6Net>,
}

/// Every interface but loopback, by name, with its addresses (`getifaddrs`) and MAC
/// (`/sys/class/net/<name>/address`); empty when the kernel cannot be asked.
pub fn interfaces() -> Vec<Interface> {
    use nix::net::if_::InterfaceFlags;
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    let mut out: Vec<Interface> = Vec::new();
    for a in addrs {
        if a.flags.contains(InterfaceFlags::IFF_LOOPBACK) {
            continue;
        }
        let idx = match out.iter().position(|i| i.name == a.interface_name) {
            Some(i) => i,
            None => {
                let mac = std::fs::read_to_string(
                    Path::new("/sys/class/net")
                        .join(&a.interface_name)
                        .join("address"),
                )
                .ok()
                .and_then(|m| parse_mac(&m));
                out.push(Interface {
                    name: a.interface_name.clone(),
                    mac,
                    up: false,
                    ipv4: Vec::new(),
                    ipv6: Vec::new(),
                });
                out.len() - 1
            }
        };
        let iface = &mut out[idx];
        iface.up |= a
            .flags
            .contains(InterfaceFlags::IFF_UP | InterfaceFlags::IFF_RUNNING);
        let (Some(addr), Some(mask)) = (a.address.as_ref(), a.netmask.as_ref()) else {
            continue;
        };
        let net = match (addr.as_sockaddr_in(), mask.as_sockaddr_in()) {
            (Some(ip), Some(m)) => Some(IpNet::V4(
                Ipv4Net::with_netmask(ip.ip(), m.ip()).unwrap_or_else(|_| Ipv4Net::from(ip.ip())),
            )),
            _ => match (addr.as_sockaddr_in6(), mask.as_sockaddr_in6()) {
                (Some(ip), Some(m)) => Some(IpNet::V6(
                    Ipv6Net::with_netmask(ip.ip(), m.ip())
                        .unwrap_or_else(|_| Ipv6Net::from(ip.ip())),
                )),
                _ => None,
            },
        };
        match net {
            Some(IpNet::V4(n)) if !iface.ipv4.contains(&n) => iface.ipv4.push(n),
            Some(IpNet::V6(n)) if !iface.ipv6.contains(&n) => iface.ipv6.push(n),
            _ => {}
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// This unit's LAN interface among `interfaces`: the one of the IPv4 default route (`routed`),
/// else the first with an IPv4 address, else the first with a MAC.
pub fn primary_interface<'a>(
    interfaces: &'a [Interface],
    routed: Option<&str>,
) -> Option<&'a Interface> {
    routed
        .and_then(|r| interfaces.iter().find(|i| i.name == r))
        .or_else(|| interfaces.iter().find(|i| !i.ipv4.is_empty()))
        .or_else(|| interfaces.iter().find(|i| i.mac.is_some()))
}

/// [`primary_interface`] of this unit's [`interfaces`] and [`default_route`].
pub fn lan_interface() -> Option<Interface> {
    let all = interfaces();
    let routed = default_route().map(|(iface, _)| iface);
    primary_interface(&all, routed.as_deref()).cloned()
}

/// The resolver's name servers: systemd-resolved's upstream list when it runs (the image's
/// `/etc/resolv.conf` then names only its local stub), else `/etc/resolv.conf`.
pub fn dns_servers() -> Vec<IpAddr> {
    ["/run/systemd/resolve/resolv.conf", "/etc/resolv.conf"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .map(|t| parse_resolv_conf(&t))
        .unwrap_or_default()
}

/// The `nameserver` lines of a resolv.conf (an IPv6 zone suffix `%eth0` dropped).
fn parse_resolv_conf(text: &str) -> Vec<IpAddr> {
    text.lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some("nameserver"))
                .then(|| words.next())
                .flatten()
        })
        .filter_map(|w| w.split('%').next()?.parse().ok())
        .collect()
}

/// Seconds since the kernel booted (`/proc/uptime`; the host's in the simulator).
pub fn boot_uptime_s() -> Option<u64> {
    parse_uptime(&std::fs::read_to_string("/proc/uptime").ok()?)
}

fn parse_uptime(text: &str) -> Option<u64> {
    let secs: f64 = text.split_whitespace().next()?.parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then_some(secs as u64)
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
    #[cfg(target_endian = "little")]
    fn default_route_gateway_is_read_in_network_order() {
        let table = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\n\
                     eth0\t0001A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\n\
                     eth0\t00000000\t0101A8C0\t0003\t0\t0\t100\t00000000\n";
        assert_eq!(
            default_route_in(table),
            Some(("eth0".into(), Some(Ipv4Addr::new(192, 168, 1, 1))))
        );
        let onlink = "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\n\
                      wg0\t00000000\t00000000\t0001\t0\t0\t0\t00000000\n";
        assert_eq!(default_route_in(onlink), Some(("wg0".into(), None)));
        assert_eq!(default_route_in("Iface\tDestination\n"), None);
    }

    #[test]
    fn resolv_conf_and_uptime() {
        let conf = "# generated\nsearch lan\nnameserver 192.168.1.1\nnameserver fe80::1%eth0\n\
                    nameserver  1.1.1.1 \noptions edns0\nnameserver bogus\n";
        assert_eq!(
            parse_resolv_conf(conf),
            ["192.168.1.1", "fe80::1", "1.1.1.1"]
                .map(|a| a.parse::<IpAddr>().unwrap())
                .to_vec()
        );
        assert_eq!(parse_uptime("3725.42 7000.10\n"), Some(3725));
        assert_eq!(parse_uptime("x"), None);
    }

    #[test]
    fn primary_interface_follows_the_default_route() {
        let iface = |name: &str, v4: &[&str], mac: bool| Interface {
            name: name.into(),
            mac: mac.then(|| "02:00:00:00:00:01".into()),
            up: true,
            ipv4: v4.iter().map(|a| a.parse().unwrap()).collect(),
            ipv6: Vec::new(),
        };
        let all = [
            iface("docker0", &["172.17.0.1/16"], true),
            iface("eth0", &[], true),
            iface("wlan0", &["192.168.1.9/24"], true),
        ];
        assert_eq!(
            primary_interface(&all, Some("wlan0")).unwrap().name,
            "wlan0"
        );
        assert_eq!(primary_interface(&all, None).unwrap().name, "docker0");
        assert_eq!(
            primary_interface(&all, Some("gone")).unwrap().name,
            "docker0"
        );
        assert_eq!(primary_interface(&all[1..2], None).unwrap().name, "eth0");
        assert!(primary_interface(&[], None).is_none());
        // The real kernel answers without failing; loopback is never listed.
        assert!(interfaces().iter().all(|i| i.name != "lo"));
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
