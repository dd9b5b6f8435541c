//! Which wizard write parses its body into which input type (feature `schema`), in the form of
//! `svcos_api_types::schema::REQUESTS`, so the OpenAPI description derives those bodies too.

use svcos_api_types::schema::SchemaOf;

use crate::{
    AcknowledgeInput, CircuitInput, EconomicsInput, QuietHoursInput, SafetyInput, SkipInput,
};

fn of<T: schemars::JsonSchema>(
    generator: &mut svcos_api_types::schema::SchemaGenerator,
) -> schemars::Schema {
    generator.subschema_for::<T>()
}

/// `(method, path, schema)` of every write whose body is one of this crate's input types.
pub const REQUESTS: &[(&str, &str, SchemaOf)] = &[
    ("POST", "/api/setup/step1-safety", of::<SafetyInput>),
    ("POST", "/api/setup/skip-safety", of::<SkipInput>),
    ("POST", "/api/setup/skip-password", of::<SkipInput>),
    ("POST", "/api/setup/step2-circuit", of::<CircuitInput>),
    ("POST", "/api/setup/step-economics", of::<EconomicsInput>),
    ("POST", "/api/setup/quiet-hours", of::<QuietHoursInput>),
    ("POST", "/api/safety/acknowledge", of::<AcknowledgeInput>),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_input_schema_refuses_unknown_members() {
        // The inputs deny unknown fields; the derived schemas must say so, or a client
        // generated from the description would send members the wizard refuses.
        let mut generator = svcos_api_types::schema::request_generator();
        for (_, _, schema_of) in REQUESTS {
            schema_of(&mut generator);
        }
        let defs = generator.definitions();
        for name in [
            "SafetyInput",
            "CircuitInput",
            "QuietHoursInput",
            "AcknowledgeInput",
        ] {
            assert_eq!(
                defs[name]["additionalProperties"],
                serde_json::json!(false),
                "{name}: {}",
                defs[name]
            );
        }
    }
}
