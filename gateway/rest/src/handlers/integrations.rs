//! MQTT and webhook integrations.
//! Operations still marked `planned!` answer 501 with the envelope until their feature lands.

use crate::planned;
use crate::registry::Route;

/// This module's rows of the registry.
pub fn routes() -> Vec<Route> {
    vec![
        planned!(GET "/api/config/mqtt", P, Config, "MQTT"),
        planned!(POST "/api/config/mqtt", P, Config, "MQTT"),
        planned!(POST "/api/config/mqtt/test", P, Config, "MQTT"),
        planned!(GET "/api/config/webhook", P, Config, "webhooks"),
        planned!(POST "/api/config/webhook", P, Config, "webhooks"),
        planned!(POST "/api/config/webhook/test", P, Config, "webhooks"),
        planned!(GET "/api/mqtt/status", P, Integrations, "MQTT"),
    ]
}
