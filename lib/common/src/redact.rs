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

/// A URL read by the `url` crate (WHATWG rules) and cut around its authority: the one reader
/// of a pool URL, so the host a connection dials, the password a login sends and the part a mask
/// hides can never disagree about where the credentials end (the last `@` of the authority).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlParts {
    /// The scheme, lower case (`stratum+tcp`).
    pub scheme: String,
    /// The user name of the userinfo, percent-decoded (empty without one).
    pub username: String,
    /// The password of the userinfo, percent-decoded; `None` when absent or empty.
    pub password: Option<String>,
    /// The host as written (a bracketed IPv6 host keeps its brackets); empty without one.
    pub host: String,
    /// The port, when one is written.
    pub port: Option<u16>,
    /// The path (the Stratum V2 authority key as `/key`; may be empty).
    pub path: String,
    /// Whether a query (`?`) or fragment (`#`) follows the path.
    pub has_query_or_fragment: bool,
}

/// Why [`UrlParts::parse`] refused a URL (the `url` crate's reason).
pub type UrlError = url::ParseError;

fn decode(part: &str) -> String {
    percent_encoding::percent_decode_str(part)
        .decode_utf8_lossy()
        .into_owned()
}

impl UrlParts {
    /// Read `scheme://[user[:password]@]host[:port][/path]`.
    pub fn parse(text: &str) -> Result<Self, UrlError> {
        let url = url::Url::parse(text)?;
        Ok(UrlParts {
            scheme: url.scheme().to_string(),
            username: decode(url.username()),
            password: url.password().map(decode).filter(|p| !p.is_empty()),
            host: url.host_str().unwrap_or_default().to_string(),
            port: url.port(),
            path: url.path().to_string(),
            has_query_or_fragment: url.query().is_some() || url.fragment().is_some(),
        })
    }
}

/// `scheme://user:pass@host/…` → `scheme://user:********@host/…`; a URL without a password in
/// its userinfo is returned unchanged (borrowed). A userinfo without `:` is a bare secret for
/// some schemes, so it is masked whole. A string that is not a URL but has an `@` is masked
/// whole: whatever it is, it may hold a secret.
pub fn mask_url_userinfo(text: &str) -> Cow<'_, str> {
    let Ok(mut url) = url::Url::parse(text) else {
        return if text.contains('@') {
            Cow::Borrowed(SECRET_MASK)
        } else {
            Cow::Borrowed(text)
        };
    };
    if (url.username().is_empty() && url.password().is_none()) || is_masked(&url) {
        return Cow::Borrowed(text);
    }
    // Setting a userinfo fails only for URLs without a host, which have no userinfo either.
    let masked = match url.password() {
        Some(_) => url.set_password(Some(SECRET_MASK)),
        None => url.set_username(SECRET_MASK),
    };
    match masked {
        Ok(()) => Cow::Owned(url.into()),
        Err(()) => Cow::Borrowed(SECRET_MASK),
    }
}

fn is_masked(url: &url::Url) -> bool {
    match url.password() {
        Some(p) => p == SECRET_MASK,
        None => url.username() == SECRET_MASK,
    }
}

/// Whether a URL shows the mask where its password would be (a client echoing a masked URL).
pub fn is_masked_url(text: &str) -> bool {
    url::Url::parse(text).is_ok_and(|u| is_masked(&u))
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
            // Not a URL (the port is out of range) but maybe a secret: masked whole.
            ("stratum+tcp://u:pw@h:99999", "********"),
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
        let p = UrlParts::parse("stratum+tcp://u:p@ss@[::1]:3333/k?x#y").unwrap();
        assert_eq!(
            p,
            UrlParts {
                scheme: "stratum+tcp".into(),
                username: "u".into(),
                password: Some("p@ss".into()),
                host: "[::1]".into(),
                port: Some(3333),
                path: "/k".into(),
                has_query_or_fragment: true,
            }
        );
        let p = UrlParts::parse("stratum2+tcp://h:1/key@x").unwrap();
        assert_eq!((p.username.as_str(), p.host.as_str()), ("", "h"));
        assert_eq!((p.path.as_str(), p.password), ("/key@x", None));
        assert_eq!(
            UrlParts::parse("stratum+tcp://tok@h:1").unwrap().password,
            None
        );
        assert_eq!(
            UrlParts::parse("stratum+tcp://u:@h:1").unwrap().password,
            None
        );
        let p = UrlParts::parse("stratum+tcp://Pool.Example:3333").unwrap();
        assert_eq!((p.host.as_str(), p.path.as_str()), ("Pool.Example", ""));
        // `h:1` is scheme `h` with path `1`: no host, which every reader then refuses.
        assert_eq!(UrlParts::parse("h:1").unwrap().host, "");
        assert!(UrlParts::parse("pool.example").is_err());
        assert!(UrlParts::parse("stratum+tcp://h:99999").is_err());
    }

    #[test]
    fn masked_urls_are_recognised() {
        assert!(is_masked_url("stratum+tcp://u:********@h:1"));
        assert!(is_masked_url("stratum+tcp://********@h:1"));
        assert!(!is_masked_url("stratum+tcp://u:p@h:1"));
        assert!(!is_masked_url("stratum+tcp://h:1"));
    }
}
