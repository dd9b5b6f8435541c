//! The LAN settings (`[network.ipv4]`, `[system].hostname`) as a systemd-networkd `.network`
//! file.
//!
//! The gateway is the one writer: after every config write and at its start it renders the
//! file from the config in force ([`render`]) and writes it, atomically and only when the text
//! differs, to `<state>/gateway/network/` ([`network_file_path`]). The directory comes from the
//! [`Layout`], never from the config or a request, so no API value chooses where a file goes.
//!
//! What applies it:
//! - The image: the gateway runs unprivileged and networkd reads only root's directories, so
//!   `svcos-network.path` (root) watches the file and `svcos-network.service` installs it as
//!   `/run/systemd/network/10-svcos-lan.network` and runs `networkctl reload`, which
//!   reconfigures the links the changed file matches. At boot the same service installs it
//!   before networkd starts. Without a file (first boot) the image's
//!   `/usr/lib/systemd/network/90-svcos-dhcp.network` asks DHCP on every Ethernet port.
//! - The simulator: nothing. `svcos sim` runs on a host whose network is not the miner's, so the
//!   file is only written into the sim's state folder, where tests read it.

use std::io;
use std::path::{Path, PathBuf};

use crate::config::{Config, Ipv4Method};
use crate::paths::Layout;
use crate::{ServiceName, fsutil};

/// The file's name: networkd applies the first file in lexical order that matches a link, so
/// `10-` wins over the image's `90-svcos-dhcp.network` fallback.
pub const FILE_NAME: &str = "10-svcos-lan.network";

/// Where the gateway writes the file: `<state>/gateway/network/10-svcos-lan.network`.
pub fn network_file_path(layout: &Layout) -> PathBuf {
    layout
        .service_state_dir(ServiceName::Gateway)
        .join("network")
        .join(FILE_NAME)
}

/// The `.network` file for `config` (deterministic: the same settings give the same text, so an
/// unrelated config write never makes networkd reconfigure the link).
pub fn render(config: &Config) -> String {
    let v4 = &config.network.ipv4;
    let mut out = String::from(
        "# Written by the svcOS gateway from [network.ipv4] and [system].hostname; edits are\n\
         # replaced on the next config write. Change it with PUT /api/network/config.\n\n",
    );
    out.push_str(&format!("[Match]\nName={}\n\n[Network]\n", v4.interface));
    match v4.method {
        Ipv4Method::Dhcp => out.push_str("DHCP=ipv4\n"),
        Ipv4Method::Static => {
            out.push_str(&format!("Address={}\nGateway={}\n", v4.address, v4.gateway));
        }
    }
    for dns in &v4.dns {
        out.push_str(&format!("DNS={dns}\n"));
    }
    if v4.method == Ipv4Method::Dhcp {
        // The name the router shows for the lease is the miner's; a DNS list of the owner's
        // replaces the one the DHCP server offers instead of being merged with it.
        out.push_str(&format!(
            "\n[DHCPv4]\nSendHostname=yes\nHostname={}\n",
            config.system.hostname
        ));
        if !v4.dns.is_empty() {
            out.push_str("UseDNS=no\n");
        }
    }
    out
}

/// Bring the file at `path` in line with `config`: written (0644, atomically) when its text
/// differs. Returns whether it was written.
pub fn save(path: &Path, config: &Config) -> io::Result<bool> {
    let text = render(config);
    if std::fs::read_to_string(path).is_ok_and(|t| t == text) {
        return Ok(false);
    }
    if let Some(dir) = path.parent() {
        fsutil::ensure_dir(dir, 0o755)?;
    }
    fsutil::atomic_write(path, text.as_bytes(), 0o644)?;
    Ok(true)
}

/// [`save`] at this layout's [`network_file_path`] (the gateway calls it at start and after
/// every config write).
pub fn apply_config(layout: &Layout, config: &Config) -> io::Result<bool> {
    save(&network_file_path(layout), config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Ipv4Config;

    fn config(v4: Ipv4Config) -> Config {
        let mut c = Config::default();
        c.system.hostname = "garage-heater".into();
        c.network.ipv4 = v4;
        c
    }

    #[test]
    fn dhcp_sends_the_hostname_and_keeps_the_servers_dns() {
        let text = render(&config(Ipv4Config::default()));
        assert!(text.contains("[Match]\nName=eth0\n"), "{text}");
        assert!(text.contains("[Network]\nDHCP=ipv4\n"), "{text}");
        assert!(text.contains("[DHCPv4]\nSendHostname=yes\nHostname=garage-heater\n"));
        assert!(!text.contains("UseDNS") && !text.contains("DNS=") && !text.contains("Address="));
        let own_dns = render(&config(Ipv4Config {
            dns: vec!["9.9.9.9".into()],
            ..Ipv4Config::default()
        }));
        assert!(own_dns.contains("DNS=9.9.9.9\n") && own_dns.contains("UseDNS=no\n"));
    }

    #[test]
    fn static_lists_address_gateway_and_dns_in_order() {
        let c = config(Ipv4Config {
            method: Ipv4Method::Static,
            interface: "end0".into(),
            address: "192.168.1.50/24".into(),
            gateway: "192.168.1.1".into(),
            dns: vec!["192.168.1.1".into(), "2606:4700::1111".into()],
        });
        c.validate().unwrap();
        let text = render(&c);
        assert!(
            text.ends_with(
                "[Match]\nName=end0\n\n[Network]\nAddress=192.168.1.50/24\nGateway=192.168.1.1\n\
                 DNS=192.168.1.1\nDNS=2606:4700::1111\n"
            ),
            "{text}"
        );
        assert!(!text.contains("DHCP"));
    }

    #[test]
    fn save_writes_only_a_change() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gateway/network").join(FILE_NAME);
        let mut c = config(Ipv4Config::default());
        assert!(save(&path, &c).unwrap());
        assert!(!save(&path, &c).unwrap(), "same text: not rewritten");
        c.api.port = 8123;
        assert!(
            !save(&path, &c).unwrap(),
            "other sections do not touch the file"
        );
        c.system.hostname = "rig-7".into();
        assert!(save(&path, &c).unwrap());
        assert!(
            std::fs::read_to_string(&path)
                .unwrap()
                .contains("Hostname=rig-7\n")
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
        let layout = Layout::sim(dir.path());
        assert_eq!(
            network_file_path(&layout),
            dir.path()
                .join("state/gateway/network/10-svcos-lan.network")
        );
    }
}
