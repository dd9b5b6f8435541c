//! Firmware update and restore-to-stock.
//! Operations still marked `planned!` answer 501 with the envelope until their feature lands.

use crate::planned;
use crate::registry::Route;

/// This module's rows of the registry.
pub fn routes() -> Vec<Route> {
    vec![
        planned!(POST "/api/system/restore-to-stock", P, Identity, "restore to stock firmware"),
        planned!(POST "/api/system/restore-to-stock/preflight", P, Identity, "restore-to-stock preflight"),
        planned!(GET "/api/system/restore-to-stock/preflight-checks", P, Identity, "restore-to-stock preflight checks"),
        planned!(GET "/api/system/restore-to-stock/status", P, Identity, "restore-to-stock status"),
        planned!(GET "/api/system/update/status", P, Identity, "firmware update"),
        planned!(POST "/api/system/upgrade", P, Identity, "firmware upgrade"),
        planned!(GET "/api/system/upgrade/status", P, Identity, "firmware upgrade status"),
        planned!(POST "/api/v1/firmware/update", P, Identity, "firmware update"),
        planned!(GET "/api/v1/firmware/update/status", P, Identity, "firmware update status"),
        planned!(POST "/api/v1/system/upgrade", P, Identity, "firmware upgrade"),
        planned!(GET "/api/v1/system/upgrade/status", P, Identity, "firmware upgrade status"),
    ]
}
