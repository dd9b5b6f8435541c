//! svcos-open-data: the Open Mining Data API, a free, keyless, read-only JSON API over
//! Bitcoin-mining datasets. It is a server program of its own (not part of the firmware image
//! and not linked into the `svcos` binary).
//!
//! Design:
//! - **Data** lives in versioned JSON Lines files under `open-data/datasets/` with a JSON Schema
//!   per dataset ([`datasets`], validated by [`schema`] with the `jsonschema` crate). A bad row
//!   stops the load with `file:line: reason` (exit 78). The files are compiled in, or read from `--datasets DIR`.
//! - **Store**: SQLite ([`store`]) holds every record as its canonical JSON text plus the
//!   hashprice history. The API and `export` both write those stored bytes, so a mirror's
//!   records are byte-identical to the API's.
//! - **One registry** ([`registry::ROUTES`]) generates the axum router ([`server::router`]),
//!   `/v1/catalog`, `/v1/openapi.json` and the HTML index, so they cannot drift apart. The
//!   service's own answer shapes are types ([`shapes`]) whose schemas are derived (schemars).
//! - **Site**: `/data/` with every CSV and JSON mirror, `/data/api/`, `/llms.txt` and
//!   `/methodology` are answered from the same functions `export` writes its files with
//!   ([`export::site_files`], [`site`]), so the service and a CDN serving the export agree.
//! - **Scaling out**: `snapshot` seals a store into one file; `serve --read-only` instances open
//!   it immutable and render from it alone, so N instances answer identical bytes and ETags.
//! - **Fast path**: the data is read-only between refreshes, so each answer is rendered once
//!   per (route, normalized query, data generation) into a bounded [`cache`] with its strong
//!   ETag; gzip and brotli variants are compressed once, on first demand. A request is a map
//!   lookup plus header writes.
//! - **Hashprice** ([`hashprice`], [`upstream`]): every 15 minutes from a Bitcoin Core JSON-RPC
//!   or an Esplora REST source (public defaults; `--offline` for none) and a JSON price source;
//!   a failing upstream keeps the last good value flagged stale, never an error page, and is
//!   retried with backoff (5 s doubling to 60 s), not after the whole interval.
//! - **Hostile clients** ([`listen`]): a public server is flooded sooner or later, so the accept
//!   loop bounds what a client can hold. A request head must arrive within 10 s; a connection
//!   inactive for 30 s is closed (10 s in practice when it waits for its next request: hyper's
//!   header timer runs then too); a handler that has not answered in 30 s is answered 503. At
//!   most 4096 connections are held (fewer if the descriptor limit minus a reserve of 96 is
//!   lower); at the cap the least recently active idle connection is closed for the new one,
//!   and only when none is idle is the new one refused with a 503. Failed accepts (EMFILE)
//!   back off for 50 ms. Freed connection memory goes back to the OS through the shared
//!   allocator trimmer ([`process::spawn_trimmer`]). The one firmware crate linked is
//!   svcos-netserve (its write-progress socket wrapper), which has no gRPC in it; the process
//!   plumbing is [`process`], so the gRPC stack stays out of this binary.

pub mod cache;
pub mod client;
pub mod datasets;
pub mod export;
pub mod hashprice;
pub mod listen;
pub mod process;
pub mod query;
pub mod registry;
pub mod render;
pub mod schema;
pub mod server;
pub mod shapes;
pub mod site;
pub mod store;
pub mod time;
pub mod upstream;

use std::path::Path;

use datasets::{LoadError, PriceFeed, Source};
use store::Store;

/// Why the service could not open its data.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// A dataset file is invalid (the operator must fix the file: exit 78).
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The store could not be opened or written.
    #[error(transparent)]
    Store(#[from] store::StoreError),
}

/// The feed a fresh store is loaded with: `--price-feed` when it is a file, else the sample
/// that ships with the datasets.
pub fn initial_feed(
    src: &Source,
    infos: &std::collections::BTreeMap<String, datasets::DatasetInfo>,
    feed_file: Option<&Path>,
) -> Result<PriceFeed, LoadError> {
    match feed_file {
        Some(p) => datasets::read_feed_file(p, infos),
        None => {
            let (name, text) = src.read(&infos["price-index"].file)?;
            datasets::feed_from_text(&name, &text, infos)
        }
    }
}

/// Open a sealed snapshot read-only (see [`Store::open_read_only`]); the dataset files are
/// still read for the manifest (titles, schemas) but nothing is loaded into the snapshot.
pub fn open_snapshot(
    db: &Path,
    src: &Source,
) -> Result<
    (
        std::collections::BTreeMap<String, datasets::DatasetInfo>,
        Store,
    ),
    OpenError,
> {
    let infos = datasets::manifest(src)?;
    let store = Store::open_read_only(db)?;
    if !store.is_loaded()? {
        return Err(OpenError::Load(LoadError {
            file: db.display().to_string(),
            line: 0,
            reason: "not a loaded snapshot (make one with `svcos-open-data snapshot`)".into(),
        }));
    }
    Ok((infos, store))
}

/// Open the store at `db`; load the datasets into it when it is new (or `reload` is set).
/// Every dataset file is validated even when the store already holds data, so a broken file
/// is reported at start, not at the next reload.
pub fn open_store(
    db: &Path,
    src: &Source,
    feed_file: Option<&Path>,
    reload: bool,
) -> Result<
    (
        std::collections::BTreeMap<String, datasets::DatasetInfo>,
        Store,
    ),
    OpenError,
> {
    let infos = datasets::manifest(src)?;
    let feed = initial_feed(src, &infos, feed_file)?;
    let records = datasets::load_all(src, &infos, &feed)?;
    let mut store = Store::open(db)?;
    if reload || feed_file.is_some() || !store.is_loaded()? {
        store.replace_all(&infos, &records, &feed, &src.label(), time::now_unix())?;
    }
    Ok((infos, store))
}
