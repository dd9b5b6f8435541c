//! What the body of a write may be: nothing, or a JSON object sent as JSON (a bare array where
//! a route documents one). The guard applies it to every write before the handler runs, and
//! `handlers::parse_body` to what it parses, so one rule decides both.

use axum::http::{HeaderMap, StatusCode, header};
use serde_json::Value;

use crate::envelope::{ApiError, ErrorCode};

/// Whether the request says its body is JSON: exactly one `Content-Type` whose media type (the
/// part before any parameter, trimmed, any case) is `application/json` or
/// `application/<subtype>+json`. A parameter never makes a body JSON: `text/plain;charset=+json`
/// is what a web page on another site may send without a CORS preflight.
pub fn is_json_content_type(headers: &HeaderMap) -> bool {
    let mut values = headers.get_all(header::CONTENT_TYPE).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return false;
    };
    let Ok(value) = value.to_str() else {
        return false;
    };
    let essence = value
        .split_once(';')
        .map_or(value, |(essence, _)| essence)
        .trim()
        .to_ascii_lowercase();
    let Some(subtype) = essence.strip_prefix("application/") else {
        return false;
    };
    // RFC 6838 restricted-name characters: a subtype like `vnd.svcos+json`, never a space.
    let restricted = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
    };
    subtype == "json"
        || subtype
            .strip_suffix("+json")
            .is_some_and(|s| restricted(s) && !s.starts_with('+'))
}

/// A write's body as the guard and every handler accept it: `None` when empty (whitespace
/// only); otherwise JSON sent as JSON (415), well-formed (400) and an object, or where `arrays`
/// says so also an array (422; serde would read an array into a struct by position).
pub fn json_body(
    headers: &HeaderMap,
    body: &[u8],
    arrays: bool,
) -> Result<Option<Value>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    if !is_json_content_type(headers) {
        return Err(
            ApiError::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, "expected a JSON body")
                .detail("a non-empty body needs Content-Type: application/json")
                .code(ErrorCode::UnclassifiedError)
                .suggestion("send Content-Type: application/json, or no body at all"),
        );
    }
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request("malformed JSON body")
            .detail(e.to_string())
            .suggestion("send a JSON object of the documented shape")
    })?;
    if value.is_object() || (arrays && value.is_array()) {
        return Ok(Some(value));
    }
    Err(ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "the JSON body must be an object",
    )
    .detail(format!("got {}", json_kind(&value)))
    .code(ErrorCode::UnclassifiedError)
    .suggestion("send a JSON object of the documented shape (docs/API-SHAPES.md)"))
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
