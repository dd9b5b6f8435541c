//! The merged log view: every service's recent-log file read, filtered, merged in time order,
//! masked, and tailed live. No HTTP here; the gateway's routes (`GET /api/logs`,
//! `GET /api/logs/download`, `/ws?topic=logs`) parse a [`LogQuery`], call in and shape the answer.
//!
//! Design:
//! - **Source**: the supervisor captures each service's output and appends it to
//!   `<runtime>/logs/<service>.log` (rotated once to `.log.1`), each line after the RFC 3339 time
//!   it read it (`svcos_supervisor::logs::forward`). The files are the one record; this crate
//!   only reads them, so the view needs no peer and shows what the log backup holds.
//! - **Lines**: `<time> <level> <message>` where the level is the word tracing's formatter puts
//!   first. A line without a level (a panic message, a library's plain output) counts as `info`,
//!   a panic's first line as `error`; a line without a time (written before the stamp existed)
//!   takes the time of the line before it in its file.
//! - **Order**: every file is in time order already; the merge is a stable sort on the time, so
//!   lines of one service stamped in the same millisecond keep their order.
//! - **Secrets** never reach an answer: [`mask_secrets`] masks URL passwords (the one rule of
//!   `svcos_common::redact`), `token=`/`ticket=`/`password=`-style values and bearer tokens in
//!   every message, whatever a service wrote.
//! - **Backup**: [`backup`] lists and archives the same files as they are, for
//!   `GET /api/log/backup` and its manifest.
//! - **Tail**: [`Tail`] keeps a cursor (inode and offset) per file and reads only what was
//!   appended since, following a rotation through the `.log.1` file.

pub mod backup;

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use svcos_api_types::diagnostics::{LogEntry, LogsBody};
use svcos_common::ServiceName;

/// Lines `GET /api/logs` answers unless `limit` says otherwise.
pub const DEFAULT_LIMIT: usize = 500;
/// Most lines one `GET /api/logs` answers.
pub const MAX_LIMIT: usize = 5000;
/// Most lines one download holds (every recent-log file together holds fewer).
pub const MAX_DOWNLOAD: usize = 100_000;
/// Most lines a live tail sends before its live part (`limit` of `/ws?topic=logs`).
pub const MAX_BACKLOG: usize = 1000;
/// Most bytes one tail poll reads from one file; the rest waits for the next poll.
const MAX_POLL_BYTES: u64 = 256 * 1024;

/// Severity, lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// `trace`.
    Trace,
    /// `debug`.
    Debug,
    /// `info`.
    Info,
    /// `warn`.
    Warn,
    /// `error`.
    Error,
}

impl Level {
    /// Every level, lowest first.
    pub const ALL: [Level; 5] = [
        Level::Trace,
        Level::Debug,
        Level::Info,
        Level::Warn,
        Level::Error,
    ];

    /// The API's word.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Trace => "trace",
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        }
    }

    fn parse(word: &str) -> Option<Level> {
        Level::ALL
            .into_iter()
            .find(|l| l.as_str().eq_ignore_ascii_case(word))
    }
}

/// Why a query was refused: the field and the accepted form.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid value for {field}: {message}")]
pub struct QueryError {
    /// The query parameter.
    pub field: &'static str,
    /// The accepted form.
    pub message: String,
}

fn bad(field: &'static str, message: impl Into<String>) -> QueryError {
    QueryError {
        field,
        message: message.into(),
    }
}

/// The query parameters of the log routes, as sent (every one optional).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct LogQuery {
    /// Services, comma-separated (default all).
    pub service: Option<String>,
    /// Lowest level shown (default `info`).
    pub level: Option<String>,
    /// Text the message or service must contain, any case.
    pub q: Option<String>,
    /// Only lines at or after this RFC 3339 time.
    pub since: Option<String>,
    /// Most lines (the newest are kept).
    pub limit: Option<String>,
    /// Download format: `text` (default) or `ndjson`.
    pub format: Option<String>,
}

/// Which lines to show.
#[derive(Debug, Clone, PartialEq)]
pub struct Filter {
    /// The services read.
    pub services: Vec<ServiceName>,
    /// Lowest level shown.
    pub min_level: Level,
    /// Lower-case text a line must contain (in its message or service).
    pub text: Option<String>,
    /// Only lines at or after this time, Unix ms.
    pub since_ms: Option<i64>,
}

impl Default for Filter {
    fn default() -> Self {
        Filter {
            services: ServiceName::ALL.to_vec(),
            min_level: Level::Info,
            text: None,
            since_ms: None,
        }
    }
}

impl Filter {
    /// Whether `e` passes.
    pub fn admits(&self, e: &LogEntry) -> bool {
        Level::parse(e.level).unwrap_or(Level::Info) >= self.min_level
            && self.since_ms.is_none_or(|s| e.time_ms >= s)
            && self
                .text
                .as_deref()
                .is_none_or(|t| e.message.to_lowercase().contains(t) || e.service.contains(t))
    }
}

/// Download formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `text/plain`: `<time> <LEVEL> <service>: <message>` per line.
    Text,
    /// `application/x-ndjson`: one [`LogEntry`] JSON object per line.
    Ndjson,
}

impl LogQuery {
    /// The checked filter.
    pub fn filter(&self) -> Result<Filter, QueryError> {
        let mut f = Filter::default();
        if let Some(list) = self.service.as_deref().filter(|s| !s.trim().is_empty()) {
            f.services = list
                .split(',')
                .map(|name| {
                    let name = name.trim();
                    ServiceName::ALL
                        .into_iter()
                        .find(|s| s.as_str() == name)
                        .ok_or_else(|| {
                            let names: Vec<&str> =
                                ServiceName::ALL.iter().map(|s| s.as_str()).collect();
                            bad(
                                "service",
                                format!("comma-separated, each one of {}", names.join(", ")),
                            )
                        })
                })
                .collect::<Result<_, _>>()?;
        }
        if let Some(word) = self.level.as_deref().filter(|s| !s.is_empty()) {
            f.min_level = Level::parse(word)
                .ok_or_else(|| bad("level", "one of trace, debug, info, warn, error"))?;
        }
        if let Some(q) = self.q.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
            if q.chars().count() > 200 {
                return Err(bad("q", "at most 200 characters"));
            }
            f.text = Some(q.to_lowercase());
        }
        if let Some(since) = self.since.as_deref().filter(|s| !s.is_empty()) {
            let ts: jiff::Timestamp = since.parse().map_err(|_| {
                bad(
                    "since",
                    "an RFC 3339 time with its offset, e.g. 2026-11-29T03:00:00Z",
                )
            })?;
            f.since_ms = Some(ts.as_millisecond());
        }
        Ok(f)
    }

    /// The checked `limit` (1 to `max`, `default` when absent).
    pub fn limit(&self, default: usize, max: usize) -> Result<usize, QueryError> {
        match self.limit.as_deref().filter(|s| !s.is_empty()) {
            None => Ok(default),
            Some(text) => text
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=max).contains(n))
                .ok_or_else(|| bad("limit", format!("1-{max}"))),
        }
    }

    /// The checked `limit` of a live tail: lines sent before the live part, 0 to
    /// [`MAX_BACKLOG`], default 0.
    pub fn backlog(&self) -> Result<usize, QueryError> {
        match self.limit.as_deref().filter(|s| !s.is_empty()) {
            None => Ok(0),
            Some(text) => text
                .parse::<usize>()
                .ok()
                .filter(|n| *n <= MAX_BACKLOG)
                .ok_or_else(|| bad("limit", format!("0-{MAX_BACKLOG}"))),
        }
    }

    /// The checked download format.
    pub fn format(&self) -> Result<Format, QueryError> {
        match self.format.as_deref().unwrap_or("text") {
            "text" | "" => Ok(Format::Text),
            "ndjson" => Ok(Format::Ndjson),
            _ => Err(bad("format", "text or ndjson")),
        }
    }
}

/// The recent-log file of a service under the supervisor's `<runtime>/logs` directory.
pub fn service_file(logs_dir: &Path, service: ServiceName) -> PathBuf {
    logs_dir.join(format!("{service}.log"))
}

fn rotated(path: &Path) -> PathBuf {
    path.with_extension("log.1")
}

/// Split `<level> <message>` (tracing's formatter pads the level on the left).
fn level_of(text: &str) -> (Level, &str) {
    let trimmed = text.trim_start();
    let (word, rest) = trimmed.split_once(' ').unwrap_or((trimmed, ""));
    if word.len() == 4 || word.len() == 5 {
        let upper = word.chars().all(|c| c.is_ascii_uppercase());
        if let Some(level) = Level::parse(word).filter(|_| upper) {
            return (level, rest.trim_start());
        }
    }
    if text.contains("panicked at") {
        return (Level::Error, text);
    }
    (Level::Info, text)
}

/// The key names whose values are masked wherever they appear as `key=value` or `key: value`.
const SECRET_KEYS: [&str; 6] = ["token", "ticket", "password", "passwd", "secret", "pass"];

/// `message` with every secret masked ([`svcos_common::redact::SECRET_MASK`]): URL passwords
/// (the one rule of `svcos_common::redact`), values of `token=`, `ticket=`, `password=`,
/// `passwd=`, `secret=` and `pass=` (also as `?token=` in a URL or `password: x`), and the word
/// after `Bearer`. Services never log secrets on purpose; this holds if one ever does.
pub fn mask_secrets(message: &str) -> String {
    use svcos_common::redact::{SECRET_MASK, mask_url_userinfo};
    let mut out = Vec::new();
    let mut mask_next = false;
    for word in message.split(' ') {
        if mask_next && !word.is_empty() {
            out.push(SECRET_MASK.to_string());
            mask_next = false;
            continue;
        }
        let mut w = if word.contains("://") && word.contains('@') {
            mask_url_userinfo(word.trim_matches(|c| c == '"' || c == '\'')).into_owned()
        } else {
            word.to_string()
        };
        w = mask_key_values(&w);
        let lower = w.to_ascii_lowercase();
        if lower == "bearer" || SECRET_KEYS.iter().any(|k| lower == format!("{k}:")) {
            mask_next = true;
        }
        out.push(w);
    }
    out.join(" ")
}

/// Mask the value of every `key=value` whose key (after `?`, `&`, `"` or the word start) is a
/// [`SECRET_KEYS`] entry; the value ends at `&`, `,`, `;` or a quote.
fn mask_key_values(word: &str) -> String {
    let lower = word.to_ascii_lowercase();
    let mut out = String::with_capacity(word.len());
    let mut i = 0;
    while let Some(rel) = lower[i..].find('=') {
        let eq = i + rel;
        let key_start = lower[..eq]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            .map_or(0, |p| p + 1);
        let key = &lower[key_start..eq];
        let secret = SECRET_KEYS
            .iter()
            .any(|k| key == *k || key.ends_with(&format!("_{k}")));
        // A quoted value (`key="v"`) starts after its quote.
        let start = eq + 1 + usize::from(lower[eq + 1..].starts_with(['"', '\'']));
        let end = lower[start..]
            .find(['&', ',', ';', '"', '\''])
            .map_or(word.len(), |p| start + p);
        out.push_str(&word[i..start]);
        if secret && end > start {
            out.push_str(svcos_common::redact::SECRET_MASK);
        } else {
            out.push_str(&word[start..end]);
        }
        i = end;
    }
    out.push_str(&word[i..]);
    out
}

/// One line of a recent-log file as an entry; `prev_ms` is the time of the line before it in
/// its file (taken when this one has no stamp).
pub fn parse_line(service: ServiceName, raw: &str, prev_ms: i64) -> LogEntry {
    let (time_ms, text) = match raw.split_once(' ') {
        Some((stamp, rest)) => match stamp.parse::<jiff::Timestamp>() {
            Ok(ts) => (ts.as_millisecond(), rest),
            Err(_) => (prev_ms, raw),
        },
        None => (prev_ms, raw),
    };
    let (level, message) = level_of(text);
    LogEntry {
        time: svcos_common::time::rfc3339_ms(time_ms),
        time_ms,
        service: service.as_str().to_string(),
        level: level.as_str(),
        message: mask_secrets(message),
    }
}

/// Every line of one service's files (`.log.1` then `.log`), oldest first.
pub fn read_service(logs_dir: &Path, service: ServiceName) -> Vec<LogEntry> {
    let path = service_file(logs_dir, service);
    let mut out = Vec::new();
    let mut prev = 0;
    for p in [rotated(&path), path] {
        if let Ok(bytes) = std::fs::read(&p) {
            for line in String::from_utf8_lossy(&bytes).lines() {
                let e = parse_line(service, line, prev);
                prev = e.time_ms;
                out.push(e);
            }
        }
    }
    out
}

/// The last `n` raw lines of a service's files (`/api/debug/log`).
pub fn tail_lines(logs_dir: &Path, service: ServiceName, n: usize) -> Vec<String> {
    let path = service_file(logs_dir, service);
    let mut lines = Vec::new();
    for p in [rotated(&path), path] {
        if let Ok(s) = std::fs::read_to_string(&p) {
            lines.extend(s.lines().map(str::to_string));
        }
    }
    let skip = lines.len().saturating_sub(n);
    lines.split_off(skip)
}

/// Merge entries of several services in time order (stable: one service's order is kept).
fn merge(mut entries: Vec<LogEntry>) -> Vec<LogEntry> {
    entries.sort_by_key(|e| e.time_ms);
    entries
}

/// The newest `limit` lines that pass `filter`, every service merged, oldest first; and whether
/// more passed.
pub fn merged(logs_dir: &Path, filter: &Filter, limit: usize) -> (Vec<LogEntry>, bool) {
    let all: Vec<LogEntry> = filter
        .services
        .iter()
        .flat_map(|s| read_service(logs_dir, *s))
        .filter(|e| filter.admits(e))
        .collect();
    let mut all = merge(all);
    let truncated = all.len() > limit;
    let skip = all.len().saturating_sub(limit);
    (all.split_off(skip), truncated)
}

/// `GET /api/logs`.
pub fn body(logs_dir: &Path, query: &LogQuery) -> Result<LogsBody, QueryError> {
    let filter = query.filter()?;
    let limit = query.limit(DEFAULT_LIMIT, MAX_LIMIT)?;
    let (entries, truncated) = merged(logs_dir, &filter, limit);
    Ok(LogsBody {
        schema: "svcos.api.logs.v1",
        count: entries.len(),
        truncated,
        entries,
    })
}

/// `GET /api/logs/download`: the body, its media type and a file name.
pub fn download(
    logs_dir: &Path,
    query: &LogQuery,
    now_ms: i64,
) -> Result<(String, &'static str, String), QueryError> {
    let filter = query.filter()?;
    let format = query.format()?;
    let limit = query.limit(MAX_DOWNLOAD, MAX_DOWNLOAD)?;
    let (entries, _) = merged(logs_dir, &filter, limit);
    let stamp = svcos_common::time::rfc3339_ms(now_ms).replace(':', "");
    Ok(match format {
        Format::Text => (
            entries.iter().map(text_line).collect(),
            "text/plain; charset=utf-8",
            format!("svcos-logs-{stamp}.txt"),
        ),
        Format::Ndjson => (
            entries
                .iter()
                .map(|e| format!("{}\n", entry_json(e)))
                .collect(),
            "application/x-ndjson",
            format!("svcos-logs-{stamp}.ndjson"),
        ),
    })
}

/// `<time> <LEVEL> <service>: <message>\n`.
pub fn text_line(e: &LogEntry) -> String {
    format!(
        "{} {:>5} {}: {}\n",
        e.time,
        e.level.to_ascii_uppercase(),
        e.service,
        e.message
    )
}

fn entry_json(e: &LogEntry) -> serde_json::Value {
    serde_json::to_value(e).unwrap_or_default()
}

/// A `/ws?topic=logs` frame: `{"type": "log", "schema": "svcos.ws.log.v1", time, time_ms,
/// service, level, message}`.
pub fn ws_frame(e: &LogEntry) -> String {
    let mut v = entry_json(e);
    v["type"] = "log".into();
    v["schema"] = "svcos.ws.log.v1".into();
    v.to_string()
}

/// Where a tail stands in one service's file.
#[derive(Debug, Clone, Copy, Default)]
struct Cursor {
    inode: u64,
    offset: u64,
    prev_ms: i64,
}

/// A live tail: each [`Tail::poll`] returns the lines appended since the last one that pass
/// the filter, merged in time order.
#[derive(Debug)]
pub struct Tail {
    logs_dir: PathBuf,
    filter: Filter,
    cursors: Vec<(ServiceName, Cursor)>,
}

impl Tail {
    /// A tail that starts at the current end of every file.
    pub fn new(logs_dir: &Path, filter: Filter) -> Self {
        let cursors = filter
            .services
            .iter()
            .map(|&s| {
                let cursor = std::fs::metadata(service_file(logs_dir, s))
                    .map(|m| Cursor {
                        inode: m.ino(),
                        offset: m.len(),
                        prev_ms: 0,
                    })
                    .unwrap_or_default();
                (s, cursor)
            })
            .collect();
        Tail {
            logs_dir: logs_dir.to_path_buf(),
            filter,
            cursors,
        }
    }

    /// The filter in force.
    pub fn filter(&self) -> &Filter {
        &self.filter
    }

    /// Lines appended since the last poll that pass the filter, oldest first.
    pub fn poll(&mut self) -> Vec<LogEntry> {
        let mut out = Vec::new();
        for (service, cursor) in &mut self.cursors {
            let path = service_file(&self.logs_dir, *service);
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            let mut lines = Vec::new();
            if meta.ino() != cursor.inode {
                // Rotated: finish the old file (now `.log.1`), then read the new one from 0.
                let old = rotated(&path);
                if std::fs::metadata(&old).is_ok_and(|m| m.ino() == cursor.inode) {
                    read_from(&old, &mut cursor.offset, &mut lines);
                }
                cursor.inode = meta.ino();
                cursor.offset = 0;
            } else if meta.len() < cursor.offset {
                cursor.offset = 0;
            }
            read_from(&path, &mut cursor.offset, &mut lines);
            for line in lines {
                let e = parse_line(*service, &line, cursor.prev_ms);
                cursor.prev_ms = e.time_ms;
                if self.filter.admits(&e) {
                    out.push(e);
                }
            }
        }
        merge(out)
    }
}

/// What `/ws?topic=logs` streams: the backlog the query asks for, then every new line that
/// passes its filter.
#[derive(Debug)]
pub struct Follow {
    tail: Tail,
    backlog: Vec<LogEntry>,
}

impl Follow {
    /// Check the query and read its backlog (blocking: file reads). The tail starts before the
    /// backlog is read, so a line written in between may come twice but none is lost.
    pub fn start(logs_dir: &Path, query: &LogQuery) -> Result<Follow, QueryError> {
        let (filter, n) = (query.filter()?, query.backlog()?);
        let tail = Tail::new(logs_dir, filter.clone());
        let backlog = merged(logs_dir, &filter, n).0;
        Ok(Follow { tail, backlog })
    }

    /// The frames to send now: the backlog on the first call, then the lines appended since.
    pub fn frames(&mut self) -> Vec<String> {
        std::mem::take(&mut self.backlog)
            .into_iter()
            .chain(self.tail.poll())
            .map(|e| ws_frame(&e))
            .collect()
    }
}

/// Append the complete lines of `path` after `offset` to `lines` and move `offset` past them
/// (a line still being written waits for the next poll).
fn read_from(path: &Path, offset: &mut u64, lines: &mut Vec<String>) {
    let Ok(mut f) = std::fs::File::open(path) else {
        return;
    };
    if f.seek(SeekFrom::Start(*offset)).is_err() {
        return;
    }
    let mut buf = Vec::new();
    if f.take(MAX_POLL_BYTES).read_to_end(&mut buf).is_err() {
        return;
    }
    let Some(end) = buf.iter().rposition(|&b| b == b'\n') else {
        return;
    };
    *offset += end as u64 + 1;
    lines.extend(
        String::from_utf8_lossy(&buf[..end])
            .split('\n')
            .map(str::to_string),
    );
}

#[cfg(test)]
mod tests;
