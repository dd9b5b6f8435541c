//! The JSON Schemas of the API's types (feature `schema`): which route answers which type is
//! said by the route's own row in the gateway's registry (`route!(..., req: T, res: U)`); this
//! module only turns a type into its schema and builds the generators.

/// The generator type, for the document's builder.
pub use schemars::generate::SchemaGenerator;
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema};

/// A body's schema: a `$ref` into the generator's definitions.
pub type SchemaOf = fn(&mut SchemaGenerator) -> Schema;

/// The schema of `T`, for a route row's `req:`/`res:` types.
pub fn of<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

/// A generator for an OpenAPI 3.1 document: JSON Schema 2020-12, definitions under
/// `#/components/schemas`, shapes as serialised.
pub fn generator() -> SchemaGenerator {
    SchemaSettings::draft2020_12()
        .with(|s| s.definitions_path = "/components/schemas".into())
        .for_serialize()
        .into_generator()
}

/// The same for request bodies: shapes as deserialised, so a member with a default is optional.
pub fn request_generator() -> SchemaGenerator {
    SchemaSettings::draft2020_12()
        .with(|s| s.definitions_path = "/components/schemas".into())
        .for_deserialize()
        .into_generator()
}
