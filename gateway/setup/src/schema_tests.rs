//! The wizard's input schemas as the OpenAPI description derives them.

use svcos_api_types::schema::{of, request_generator};

use crate::{
    AcknowledgeInput, CircuitInput, EconomicsInput, QuietHoursInput, SafetyInput, SkipInput,
};

#[test]
fn every_input_schema_refuses_unknown_members() {
    // The inputs deny unknown fields; the derived schemas must say so, or a client
    // generated from the description would send members the wizard refuses.
    let mut generator = request_generator();
    of::<SafetyInput>(&mut generator);
    of::<SkipInput>(&mut generator);
    of::<CircuitInput>(&mut generator);
    of::<EconomicsInput>(&mut generator);
    of::<QuietHoursInput>(&mut generator);
    of::<AcknowledgeInput>(&mut generator);
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
