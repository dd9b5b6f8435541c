//! The reply side of the cgminer API, without I/O: a small model of what cgminer prints
//! (a STATUS block plus at most one data section) and its two encodings.
//!
//! Keys keep the order they were added in, because fleet tools written against cgminer
//! sometimes scan replies textually, and cgminer itself prints in insertion order.

use std::borrow::Cow;
use std::fmt::Write as _;

use crate::protocol::Format;

/// cgminer's status codes used by this server (numbers from cgminer's `api.c`).
pub mod code {
    /// `%d Pool(s)`.
    pub const POOL: u32 = 7;
    /// `No pools`.
    pub const NOPOOL: u32 = 8;
    /// `%d ASC(s)`.
    pub const DEVS: u32 = 9;
    /// `No ASCs`.
    pub const NODEVS: u32 = 10;
    /// `Summary`.
    pub const SUMM: u32 = 11;
    /// `Invalid command`.
    pub const INVCMD: u32 = 14;
    /// `Missing device id parameter`.
    pub const MISID: u32 = 15;
    /// `... versions`.
    pub const VERSION: u32 = 22;
    /// `Invalid JSON`.
    pub const INVJSON: u32 = 23;
    /// `Missing JSON 'command'`.
    pub const MISCMD: u32 = 24;
    /// `Missing pool id parameter`.
    pub const MISPID: u32 = 25;
    /// `Invalid pool id %d - range is 0 - %d`.
    pub const INVPID: u32 = 26;
    /// `Switching to pool %d:'%s'`.
    pub const SWITCHP: u32 = 27;
    /// `... config`.
    pub const MINECONFIG: u32 = 33;
    /// `Access denied to '%s' command`.
    pub const ACCDENY: u32 = 45;
    /// `Privileged access OK`.
    pub const ACCOK: u32 = 46;
    /// `Enabling pool %d:'%s'`.
    pub const ENAPOOL: u32 = 47;
    /// `Disabling pool %d:'%s'`.
    pub const DISPOOL: u32 = 48;
    /// `Pool %d:'%s' already enabled`.
    pub const ALRENAP: u32 = 49;
    /// `Pool %d:'%s' already disabled`.
    pub const ALRDISP: u32 = 50;
    /// `Cannot disable last active pool %d:'%s'`.
    pub const DISLASTP: u32 = 51;
    /// `Missing addpool details`.
    pub const MISPDP: u32 = 52;
    /// `Invalid addpool details '%s'`.
    pub const INVPDP: u32 = 53;
    /// `Added pool '%s'`.
    pub const ADDPOOL: u32 = 55;
    /// `Cannot remove last pool %d:'%s'`.
    pub const REMLASTP: u32 = 66;
    /// `Cannot remove active pool %d:'%s'`.
    pub const ACTPOOL: u32 = 67;
    /// `Removed pool %d:'%s'`.
    pub const REMPOOL: u32 = 68;
    /// `Device Details`.
    pub const DEVDETAILS: u32 = 69;
    /// `... stats`.
    pub const MINESTATS: u32 = 70;
    /// `Missing check cmd`.
    pub const MISCHK: u32 = 71;
    /// `Check command`.
    pub const CHECK: u32 = 72;
    /// `Changed pool priorities`.
    pub const POOLPRIO: u32 = 73;
    /// `Duplicate pool specified %d`.
    pub const DUPPID: u32 = 74;
    /// `... coin`.
    pub const MINECOIN: u32 = 78;
    /// `No ASCs`.
    pub const ASCNON: u32 = 105;
    /// `Invalid ASC id %d - range is 0 - %d`.
    pub const INVASC: u32 = 107;
    /// `ASC %d already enabled`.
    pub const ASCLRENA: u32 = 108;
    /// `ASC %d already disabled`.
    pub const ASCLRDIS: u32 = 109;
    /// `ASC %d sent enable message`.
    pub const ASCENA: u32 = 110;
    /// `ASC %d set disable flag`.
    pub const ASCDIS: u32 = 111;
    /// `Missing option after ASC number`.
    pub const MISASCOPT: u32 = 116;
    /// `ASC %d set help: %s`.
    pub const ASCHELP: u32 = 118;
    /// `ASC %d set OK`.
    pub const ASCSETOK: u32 = 119;
    /// `ASC %d set failed: %s`.
    pub const ASCSETERR: u32 = 120;
    /// `LCD`.
    pub const LCD: u32 = 125;
    /// bOSminer's extension code for `temps`.
    pub const TEMPS: u32 = 201;
    /// bOSminer's extension code for `fans`.
    pub const FANS: u32 = 202;
}

/// cgminer's severity letters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// `E`: the command failed.
    Error,
    /// `W`: answered, but something is wrong (here: a peer service is restarting).
    Warning,
    /// `I`: informational (e.g. "already enabled").
    Info,
    /// `S`: success.
    Success,
}

impl Severity {
    /// The letter cgminer prints.
    pub fn letter(self) -> &'static str {
        match self {
            Severity::Error => "E",
            Severity::Warning => "W",
            Severity::Info => "I",
            Severity::Success => "S",
        }
    }
}

/// The STATUS block of a reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    /// S/I/W/E.
    pub severity: Severity,
    /// cgminer's message code.
    pub code: u32,
    /// Human-readable message.
    pub msg: String,
}

impl Status {
    /// A status with the given parts.
    pub fn new(severity: Severity, code: u32, msg: impl Into<String>) -> Self {
        Status {
            severity,
            code,
            msg: msg.into(),
        }
    }
    /// Success.
    pub fn ok(code: u32, msg: impl Into<String>) -> Self {
        Self::new(Severity::Success, code, msg)
    }
    /// Error.
    pub fn error(code: u32, msg: impl Into<String>) -> Self {
        Self::new(Severity::Error, code, msg)
    }
    /// `Invalid command` (code 14).
    pub fn invalid_command() -> Self {
        Self::error(code::INVCMD, "Invalid command")
    }
    /// `Invalid JSON` (code 23).
    pub fn invalid_json() -> Self {
        Self::error(code::INVJSON, "Invalid JSON")
    }
    /// `Access denied to '<command>' command` (code 45).
    pub fn access_denied(command: &str) -> Self {
        Self::error(
            code::ACCDENY,
            format!("Access denied to '{command}' command"),
        )
    }
}

/// A value with the type cgminer would print it as.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A string.
    Str(Cow<'static, str>),
    /// A signed integer.
    Int(i64),
    /// An unsigned integer.
    UInt(u64),
    /// A real printed with a fixed number of decimals (cgminer: MHS 2, diff 8, double 6).
    Real(f64, u8),
    /// `true`/`false`.
    Bool(bool),
}

impl From<&'static str> for Value {
    fn from(s: &'static str) -> Self {
        Value::Str(Cow::Borrowed(s))
    }
}
impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Str(Cow::Owned(s))
    }
}
impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value::UInt(v)
    }
}
impl From<u32> for Value {
    fn from(v: u32) -> Self {
        Value::UInt(v.into())
    }
}
impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}
impl From<i32> for Value {
    fn from(v: i32) -> Self {
        Value::Int(v.into())
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}

/// A real with cgminer's hashrate precision (2 decimals).
pub fn rate(v: f64) -> Value {
    Value::Real(v, 2)
}
/// A real with cgminer's difficulty precision (8 decimals).
pub fn diff(v: f64) -> Value {
    Value::Real(v, 8)
}
/// A real with cgminer's generic double precision (6 decimals).
pub fn real(v: f64) -> Value {
    Value::Real(v, 6)
}

/// One object of a data section, keys in insertion order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Record(pub Vec<(Cow<'static, str>, Value)>);

impl Record {
    /// An empty record.
    pub fn new() -> Self {
        Record(Vec::with_capacity(32))
    }
    /// Append a key with a static name.
    pub fn add(&mut self, key: &'static str, value: impl Into<Value>) -> &mut Self {
        self.0.push((Cow::Borrowed(key), value.into()));
        self
    }
    /// Append a key with a computed name (e.g. `chain_rate1`).
    pub fn add_owned(&mut self, key: String, value: impl Into<Value>) -> &mut Self {
        self.0.push((Cow::Owned(key), value.into()));
        self
    }
    /// The value of a key (tests and consistency checks).
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
}

/// A data section such as `SUMMARY` or `POOLS`.
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    /// The section key, e.g. `SUMMARY`.
    pub name: &'static str,
    /// Its records.
    pub records: Vec<Record>,
    /// Whether plain text prints `NAME,` before the records (cgminer does for single-record
    /// sections such as SUMMARY and VERSION; list sections start each record with its index).
    pub plain_header: bool,
}

/// The reply to one command: a status and at most one section.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The STATUS block.
    pub status: Status,
    /// The data, if any.
    pub section: Option<Section>,
}

impl Reply {
    /// A reply with only a status.
    pub fn status(status: Status) -> Self {
        Reply {
            status,
            section: None,
        }
    }
    /// A reply with a status and a single-record section (printed with a header in plain text).
    pub fn single(status: Status, name: &'static str, record: Record) -> Self {
        Reply {
            status,
            section: Some(Section {
                name,
                records: vec![record],
                plain_header: true,
            }),
        }
    }
    /// A reply with a status and a list section.
    pub fn list(status: Status, name: &'static str, records: Vec<Record>) -> Self {
        Reply {
            status,
            section: Some(Section {
                name,
                records,
                plain_header: false,
            }),
        }
    }
}

/// What the whole connection gets back: one reply, or a `+` join of named replies.
#[derive(Debug, Clone, PartialEq)]
pub enum Response {
    /// A single command's reply.
    Single(Reply),
    /// A join, in request order: `(command, reply)`.
    Join(Vec<(String, Reply)>),
}

/// Fields every STATUS block carries besides the status itself.
#[derive(Debug, Clone, Copy)]
pub struct Stamp<'a> {
    /// Unix seconds of the request (`When`).
    pub when: i64,
    /// `Description`: who answers (cgminer prints its own name and version).
    pub description: &'a str,
}

/// Encode a response the way cgminer does, including the trailing NUL.
pub fn encode(response: &Response, format: Format, stamp: Stamp<'_>) -> Vec<u8> {
    let mut out = String::with_capacity(4096);
    match (response, format) {
        (Response::Single(reply), Format::Json) => json_reply(&mut out, reply, stamp),
        (Response::Single(reply), Format::Plain) => plain_reply(&mut out, reply, stamp),
        (Response::Join(parts), Format::Json) => {
            out.push('{');
            for (i, (command, reply)) in parts.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                json_str(&mut out, command);
                out.push_str(":[");
                json_reply(&mut out, reply, stamp);
                out.push(']');
            }
            if !parts.is_empty() {
                out.push(',');
            }
            out.push_str("\"id\":1}");
        }
        (Response::Join(parts), Format::Plain) => {
            for (command, reply) in parts {
                out.push_str("CMD=");
                plain_str(&mut out, command);
                out.push('|');
                plain_reply(&mut out, reply, stamp);
            }
        }
    }
    let mut bytes = out.into_bytes();
    bytes.push(0);
    bytes
}

fn status_record(status: &Status, stamp: Stamp<'_>) -> Record {
    let mut r = Record(Vec::with_capacity(5));
    r.add("STATUS", status.severity.letter())
        .add("When", stamp.when)
        .add("Code", status.code)
        .add_owned("Msg".into(), status.msg.clone())
        .add_owned("Description".into(), stamp.description.to_string());
    r
}

fn json_reply(out: &mut String, reply: &Reply, stamp: Stamp<'_>) {
    out.push_str("{\"STATUS\":[");
    json_record(out, &status_record(&reply.status, stamp));
    out.push(']');
    if let Some(section) = &reply.section {
        out.push_str(",\"");
        out.push_str(section.name);
        out.push_str("\":[");
        for (i, record) in section.records.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            json_record(out, record);
        }
        out.push(']');
    }
    out.push_str(",\"id\":1}");
}

fn json_record(out: &mut String, record: &Record) {
    out.push('{');
    for (i, (key, value)) in record.0.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        json_str(out, key);
        out.push(':');
        match value {
            Value::Str(s) => json_str(out, s),
            other => scalar(out, other),
        }
    }
    out.push('}');
}

fn scalar(out: &mut String, value: &Value) {
    match value {
        Value::Str(s) => out.push_str(s),
        Value::Int(v) => {
            let _ = write!(out, "{v}");
        }
        Value::UInt(v) => {
            let _ = write!(out, "{v}");
        }
        // JSON has no NaN/inf; a value we cannot know is printed as 0 like cgminer's zeroed
        // counters rather than producing a reply no parser accepts.
        Value::Real(v, decimals) => {
            let v = if v.is_finite() { *v } else { 0.0 };
            let _ = write!(out, "{v:.prec$}", prec = usize::from(*decimals));
        }
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
    }
}

fn json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn plain_reply(out: &mut String, reply: &Reply, stamp: Stamp<'_>) {
    plain_record(out, &status_record(&reply.status, stamp));
    if let Some(section) = &reply.section {
        if section.plain_header {
            out.push_str(section.name);
            out.push(',');
        }
        for record in &section.records {
            plain_record(out, record);
        }
    }
}

fn plain_record(out: &mut String, record: &Record) {
    for (i, (key, value)) in record.0.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(key);
        out.push('=');
        match value {
            Value::Str(s) => plain_str(out, s),
            other => scalar(out, other),
        }
    }
    out.push('|');
}

/// cgminer escapes its separators with a backslash in plain-text replies.
fn plain_str(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            ',' | '|' | '=' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '\0' | '\n' | '\r' => out.push(' '),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAMP: Stamp<'static> = Stamp {
        when: 1_700_000_000,
        description: "svcOS 0.1.0",
    };

    fn summary() -> Reply {
        let mut r = Record::new();
        r.add("Elapsed", 42u64)
            .add("GHS 5s", rate(13_500.123))
            .add("Best Share", diff(1.5))
            .add("Pool", "a\"b,c");
        Reply::single(Status::ok(code::SUMM, "Summary"), "SUMMARY", r)
    }

    #[test]
    fn json_single_matches_cgminer_shape() {
        let bytes = encode(&Response::Single(summary()), Format::Json, STAMP);
        assert_eq!(bytes.last(), Some(&0));
        let text = std::str::from_utf8(&bytes[..bytes.len() - 1]).unwrap();
        assert_eq!(
            text,
            "{\"STATUS\":[{\"STATUS\":\"S\",\"When\":1700000000,\"Code\":11,\"Msg\":\"Summary\",\
             \"Description\":\"svcOS 0.1.0\"}],\"SUMMARY\":[{\"Elapsed\":42,\"GHS 5s\":13500.12,\
             \"Best Share\":1.50000000,\"Pool\":\"a\\\"b,c\"}],\"id\":1}"
        );
        let v: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(v["SUMMARY"][0]["GHS 5s"], 13500.12);
    }

    #[test]
    fn json_join_nests_each_reply_in_a_list() {
        let resp = Response::Join(vec![
            ("summary".into(), summary()),
            ("bogus".into(), Reply::status(Status::invalid_command())),
        ]);
        let bytes = encode(&resp, Format::Json, STAMP);
        let v: serde_json::Value = serde_json::from_slice(&bytes[..bytes.len() - 1]).unwrap();
        assert_eq!(v["id"], 1);
        assert_eq!(v["summary"][0]["SUMMARY"][0]["Elapsed"], 42);
        assert_eq!(v["bogus"][0]["STATUS"][0]["Code"], 14);
        assert_eq!(v["bogus"][0]["STATUS"][0]["STATUS"], "E");
    }

    #[test]
    fn plain_escapes_separators_and_prints_headers() {
        let bytes = encode(&Response::Single(summary()), Format::Plain, STAMP);
        let text = std::str::from_utf8(&bytes[..bytes.len() - 1]).unwrap();
        assert_eq!(
            text,
            "STATUS=S,When=1700000000,Code=11,Msg=Summary,Description=svcOS 0.1.0|\
             SUMMARY,Elapsed=42,GHS 5s=13500.12,Best Share=1.50000000,Pool=a\"b\\,c|"
        );
        let mut pool = Record::new();
        pool.add("POOL", 0u32);
        let list = Reply::list(Status::ok(code::POOL, "1 Pool(s)"), "POOLS", vec![pool]);
        let join = Response::Join(vec![("pools".into(), list)]);
        let bytes = encode(&join, Format::Plain, STAMP);
        let text = std::str::from_utf8(&bytes).unwrap();
        assert!(text.starts_with("CMD=pools|STATUS=S,"), "{text}");
        assert!(text.ends_with("|POOL=0|\0"), "{text}");
    }

    #[test]
    fn non_finite_reals_stay_valid_json() {
        let mut r = Record::new();
        r.add("x", rate(f64::NAN)).add("y", rate(f64::INFINITY));
        let reply = Reply::single(Status::ok(code::SUMM, "Summary"), "SUMMARY", r);
        let bytes = encode(&Response::Single(reply), Format::Json, STAMP);
        let v: serde_json::Value = serde_json::from_slice(&bytes[..bytes.len() - 1]).unwrap();
        assert_eq!(v["SUMMARY"][0]["x"], 0.0);
    }
}
