//! `svcos-open-data serve` / `export`: parse the command line, open the store, run.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use svcos_open_data::client::Url;
use svcos_open_data::datasets::Source;
use svcos_open_data::listen::{self, Limits};
use svcos_open_data::process::{self, Shutdown, exit};
use svcos_open_data::server::{self, AppState, FeedSource, HashpriceConfig};
use svcos_open_data::upstream::{self, ChainSource};
use svcos_open_data::{OpenError, export, open_snapshot, open_store};

#[derive(Debug, Parser)]
#[command(
    name = "svcos-open-data",
    about = "Open Mining Data API: a free, keyless, read-only JSON API over mining datasets"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the API over HTTP.
    Serve(ServeArgs),
    /// Write the static site: the CSV and JSON mirrors of every dataset (data/), the endpoint
    /// index (data/api/), llms.txt and the methodology page; the bulk path for a CDN.
    Export(ExportArgs),
    /// Build a sealed SQLite snapshot from the dataset files, for `serve --read-only` instances.
    Snapshot(SnapshotArgs),
}

#[derive(Debug, clap::Args)]
struct SnapshotArgs {
    /// The snapshot file to write (replaced if it exists).
    #[arg(long)]
    db: PathBuf,
    /// Dataset directory laid out like open-data/datasets (default: the copy compiled in).
    #[arg(long)]
    datasets: Option<PathBuf>,
    /// Price-index feed file (default: the labelled sample).
    #[arg(long)]
    price_feed: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct DataArgs {
    /// SQLite store; created and loaded from the dataset files when missing.
    #[arg(long)]
    db: PathBuf,
    /// Dataset directory laid out like open-data/datasets (default: the copy compiled in).
    #[arg(long)]
    datasets: Option<PathBuf>,
    /// Price-index feed: a file path or an http(s) URL (default: the labelled sample).
    #[arg(long)]
    price_feed: Option<String>,
    /// Load the dataset files into an existing store again.
    #[arg(long)]
    reload: bool,
}

#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// Listen address, ADDR:PORT.
    #[arg(long, default_value = "127.0.0.1:8090")]
    bind: std::net::SocketAddr,
    #[command(flatten)]
    data: DataArgs,
    /// Serve --db as a shared read-only snapshot (made by `snapshot`): nothing is loaded or
    /// written, so any number of instances can serve the one file.
    #[arg(long, conflicts_with_all = ["reload", "price_feed"])]
    read_only: bool,
    /// Bitcoin Core JSON-RPC URL, e.g. http://user:pass@127.0.0.1:8332 (credentials never logged).
    #[arg(long, conflicts_with = "esplora_url")]
    bitcoind_rpc: Option<String>,
    /// Esplora REST base URL [default: https://blockstream.info/api].
    #[arg(long)]
    esplora_url: Option<String>,
    /// BTC price source answering {"USD": n, "CAD": n} or CoinGecko's simple-price shape
    /// [default: CoinGecko's simple price in USD and CAD].
    #[arg(long)]
    price_url: Option<String>,
    /// No hashprice upstream at all (hashprice stays empty, flagged stale).
    #[arg(long, conflicts_with_all = ["bitcoind_rpc", "esplora_url", "price_url"])]
    offline: bool,
    /// Seconds between hashprice refreshes.
    #[arg(long, default_value_t = server::DEFAULT_INTERVAL.as_secs())]
    hashprice_interval_s: u64,
    /// Seconds before the first retry of a failed hashprice refresh (doubling per failure).
    #[arg(long, default_value_t = server::RETRY_MIN.as_secs())]
    retry_min_s: u64,
    /// Longest wait in seconds between retries while the upstreams fail.
    #[arg(long, default_value_t = server::RETRY_MAX.as_secs())]
    retry_max_s: u64,
    /// Recent blocks whose fees are averaged.
    #[arg(long, default_value_t = 144)]
    fee_blocks: u64,
    /// Seconds between price-feed reloads (when --price-feed is given).
    #[arg(long, default_value_t = 3600)]
    price_feed_interval_s: u64,
    /// Public base URL (OpenAPI servers, index page).
    #[arg(long)]
    site_url: Option<String>,
    /// Worker threads (default: one per core).
    #[arg(long)]
    workers: Option<usize>,
    /// Most cached (route, query) answers kept.
    #[arg(long, default_value_t = 10_000)]
    cache_entries: usize,
    /// Most connections held at once (lowered to what the descriptor limit leaves); at the
    /// cap the least recently active idle connection is closed for a new one.
    #[arg(long, default_value_t = listen::MAX_CONNECTIONS)]
    max_connections: usize,
    /// Seconds a client gets to send a complete request head.
    #[arg(long, default_value_t = listen::HEADER_READ_TIMEOUT.as_secs())]
    header_timeout_s: u64,
    /// Seconds a connection with no request in flight is kept.
    #[arg(long, default_value_t = listen::IDLE_TIMEOUT.as_secs())]
    idle_timeout_s: u64,
    /// Seconds a request may take before it is answered 503.
    #[arg(long, default_value_t = listen::REQUEST_TIMEOUT.as_secs())]
    request_timeout_s: u64,
}

#[derive(Debug, clap::Args)]
struct ExportArgs {
    #[command(flatten)]
    data: DataArgs,
    /// Directory for the site (data/, data/api/, llms.txt, methodology/).
    #[arg(long)]
    out: PathBuf,
    /// Public base URL of the site (absolute links in the pages).
    #[arg(long)]
    site_url: Option<String>,
}

fn fail(code: u8, msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("svcos-open-data: {msg}");
    ExitCode::from(code)
}

fn open(
    data: &DataArgs,
    read_only: bool,
) -> Result<
    (
        std::collections::BTreeMap<String, svcos_open_data::datasets::DatasetInfo>,
        svcos_open_data::store::Store,
        Source,
    ),
    ExitCode,
> {
    let src = Source {
        dir: data.datasets.clone(),
    };
    let feed_file = data
        .price_feed
        .as_deref()
        .filter(|f| !f.starts_with("http://") && !f.starts_with("https://"))
        .map(PathBuf::from);
    let opened = if read_only {
        open_snapshot(&data.db, &src)
    } else {
        open_store(&data.db, &src, feed_file.as_deref(), data.reload)
    };
    match opened {
        Ok((infos, store)) => Ok((infos, store, src)),
        Err(OpenError::Load(e)) => Err(fail(exit::CONFIG, e)),
        Err(e) => Err(fail(exit::FAILURE, e)),
    }
}

fn url(flag: &str, s: &str) -> Result<Url, ExitCode> {
    Url::parse(s).map_err(|e| fail(exit::USAGE, format!("--{flag}: {e}")))
}

fn serve(args: ServeArgs) -> ExitCode {
    let (infos, store, src) = match open(&args.data, args.read_only) {
        Ok(x) => x,
        Err(c) => return c,
    };
    // Out of the box hashprice works: the documented public upstreams unless told otherwise.
    let esplora_default = (!args.offline && args.bitcoind_rpc.is_none())
        .then(|| upstream::DEFAULT_ESPLORA_URL.to_string());
    let price_default = (!args.offline).then(|| upstream::DEFAULT_PRICE_URL.to_string());
    let chain = match (
        &args.bitcoind_rpc,
        args.esplora_url.as_ref().or(esplora_default.as_ref()),
    ) {
        (Some(u), _) => match url("bitcoind-rpc", u) {
            Ok(u) => Some(ChainSource::Rpc(u)),
            Err(c) => return c,
        },
        (None, Some(u)) => match url("esplora-url", u) {
            Ok(u) => Some(ChainSource::Esplora(u)),
            Err(c) => return c,
        },
        (None, None) => None,
    };
    let price = match args.price_url.as_ref().or(price_default.as_ref()) {
        Some(u) => match url("price-url", u) {
            Ok(u) => Some(u),
            Err(c) => return c,
        },
        None => None,
    };
    let feed = match args.data.price_feed.as_deref() {
        None => None,
        Some(f) if f.starts_with("http://") || f.starts_with("https://") => {
            match url("price-feed", f) {
                Ok(u) => Some(FeedSource::Url(u)),
                Err(c) => return c,
            }
        }
        Some(f) => Some(FeedSource::File(PathBuf::from(f))),
    };
    let interval = Duration::from_secs(args.hashprice_interval_s.max(1));
    let state = match AppState::new(
        infos,
        src,
        store,
        args.site_url.clone(),
        interval.as_secs(),
        args.cache_entries,
    ) {
        Ok(s) => Arc::new(s),
        Err(e) => return fail(exit::FAILURE, e),
    };
    let workers = args
        .workers
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(exit::FAILURE, e),
    };
    rt.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(args.bind).await {
            Ok(l) => l,
            Err(e) => return fail(exit::FAILURE, format!("bind {}: {e}", args.bind)),
        };
        if let Some(FeedSource::Url(_)) = &feed {
            // A URL feed is not read at load time (no network before binding); fetch it now.
            state.refresh_feed(feed.as_ref().expect("checked")).await;
        }
        tracing::info!(addr = %args.bind, workers, "serving the Open Mining Data API");
        let hp = HashpriceConfig {
            chain,
            price,
            interval,
            fee_blocks: args.fee_blocks,
            retry_min: Duration::from_secs(args.retry_min_s.max(1)),
            retry_max: Duration::from_secs(args.retry_max_s.max(args.retry_min_s).max(1)),
        };
        let feed = feed.map(|f| (f, Duration::from_secs(args.price_feed_interval_s.max(1))));
        let limits = Limits {
            header_read_timeout: Duration::from_secs(args.header_timeout_s.max(1)),
            idle_timeout: Duration::from_secs(args.idle_timeout_s.max(1)),
            request_timeout: Duration::from_secs(args.request_timeout_s.max(1)),
            max_connections: args.max_connections.max(1),
        };
        let shutdown = Shutdown::new();
        if let Err(e) = process::trigger_on_signals(&shutdown) {
            return fail(exit::FAILURE, format!("signal handlers: {e}"));
        }
        // Connection floods free their buffers in pieces scattered over the heap, which glibc
        // keeps resident; the trimmer hands them back once the flood is over.
        process::spawn_trimmer(shutdown.clone());
        server::run(
            state,
            listener,
            hp,
            feed,
            limits,
            shutdown.cancelled_owned(),
        )
        .await;
        ExitCode::SUCCESS
    })
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    match Cli::parse().command {
        Command::Serve(args) => serve(args),
        Command::Export(args) => {
            let (infos, store, _) = match open(&args.data, false) {
                Ok(x) => x,
                Err(c) => return c,
            };
            let openapi = Arc::new(svcos_open_data::registry::openapi(
                &infos,
                args.site_url.as_deref(),
            ));
            let snap = match server::snapshot_from_store(
                &store,
                openapi,
                args.site_url.clone(),
                server::DEFAULT_INTERVAL.as_secs(),
            ) {
                Ok(s) => s,
                Err(e) => return fail(exit::FAILURE, e),
            };
            match export::export(&snap, &args.out) {
                Ok(files) => {
                    for f in files {
                        println!("{}", args.out.join(f).display());
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => fail(exit::FAILURE, e),
            }
        }
        Command::Snapshot(args) => {
            let src = Source {
                dir: args.datasets.clone(),
            };
            // A fresh file: a snapshot holds exactly what the dataset files say.
            for suffix in ["", "-wal", "-shm", "-journal"] {
                let mut p = args.db.clone().into_os_string();
                p.push(suffix);
                let _ = std::fs::remove_file(p);
            }
            match open_store(&args.db, &src, args.price_feed.as_deref(), true) {
                Ok((_, store)) => match store.seal() {
                    Ok(()) => {
                        println!("{}", args.db.display());
                        ExitCode::SUCCESS
                    }
                    Err(e) => fail(exit::FAILURE, e),
                },
                Err(OpenError::Load(e)) => fail(exit::CONFIG, e),
                Err(e) => fail(exit::FAILURE, e),
            }
        }
    }
}
