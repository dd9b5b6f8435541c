//! Static checks of what ships around the supervisor: the systemd unit, sysusers, tmpfiles and
//! D-Bus policy (checked with the real systemd/dbus tools when installed), and the Buildroot
//! external tree (which cannot be built here: no network for sources).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use svcos_common::ServiceName;
use svcos_common::config::{Config, HardwareDriver};
use svcos_common::paths::{PROD_CONFIG, PROD_RUNTIME_DIR, PROD_STATE_DIR};
use svcos_e2e::svcos_bin;
use svcos_supervisor::child::{SERVICE_GROUP, service_user};
use svcos_supervisor::dbus::BUS_NAME;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn overlay() -> PathBuf {
    root().join("rootfs/board/svcos/rootfs-overlay")
}

/// Path inside the overlay of an absolute target path.
fn in_overlay(abs: &str) -> PathBuf {
    overlay().join(abs.trim_start_matches('/'))
}

fn production_services() -> Vec<ServiceName> {
    ServiceName::ALL
        .into_iter()
        .filter(|s| {
            !matches!(
                s,
                ServiceName::HwSim | ServiceName::TestPool | ServiceName::Supervisor
            )
        })
        .collect()
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// `Key=value` lines of a unit file (later keys win, as systemd does for single-valued keys).
fn unit_keys(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.starts_with('['))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

#[test]
fn unit_passes_systemd_analyze_verify() {
    if !have("systemd-analyze") {
        eprintln!("SKIP: systemd-analyze is not installed");
        return;
    }
    // verify checks that ExecStart's binary exists: point it at the built one (or, when it has
    // not been built, at a binary that surely exists).
    let bin = svcos_bin();
    let bin = if bin.exists() {
        bin
    } else {
        PathBuf::from("/bin/true")
    };
    let dir = tempfile::tempdir().unwrap();
    let unit = read("systemd/svcos.service").replace(
        "ExecStart=/usr/bin/svcos",
        &format!("ExecStart={}", bin.display()),
    );
    let path = dir.path().join("svcos.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "systemd-analyze verify: {stderr}");
    assert!(
        !stderr.contains("svcos.service"),
        "warnings about the unit: {stderr}"
    );
}

#[test]
fn unit_has_the_settings_the_design_relies_on() {
    let keys = unit_keys(&read("systemd/svcos.service"));
    let want = [
        ("Type", "notify"),
        ("ExecStart", "/usr/bin/svcos supervisor"),
        ("Restart", "always"),
        // Children must outlive a supervisor restart.
        ("KillMode", "process"),
        ("RuntimeDirectoryPreserve", "restart"),
        ("ProtectSystem", "strict"),
        ("ReadWritePaths", PROD_STATE_DIR),
        ("PrivateTmp", "yes"),
        ("NoNewPrivileges", "yes"),
        ("SupplementaryGroups", SERVICE_GROUP),
    ];
    for (k, v) in want {
        assert_eq!(keys.get(k).map(String::as_str), Some(v), "{k}");
    }
    assert!(keys.contains_key("WatchdogSec"));
    // hw-agent needs /dev (UART, i2c-dev) and a writable /sys (PWM, GPIO): nothing may close the
    // device policy or make /sys read-only.
    for key in [
        "ProtectClock",
        "PrivateDevices",
        "DevicePolicy",
        "DeviceAllow",
        "ProtectKernelTunables",
    ] {
        assert!(!keys.contains_key(key), "{key} would lock hw-agent out");
    }
    assert_eq!(
        format!("/run/{}", keys["RuntimeDirectory"]),
        PROD_RUNTIME_DIR,
        "RuntimeDirectory is the runtime dir the code uses"
    );
    let caps: Vec<&str> = keys["CapabilityBoundingSet"].split_whitespace().collect();
    for cap in [
        "CAP_SETUID",
        "CAP_SETGID",
        "CAP_NET_BIND_SERVICE",
        "CAP_KILL",
    ] {
        assert!(caps.contains(&cap), "{cap} in {caps:?}");
    }
    assert_eq!(caps.len(), 4, "nothing beyond what is needed: {caps:?}");
}

#[test]
fn sysusers_and_tmpfiles_create_the_users_and_dirs_the_code_expects() {
    if !have("systemd-sysusers") || !have("systemd-tmpfiles") {
        eprintln!("SKIP: systemd-sysusers/systemd-tmpfiles not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sysroot = dir.path();
    std::fs::create_dir_all(sysroot.join("etc")).unwrap();
    let out = Command::new("systemd-sysusers")
        .arg(format!("--root={}", sysroot.display()))
        .arg(root().join("systemd/svcos.sysusers"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let passwd = std::fs::read_to_string(sysroot.join("etc/passwd")).unwrap();
    let group = std::fs::read_to_string(sysroot.join("etc/group")).unwrap();
    let gid_of = |name: &str| -> u32 {
        group
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f[0] == name).then(|| f[2].parse().unwrap())
            })
            .unwrap_or_else(|| panic!("group {name}"))
    };
    let svcos_gid = gid_of(SERVICE_GROUP);
    let mut uids = BTreeMap::new();
    for service in production_services() {
        let user = service_user(service);
        let fields: Vec<&str> = passwd
            .lines()
            .map(|l| l.split(':').collect::<Vec<_>>())
            .find(|f| f[0] == user)
            .unwrap_or_else(|| panic!("user {user} in {passwd}"));
        assert_eq!(fields[3].parse::<u32>().unwrap(), svcos_gid, "{user}");
        uids.insert(service, fields[2].parse::<u32>().unwrap());
    }
    for device_group in ["dialout", "i2c", "gpio"] {
        let members = group
            .lines()
            .find(|l| l.starts_with(&format!("{device_group}:")))
            .unwrap();
        assert_eq!(
            members.rsplit(':').next(),
            Some(service_user(ServiceName::HwAgent).as_str()),
            "only hw-agent may open {device_group} devices"
        );
    }

    let out = Command::new("systemd-tmpfiles")
        .arg(format!("--root={}", sysroot.display()))
        .arg("--create")
        .arg(root().join("systemd/svcos.tmpfiles"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let meta = |p: &str| std::fs::metadata(sysroot.join(p.trim_start_matches('/'))).unwrap();
    assert_eq!(meta(PROD_RUNTIME_DIR).permissions().mode() & 0o7777, 0o1770);
    assert_eq!(meta(PROD_RUNTIME_DIR).gid(), svcos_gid);
    for service in production_services() {
        let dir = format!("{PROD_STATE_DIR}/{service}");
        let m = meta(&dir);
        assert_eq!(m.uid(), uids[&service], "{dir} owned by its service");
        let mode = m.permissions().mode() & 0o777;
        if service == ServiceName::Auth {
            assert_eq!(mode, 0o700, "only auth reads the password hash");
        } else {
            assert_eq!(mode, 0o750, "{dir}");
        }
    }
}

#[test]
fn dbus_policy_is_accepted_by_dbus_daemon() {
    let policy = root().join("systemd/org.svcos.Supervisor1.conf");
    let text = std::fs::read_to_string(&policy).unwrap();
    assert!(text.contains(&format!("own=\"{BUS_NAME}\"")));
    if !have("dbus-daemon") {
        eprintln!("SKIP: dbus-daemon is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bus.conf");
    std::fs::write(
        &config,
        format!(
            "<!DOCTYPE busconfig PUBLIC \"-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN\"
 \"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd\">
<busconfig>
  <type>custom</type>
  <listen>unix:path={}/bus</listen>
  <auth>EXTERNAL</auth>
  <policy context=\"default\"><allow user=\"*\"/></policy>
  <include>{}</include>
</busconfig>",
            dir.path().display(),
            policy.display()
        ),
    )
    .unwrap();
    let mut daemon = Command::new("dbus-daemon")
        .arg(format!("--config-file={}", config.display()))
        .args(["--nofork", "--nopidfile", "--print-address=1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(daemon.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let running = daemon.try_wait().unwrap().is_none();
    let _ = daemon.kill();
    let out = daemon.wait_with_output().unwrap();
    assert!(
        running && line.starts_with("unix:"),
        "dbus-daemon rejected the policy: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn buildroot_package_installs_the_binary_the_workspace_builds() {
    let mk = read("rootfs/package/svcos/svcos.mk");
    let var = |name: &str| -> String {
        mk.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} = ")))
            .unwrap_or_else(|| panic!("{name} in svcos.mk"))
            .trim()
            .to_string()
    };
    assert!(mk.contains("$(eval $(cargo-package))"));
    assert_eq!(var("SVCOS_SITE_METHOD"), "local");
    assert_eq!(var("SVCOS_SITE"), "$(BR2_EXTERNAL_SVCOS_PATH)/..");
    // The site is the workspace root; the subdir is the package that owns the `svcos` binary.
    let workspace = read("Cargo.toml");
    let subdir = var("SVCOS_SUBDIR");
    assert!(
        workspace.contains(&format!("\"{subdir}\"")),
        "{subdir} is a workspace member"
    );
    let package: toml::Table = read(&format!("{subdir}/Cargo.toml")).parse().unwrap();
    assert_eq!(package["package"]["name"].as_str(), Some("svcos"));
    let bins: Vec<&str> = package["bin"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["name"].as_str())
        .collect();
    assert_eq!(bins, ["svcos"]);
    // The image is `cargo build --release -p svcos --no-default-features`: the default `sim`
    // feature (hw-sim, the test pool) must stay out, and must be what the feature gates.
    assert_eq!(
        var("SVCOS_CARGO_BUILD_OPTS"),
        "-p svcos --no-default-features --bin svcos"
    );
    assert_eq!(
        var("SVCOS_CARGO_INSTALL_OPTS"),
        "--no-default-features --bin svcos"
    );
    // Default features: the simulator and the bundled SQLite (the image links the system one).
    let defaults: Vec<&str> = package["features"]["default"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f.as_str())
        .collect();
    assert_eq!(defaults, ["sim", "bundled-sqlite"]);
    assert_eq!(
        package["features"]["bundled-sqlite"][0].as_str(),
        Some("svcos-tuner/bundled-sqlite")
    );
    // ...and so the image's package needs Buildroot's sqlite.
    assert!(
        var("SVCOS_DEPENDENCIES")
            .split_whitespace()
            .any(|d| d == "sqlite")
    );
    assert_eq!(
        package["dependencies"]["svcos-hw-sim"]["optional"].as_bool(),
        Some(true),
        "hw-sim is only in the sim build"
    );
    // cargo install --root $(TARGET_DIR)/usr puts it at /usr/bin/svcos, which the unit runs.
    assert!(read("systemd/svcos.service").contains("ExecStart=/usr/bin/svcos supervisor"));
    // The image's users are the sysusers file's users.
    let mk_users: Vec<String> = mk
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("svcos-"))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect();
    let want: Vec<String> = production_services()
        .into_iter()
        .map(service_user)
        .collect();
    assert_eq!(mk_users, want);
    let hw = mk
        .lines()
        .find(|l| l.trim().starts_with("svcos-hw-agent "))
        .unwrap();
    assert!(hw.contains(" dialout,i2c,gpio "), "{hw}");
}

#[test]
fn overlay_paths_are_the_ones_the_code_reads() {
    // The config the code loads in production.
    let config_path = in_overlay(PROD_CONFIG);
    assert!(config_path.is_file(), "{}", config_path.display());
    // The units and policy in the overlay are exactly the ones in systemd/.
    let pairs = [
        (
            "systemd/svcos.service",
            "/usr/lib/systemd/system/svcos.service",
        ),
        ("systemd/svcos.sysusers", "/usr/lib/sysusers.d/svcos.conf"),
        ("systemd/svcos.tmpfiles", "/usr/lib/tmpfiles.d/svcos.conf"),
        (
            "systemd/org.svcos.Supervisor1.conf",
            "/usr/share/dbus-1/system.d/org.svcos.Supervisor1.conf",
        ),
    ];
    for (src, target) in pairs {
        assert_eq!(
            std::fs::read(root().join(src)).unwrap(),
            std::fs::read(in_overlay(target)).unwrap_or_default(),
            "{target} in the overlay equals {src}"
        );
    }
    // Enabled at boot: the wants symlink points at the installed unit.
    let link = in_overlay("/etc/systemd/system/multi-user.target.wants/svcos.service");
    let target = std::fs::read_link(&link).unwrap();
    assert_eq!(target, Path::new("/usr/lib/systemd/system/svcos.service"));
    assert!(in_overlay(target.to_str().unwrap()).is_file());
    // The tmpfiles snippet creates the runtime and state dirs the code uses.
    let tmpfiles = read("systemd/svcos.tmpfiles");
    let dirs: Vec<&str> = tmpfiles
        .lines()
        .filter(|l| l.starts_with("d "))
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    assert!(dirs.contains(&PROD_RUNTIME_DIR));
    assert!(dirs.contains(&PROD_STATE_DIR));
    for service in production_services() {
        let d = format!("{PROD_STATE_DIR}/{service}");
        assert!(dirs.contains(&d.as_str()), "{d}");
    }
}

#[test]
fn shipped_config_parses_with_the_real_loader() {
    let config = Config::load(&in_overlay(PROD_CONFIG)).unwrap();
    assert_eq!(config.hardware.driver, HardwareDriver::Linux);
    assert_eq!(
        config.hardware.uarts.len() as u32,
        config.hardware.chain_count()
    );
    assert_eq!(config.api.http_port, 80);
    assert!(config.pools.is_empty(), "no pool is preconfigured");
}

#[test]
fn external_tree_is_complete() {
    assert!(read("rootfs/external.desc").contains("name: SVCOS"));
    assert!(
        read("rootfs/Config.in")
            .contains("source \"$BR2_EXTERNAL_SVCOS_PATH/package/svcos/Config.in\"")
    );
    assert!(read("rootfs/external.mk").contains("$(BR2_EXTERNAL_SVCOS_PATH)/package/*/*.mk"));
    let pkg = read("rootfs/package/svcos/Config.in");
    assert!(pkg.contains("config BR2_PACKAGE_SVCOS"));
    assert!(pkg.contains("select BR2_PACKAGE_HOST_RUSTC"));
    let fragment = read("rootfs/configs/svcos.fragment");
    for line in [
        "BR2_INIT_SYSTEMD=y",
        "BR2_PACKAGE_DBUS=y",
        "BR2_PACKAGE_SVCOS=y",
        "BR2_ROOTFS_OVERLAY=\"$(BR2_EXTERNAL_SVCOS_PATH)/board/svcos/rootfs-overlay\"",
    ] {
        assert!(fragment.lines().any(|l| l == line), "{line}");
    }
    assert!(overlay().is_dir());
}

/// The SSH units (dropbear per connection, the key copy), as shipped in `systemd/`.
const SSH_UNITS: [&str; 4] = [
    "svcos-ssh.socket",
    "svcos-ssh@.service",
    "svcos-ssh-keys.path",
    "svcos-ssh-keys.service",
];

#[test]
fn ssh_units_use_the_paths_the_gateway_writes() {
    use svcos_common::paths::Layout;
    use svcos_common::sshkeys;
    let layout = Layout::production();
    let keys = sshkeys::authorized_keys_path(&layout);
    let env = sshkeys::dropbear_env_path(&layout);
    let socket = unit_keys(&read("systemd/svcos-ssh.socket"));
    assert_eq!(socket["ListenStream"], sshkeys::SSH_PORT.to_string());
    assert_eq!(socket["Accept"], "yes");
    let session = unit_keys(&read("systemd/svcos-ssh@.service"));
    // Keys only unless the gateway's file says otherwise.
    assert_eq!(session["Environment"], "DROPBEAR_ARGS=-s");
    assert_eq!(session["EnvironmentFile"], format!("-{}", env.display()));
    assert_eq!(
        session["ExecStart"],
        "-/usr/sbin/dropbear -i -R $DROPBEAR_ARGS"
    );
    assert_eq!(sshkeys::dropbear_args(false), "-s");
    let watch = unit_keys(&read("systemd/svcos-ssh-keys.path"));
    assert_eq!(watch["PathChanged"], keys.display().to_string());
    let copy = read("systemd/svcos-ssh-keys.service");
    assert!(copy.contains(&format!("src={}", keys.display())), "{copy}");
    assert!(copy.contains("dst=/var/lib/svcos/ssh/root/authorized_keys"));
    // The copy's target directory and the host keys' directory exist, root-only.
    let tmpfiles = read("systemd/svcos.tmpfiles");
    for dir in [
        "/var/lib/svcos/ssh",
        "/var/lib/svcos/ssh/hostkeys",
        "/var/lib/svcos/ssh/root",
    ] {
        assert!(
            tmpfiles
                .lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>()[..]
                    .starts_with(&["d", dir, "0700", "root", "root"])),
            "{dir}"
        );
    }
    // The image links dropbear's paths there, installs dropbear and enables the units.
    let post = read("rootfs/board/svcos/post-build.sh");
    assert!(post.contains("ln -s /var/lib/svcos/ssh/hostkeys \"$TARGET_DIR/etc/dropbear\""));
    assert!(post.contains("ln -s /var/lib/svcos/ssh/root \"$TARGET_DIR/root/.ssh\""));
    let fragment = read("rootfs/configs/svcos.fragment");
    assert!(fragment.lines().any(|l| l == "BR2_PACKAGE_DROPBEAR=y"));
    for unit in SSH_UNITS {
        assert_eq!(
            std::fs::read(root().join("systemd").join(unit)).unwrap(),
            std::fs::read(in_overlay(&format!("/usr/lib/systemd/system/{unit}")))
                .unwrap_or_default(),
            "{unit} in the overlay equals systemd/{unit}"
        );
    }
    for (wants, unit) in [
        ("sockets.target.wants", "svcos-ssh.socket"),
        ("multi-user.target.wants", "svcos-ssh-keys.path"),
        ("multi-user.target.wants", "svcos-ssh-keys.service"),
    ] {
        let link = in_overlay(&format!("/etc/systemd/system/{wants}/{unit}"));
        assert_eq!(
            std::fs::read_link(&link).unwrap(),
            Path::new("/usr/lib/systemd/system").join(unit)
        );
    }
    let masked = in_overlay("/etc/systemd/system/dropbear.service");
    assert_eq!(std::fs::read_link(masked).unwrap(), Path::new("/dev/null"));
    // The shipped config keeps password logins off.
    let config = Config::load(&in_overlay(PROD_CONFIG)).unwrap();
    assert!(!config.network.ssh.password_login);
    assert!(config.network.mdns.enabled);
}

#[test]
fn ssh_units_pass_systemd_analyze_verify() {
    if !have("systemd-analyze") {
        eprintln!("SKIP: systemd-analyze is not installed");
        return;
    }
    // verify wants the executables to exist: dropbear is not installed here.
    let dir = tempfile::tempdir().unwrap();
    for unit in SSH_UNITS {
        let text = read(&format!("systemd/{unit}")).replace("/usr/sbin/dropbear", "/bin/true");
        std::fs::write(dir.path().join(unit), text).unwrap();
    }
    // A template is verified through an instance name.
    std::fs::copy(
        dir.path().join("svcos-ssh@.service"),
        dir.path().join("svcos-ssh@0.service"),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .args(
            [
                "svcos-ssh.socket",
                "svcos-ssh@0.service",
                "svcos-ssh-keys.path",
                "svcos-ssh-keys.service",
            ]
            .map(|u| dir.path().join(u)),
        )
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "systemd-analyze verify: {stderr}");
    assert!(
        !stderr.contains("svcos-ssh"),
        "warnings about the units: {stderr}"
    );
}

/// The LAN settings units (the watch and the install for networkd), as shipped in `systemd/`.
const NETWORK_UNITS: [&str; 2] = ["svcos-network.path", "svcos-network.service"];

#[test]
fn network_units_install_the_file_the_gateway_writes() {
    use svcos_common::networkd;
    use svcos_common::paths::Layout;
    let written = networkd::network_file_path(&Layout::production());
    let watch = unit_keys(&read("systemd/svcos-network.path"));
    assert_eq!(watch["PathChanged"], written.display().to_string());
    assert_eq!(watch["Unit"], "svcos-network.service");
    let install = read("systemd/svcos-network.service");
    assert!(
        install.contains(&format!("src={}", written.display())),
        "{install}"
    );
    assert!(install.contains(&format!("dst=/run/systemd/network/{}", networkd::FILE_NAME)));
    assert!(install.contains("networkctl reload"));
    let keys = unit_keys(&install);
    assert!(
        keys["Before"]
            .split_whitespace()
            .any(|u| u == "systemd-networkd.service")
    );
    // The first-boot default sorts after the owner's file, so the owner's wins for its link.
    let fallback = "/usr/lib/systemd/network/90-svcos-dhcp.network";
    assert!(
        std::fs::read_to_string(in_overlay(fallback))
            .unwrap()
            .contains("DHCP=ipv4")
    );
    assert!(networkd::FILE_NAME < "90-svcos-dhcp.network");
    for unit in NETWORK_UNITS {
        assert_eq!(
            std::fs::read(root().join("systemd").join(unit)).unwrap(),
            std::fs::read(in_overlay(&format!("/usr/lib/systemd/system/{unit}")))
                .unwrap_or_default(),
            "{unit} in the overlay equals systemd/{unit}"
        );
        let link = in_overlay(&format!(
            "/etc/systemd/system/multi-user.target.wants/{unit}"
        ));
        assert_eq!(
            std::fs::read_link(&link).unwrap(),
            Path::new("/usr/lib/systemd/system").join(unit)
        );
    }
    let fragment = read("rootfs/configs/svcos.fragment");
    for line in [
        "BR2_PACKAGE_SYSTEMD_NETWORKD=y",
        "BR2_PACKAGE_SYSTEMD_RESOLVED=y",
    ] {
        assert!(fragment.lines().any(|l| l == line), "{line}");
    }
    // The shipped config asks DHCP, and the file the gateway renders from it says so.
    let config = Config::load(&in_overlay(PROD_CONFIG)).unwrap();
    assert_eq!(config.network.ipv4, Default::default());
    assert!(networkd::render(&config).contains("DHCP=ipv4"));
}

#[test]
fn network_units_pass_systemd_analyze_verify() {
    if !have("systemd-analyze") {
        eprintln!("SKIP: systemd-analyze is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for unit in NETWORK_UNITS {
        std::fs::copy(root().join("systemd").join(unit), dir.path().join(unit)).unwrap();
    }
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .args(NETWORK_UNITS.map(|u| dir.path().join(u)))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "systemd-analyze verify: {stderr}");
    assert!(
        !stderr.contains("svcos-network"),
        "warnings about the units: {stderr}"
    );
}
