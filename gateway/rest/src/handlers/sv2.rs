//! Stratum V2 job declaration (owned with the SV2 client in stratum-agent).
//! Operations still marked `planned!` answer 501 with the envelope until their feature lands.

use crate::routing::Route;
use crate::{AppState, planned};

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        planned!(POST "/api/jd/config", U, Pools, "Stratum V2 job declaration"),
        planned!(GET "/api/jd/status", U, Pools, "Stratum V2 job declaration"),
        planned!(POST "/api/jd/test-connection", U, Pools, "Stratum V2 job declaration"),
    ]
}
