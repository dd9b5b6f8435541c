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
}
