//! Read-only reference catalogues (`/api/re/*`, `/api/firmware/*` notes, the cgminer command
//! catalogue, the error vocabulary): one envelope; each catalogue's entries keep their own
//! members.

use serde::Serialize;
use serde_json::Value;

/// Every catalogue (`svcos.api.catalog.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CatalogBody {
    /// `svcos.api.catalog.v1`.
    pub schema: &'static str,
    /// The catalogue's id.
    pub catalog: &'static str,
    /// Its title.
    pub title: &'static str,
    /// Where the content comes from (never the hardware).
    pub source: &'static str,
    /// The entries; their members depend on the catalogue.
    pub entries: Vec<Value>,
}

impl CatalogBody {
    /// Catalogue `catalog` with its entries.
    pub fn new(catalog: &'static str, title: &'static str, entries: Vec<Value>) -> Self {
        CatalogBody {
            schema: "svcos.api.catalog.v1",
            catalog,
            title,
            source: "static reference data compiled into the firmware; no hardware is accessed",
            entries,
        }
    }
}
