//! The cgminer API command table svcOS serves on TCP 4028: legacy-tcp dispatches by it and the
//! gateway's `/api/cgminer/catalog` lists it, so the two cannot drift apart.

/// One cgminer command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Command {
    /// The name a client sends.
    pub name: &'static str,
    /// Needs a client on the `W:` (write) list.
    pub privileged: bool,
    /// Allowed inside a `+` join.
    pub joinable: bool,
    /// svcOS carries it out. Commands cgminer has but svcOS does not offer stay in the table
    /// (privileged), so unprivileged clients get cgminer's refusal and privileged ones an
    /// honest "not supported".
    pub served: bool,
}

const fn cmd(name: &'static str, privileged: bool, joinable: bool, served: bool) -> Command {
    Command {
        name,
        privileged,
        joinable,
        served,
    }
}

/// Every command, in cgminer's order of its API documentation.
pub const COMMANDS: &[Command] = &[
    cmd("version", false, true, true),
    cmd("config", false, true, true),
    cmd("summary", false, true, true),
    cmd("pools", false, true, true),
    cmd("devs", false, true, true),
    cmd("edevs", false, true, true),
    cmd("devdetails", false, true, true),
    cmd("stats", false, true, true),
    cmd("estats", false, true, true),
    cmd("coin", false, true, true),
    cmd("lcd", false, true, true),
    cmd("fans", false, true, true),
    cmd("temps", false, true, true),
    cmd("check", false, false, true),
    cmd("privileged", true, false, true),
    cmd("switchpool", true, false, true),
    cmd("enablepool", true, false, true),
    cmd("disablepool", true, false, true),
    cmd("addpool", true, false, true),
    cmd("removepool", true, false, true),
    cmd("poolpriority", true, false, true),
    cmd("restart", true, false, true),
    cmd("ascset", true, false, true),
    cmd("ascenable", true, false, true),
    cmd("ascdisable", true, false, true),
    // Mining is supervised: stopping it goes through the REST API.
    cmd("quit", true, false, false),
    // Config is saved and debugged through the authenticated REST API only.
    cmd("save", true, false, false),
    cmd("setconfig", true, false, false),
    cmd("debug", true, false, false),
    cmd("zero", true, false, false),
    cmd("failover-only", true, false, false),
    cmd("poolquota", true, false, false),
    cmd("setpool", true, false, false),
    cmd("hotplug", true, false, false),
    cmd("lockstats", true, true, false),
];

/// The command named `name`, if cgminer has it.
pub fn lookup(name: &str) -> Option<&'static Command> {
    COMMANDS.iter().find(|c| c.name == name)
}

/// Identify a discovered miner from its `version` reply: (firmware family, firmware version,
/// API version, model, make). The gateway's fleet discovery uses it.
pub fn identify(
    version: &serde_json::Value,
) -> (
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
) {
    let rec = &version["VERSION"][0];
    let s = |k: &str| {
        rec.get(k).and_then(|v| {
            v.as_str()
                .map(str::to_string)
                .or_else(|| (!v.is_null()).then(|| v.to_string()))
        })
    };
    let (firmware, fw_version) = [
        ("svcOS", "svcOS"),
        ("BOSer", "Braiins OS"),
        ("BOSminer", "Braiins OS"),
        ("LUXminer", "LuxOS"),
        ("BMMiner", "bmminer (Bitmain stock)"),
        ("CGMiner", "cgminer"),
        ("sgminer", "sgminer"),
    ]
    .iter()
    .find_map(|(key, name)| s(key).map(|v| (name.to_string(), Some(v))))
    .unwrap_or_else(|| ("unknown cgminer-compatible".to_string(), None));
    let model = s("Type").or_else(|| s("Model")).filter(|m| !m.is_empty());
    let make = model.as_deref().and_then(|m| {
        let m = m.to_ascii_lowercase();
        [
            ("antminer", "Bitmain"),
            ("bitaxe", "Bitaxe"),
            ("whatsminer", "MicroBT"),
            ("avalon", "Canaan"),
            ("innosilicon", "Innosilicon"),
        ]
        .iter()
        .find(|(k, _)| m.contains(k))
        .map(|(_, v)| v.to_string())
    });
    (firmware, fw_version, s("API"), model, make)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_unserved_ones_are_privileged() {
        for (i, c) in COMMANDS.iter().enumerate() {
            assert!(COMMANDS[..i].iter().all(|o| o.name != c.name), "{c:?}");
            assert!(c.served || c.privileged, "{c:?}");
        }
        assert_eq!(lookup("summary").map(|c| c.privileged), Some(false));
        assert!(lookup("nonesuch").is_none());
    }

    #[test]
    fn identification() {
        let v = serde_json::json!({"VERSION": [{"svcOS": "0.1.0", "API": "3.1", "Type": "Antminer S9"}]});
        let (fw, ver, api, model, make) = identify(&v);
        assert_eq!(
            (fw.as_str(), ver.as_deref(), api.as_deref()),
            ("svcOS", Some("0.1.0"), Some("3.1"))
        );
        assert_eq!(
            (model.as_deref(), make.as_deref()),
            (Some("Antminer S9"), Some("Bitmain"))
        );
        let v = serde_json::json!({"VERSION": [{"BMMiner": "2.0.0", "API": "3.1", "Type": "Antminer S19j Pro"}]});
        assert_eq!(identify(&v).0, "bmminer (Bitmain stock)");
    }
}
