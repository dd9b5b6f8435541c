//! Dataset rows against their schema files, with the maintained `jsonschema` crate (JSON
//! Schema draft 2020-12, formats asserted).
//!
//! The schema files ship with the data (`datasets/<dataset>/schema.json`): they are the data's
//! contract, and the base of the record schemas in `/v1/openapi.json`. Two formats are the
//! service's own: `slug` (a-z, 0-9, inner '-') and `uri`, narrowed to http(s) URLs a reader can
//! open (a file on someone's disk is no public source). `date` is the standard full-date.

use jsonschema::Validator;
use serde_json::Value;

/// A compiled row schema.
pub type RowSchema = Validator;

fn is_slug(text: &str) -> bool {
    !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !text.starts_with('-')
        && !text.ends_with('-')
}

fn is_public_url(text: &str) -> bool {
    let Ok(parsed) = url::Url::parse(text) else {
        return false;
    };
    // The url crate forgives what a careful writer would not: surrounding whitespace and a
    // third slash before the host (`https:///x` reads as host `x`).
    matches!(parsed.scheme(), "http" | "https")
        && parsed.host_str().is_some_and(|h| !h.is_empty())
        && !text.contains(":///")
        && !text.contains(char::is_whitespace)
}

/// Compile a schema file's schema (it must itself be a valid draft 2020-12 schema).
pub fn compile(schema: &Value) -> Result<RowSchema, String> {
    jsonschema::draft202012::options()
        .should_validate_formats(true)
        .with_format("slug", is_slug)
        .with_format("uri", is_public_url)
        .build(schema)
        .map_err(|e| format!("invalid schema: {e}"))
}

/// Check that a schema compiles.
pub fn check_schema(schema: &Value) -> Result<(), String> {
    compile(schema).map(|_| ())
}

/// Validate `value`; the error names the JSON path of the first problem (`$.a.0.b: ...`).
pub fn validate(schema: &RowSchema, value: &Value) -> Result<(), String> {
    schema.validate(value).map_err(|e| {
        let pointer = e.instance_path().to_string();
        format!("${}: {e}", pointer.replace('/', "."))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> RowSchema {
        compile(&json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["slug", "watt"],
            "properties": {
                "slug": {"type": "string", "format": "slug"},
                "watt": {"type": "number", "exclusiveMinimum": 0, "maximum": 10000},
                "kind": {"enum": ["air", "hydro"]},
                "url": {"type": "string", "format": "uri"},
                "day": {"type": "string", "format": "date"},
                "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": true},
                "note": {"type": ["string", "null"], "maxLength": 5},
                "source": {"type": "object", "properties": {"url": {"type": "string", "format": "uri"}}}
            }
        }))
        .unwrap()
    }

    #[test]
    fn table() {
        let s = schema();
        // (row, None = valid, Some(path the error must name))
        let cases = [
            (json!({"slug": "s9", "watt": 1323}), None),
            (json!({"slug": "s9"}), Some("$: ")),
            (json!({"slug": "S9", "watt": 1}), Some("$.slug: ")),
            (json!({"slug": "-s9", "watt": 1}), Some("$.slug: ")),
            (json!({"slug": "s9", "watt": 0}), Some("$.watt: ")),
            (json!({"slug": "s9", "watt": 1e5}), Some("$.watt: ")),
            (json!({"slug": "s9", "watt": "1"}), Some("$.watt: ")),
            (json!({"slug": "s9", "watt": 1, "x": 1}), Some("$: ")),
            (
                json!({"slug": "s9", "watt": 1, "kind": "oil"}),
                Some("$.kind: "),
            ),
            (
                json!({"slug": "s9", "watt": 1, "url": "ftp://x"}),
                Some("$.url: "),
            ),
            (
                json!({"slug": "s9", "watt": 1, "url": "https:///x"}),
                Some("$.url: "),
            ),
            (
                json!({"slug": "s9", "watt": 1, "url": "https://a.b/c"}),
                None,
            ),
            (
                json!({"slug": "s9", "watt": 1, "day": "2026-11-31"}),
                Some("$.day: "),
            ),
            (json!({"slug": "s9", "watt": 1, "day": "2026-11-29"}), None),
            (
                json!({"slug": "s9", "watt": 1, "tags": ["a", "a"]}),
                Some("$.tags: "),
            ),
            (json!({"slug": "s9", "watt": 1, "note": null}), None),
            (
                json!({"slug": "s9", "watt": 1, "note": "toolong"}),
                Some("$.note: "),
            ),
            // An open object (a source that gains members) takes them; its known ones are checked.
            (
                json!({"slug": "s9", "watt": 1, "source": {"url": "https://a.b", "licence": "CC0"}}),
                None,
            ),
            (
                json!({"slug": "s9", "watt": 1, "source": {"url": "file:///etc"}}),
                Some("$.source.url: "),
            ),
        ];
        for (value, want) in cases {
            let got = validate(&s, &value);
            match want {
                None => assert!(got.is_ok(), "{value}: {got:?}"),
                Some(w) => {
                    let e = got.expect_err(&value.to_string());
                    assert!(e.starts_with(w), "{value}: {e} does not start with {w}");
                }
            }
        }
    }

    #[test]
    fn a_broken_schema_is_refused() {
        assert!(check_schema(&json!({"type": "object", "minProperties": "x"})).is_err());
        assert!(check_schema(&json!({"type": "objekt"})).is_err());
    }
}
