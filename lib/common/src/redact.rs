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

/// A URL cut around its authority (RFC 3986 §3.2): the one rule every reader of a pool URL
/// follows, so the host a connection dials, the password a login sends and the part a mask
/// hides can never disagree about where the credentials end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UrlParts<'a> {
    /// Before `://`.
    pub scheme: &'a str,
    /// Before the authority's last `@`; `None` without one.
    pub userinfo: Option<&'a str>,
    /// After that `@`: `host:port` (a bracketed IPv6 host keeps its brackets).
    pub host_port: &'a str,
    /// From the first `/`, `?` or `#` after `://` on (may be empty).
    pub tail: &'a str,
}

impl<'a> UrlParts<'a> {
    /// `None` for a string without `://`.
    pub fn split(url: &'a str) -> Option<Self> {
        let (scheme, rest) = url.split_once("://")?;
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        // An '@' may appear in a password, never in a host: the last one ends the userinfo.
        let (userinfo, host_port) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        Some(UrlParts {
            scheme,
            userinfo,
            host_port,
            tail,
        })
    }

    /// The password in the userinfo (after its first `:`), if any and not empty.
    pub fn password(&self) -> Option<&'a str> {
        self.userinfo?
            .split_once(':')
            .map(|(_, pw)| pw)
            .filter(|pw| !pw.is_empty())
    }
}

/// `scheme://user:pass@host/…` → `scheme://user:********@host/…`; a URL without a password in
/// its userinfo is returned unchanged (borrowed). A userinfo without `:` is a bare secret for
/// some schemes, so it is masked whole.
pub fn mask_url_userinfo(url: &str) -> Cow<'_, str> {
    let Some(parts) = UrlParts::split(url) else {
        return Cow::Borrowed(url);
    };
    let Some(userinfo) = parts.userinfo else {
        return Cow::Borrowed(url);
    };
    let masked_userinfo = match userinfo.split_once(':') {
        Some((_, pass)) if pass == SECRET_MASK => return Cow::Borrowed(url),
        Some((user, _)) => format!("{user}:{SECRET_MASK}"),
        None if userinfo == SECRET_MASK => return Cow::Borrowed(url),
        None => SECRET_MASK.to_string(),
    };
    Cow::Owned(format!(
        "{}://{masked_userinfo}@{}{}",
        parts.scheme, parts.host_port, parts.tail
    ))
}

/// Whether a URL shows the mask where its password would be (a client echoing a masked URL).
pub fn is_masked_url(url: &str) -> bool {
    UrlParts::split(url)
        .and_then(|p| p.userinfo)
        .is_some_and(|u| u == SECRET_MASK || u.ends_with(&format!(":{SECRET_MASK}")))
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
    fn authority_split_table() {
        let p = UrlParts::split("stratum+tcp://u:p@ss@[::1]:3333/k?x#y").unwrap();
        assert_eq!(
            p,
            UrlParts {
                scheme: "stratum+tcp",
                userinfo: Some("u:p@ss"),
                host_port: "[::1]:3333",
                tail: "/k?x#y",
            }
        );
        assert_eq!(p.password(), Some("p@ss"));
        let p = UrlParts::split("stratum2+tcp://h:1/key@x").unwrap();
        assert_eq!((p.userinfo, p.host_port, p.tail), (None, "h:1", "/key@x"));
        assert_eq!(p.password(), None);
        assert_eq!(
            UrlParts::split("stratum+tcp://tok@h:1").unwrap().password(),
            None
        );
        assert_eq!(
            UrlParts::split("stratum+tcp://u:@h:1").unwrap().password(),
            None
        );
        assert_eq!(UrlParts::split("h:1"), None);
    }

    #[test]
    fn masked_urls_are_recognised() {
        assert!(is_masked_url("stratum+tcp://u:********@h:1"));
        assert!(is_masked_url("stratum+tcp://********@h:1"));
        assert!(!is_masked_url("stratum+tcp://u:p@h:1"));
        assert!(!is_masked_url("stratum+tcp://h:1"));
    }
}
