//! Static checks of the A/B layout the image declares: RAUC's system.conf (loaded by the real
//! `rauc` when installed), the U-Boot boot-count script, the genimage partition layout, fstab
//! and the Buildroot fragment, against the constants the updater and the sim use.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use svcos_common::config::Config;
use svcos_common::paths::{Layout, PROD_STATE_DIR};
use svcos_supervisor::update::simslots::{BOOT_ATTEMPTS, BOOTNAMES, slot_name};
use svcos_supervisor::update::{compatible, updater::Platform};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

const SYSTEM_CONF: &str = "rootfs/board/svcos/rootfs-overlay/etc/rauc/system.conf";

/// `[section]` → key → value of an INI file (RAUC's GKeyFile format).
fn ini(text: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut out: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut section = String::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_string();
            out.entry(section.clone()).or_default();
        } else if let Some((k, v)) = line.split_once('=') {
            out.entry(section.clone())
                .or_default()
                .insert(k.trim().to_string(), v.trim().to_string());
        } else {
            panic!("not an INI line: {line:?}");
        }
    }
    out
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

#[test]
fn system_conf_declares_two_root_slots_and_the_paths_the_updater_uses() {
    let conf = ini(&read(SYSTEM_CONF));
    let system = &conf["system"];
    assert_eq!(system["bootloader"], "uboot");
    // The shipped config's board decides the model string bundles must carry.
    let shipped =
        Config::load(&root().join("rootfs/board/svcos/rootfs-overlay/etc/svcos/config.toml"))
            .unwrap();
    assert_eq!(system["compatible"], compatible(&shipped, false));
    assert!(
        system["data-directory"].starts_with(PROD_STATE_DIR),
        "RAUC's records live on the data partition"
    );
    // The keyring RAUC checks is the one the updater pre-verifies with.
    let platform = Platform::new(&Layout::production(), None);
    assert_eq!(Path::new(&conf["keyring"]["path"]), platform.keyring);
    let mut devices = Vec::new();
    for (n, bootname) in BOOTNAMES.iter().enumerate() {
        let section = format!("slot.{}", slot_name(bootname));
        assert_eq!(section, format!("slot.rootfs.{n}"));
        let slot = conf
            .get(&section)
            .unwrap_or_else(|| panic!("no [{section}]"));
        assert_eq!(slot["bootname"], *bootname);
        assert_eq!(slot["type"], "ext4");
        devices.push(slot["device"].clone());
    }
    assert_ne!(devices[0], devices[1], "two distinct root partitions");
    // The partitions follow the genimage order: p1 boot, p2 A, p3 B, p4 data.
    assert_eq!(devices, ["/dev/mmcblk0p2", "/dev/mmcblk0p3"]);
}

#[test]
fn real_rauc_loads_the_system_conf() {
    if !have("rauc") || !have("openssl") || !have("mksquashfs") {
        eprintln!("SKIP: rauc, openssl or mksquashfs not installed");
        return;
    }
    // `rauc info` loads and validates the system config before it reads the bundle.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ok = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "1", "-subj", "/CN=static test"])
        .arg("-keyout")
        .arg(d.join("key.pem"))
        .arg("-out")
        .arg(d.join("cert.pem"))
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let content = d.join("content");
    std::fs::create_dir(&content).unwrap();
    std::fs::write(content.join("rootfs.ext4"), vec![7u8; 8192]).unwrap();
    std::fs::write(
        content.join("manifest.raucm"),
        "[update]\ncompatible=svcos-s9\nversion=1.0.0\n\n[image.rootfs]\nfilename=rootfs.ext4\n",
    )
    .unwrap();
    let bundle = d.join("b.raucb");
    let out = Command::new("rauc")
        .arg("bundle")
        .arg(format!("--cert={}", d.join("cert.pem").display()))
        .arg(format!("--key={}", d.join("key.pem").display()))
        .arg(&content)
        .arg(&bundle)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let info = |conf: &Path| {
        Command::new("rauc")
            .arg(format!("--conf={}", conf.display()))
            .arg(format!("--keyring={}", d.join("cert.pem").display()))
            .arg("info")
            .arg(&bundle)
            .output()
            .unwrap()
    };
    let out = info(&root().join(SYSTEM_CONF));
    assert!(
        out.status.success(),
        "rauc rejects system.conf: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // And the check can fail: a broken copy is refused.
    let broken = d.join("broken.conf");
    std::fs::write(
        &broken,
        read(SYSTEM_CONF).replace("bootloader=uboot", "bootloader=floppy"),
    )
    .unwrap();
    assert!(!info(&broken).status.success());
}

#[test]
fn boot_script_counts_attempts_like_the_sim() {
    let script = read("rootfs/board/svcos/boot.cmd");
    for bootname in BOOTNAMES {
        assert!(script.contains(&format!("BOOT_{bootname}_LEFT")));
        assert!(
            script.contains(&format!("setenv BOOT_{bootname}_LEFT {BOOT_ATTEMPTS}")),
            "slot {bootname} gets {BOOT_ATTEMPTS} attempts, as in the sim"
        );
        // An attempt is used up before the kernel starts.
        assert!(script.contains(&format!(
            "setexpr BOOT_{bootname}_LEFT ${{BOOT_{bootname}_LEFT}} - 1"
        )));
    }
    assert!(script.contains("BOOT_ORDER"));
    assert!(script.contains("saveenv"));
    // fw_env.config points the env tools RAUC uses at the offset genimage reserves.
    let env = read("rootfs/board/svcos/rootfs-overlay/etc/fw_env.config");
    let genimage = read("rootfs/board/svcos/genimage.cfg");
    let offset = env
        .lines()
        .find(|l| l.starts_with("/dev/"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap();
    assert!(genimage.contains(&format!("offset = {offset}")), "{offset}");
}

#[test]
fn genimage_and_fstab_give_two_slots_and_a_data_partition() {
    let genimage = read("rootfs/board/svcos/genimage.cfg");
    let partitions: Vec<&str> = genimage
        .lines()
        .map(str::trim)
        .filter_map(|l| l.strip_prefix("partition "))
        .filter_map(|l| l.strip_suffix(" {"))
        .collect();
    assert_eq!(
        partitions,
        ["u-boot-env", "boot", "rootfs-a", "rootfs-b", "data"]
    );
    assert_eq!(genimage.matches("image = \"rootfs.ext4\"").count(), 2);
    // The data partition (p4: the env is not in the table) is the state directory.
    let fstab = read("rootfs/board/svcos/rootfs-overlay/etc/fstab");
    let data = fstab
        .lines()
        .find(|l| l.starts_with("/dev/mmcblk0p4"))
        .expect("data partition in fstab");
    assert_eq!(data.split_whitespace().nth(1), Some(PROD_STATE_DIR));
    let root_line = fstab.lines().find(|l| l.starts_with("/dev/root")).unwrap();
    assert!(
        root_line.contains("ro,"),
        "root slots are mounted read-only"
    );
}

#[test]
fn buildroot_fragment_enables_rauc_and_the_image_scripts() {
    let fragment = read("rootfs/configs/svcos.fragment");
    for line in [
        "BR2_PACKAGE_RAUC=y",
        "BR2_PACKAGE_RAUC_DBUS=y",
        "BR2_PACKAGE_SQUASHFS=y",
        "BR2_PACKAGE_UBOOT_TOOLS_FWPRINTENV=y",
        "BR2_TARGET_ROOTFS_EXT2_4=y",
        "BR2_PACKAGE_HOST_GENIMAGE=y",
        "BR2_PACKAGE_HOST_RAUC=y",
        "BR2_ROOTFS_POST_BUILD_SCRIPT=\"$(BR2_EXTERNAL_SVCOS_PATH)/board/svcos/post-build.sh\"",
        "BR2_ROOTFS_POST_IMAGE_SCRIPT=\"$(BR2_EXTERNAL_SVCOS_PATH)/board/svcos/post-image.sh\"",
    ] {
        assert!(fragment.lines().any(|l| l == line), "missing {line}");
    }
    for script in ["post-build.sh", "post-image.sh"] {
        let path = root().join("rootfs/board/svcos").join(script);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert!(mode & 0o111 != 0, "{script} is executable");
        if have("sh") {
            let ok = Command::new("sh")
                .arg("-n")
                .arg(&path)
                .status()
                .unwrap()
                .success();
            assert!(ok, "{script} parses");
        }
    }
    let post_build = read("rootfs/board/svcos/post-build.sh");
    assert!(post_build.contains("/etc/rauc/keyring.pem"));
}
