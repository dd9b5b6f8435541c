//! Which route answers which type, and their JSON Schemas (feature `schema`).

use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::{JsonSchema, Schema};

use crate::{pools, status};

/// A route's `200` schema: a `$ref` into the generator's definitions.
pub type SchemaOf = fn(&mut SchemaGenerator) -> Schema;

fn of<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

/// `(method, path, schema)` of every route whose `200` body is a type of this crate.
pub const RESPONSES: &[(&str, &str, SchemaOf)] = &[
    ("GET", "/api/status", of::<status::StatusBody>),
    ("GET", "/api/stats", of::<status::StatsBody>),
    ("GET", "/api/chips", of::<status::ChipsBody>),
    (
        "GET",
        "/api/mining/chain/presence",
        of::<status::ChainPresenceBody>,
    ),
    ("GET", "/api/pools", of::<pools::PoolsBody>),
];

/// A generator for an OpenAPI 3.1 document: JSON Schema 2020-12, definitions under
/// `#/components/schemas`, shapes as serialised.
pub fn generator() -> SchemaGenerator {
    SchemaSettings::draft2020_12()
        .with(|s| s.definitions_path = "/components/schemas".into())
        .for_serialize()
        .into_generator()
}
