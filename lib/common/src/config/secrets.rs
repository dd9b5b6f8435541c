//! Secrets in config answers: masked on the way out, put back where a client echoes the mask
//! (pool passwords and URL credentials, the donation pool URL's, MQTT, webhook and swarm secrets).

use serde_json::Value;

use super::{Config, PoolConfig};
use crate::redact::{SECRET_MASK, is_masked_url, mask_url_userinfo};

/// The config as JSON with secrets masked (pool passwords, credentials inside pool URLs, the
/// donation pool URL's, MQTT, webhook and swarm secrets).
pub fn masked(config: &Config) -> Value {
    let mut v = serde_json::to_value(config).unwrap_or(Value::Null);
    if let Some(pools) = v.get_mut("pools").and_then(Value::as_array_mut) {
        for p in pools {
            if let Some(pw) = p.get_mut("password") {
                *pw = Value::String(SECRET_MASK.into());
            }
            mask_url_member(p.get_mut("url"));
        }
    }
    mask_url_member(v.pointer_mut("/donation/pool_url"));
    mask_secrets(&mut v);
    v
}
pub fn mask_url_member(v: Option<&mut Value>) {
    if let Some(Value::String(url)) = v {
        let masked = mask_url_userinfo(url).into_owned();
        *url = masked;
    }
}
/// Put stored pool secrets back where a client echoed the mask: the password of the pool with
/// the same URL and user (else the same position), and a URL whose credentials were masked.
pub fn unmask_pools(pools: &mut [PoolConfig], old: &Config) {
    for (i, p) in pools.iter_mut().enumerate() {
        if is_masked_url(&p.url) {
            let shown = p.url.clone();
            let same = |o: &&PoolConfig| mask_url_userinfo(&o.url) == shown;
            let stored = old
                .pools
                .get(i)
                .filter(same)
                .or_else(|| old.pools.iter().find(same))
                .map(|o| o.url.clone());
            if let Some(url) = stored {
                p.url = url;
            }
        }
        if p.password == SECRET_MASK {
            p.password = old
                .pools
                .iter()
                .find(|o| o.url == p.url && o.user == p.user)
                .or_else(|| old.pools.get(i))
                .map(|o| o.password.clone())
                .unwrap_or_else(|| "x".into());
        }
    }
}
/// Every secret a client may echo masked: pools, donation URL, MQTT, webhooks.
pub fn restore_secrets(new: &mut Config, old: &Config) {
    unmask_pools(&mut new.pools, old);
    if is_masked_url(&new.donation.pool_url)
        && mask_url_userinfo(&old.donation.pool_url) == new.donation.pool_url
    {
        new.donation.pool_url = old.donation.pool_url.clone();
    }
    unmask_secrets(new, old);
}
/// Replace `mqtt.password`, `swarm.key` and `webhook.hooks[].secret` by the mask in a JSON config.
pub fn mask_secrets(v: &mut Value) {
    let mask = |s: &mut Value| {
        if s.as_str().is_some_and(|s| !s.is_empty()) {
            *s = Value::String(SECRET_MASK.into());
        }
    };
    for pointer in ["/mqtt/password", "/swarm/key"] {
        if let Some(secret) = v.pointer_mut(pointer) {
            mask(secret);
        }
    }
    if let Some(hooks) = v
        .pointer_mut("/webhook/hooks")
        .and_then(Value::as_array_mut)
    {
        for h in hooks {
            if let Some(s) = h.get_mut("secret") {
                mask(s);
            }
        }
    }
}
/// The stored secret for a hook: same URL first, else the same position.
pub fn stored_secret(old: &Config, url: &str, index: usize) -> String {
    let hooks = &old.webhook.hooks;
    hooks
        .iter()
        .find(|h| h.url == url)
        .or_else(|| hooks.get(index))
        .map(|h| h.secret.clone())
        .unwrap_or_default()
}
/// Put stored secrets back where a client echoed the mask.
pub fn unmask_secrets(new: &mut Config, old: &Config) {
    if new.mqtt.password == SECRET_MASK {
        new.mqtt.password = old.mqtt.password.clone();
    }
    if new.swarm.key == SECRET_MASK {
        new.swarm.key = old.swarm.key.clone();
    }
    for (i, h) in new.webhook.hooks.iter_mut().enumerate() {
        if h.secret == SECRET_MASK {
            h.secret = stored_secret(old, &h.url, i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::WebhookHook;
    use super::*;

    #[test]
    fn masked_hides_pool_passwords() {
        let mut c = Config::default();
        c.pools.push(PoolConfig {
            url: "stratum+tcp://a:1".into(),
            user: "u".into(),
            password: "secret".into(),
            ..Default::default()
        });
        let v = masked(&c);
        assert_eq!(v["pools"][0]["password"], SECRET_MASK);
        let mut back: Config = serde_json::from_value(v).unwrap();
        unmask_pools(&mut back.pools, &c);
        assert_eq!(back.pools[0].password, "secret");
    }

    #[test]
    fn secrets_masked_and_restored() {
        let mut old = Config::default();
        old.mqtt.password = "pw".into();
        old.swarm.key = "swarm-room-key-0123".into();
        old.webhook.hooks = vec![WebhookHook {
            url: "http://10.0.0.1/a".into(),
            secret: "s1".into(),
            ..Default::default()
        }];
        let mut v = serde_json::to_value(&old).unwrap();
        mask_secrets(&mut v);
        assert_eq!(v["mqtt"]["password"], SECRET_MASK);
        assert_eq!(v["webhook"]["hooks"][0]["secret"], SECRET_MASK);
        assert_eq!(v["swarm"]["key"], SECRET_MASK);
        assert!(!v.to_string().contains("s1\""));
        assert!(!v.to_string().contains("swarm-room-key"));
        let mut back: Config = serde_json::from_value(v).unwrap();
        unmask_secrets(&mut back, &old);
        assert_eq!(back, old);
    }
}
