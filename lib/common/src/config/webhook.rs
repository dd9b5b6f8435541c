use serde::{Deserialize, Serialize};

use super::ConfigError;
use super::mqtt::is_valid_host;

/// Every event name the integrations emit (docs/API-SHAPES.md describes each payload).
pub const EVENT_NAMES: &[&str] = &[
    "miner.state_changed",
    "miner.sleep",
    "miner.wake",
    "miner.overheat",
    "miner.overheat_cleared",
    "miner.fault",
    "miner.fault_cleared",
    "chain.fault",
    "chain.recovered",
    "pool.switched",
    "pool.down",
    "pool.up",
    "service.restarted",
    "service.unreachable",
    "service.reachable",
    "test",
];

/// Most hooks a config may list.
pub const MAX_HOOKS: usize = 16;

/// `[webhook]`: signed HTTP POSTs of events to operator-configured receivers. Off by default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct WebhookConfig {
    /// Deliver at all. Default false.
    pub enabled: bool,
    /// Per-attempt deadline (connect, send, response head) in milliseconds. Default 5000,
    /// 500-60000.
    pub timeout_ms: u32,
    /// Attempts per event and hook, the first included; retries back off 1 s, 2 s, 4 s, ….
    /// Default 5, 1-10.
    pub max_attempts: u32,
    /// Events waiting per hook; when full the oldest is dropped (and counted). Default 64,
    /// 1-1024.
    pub queue_len: u32,
    /// The receivers.
    pub hooks: Vec<WebhookHook>,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        WebhookConfig {
            enabled: false,
            timeout_ms: 5000,
            max_attempts: 5,
            queue_len: 64,
            hooks: Vec::new(),
        }
    }
}

/// One receiver.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct WebhookHook {
    /// `http://host[:port]/path` on the operator's network (no TLS on this firmware).
    pub url: String,
    /// Deliver to this hook. Default true.
    pub enabled: bool,
    /// Event filter: names from [`EVENT_NAMES`], `group.*` or `*`; empty means every event.
    pub events: Vec<String>,
    /// HMAC-SHA256 key of the `X-Svcos-Signature` header; empty sends unsigned (never
    /// logged, masked in GET answers). Default empty.
    pub secret: String,
}

impl Default for WebhookHook {
    fn default() -> Self {
        WebhookHook {
            url: String::new(),
            enabled: true,
            events: Vec::new(),
            secret: String::new(),
        }
    }
}

// Hand-written so that a config printed with `{:?}` never shows the secret.
impl std::fmt::Debug for WebhookHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookHook")
            .field("url", &self.url)
            .field("enabled", &self.enabled)
            .field("events", &self.events)
            .field("secret_set", &!self.secret.is_empty())
            .finish()
    }
}

/// Whether an event filter entry is an event name, `group.*` or `*`.
pub fn is_valid_event_filter(filter: &str) -> bool {
    if filter == "*" || EVENT_NAMES.contains(&filter) {
        return true;
    }
    filter.strip_suffix(".*").is_some_and(|group| {
        EVENT_NAMES
            .iter()
            .any(|n| n.split('.').next() == Some(group) && n.contains('.'))
    })
}

/// Whether `event` passes a hook's filter (empty = every event).
pub fn event_matches(filters: &[String], event: &str) -> bool {
    filters.is_empty()
        || filters.iter().any(|f| {
            f == "*"
                || f == event
                || f.strip_suffix(".*")
                    .is_some_and(|g| event.strip_prefix(g).is_some_and(|r| r.starts_with('.')))
        })
}

/// Check a webhook URL: `http://` with a host and optional port (read by the `url` crate).
/// Returns what is wrong.
pub fn check_webhook_url(text: &str) -> Result<(), &'static str> {
    let url = match url::Url::parse(text) {
        Ok(url) => url,
        Err(url::ParseError::InvalidPort) => return Err("invalid port (1-65535)"),
        Err(url::ParseError::RelativeUrlWithoutBase) => return Err("must start with http://"),
        Err(_) => return Err("missing or invalid host"),
    };
    match url.scheme() {
        "http" => {}
        "https" => {
            return Err(
                "https is not supported: this firmware has no TLS client; use http:// on your own network",
            );
        }
        _ => return Err("must start with http://"),
    }
    if text.len() > 2048 || text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("at most 2048 characters, no spaces");
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("credentials in the URL are not supported; use the hook's secret");
    }
    let host_ok = match url.host() {
        Some(url::Host::Domain(name)) => is_valid_host(name),
        Some(url::Host::Ipv4(_) | url::Host::Ipv6(_)) => true,
        None => false,
    };
    if !host_ok {
        return Err("missing or invalid host");
    }
    if url.port() == Some(0) {
        return Err("invalid port (1-65535)");
    }
    if !text.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("only printable ASCII (percent-encode anything else)");
    }
    Ok(())
}

impl WebhookConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !(500..=60_000).contains(&self.timeout_ms) {
            return Err(ConfigError::invalid("webhook.timeout_ms", "500-60000 ms"));
        }
        if !(1..=10).contains(&self.max_attempts) {
            return Err(ConfigError::invalid("webhook.max_attempts", "1-10"));
        }
        if !(1..=1024).contains(&self.queue_len) {
            return Err(ConfigError::invalid("webhook.queue_len", "1-1024"));
        }
        if self.hooks.len() > MAX_HOOKS {
            return Err(ConfigError::invalid(
                "webhook.hooks",
                format!("at most {MAX_HOOKS} hooks"),
            ));
        }
        for (i, hook) in self.hooks.iter().enumerate() {
            check_webhook_url(&hook.url)
                .map_err(|m| ConfigError::invalid(format!("webhook.hooks[{i}].url"), m))?;
            if hook.secret.len() > 256 {
                return Err(ConfigError::invalid(
                    format!("webhook.hooks[{i}].secret"),
                    "at most 256 bytes",
                ));
            }
            for (j, f) in hook.events.iter().enumerate() {
                if !is_valid_event_filter(f) {
                    return Err(ConfigError::invalid(
                        format!("webhook.hooks[{i}].events[{j}]"),
                        format!(
                            "unknown event {f:?}; use one of {}, a group such as \"pool.*\", or \"*\"",
                            EVENT_NAMES.join(", ")
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        for ok in [
            "http://192.168.1.10:8123/api/webhook/abc",
            "http://ha.local/hook",
            "http://[::1]:9000/x?y=1",
            "http://127.0.0.1",
        ] {
            assert_eq!(check_webhook_url(ok), Ok(()), "{ok}");
        }
        for bad in [
            "https://x/",
            "ftp://x",
            "http://",
            "http://a b/",
            "http://h:0/",
            "http://h:99999/",
            "http://u:p@h/",
            "http://u@h/",
            "http://[::1/",
            "http://-h/",
            "192.168.1.1",
        ] {
            assert!(check_webhook_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn filters() {
        assert!(is_valid_event_filter("pool.*"));
        assert!(is_valid_event_filter("miner.sleep"));
        assert!(is_valid_event_filter("*"));
        assert!(!is_valid_event_filter("pools.*"));
        assert!(!is_valid_event_filter("miner.slep"));
        let f = vec!["pool.*".to_string(), "miner.wake".to_string()];
        assert!(event_matches(&f, "pool.switched"));
        assert!(event_matches(&f, "miner.wake"));
        assert!(!event_matches(&f, "miner.sleep"));
        assert!(event_matches(&[], "miner.sleep"));
    }

    #[test]
    fn rules_name_the_field() {
        let mut c = WebhookConfig {
            hooks: vec![WebhookHook {
                url: "http://10.0.0.2/x".into(),
                events: vec!["nope".into()],
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(
            c.validate().unwrap_err().field(),
            Some("webhook.hooks[0].events[0]")
        );
        c.hooks[0].events.clear();
        c.hooks[0].url = "https://x".into();
        assert_eq!(
            c.validate().unwrap_err().field(),
            Some("webhook.hooks[0].url")
        );
        c.hooks[0].url = "http://x".into();
        c.timeout_ms = 1;
        assert_eq!(
            c.validate().unwrap_err().field(),
            Some("webhook.timeout_ms")
        );
    }
}
