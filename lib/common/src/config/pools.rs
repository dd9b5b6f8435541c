use serde::{Deserialize, Serialize};

use super::ConfigError;

/// One `[[pools]]` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct PoolConfig {
    /// `stratum+tcp://host:port`, `stratum+ssl://host:port` or `stratum2+tcp://host:port/<pubkey>`.
    pub url: String,
    /// Worker name.
    pub user: String,
    /// Worker password (never logged). Default "x".
    pub password: String,
    /// Lower is preferred; ties keep list order. Default 0.
    pub priority: u32,
    /// Share of time in quota (split) mode; 0 = failover only. Default 0.
    pub quota: u32,
    /// Default true.
    pub enabled: bool,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            url: String::new(),
            user: String::new(),
            password: "x".into(),
            priority: 0,
            quota: 0,
            enabled: true,
        }
    }
}

impl PoolConfig {
    /// Validate with `prefix` (e.g. `pools[0]`) naming the entry in errors.
    pub fn validate(&self, prefix: &str) -> Result<(), ConfigError> {
        check_pool_url(&self.url)
            .map_err(|why| ConfigError::invalid(format!("{prefix}.url"), why))?;
        if self.user.is_empty()
            || self.user.len() > 256
            || self.user.chars().any(char::is_whitespace)
        {
            return Err(ConfigError::invalid(
                format!("{prefix}.user"),
                "1-256 characters without spaces",
            ));
        }
        if self.password.len() > 256 {
            return Err(ConfigError::invalid(
                format!("{prefix}.password"),
                "at most 256 characters",
            ));
        }
        if self.quota > 100 {
            return Err(ConfigError::invalid(format!("{prefix}.quota"), "0-100"));
        }
        Ok(())
    }
}

/// Longest accepted pool URL, in bytes. Real ones are under 100 (a Stratum V2 URL with its
/// authority key about 90); the cap keeps one bad write from growing the config file, every
/// `/metrics` scrape and the cgminer `pools` reply by the URL's size.
pub const MAX_POOL_URL_BYTES: usize = 512;

/// Check a pool URL's shape: a known scheme, an optional `userinfo@`, a host that is a DNS name
/// or an IP literal (IPv6 in brackets), a port 1-65535 and an optional path (the Stratum V2
/// authority key). The URL reaches the config file, TOML strings, Prometheus labels and the
/// cgminer text protocol (whose separators are `,`, `|` and `=`), so whitespace, control
/// characters, quotes and those separators are refused anywhere in it. The error says what to fix.
pub fn check_pool_url(url: &str) -> Result<(), String> {
    if url.len() > MAX_POOL_URL_BYTES {
        return Err(format!(
            "is {} bytes long; at most {MAX_POOL_URL_BYTES}",
            url.len()
        ));
    }
    if let Some(c) = url
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || matches!(c, '"' | ',' | '|' | '=' | '\\'))
    {
        return Err(format!(
            "contains {c:?}; spaces, control characters, quotes and , | = \\ are not allowed"
        ));
    }
    const SCHEMES: &str = "must start with stratum+tcp://, stratum+ssl:// or stratum2+tcp://";
    const SHAPE: &str = "needs host:port, e.g. stratum+tcp://pool.example:3333";
    let parts = crate::redact::UrlParts::parse(url).map_err(|e| match e {
        url::ParseError::RelativeUrlWithoutBase => SCHEMES.to_string(),
        url::ParseError::InvalidPort => format!(
            "port {:?} is not a number 1-65535",
            url.rsplit(':').next().unwrap_or_default()
        ),
        url::ParseError::InvalidIpv6Address => "host is not an IPv6 address".to_string(),
        url::ParseError::EmptyHost => SHAPE.to_string(),
        other => format!("is not a URL ({other})"),
    })?;
    if !matches!(
        parts.scheme.as_str(),
        "stratum+tcp" | "stratum+ssl" | "stratum2+tcp"
    ) {
        return Err(SCHEMES.into());
    }
    if parts.has_query_or_fragment {
        return Err(
            "has a query or fragment (? or #); a pool URL is host:port and, for \
                    stratum2+tcp, /authority-key"
                .into(),
        );
    }
    // Credentials in the URL are masked wherever it is shown (`redact::mask_url_userinfo`).
    let host = parts.host.as_str();
    let port = parts.port.ok_or(SHAPE)?;
    if host.is_empty() {
        return Err(SHAPE.into());
    }
    if port == 0 {
        return Err(format!("port {port:?} is not a number 1-65535"));
    }
    if let Some(v6) = host.strip_prefix('[') {
        let ok = v6
            .strip_suffix(']')
            .is_some_and(|a| a.parse::<std::net::Ipv6Addr>().is_ok());
        return if ok {
            Ok(())
        } else {
            Err(format!("host {host:?} is not an IPv6 address"))
        };
    }
    if host.parse::<std::net::Ipv4Addr>().is_ok() || is_dns_name(host) {
        Ok(())
    } else {
        Err(format!(
            "host {host:?} is not a DNS name (labels of letters, digits, - and _, each 1-63 \
             characters, 253 in all) or an IP address (IPv6 in brackets)"
        ))
    }
}

/// A DNS name: dot-separated labels of ASCII letters, digits, `-` (not at either end) and `_`
/// (found in LAN host names), each 1-63 bytes, at most 253 bytes in all; one trailing dot allowed.
fn is_dns_name(host: &str) -> bool {
    let name = host.strip_suffix('.').unwrap_or(host);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// `[stratum]`: pool-client behaviour. Times in seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct StratumConfig {
    /// Give up a connection attempt after this long. Default 5.
    pub connect_timeout_s: u32,
    /// A connected pool that sent no notify for this long counts as dead. Default 120.
    pub silent_timeout_s: u32,
    /// A higher-priority pool must be healthy this long before failback; also the minimum time
    /// between two switches. Default 300.
    pub failback_hysteresis_s: u32,
    /// Sent as mining.suggest_difficulty when > 0. Default 0.
    pub suggest_difficulty: f64,
    /// Ask the pool for version rolling (BIP 310). Default true.
    pub version_rolling: bool,
    /// Readiness gate for the native Stratum V2 stack. Default false.
    pub sv2_enabled: bool,
    /// Extra CA certificates (PEM file) trusted for `stratum+ssl://` pools besides the webpki
    /// roots; empty = none. Default empty.
    pub tls_ca_file: String,
    /// `[stratum.jd]`: Stratum V2 job declaration (behind `sv2_enabled`).
    pub jd: JdConfig,
}

/// `[stratum.jd]`: Stratum V2 job declaration. The miner takes block templates from a template
/// provider, declares them to the pool's job-declaration server and mines them on its SV2 pool
/// connection; while that fails it mines the pool's own templates.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct JdConfig {
    /// Declare jobs. Needs `[stratum].sv2_enabled` and a `stratum2+tcp://` pool. Default false.
    pub enabled: bool,
    /// The pool's job-declaration server, `stratum2+tcp://host:port/<authority key>`. Default
    /// empty.
    pub server: String,
    /// The template provider, `stratum2+tcp://host:port/<authority key>`. Default empty.
    pub template_provider: String,
}

impl JdConfig {
    /// Check the fields; `sv2_enabled` is the readiness gate job declaration sits behind.
    pub fn validate(&self, sv2_enabled: bool) -> Result<(), ConfigError> {
        for (field, url) in [
            ("stratum.jd.server", &self.server),
            ("stratum.jd.template_provider", &self.template_provider),
        ] {
            if url.is_empty() {
                if self.enabled {
                    return Err(ConfigError::invalid(
                        field,
                        "needed when job declaration is enabled",
                    ));
                }
                continue;
            }
            check_pool_url(url).map_err(|e| ConfigError::invalid(field, e))?;
            let key = url
                .strip_prefix("stratum2+tcp://")
                .and_then(|rest| rest.split_once('/'))
                .map(|(_, key)| key)
                .unwrap_or_default();
            if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphanumeric()) {
                return Err(ConfigError::invalid(
                    field,
                    "must be stratum2+tcp://host:port/<base58 authority key>",
                ));
            }
        }
        if self.enabled && !sv2_enabled {
            return Err(ConfigError::invalid(
                "stratum.jd.enabled",
                "needs stratum.sv2_enabled = true (job declaration is Stratum V2)",
            ));
        }
        Ok(())
    }
}

impl Default for StratumConfig {
    fn default() -> Self {
        StratumConfig {
            connect_timeout_s: 5,
            silent_timeout_s: 120,
            failback_hysteresis_s: 300,
            suggest_difficulty: 0.0,
            version_rolling: true,
            sv2_enabled: false,
            tls_ca_file: String::new(),
            jd: JdConfig::default(),
        }
    }
}

impl StratumConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=120).contains(&self.connect_timeout_s) {
            return Err(ConfigError::invalid("stratum.connect_timeout_s", "1-120 s"));
        }
        if !(1..=3600).contains(&self.silent_timeout_s) {
            return Err(ConfigError::invalid("stratum.silent_timeout_s", "1-3600 s"));
        }
        if self.failback_hysteresis_s > 86_400 {
            return Err(ConfigError::invalid(
                "stratum.failback_hysteresis_s",
                "0-86400 s",
            ));
        }
        if self.suggest_difficulty < 0.0 {
            return Err(ConfigError::invalid(
                "stratum.suggest_difficulty",
                "must be >= 0",
            ));
        }
        self.jd.validate(self.sv2_enabled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(url: &str) -> PoolConfig {
        PoolConfig {
            url: url.into(),
            user: "worker".into(),
            ..PoolConfig::default()
        }
    }

    #[test]
    fn job_declaration_needs_the_sv2_gate_and_keyed_stratum2_urls() {
        const URL: &str =
            "stratum2+tcp://10.0.0.2:34254/9bDuixKmZqAJnrmP746n8zU1wyAQRrus7th9dxnkPg6RzQvCnan";
        let on = JdConfig {
            enabled: true,
            server: URL.into(),
            template_provider: URL.into(),
        };
        assert!(on.validate(true).is_ok());
        let field = |r: Result<(), ConfigError>| match r {
            Err(ConfigError::Invalid { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field(on.validate(false)), "stratum.jd.enabled");
        for (server, tp, bad) in [
            ("", URL, "stratum.jd.server"),
            (URL, "", "stratum.jd.template_provider"),
            ("stratum2+tcp://10.0.0.2:34254", URL, "stratum.jd.server"),
            (
                URL,
                "stratum+tcp://10.0.0.2:3333/key",
                "stratum.jd.template_provider",
            ),
            (
                "stratum2+tcp://10.0.0.2:34254/a b",
                URL,
                "stratum.jd.server",
            ),
        ] {
            let c = JdConfig {
                server: server.into(),
                template_provider: tp.into(),
                ..on.clone()
            };
            assert_eq!(field(c.validate(true)), bad, "{server} {tp}");
        }
        // Off, empty is fine; off with a malformed URL is still refused (it would be saved).
        assert!(JdConfig::default().validate(false).is_ok());
        let off = JdConfig {
            server: "nonsense".into(),
            ..JdConfig::default()
        };
        assert_eq!(field(off.validate(false)), "stratum.jd.server");
    }

    #[test]
    fn valid_urls_are_accepted() {
        for url in [
            "stratum+tcp://pool.example:3333",
            "stratum+tcp://pool.example.:3333",
            "stratum+ssl://eu-1.pool_x.example.com:443",
            "stratum+tcp://192.168.1.10:3333",
            "stratum+tcp://[::1]:3333",
            "stratum+tcp://[2001:db8::7]:65535",
            "stratum+tcp://localhost:1",
            "stratum2+tcp://p:34254/9bDuixKmZqAJnrmP746n8zU1wyAQRrus7th9dxnkPg6RzQvCnan",
            "stratum+tcp://user:secret@pool.example:3333",
            "stratum+tcp://pool.example:3333/",
        ] {
            pool(url)
                .validate("pools[0]")
                .unwrap_or_else(|e| panic!("{url}: {e}"));
        }
        let longest = format!(
            "stratum+tcp://{}.example:3333",
            ["a".repeat(63), "b".repeat(63), "c".repeat(63)].join(".")
        );
        pool(&longest).validate("pools[0]").unwrap();
    }

    #[test]
    fn bad_urls_are_refused_naming_the_field() {
        let huge = format!("stratum+tcp://{}:3333", "a".repeat(100_000));
        let long_but_dns = format!(
            "stratum+tcp://{}.example:3333/{}",
            "a".repeat(60),
            "k".repeat(460)
        );
        for (url, why) in [
            (huge.as_str(), "at most 512"),
            (long_but_dns.as_str(), "at most 512"),
            ("stratum+tcp://pool\".example:3333", "contains '\"'"),
            ("stratum+tcp://pool\nexample:3333", "contains '\\n'"),
            ("stratum+tcp://pool example:3333", "contains ' '"),
            ("stratum+tcp://pool,x:3333", "contains ','"),
            ("stratum+tcp://pool|x:3333", "contains '|'"),
            ("stratum+tcp://pool=x:3333", "contains '='"),
            ("stratum+tcp://pool.example", "needs host:port"),
            ("stratum+tcp://:3333", "needs host:port"),
            ("stratum+tcp://pool.example:0", "not a number 1-65535"),
            ("stratum+tcp://pool.example:65536", "not a number 1-65535"),
            ("stratum+tcp://pool..example:3333", "not a DNS name"),
            ("stratum+tcp://-pool.example:3333", "not a DNS name"),
            ("stratum+tcp://pool!.example:3333", "not a DNS name"),
            ("stratum+tcp://pöol.example:3333", "not a DNS name"),
            ("stratum+tcp://[::g]:3333", "not an IPv6 address"),
            ("http://pool.example:3333", "must start with"),
            ("stratum+tcp://pool.example:3333?x", "query or fragment"),
            ("stratum+tcp://pool.example:3333#f", "query or fragment"),
        ] {
            let err = pool(url).validate("pools[2]").expect_err(url);
            assert_eq!(err.field(), Some("pools[2].url"), "{url}: {err}");
            assert!(err.to_string().contains(why), "{url}: {err}");
        }
        let label = format!("stratum+tcp://{}.example:3333", "a".repeat(64));
        assert!(pool(&label).validate("p").is_err());
    }

    #[test]
    fn a_config_file_with_valid_pools_still_loads() {
        let text = "[[pools]]\nurl = \"stratum+tcp://user:pw@pool.example:3333\"\nuser = \"w\"\n\
                    [[pools]]\nurl = \"stratum2+tcp://10.0.0.2:34254/9bDuixKmZqAJnrmP746n8zU1wyAQRrus7th9dxnkPg6RzQvCnan\"\nuser = \"w\"\n";
        let config = super::super::Config::from_toml_str(text, std::path::Path::new("c.toml"))
            .expect("valid pools load");
        assert_eq!(config.pools.len(), 2);
    }
}
