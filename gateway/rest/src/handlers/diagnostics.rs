//! Diagnostic runs, debug surfaces (Hacker mode; writes need confirm) and hardware inventory details.
//! Operations still marked `planned!` answer 501 with the envelope until their feature lands.

use crate::planned;
use crate::registry::Route;

/// This module's rows of the registry.
pub fn routes() -> Vec<Route> {
    vec![
        planned!(GET "/api/hardware/pic_info", P, Hardware, "PIC information"),
        planned!(GET "/api/hardware/psu_bypass_matrix", P, Hardware, "PSU bypass matrix"),
        planned!(GET "/api/hardware/psu_catalog", P, Hardware, "PSU catalog"),
        planned!(GET "/api/miner/pvt-table", U, Hardware, "PVT table"),
        planned!(POST "/api/debug/asic-command", P, Diagnostics, "raw ASIC commands"),
        planned!(GET "/api/debug/i2c", P, Diagnostics, "raw i2c access"),
        planned!(POST "/api/debug/i2c", P, Diagnostics, "raw i2c access"),
        planned!(GET "/api/debug/log", P, Diagnostics, "debug log"),
        planned!(POST "/api/debug/pid-params", P, Diagnostics, "fan PID parameters"),
        planned!(POST "/api/debug/psu/control", P, Diagnostics, "raw PSU control"),
        planned!(GET "/api/debug/registers", P, Diagnostics, "raw register access"),
        planned!(POST "/api/debug/registers", P, Diagnostics, "raw register access"),
        planned!(GET "/api/diagnostics/board-health/report", P, Diagnostics, "board health diagnostics"),
        planned!(GET "/api/diagnostics/board-health/result", P, Diagnostics, "board health diagnostics"),
        planned!(POST "/api/diagnostics/board-health/start", P, Diagnostics, "board health diagnostics"),
        planned!(GET "/api/diagnostics/board-health/status", P, Diagnostics, "board health diagnostics"),
        planned!(GET "/api/diagnostics/chip-health/report", P, Diagnostics, "chip health diagnostics"),
        planned!(GET "/api/diagnostics/chip-health/result", P, Diagnostics, "chip health diagnostics"),
        planned!(POST "/api/diagnostics/chip-health/start", P, Diagnostics, "chip health diagnostics"),
        planned!(GET "/api/diagnostics/chip-health/status", P, Diagnostics, "chip health diagnostics"),
        planned!(GET "/api/diagnostics/failure_modes", P, Diagnostics, "failure mode catalog"),
        planned!(POST "/api/diagnostics/hashreport/cancel", P, Diagnostics, "hash report runs"),
        planned!(GET "/api/diagnostics/hashreport/report", P, Diagnostics, "hash report runs"),
        planned!(GET "/api/diagnostics/hashreport/result", P, Diagnostics, "hash report runs"),
        planned!(POST "/api/diagnostics/hashreport/start", P, Diagnostics, "hash report runs"),
        planned!(GET "/api/diagnostics/hashreport/status", P, Diagnostics, "hash report runs"),
        planned!(GET "/api/diagnostics/logs/manifest", P, Diagnostics, "log manifest"),
        planned!(GET "/api/diagnostics/recovery_actions", P, Diagnostics, "recovery actions"),
        planned!(GET "/api/diagnostics/reports/recent", P, Diagnostics, "diagnostic reports"),
        planned!(GET "/api/diagnostics/state_machine", P, Diagnostics, "diagnostics state machine"),
        planned!(GET "/api/diagnostics/troubleshoot/fpga", P, Diagnostics, "FPGA troubleshooting"),
        planned!(GET "/api/diagnostics/troubleshoot/i2c-scan", P, Diagnostics, "i2c scan"),
        planned!(GET "/api/env/recipe", P, Other, "environment recipe"),
        planned!(GET "/api/log/backup", P, Other, "log backup"),
    ]
}
