//! Query-string parsing against a route's parameter table (pure, no I/O).
//!
//! The result is a normalized parameter map (defaults applied, keys sorted) whose string form
//! is the response-cache key, so `?per_page=100&page=1` and `?page=1` share one cached body.

use std::collections::BTreeMap;

use crate::registry::{Param, ParamType};

/// A parsed parameter value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum ParamValue {
    /// Text (slug, enum value, free text).
    Text(String),
    /// Integer.
    Int(i64),
}

impl ParamValue {
    /// The text, if this is text.
    pub fn text(&self) -> Option<&str> {
        match self {
            ParamValue::Text(s) => Some(s),
            ParamValue::Int(_) => None,
        }
    }

    /// The integer, if this is one.
    pub fn int(&self) -> Option<i64> {
        match self {
            ParamValue::Int(n) => Some(*n),
            ParamValue::Text(_) => None,
        }
    }
}

/// Normalized parameters of one request.
pub type Params = BTreeMap<&'static str, ParamValue>;

/// Why a query was refused: the parameter and a sentence about what is allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryError {
    /// The offending parameter.
    pub parameter: String,
    /// What is wrong and what is allowed.
    pub message: String,
}

fn err(parameter: &str, message: impl Into<String>) -> QueryError {
    QueryError {
        parameter: parameter.to_string(),
        message: message.into(),
    }
}

/// Whether every `%` of a raw query is followed by two hex digits. The decoder
/// (`form_urlencoded`, the url crate's) keeps a broken escape as literal text, which would turn
/// a client's mistake into a silent filter on the text `%ZZ`.
fn escapes_are_whole(raw: &str) -> bool {
    let b = raw.as_bytes();
    b.iter().enumerate().all(|(i, c)| {
        *c != b'%'
            || b.get(i + 1..i + 3)
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
    })
}

/// Check one value against its declared type.
pub fn parse_value(p: &Param, raw: &str) -> Result<ParamValue, QueryError> {
    match &p.ty {
        ParamType::Int { min, max, .. } => {
            let n: i64 = raw.parse().map_err(|_| {
                err(
                    p.name,
                    format!("{} must be an integer from {min} to {max}", p.name),
                )
            })?;
            if n < *min || n > *max {
                return Err(err(
                    p.name,
                    format!("{} must be from {min} to {max}, got {n}", p.name),
                ));
            }
            Ok(ParamValue::Int(n))
        }
        ParamType::Enum(values) => {
            if values.contains(&raw) {
                Ok(ParamValue::Text(raw.to_string()))
            } else {
                Err(err(
                    p.name,
                    format!("{} must be one of {}", p.name, values.join(", ")),
                ))
            }
        }
        ParamType::Slug => {
            let ok = !raw.is_empty()
                && raw.len() <= 64
                && raw
                    .bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-');
            if ok {
                Ok(ParamValue::Text(raw.to_string()))
            } else {
                Err(err(
                    p.name,
                    format!(
                        "{} must be a slug: 1-64 characters of a-z, 0-9 and '-'",
                        p.name
                    ),
                ))
            }
        }
        ParamType::Key => {
            let b = raw.as_bytes();
            let ok = !b.is_empty()
                && b.len() <= 64
                && b[0].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'-');
            if ok {
                Ok(ParamValue::Text(raw.to_string()))
            } else {
                Err(err(
                    p.name,
                    format!(
                        "{} must be 1-64 characters of A-Z, a-z, 0-9, '_' and '-'",
                        p.name
                    ),
                ))
            }
        }
        ParamType::Text { max_len } => {
            let n = raw.chars().count();
            if n == 0 || n > *max_len {
                return Err(err(
                    p.name,
                    format!("{} must be 1 to {max_len} characters", p.name),
                ));
            }
            if raw.chars().any(char::is_control) {
                return Err(err(
                    p.name,
                    format!("{} must not contain control characters", p.name),
                ));
            }
            Ok(ParamValue::Text(raw.to_string()))
        }
    }
}

/// Parse a raw query string for a route with `params` (query parameters only).
pub fn parse_query(params: &[Param], raw: Option<&str>) -> Result<Params, QueryError> {
    let mut out = Params::new();
    let raw = raw.unwrap_or("");
    for (key, value) in form_urlencoded::parse(raw.as_bytes()) {
        // Bytes that are not UTF-8 decode to U+FFFD; refuse them rather than filter on it.
        if key.contains('\u{FFFD}') {
            return Err(err(&key, "parameter name is not valid UTF-8"));
        }
        let Some(p) = params.iter().find(|p| p.name == key && !p.in_path) else {
            let known: Vec<&str> = params
                .iter()
                .filter(|p| !p.in_path)
                .map(|p| p.name)
                .collect();
            let allowed = if known.is_empty() {
                "this route takes no query parameters".to_string()
            } else {
                format!("known parameters: {}", known.join(", "))
            };
            return Err(err(&key, format!("unknown parameter {key:?}; {allowed}")));
        };
        if value.contains('\u{FFFD}') {
            return Err(err(p.name, format!("{} is not valid UTF-8", p.name)));
        }
        if out.contains_key(p.name) {
            return Err(err(p.name, format!("{} is given more than once", p.name)));
        }
        out.insert(p.name, parse_value(p, &value)?);
    }
    if !escapes_are_whole(raw) {
        // Name the parameter whose text holds the broken escape.
        let bad = raw
            .split('&')
            .find(|pair| !escapes_are_whole(pair))
            .unwrap_or(raw);
        let name = bad.split_once('=').map_or(bad, |(k, _)| k);
        return Err(err(
            name,
            format!("{name}: a '%' escape needs two hex digits"),
        ));
    }
    for p in params.iter().filter(|p| !p.in_path) {
        if let ParamType::Int {
            default: Some(d), ..
        } = p.ty
        {
            out.entry(p.name).or_insert(ParamValue::Int(d));
        }
    }
    Ok(out)
}

/// The cache key of a route plus normalized parameters.
pub fn cache_key(route: &str, params: &Params) -> String {
    let mut key = String::from(route);
    for (i, (k, v)) in params.iter().enumerate() {
        key.push(if i == 0 { '?' } else { '&' });
        key.push_str(k);
        key.push('=');
        match v {
            ParamValue::Text(s) => {
                // Escape the separators so distinct values never share a key.
                for c in s.chars() {
                    match c {
                        '%' => key.push_str("%25"),
                        '&' => key.push_str("%26"),
                        '=' => key.push_str("%3D"),
                        c => key.push(c),
                    }
                }
            }
            ParamValue::Int(n) => key.push_str(&n.to_string()),
        }
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARAMS: &[Param] = &[
        Param::query("condition", "", ParamType::Enum(&["new", "refurbished"])),
        Param::query("manufacturer", "", ParamType::Text { max_len: 64 }),
        Param::query("model", "", ParamType::Slug),
        Param::query(
            "page",
            "",
            ParamType::Int {
                min: 1,
                max: 100_000,
                default: Some(1),
            },
        ),
        Param::query(
            "per_page",
            "",
            ParamType::Int {
                min: 1,
                max: 500,
                default: Some(100),
            },
        ),
    ];

    #[test]
    fn table() {
        let cases: &[(&str, Result<&str, &str>)] = &[
            ("", Ok("r?page=1&per_page=100")),
            ("per_page=100&page=1", Ok("r?page=1&per_page=100")),
            ("page=2&per_page=500", Ok("r?page=2&per_page=500")),
            ("page=0", Err("page")),
            ("per_page=501", Err("per_page")),
            ("page=abc", Err("page")),
            ("page=1.5", Err("page")),
            ("page=", Err("page")),
            ("condition=used", Err("condition")),
            ("condition=new", Ok("r?condition=new&page=1&per_page=100")),
            (
                "manufacturer=Micro+BT%26x",
                Ok("r?manufacturer=Micro BT%26x&page=1&per_page=100"),
            ),
            ("manufacturer=", Err("manufacturer")),
            ("manufacturer=%ZZ", Err("manufacturer")),
            ("manufacturer=%FF", Err("manufacturer")),
            ("model=Antminer", Err("model")),
            (
                "model=antminer-s9",
                Ok("r?model=antminer-s9&page=1&per_page=100"),
            ),
            ("color=red", Err("color")),
            ("page=1&page=2", Err("page")),
        ];
        for (raw, want) in cases {
            let got = parse_query(PARAMS, Some(raw)).map(|p| cache_key("r", &p));
            match (want, got) {
                (Ok(w), Ok(g)) => assert_eq!(&g, w, "{raw}"),
                (Err(param), Err(e)) => assert_eq!(&e.parameter, param, "{raw}: {e:?}"),
                (w, g) => panic!("{raw}: wanted {w:?}, got {g:?}"),
            }
        }
    }

    #[test]
    fn decoding() {
        let one =
            |raw: &str| parse_query(PARAMS, Some(raw)).map(|p| p.get("manufacturer").cloned());
        let text = |s: &str| Ok(Some(ParamValue::Text(s.into())));
        assert_eq!(one("manufacturer=a+b%20c"), text("a b c"));
        assert_eq!(one("manufacturer=%e2%82%ac"), text("€"));
        assert_eq!(
            one("manufacturer=%2").unwrap_err().parameter,
            "manufacturer"
        );
        assert_eq!(
            one("manufacturer=%C3").unwrap_err().parameter,
            "manufacturer"
        );
        assert_eq!(one("manu%66acturer=x"), text("x"));
    }
}
