//! A small JSON Schema (draft 2020-12 subset) validator for dataset rows.
//!
//! The same schema file describes a dataset row at load and its record in `/v1/openapi.json`,
//! so the keywords supported here are exactly the ones the dataset schemas use: `type` (one or a
//! list), `properties`, `required`, `additionalProperties: false`, `enum`, `minimum`,
//! `maximum`, `exclusiveMinimum`, `minLength`, `maxLength`, `items`, `minItems`,
//! `uniqueItems`, and `format: "uri"` / `"slug"` / `"date"`. An unknown keyword is an error,
//! so a schema cannot silently promise a check that is not made.

use serde_json::Value;

const KNOWN: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "enum",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "minLength",
    "maxLength",
    "items",
    "minItems",
    "uniqueItems",
    "format",
    "description",
    "title",
    "$schema",
    "$id",
    "examples",
    "x-unit",
];

/// Check that a schema only uses the keywords this validator implements.
pub fn check_schema(schema: &Value) -> Result<(), String> {
    let Some(obj) = schema.as_object() else {
        return Err("schema is not an object".into());
    };
    for key in obj.keys() {
        if !KNOWN.contains(&key.as_str()) {
            return Err(format!("unsupported schema keyword {key:?}"));
        }
    }
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        for (name, sub) in props {
            check_schema(sub).map_err(|e| format!("{name}: {e}"))?;
        }
    }
    if let Some(items) = obj.get("items") {
        check_schema(items).map_err(|e| format!("items: {e}"))?;
    }
    Ok(())
}

/// Validate `value` against `schema`; the error names the JSON path of the first problem.
pub fn validate(schema: &Value, value: &Value) -> Result<(), String> {
    validate_at(schema, value, "$")
}

fn type_ok(ty: &str, value: &Value) -> bool {
    match ty {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        _ => false,
    }
}

fn validate_at(schema: &Value, value: &Value, path: &str) -> Result<(), String> {
    let Some(s) = schema.as_object() else {
        return Ok(());
    };
    if let Some(ty) = s.get("type") {
        let ok = match ty {
            Value::String(t) => type_ok(t, value),
            Value::Array(ts) => ts
                .iter()
                .filter_map(Value::as_str)
                .any(|t| type_ok(t, value)),
            _ => false,
        };
        if !ok {
            return Err(format!("{path}: expected {ty}, found {}", kind(value)));
        }
    }
    if let Some(allowed) = s.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        return Err(format!(
            "{path}: {value} is not one of {}",
            Value::from(allowed.clone())
        ));
    }
    if let Some(n) = value.as_f64() {
        if let Some(min) = s.get("minimum").and_then(Value::as_f64)
            && n < min
        {
            return Err(format!("{path}: {n} is below the minimum {min}"));
        }
        if let Some(min) = s.get("exclusiveMinimum").and_then(Value::as_f64)
            && n <= min
        {
            return Err(format!("{path}: {n} must be greater than {min}"));
        }
        if let Some(max) = s.get("maximum").and_then(Value::as_f64)
            && n > max
        {
            return Err(format!("{path}: {n} is above the maximum {max}"));
        }
    }
    if let Some(text) = value.as_str() {
        let len = text.chars().count() as u64;
        if let Some(min) = s.get("minLength").and_then(Value::as_u64)
            && len < min
        {
            return Err(format!("{path}: shorter than {min} characters"));
        }
        if let Some(max) = s.get("maxLength").and_then(Value::as_u64)
            && len > max
        {
            return Err(format!("{path}: longer than {max} characters"));
        }
        if let Some(format) = s.get("format").and_then(Value::as_str) {
            check_format(format, text).map_err(|e| format!("{path}: {e}"))?;
        }
    }
    if let Some(items) = value.as_array() {
        if let Some(min) = s.get("minItems").and_then(Value::as_u64)
            && (items.len() as u64) < min
        {
            return Err(format!("{path}: fewer than {min} items"));
        }
        if s.get("uniqueItems") == Some(&Value::Bool(true)) {
            for (i, a) in items.iter().enumerate() {
                if items[..i].contains(a) {
                    return Err(format!("{path}[{i}]: duplicate item {a}"));
                }
            }
        }
        if let Some(item_schema) = s.get("items") {
            for (i, item) in items.iter().enumerate() {
                validate_at(item_schema, item, &format!("{path}[{i}]"))?;
            }
        }
    }
    if let Some(obj) = value.as_object() {
        if let Some(required) = s.get("required").and_then(Value::as_array) {
            for name in required.iter().filter_map(Value::as_str) {
                if !obj.contains_key(name) {
                    return Err(format!("{path}: missing required field {name:?}"));
                }
            }
        }
        let props = s.get("properties").and_then(Value::as_object);
        for (name, v) in obj {
            match props.and_then(|p| p.get(name)) {
                Some(sub) => validate_at(sub, v, &format!("{path}.{name}"))?,
                None if s.get("additionalProperties") == Some(&Value::Bool(false)) => {
                    return Err(format!("{path}: unknown field {name:?}"));
                }
                None => {}
            }
        }
    }
    Ok(())
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn check_format(format: &str, text: &str) -> Result<(), String> {
    match format {
        // Public sources only: an address a reader can open, not a file on someone's disk.
        "uri" => {
            let bad = || format!("{text:?} is not an http(s) URL");
            let parsed = url::Url::parse(text).map_err(|_| bad())?;
            // The url crate forgives what a careful writer would not: surrounding whitespace
            // and a third slash before the host (`https:///x` reads as host `x`).
            if !matches!(parsed.scheme(), "http" | "https")
                || parsed.host_str().is_none_or(str::is_empty)
                || text.contains(":///")
                || text.contains(char::is_whitespace)
            {
                return Err(bad());
            }
            Ok(())
        }
        "slug" => {
            let ok = !text.is_empty()
                && text
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !text.starts_with('-')
                && !text.ends_with('-');
            if ok {
                Ok(())
            } else {
                Err(format!("{text:?} is not a slug (a-z, 0-9, inner '-')"))
            }
        }
        "date" => {
            let b = text.as_bytes();
            let ok = b.len() == 10
                && b[4] == b'-'
                && b[7] == b'-'
                && b.iter()
                    .enumerate()
                    .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit());
            if ok {
                Ok(())
            } else {
                Err(format!("{text:?} is not a YYYY-MM-DD date"))
            }
        }
        // Anything else is descriptive only (OpenAPI formats such as "date-time").
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["slug", "watt"],
            "properties": {
                "slug": {"type": "string", "format": "slug"},
                "watt": {"type": "number", "exclusiveMinimum": 0, "maximum": 10000},
                "kind": {"enum": ["air", "hydro"]},
                "url": {"type": "string", "format": "uri"},
                "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": true},
                "note": {"type": ["string", "null"], "maxLength": 5}
            }
        })
    }

    #[test]
    fn table() {
        let cases = [
            (json!({"slug": "s9", "watt": 1323}), None),
            (
                json!({"slug": "s9"}),
                Some("missing required field \"watt\""),
            ),
            (
                json!({"slug": "S9", "watt": 1}),
                Some("$.slug: \"S9\" is not a slug"),
            ),
            (
                json!({"slug": "s9", "watt": 0}),
                Some("$.watt: 0 must be greater than 0"),
            ),
            (
                json!({"slug": "s9", "watt": 1e5}),
                Some("above the maximum"),
            ),
            (
                json!({"slug": "s9", "watt": "1"}),
                Some("$.watt: expected \"number\", found string"),
            ),
            (
                json!({"slug": "s9", "watt": 1, "x": 1}),
                Some("unknown field \"x\""),
            ),
            (
                json!({"slug": "s9", "watt": 1, "kind": "oil"}),
                Some("is not one of"),
            ),
            (
                json!({"slug": "s9", "watt": 1, "url": "ftp://x"}),
                Some("not an http(s) URL"),
            ),
            (
                json!({"slug": "s9", "watt": 1, "url": "https://a.b/c"}),
                None,
            ),
            (
                json!({"slug": "s9", "watt": 1, "tags": ["a", "a"]}),
                Some("$.tags[1]: duplicate"),
            ),
            (json!({"slug": "s9", "watt": 1, "note": null}), None),
            (
                json!({"slug": "s9", "watt": 1, "note": "toolong"}),
                Some("longer than 5"),
            ),
        ];
        for (value, want) in cases {
            let got = validate(&schema(), &value);
            match want {
                None => assert!(got.is_ok(), "{value}: {got:?}"),
                Some(w) => {
                    let e = got.expect_err(&value.to_string());
                    assert!(e.contains(w), "{value}: {e} lacks {w}");
                }
            }
        }
    }

    #[test]
    fn unknown_keywords_are_refused() {
        assert!(check_schema(&schema()).is_ok());
        let bad = json!({"type": "object", "properties": {"a": {"pattern": "x"}}});
        assert!(check_schema(&bad).unwrap_err().contains("pattern"));
    }
}
