//! Address ranges an operator may ask to scan.

use std::net::{IpAddr, Ipv4Addr};

use ipnet::Ipv4Net;

use svcos_common::net::is_lan;

use crate::MAX_HOSTS;

fn ipv4(text: &str) -> Result<Ipv4Addr, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("{text} is not an IPv4 address"))
}

/// Expand a range: `a.b.c.d`, `a.b.c.d/nn` or `a.b.c.d-a.b.c.e` (IPv4, LAN only, at most
/// [`MAX_HOSTS`] addresses). The error says what is accepted.
pub fn expand_range(range: &str) -> Result<Vec<Ipv4Addr>, String> {
    let range = range.trim();
    let (first, last) = if let Some((net, len)) = range.split_once('/') {
        // ipnet reads the CIDR (host bits may be set: 10.0.0.7/29 is 10.0.0.0/29); the checks
        // before it only say which half is wrong.
        ipv4(net)?;
        let len = len.trim();
        if len.parse::<u32>().is_err() {
            return Err(format!("/{len} is not a prefix length"));
        }
        let net: Ipv4Net = format!("{}/{len}", net.trim())
            .parse()
            .map_err(|_| "prefix length is 0-32".to_string())?;
        (u32::from(net.network()), u32::from(net.broadcast()))
    } else if let Some((a, b)) = range.split_once('-') {
        (u32::from(ipv4(a)?), u32::from(ipv4(b)?))
    } else {
        let a: Ipv4Addr = range
            .parse()
            .map_err(|_| format!("{range} is not an IPv4 address, CIDR or a-b range"))?;
        (u32::from(a), u32::from(a))
    };
    if last < first {
        return Err("the range ends before it starts".into());
    }
    // Counted before expanding, so a /0 costs nothing.
    let count = u64::from(last - first) + 1;
    if count > MAX_HOSTS as u64 {
        return Err(format!(
            "{count} addresses: at most {MAX_HOSTS} (a /22) per scan"
        ));
    }
    let hosts: Vec<Ipv4Addr> = (first..=last).map(Ipv4Addr::from).collect();
    if let Some(bad) = hosts.iter().find(|ip| !is_lan(IpAddr::V4(**ip))) {
        return Err(format!(
            "{bad} is not a LAN address (private, loopback or link-local only)"
        ));
    }
    Ok(hosts)
}
