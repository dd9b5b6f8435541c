//! Hiding secrets wherever something is shown: one mask, one URL rule.
//!
//! A pool URL may carry credentials (`stratum+tcp://user:pass@host:3333`). Every surface that
//! shows a URL (the pool snapshot stratum-agent publishes, and through it `/api/status`,
//! `/metrics`, `/ws`, cgminer `pools`, MQTT; the config views of the gateway) passes it through
//! [`mask_url_userinfo`], so the password never leaves the config file except through the
//! explicit export.

use std::borrow::Cow;

/// What replaces a secret in every answer; sending it back on a write keeps the stored secret.
pub const SECRET_MASK: &str = "********";

/// `scheme://user:pass@host/…` → `scheme://user:********@host/…`; a URL without a password in
/// its userinfo is returned unchanged (borrowed). A userinfo without `:` is a bare secret for
/// some schemes, so it is masked whole.
pub fn mask_url_userinfo(url: &str) -> Cow<'_, str> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Cow::Borrowed(url);
    };
    // The authority ends at the first '/', '?' or '#'; userinfo is what precedes its last '@'.
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let Some(at) = authority.rfind('@') else {
        return Cow::Borrowed(url);
    };
    let userinfo = &authority[..at];
    let masked_userinfo = match userinfo.split_once(':') {
        Some((_, pass)) if pass == SECRET_MASK => return Cow::Borrowed(url),
        Some((user, _)) => format!("{user}:{SECRET_MASK}"),
        None if userinfo == SECRET_MASK => return Cow::Borrowed(url),
        None => SECRET_MASK.to_string(),
    };
    Cow::Owned(format!("{scheme}://{masked_userinfo}{}", &rest[at..]))
}

/// Whether a URL shows the mask where its password would be (a client echoing a masked URL).
pub fn is_masked_url(url: &str) -> bool {
    url.split_once("://").is_some_and(|(_, rest)| {
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        rest[..end].rfind('@').is_some_and(|at| {
            let userinfo = &rest[..at];
            userinfo == SECRET_MASK || userinfo.ends_with(&format!(":{SECRET_MASK}"))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_table() {
        let table = [
            (
                "stratum+tcp://pool.example:3333",
                "stratum+tcp://pool.example:3333",
            ),
            (
                "stratum+tcp://user:pass@pool.example:3333",
                "stratum+tcp://user:********@pool.example:3333",
            ),
            (
                "stratum+ssl://a:b:c@pool.example:443/x?y=1",
                "stratum+ssl://a:********@pool.example:443/x?y=1",
            ),
            (
                "stratum2+tcp://tok@pool.example:3336/9aXk",
                "stratum2+tcp://********@pool.example:3336/9aXk",
            ),
            (
                "stratum+tcp://u:p@ss@pool.example:3333",
                "stratum+tcp://u:********@pool.example:3333",
            ),
            // An '@' after the authority is not userinfo.
            (
                "stratum2+tcp://pool.example:3336/key@x",
                "stratum2+tcp://pool.example:3336/key@x",
            ),
            ("not a url", "not a url"),
            ("", ""),
        ];
        for (url, want) in table {
            assert_eq!(mask_url_userinfo(url), want, "{url}");
            let masked = mask_url_userinfo(url);
            assert_eq!(mask_url_userinfo(&masked), masked, "idempotent: {url}");
        }
        assert!(matches!(
            mask_url_userinfo("stratum+tcp://h:1"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn masked_urls_are_recognised() {
        assert!(is_masked_url("stratum+tcp://u:********@h:1"));
        assert!(is_masked_url("stratum+tcp://********@h:1"));
        assert!(!is_masked_url("stratum+tcp://u:p@h:1"));
        assert!(!is_masked_url("stratum+tcp://h:1"));
    }
}
