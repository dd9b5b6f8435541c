//! The service's own answer shapes as Rust types: what the renderer serialises and what the
//! OpenAPI document's `components.schemas` are derived from (schemars, as the firmware's
//! gateway derives its schemas), so a field added to a type is in the document at once.
//!
//! Dataset rows are not here: their contract is the dataset's schema file, which the data is
//! published with ([`crate::datasets`]). The fields the service derives for a record are
//! ([`MinerDerived`], [`ProfileDerived`]); the OpenAPI record schemas are the files plus those
//! ([`crate::registry::record_schema`]).

use schemars::JsonSchema;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use serde::Serialize;
use serde_json::{Map, Value};

/// The meta block of every JSON answer.
#[derive(Debug, Clone, Default, Serialize, JsonSchema)]
pub struct Meta {
    /// Schema tag of this answer: `svcos.opendata.<route id>.v1`.
    pub schema: String,
    /// The dataset's (or the answer's) title.
    pub title: String,
    /// What the answer holds.
    pub description: String,
    /// Licence of the data: CC BY 4.0.
    pub license: String,
    /// Where the licence text is.
    pub license_url: String,
    /// The publisher; every record also carries its own `source`.
    pub source: String,
    /// How to credit the data.
    pub attribution: String,
    /// RFC 3339 time the data behind the answer was loaded or refreshed (not the request
    /// time, so ETags stay stable).
    pub generated_at: String,
    /// Dataset name (dataset routes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dataset: Option<String>,
    /// Dataset version from the manifest (dataset routes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dataset_version: Option<String>,
    /// Records in this answer (lists).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<usize>,
    /// Records matching the filters (lists).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<usize>,
    /// The normalized parameters applied, defaults included (lists).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filters: Option<Map<String, Value>>,
    /// Page position (error-codes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pagination: Option<Pagination>,
    /// price-index: true for the repository's illustrative feed (NOT live prices).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sample: Option<bool>,
    /// price-index: what `sample` means, when it is true.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
    /// hashprice: the last refresh failed; price-index: the last feed reload failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale: Option<bool>,
    /// price-index: the feed the items come from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feed: Option<FeedInfo>,
}

/// Where the price-index items come from.
#[derive(Debug, Clone, Default, Serialize, JsonSchema)]
pub struct FeedInfo {
    /// Vendor name from the feed header.
    pub vendor: Option<String>,
    /// Vendor site from the feed header.
    pub vendor_url: Option<String>,
    /// Date of the feed (YYYY-MM-DD).
    pub as_of: Option<String>,
    /// File path or URL host the feed was read from.
    pub origin: String,
}

/// Page position of a paginated answer.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Pagination {
    /// This page, from 1.
    pub page: usize,
    /// Records per page (1-500).
    pub per_page: usize,
    /// Records matching the filters.
    pub total: usize,
    /// Pages in all.
    pub total_pages: usize,
    /// The next page, null on the last one.
    pub next_page: Option<usize>,
    /// The previous page, null on the first one.
    pub prev_page: Option<usize>,
}

/// The body of every 4xx/5xx answer.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[schemars(rename = "Error")]
pub struct ErrorBody {
    /// Meta block (schema `svcos.opendata.error.v1`).
    pub meta: Meta,
    /// What went wrong.
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ErrorDetail {
    /// The HTTP status.
    pub status: u16,
    /// `invalid_parameter`, `unknown_parameter`, `not_found`, `method_not_allowed`,
    /// `timeout` or `overloaded`.
    pub code: String,
    /// A sentence for people: what is wrong and what is allowed.
    pub message: String,
    /// The offending parameter (400 only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parameter: Option<String>,
    /// Allowed methods (405 only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow: Option<String>,
}

/// One catalogue entry: a dataset with its routes and mirrors.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CatalogEntry {
    /// Dataset name.
    pub dataset: String,
    /// Title.
    pub title: String,
    /// Description.
    pub description: String,
    /// Data version (`live` for hashprice).
    pub version: String,
    /// Records held.
    pub records: usize,
    /// API routes serving it.
    pub routes: Vec<String>,
    /// Licence.
    pub license: String,
    /// Site paths of its CSV and JSON mirrors (`/data/...`; `export` writes the same files).
    pub mirrors: Vec<String>,
}

/// min/median/max of the prices shown.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct PriceSummary {
    /// Items with a price.
    pub count: usize,
    /// Lowest price, CAD.
    pub min_cad: Option<f64>,
    /// Median price, CAD.
    pub median_cad: Option<f64>,
    /// Highest price, CAD.
    pub max_cad: Option<f64>,
}

/// The state of the hashprice refresh.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct HashpriceStatus {
    /// The last refresh failed (or none succeeded yet): `record` is the last good value.
    pub stale: bool,
    /// Why it is stale.
    pub stale_reason: Option<String>,
    /// RFC 3339 time of the last attempt.
    pub last_attempt_at: Option<String>,
    /// RFC 3339 time of the last success.
    pub last_success_at: Option<String>,
    /// Seconds between refreshes.
    pub interval_s: u64,
}

/// Expected revenue of one unit of hashrate per day (the `record` of `/v1/hashprice`).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Hashprice {
    /// RFC 3339 time of the refresh that produced these numbers.
    pub refreshed_at: String,
    /// Chain state and the retarget and halving ahead.
    pub network: Network,
    /// Block reward.
    pub block: Block,
    /// BTC price.
    pub price: BtcPrice,
    /// Revenue in BTC.
    pub btc: PerUnit,
    /// Revenue in US dollars.
    pub usd: PerUnit,
    /// Revenue in Canadian dollars.
    pub cad: PerUnit,
    /// Where the inputs came from (kind and host only, never credentials).
    pub upstreams: Upstreams,
}

/// Chain state at the refresh.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Network {
    /// Height of the tip.
    pub height: u64,
    /// Difficulty of the next block.
    pub difficulty: f64,
    /// difficulty x 2^32 / 600 s, in EH/s.
    pub implied_hashrate_ehs: f64,
    /// Height of the next difficulty retarget.
    pub next_retarget_height: u64,
    /// Blocks until then.
    pub blocks_to_retarget: u64,
    /// RFC 3339 estimate at the 600 s target spacing.
    pub estimated_retarget_at: String,
    /// Height of the next halving.
    pub next_halving_height: u64,
    /// Blocks until then.
    pub blocks_to_halving: u64,
    /// RFC 3339 estimate at the 600 s target spacing.
    pub estimated_halving_at: String,
}

/// Block reward.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Block {
    /// Subsidy of the next block (height + 1), BTC.
    pub subsidy_btc: f64,
    /// Subsidy after the next halving, BTC.
    pub subsidy_after_halving_btc: f64,
    /// Mean fees per block over the fee window, BTC.
    pub avg_fees_btc: f64,
    /// Blocks in the fee window.
    pub fee_window_blocks: u64,
}

/// BTC price.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct BtcPrice {
    /// US dollars per BTC.
    pub usd: f64,
    /// Canadian dollars per BTC.
    pub cad: f64,
}

/// Revenue per TH/s and per PH/s per day.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct PerUnit {
    /// Per TH/s per day.
    pub per_th_day: Revenue,
    /// Per PH/s per day.
    pub per_ph_day: Revenue,
}

/// Revenue without and with fees.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Revenue {
    /// From the block subsidy alone.
    pub subsidy_only: f64,
    /// Subsidy plus the mean fees.
    pub fee_inclusive: f64,
}

/// Where the hashprice inputs came from.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Upstreams {
    /// `bitcoind-rpc` or `esplora`, and its host.
    pub chain: String,
    /// Host of the price source.
    pub price: String,
}

/// What the service adds to every miners row (derived, never in the data files).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct MinerDerived {
    /// power_w x 3.412142, rounded (BTU/h).
    pub btu_per_h: i64,
    /// svcOS's home-mining score, 0-100 (formula in docs/OPEN-DATA.md).
    #[schemars(range(min = 0, max = 100))]
    pub home_score: i64,
    /// Stock status of the linked catalogue product; not_listed when the feed has none.
    pub status: ListingStatus,
    /// The feed's cheapest in-stock item for the model (else any of its items), or null.
    pub product: Option<Product>,
}

/// Stock status of a miner's linked product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ListingStatus {
    /// The linked item is in stock.
    InStock,
    /// The linked item is out of stock.
    OutOfStock,
    /// The linked item can be pre-ordered.
    Preorder,
    /// The feed has no item for the model.
    NotListed,
}

/// Item condition in the catalogue feed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Condition {
    /// New.
    New,
    /// Refurbished.
    Refurbished,
}

/// A miner's linked catalogue product.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Product {
    /// Vendor SKU.
    pub sku: String,
    /// Product name.
    pub name: String,
    /// New or refurbished.
    pub condition: Condition,
    /// Price in CAD.
    pub price_cad: f64,
    /// in_stock, out_of_stock or preorder.
    pub stock_status: ListingStatus,
    /// Product page.
    pub url: String,
    /// true: from the illustrative sample feed, not a live price.
    pub sample: bool,
}

/// What the service adds to every power-profile point.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ProfileDerived {
    /// `<model_slug>-<profile>`, unique.
    pub id: String,
    /// power_w / hashrate_ths, 2 decimals (J/TH).
    pub efficiency_j_per_th: f64,
}

/// A generator for the OpenAPI 3.1 document: JSON Schema 2020-12, definitions under
/// `#/components/schemas`, shapes as serialised.
pub fn generator() -> SchemaGenerator {
    SchemaSettings::draft2020_12()
        .with(|s| s.definitions_path = "/components/schemas".into())
        .for_serialize()
        .into_generator()
}

/// The derived component schemas (name → schema) of the service's own shapes.
pub fn components() -> Map<String, Value> {
    let mut g = generator();
    g.subschema_for::<Meta>();
    g.subschema_for::<ErrorBody>();
    g.subschema_for::<CatalogEntry>();
    g.subschema_for::<PriceSummary>();
    g.subschema_for::<HashpriceStatus>();
    g.subschema_for::<Hashprice>();
    g.subschema_for::<MinerDerived>();
    g.subschema_for::<ProfileDerived>();
    g.take_definitions(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_are_derived_with_their_docs() {
        let c = components();
        for name in [
            "Meta",
            "Pagination",
            "Error",
            "CatalogEntry",
            "PriceSummary",
            "HashpriceStatus",
            "Hashprice",
            "Network",
        ] {
            assert!(c.contains_key(name), "{name}: {:?}", c.keys());
        }
        let meta = &c["Meta"];
        let required: Vec<&str> = meta["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert!(required.contains(&"generated_at") && !required.contains(&"dataset"));
        assert!(
            meta["properties"]["generated_at"]["description"]
                .as_str()
                .unwrap()
                .contains("RFC 3339")
        );
        assert_eq!(
            c["Pagination"]["properties"]["next_page"]["type"],
            serde_json::json!(["integer", "null"])
        );
        assert_eq!(
            c["Hashprice"]["properties"]["network"]["$ref"],
            "#/components/schemas/Network"
        );
    }
}
