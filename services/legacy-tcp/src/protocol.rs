//! The request side of the cgminer API, without I/O: framing and parsing.
//!
//! cgminer reads one request per connection. A request is either a JSON object
//! `{"command": "summary+pools", "parameter": "0"}` or plain text `command|parameter`.
//! Clients such as pyasic send bare JSON without a newline and then wait for the reply
//! (they read until we close), so the server cannot wait for a line end: [`frame`] tells
//! it whether the bytes read so far already hold a complete request.

use serde_json::Value;

/// The largest request the server reads; cgminer reads at most 4 KiB, we allow 8 KiB.
pub const MAX_REQUEST: usize = 8 * 1024;

/// Whether the bytes read so far form a whole request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// Keep reading: nothing useful yet, or a JSON value that has not ended.
    Incomplete,
    /// A request (possibly malformed) is complete; parse the first `len` bytes.
    Complete(usize),
}

/// Decide whether `buf` holds a complete request.
///
/// JSON (first non-blank byte `{`) is complete once a whole JSON value has been read, or
/// as soon as the bytes cannot become valid JSON any more (so garbage is answered at once).
/// Bytes after the value other than blanks make the whole buffer the request, which [`parse`]
/// then refuses as cgminer does (its jansson `json_loads` rejects trailing data); bytes that
/// arrive only after the reply went out are not read.
/// Plain text is complete at the first newline or NUL, or else with whatever the first read
/// brought: cgminer answers after a single `recv`, and plain-text clients such as
/// `echo -n summary | nc` neither terminate the line nor half-close.
pub fn frame(buf: &[u8]) -> Frame {
    let Some(start) = buf.iter().position(|b| !is_blank(*b)) else {
        return Frame::Incomplete;
    };
    if buf[start] == b'{' {
        // IgnoredAny walks the value without building it: framing allocates nothing.
        let mut values = serde_json::Deserializer::from_slice(&buf[start..])
            .into_iter::<serde::de::IgnoredAny>();
        match values.next() {
            Some(Ok(_)) => {
                let end = start + values.byte_offset();
                if buf[end..].iter().all(|b| is_blank(*b)) {
                    Frame::Complete(end)
                } else {
                    Frame::Complete(buf.len())
                }
            }
            Some(Err(e)) if e.is_eof() => Frame::Incomplete,
            _ => Frame::Complete(buf.len()),
        }
    } else {
        match buf[start..].iter().position(|b| *b == b'\n' || *b == 0) {
            Some(end) => Frame::Complete(start + end),
            None => Frame::Complete(buf.len()),
        }
    }
}

fn is_blank(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n' | 0)
}

/// How the client spoke, and therefore how the reply is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JSON in, JSON out.
    Json,
    /// `command|parameter` in, `KEY=value,...|` out.
    Plain,
}

/// A parsed request: one or more commands (joined with `+`) and an optional parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Reply encoding.
    pub format: Format,
    /// The command word exactly as sent (case-sensitive, like cgminer), possibly `a+b+c`.
    pub command: String,
    /// The parameter; cgminer converts JSON numbers to text.
    pub parameter: Option<String>,
}

impl Request {
    /// Whether several commands were joined with `+` (cgminer then ignores the parameter).
    pub fn is_join(&self) -> bool {
        self.command.contains('+')
    }

    /// The commands of a join in order, without empty parts and duplicates (as cgminer does).
    pub fn joined(&self) -> Vec<&str> {
        let mut seen: Vec<&str> = Vec::new();
        for part in self.command.split('+') {
            if !part.is_empty() && !seen.contains(&part) {
                seen.push(part);
            }
        }
        seen
    }
}

/// Why a request could not be parsed; each maps to a cgminer status code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// Nothing but blanks (spaces, newlines, NULs). cgminer looks the empty word up as a
    /// command and answers `Invalid command` (code 14).
    Empty,
    /// Not a JSON object, not UTF-8, or followed by more than blanks (cgminer code 23).
    InvalidJson,
    /// A JSON object without `command` (code 24).
    MissingCommand,
    /// `command` is not a string (code 14).
    CommandNotString,
}

/// Parse one complete request (the bytes [`frame`] accepted).
pub fn parse(bytes: &[u8]) -> Result<Request, ParseError> {
    let Some(start) = bytes.iter().position(|b| !is_blank(*b)) else {
        return Err(ParseError::Empty);
    };
    let bytes = &bytes[start..];
    if bytes[0] == b'{' {
        parse_json(bytes)
    } else {
        parse_plain(bytes)
    }
}

fn parse_json(bytes: &[u8]) -> Result<Request, ParseError> {
    let mut values = serde_json::Deserializer::from_slice(bytes).into_iter::<Value>();
    let Some(Ok(Value::Object(object))) = values.next() else {
        return Err(ParseError::InvalidJson);
    };
    if !bytes[values.byte_offset()..].iter().all(|b| is_blank(*b)) {
        return Err(ParseError::InvalidJson);
    }
    let command = match object.get("command") {
        None => return Err(ParseError::MissingCommand),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(ParseError::CommandNotString),
    };
    // cgminer accepts string, integer and real parameters and ignores other types.
    let parameter = match object.get("parameter") {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Some(n.to_string()),
        Some(Value::Number(n)) => n.as_f64().map(|f| format!("{f:.6}")),
        _ => None,
    };
    Ok(Request {
        format: Format::Json,
        command,
        parameter,
    })
}

fn parse_plain(bytes: &[u8]) -> Result<Request, ParseError> {
    let end = bytes
        .iter()
        .position(|b| matches!(b, b'\n' | b'\r' | 0))
        .unwrap_or(bytes.len());
    // Plain text is answered in plain text, so undecodable bytes become U+FFFD and then an
    // "Invalid command" reply rather than a JSON error the client did not ask for.
    let text = String::from_utf8_lossy(&bytes[..end]);
    let (command, parameter) = match text.split_once('|') {
        Some((c, p)) => (c.to_string(), Some(p.to_string())),
        None => (text.into_owned(), None),
    };
    Ok(Request {
        format: Format::Plain,
        command,
        parameter,
    })
}

/// The format a reply to unparseable bytes should use: JSON unless the client clearly
/// spoke plain text.
pub fn guess_format(bytes: &[u8]) -> Format {
    match bytes.iter().find(|b| !is_blank(**b)) {
        Some(b'{') | None => Format::Json,
        Some(_) => Format::Plain,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing_table() {
        let cases: &[(&[u8], Frame)] = &[
            (b"", Frame::Incomplete),
            (b"  \n", Frame::Incomplete),
            (br#"{"command":"summ"#, Frame::Incomplete),
            (br#"{"command":"summary"}"#, Frame::Complete(21)),
            (br#"  {"command":"summary"}  "#, Frame::Complete(23)),
            (br#"{"command":"summary"}{"x":1}"#, Frame::Complete(28)),
            (br#"{"command":"summary"} garbage"#, Frame::Complete(29)),
            (b"{\"command\":\"summary\"}\n\0", Frame::Complete(21)),
            (b"{]", Frame::Complete(2)),
            (b"summary", Frame::Complete(7)),
            (b"summary|0\nrest", Frame::Complete(9)),
            (b"pools\0", Frame::Complete(5)),
        ];
        for (input, want) in cases {
            assert_eq!(frame(input), *want, "{:?}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn parse_table() {
        let ok = |format, command: &str, parameter: Option<&str>| {
            Ok(Request {
                format,
                command: command.into(),
                parameter: parameter.map(Into::into),
            })
        };
        let cases: &[(&[u8], Result<Request, ParseError>)] = &[
            (
                br#"{"command":"summary"}"#,
                ok(Format::Json, "summary", None),
            ),
            (
                br#"{"command":"switchpool","parameter":"1"}"#,
                ok(Format::Json, "switchpool", Some("1")),
            ),
            (
                br#"{"command":"switchpool","parameter":2}"#,
                ok(Format::Json, "switchpool", Some("2")),
            ),
            (
                br#"{"command":"x","parameter":1.5}"#,
                ok(Format::Json, "x", Some("1.500000")),
            ),
            (
                br#"{"command":"x","parameter":true}"#,
                ok(Format::Json, "x", None),
            ),
            (b"summary", ok(Format::Plain, "summary", None)),
            (
                b"addpool|a,b,c\n",
                ok(Format::Plain, "addpool", Some("a,b,c")),
            ),
            (b"[1,2]", ok(Format::Plain, "[1,2]", None)),
            (b"{", Err(ParseError::InvalidJson)),
            (b"{]", Err(ParseError::InvalidJson)),
            (b"", Err(ParseError::Empty)),
            (b" \r\n\0\t", Err(ParseError::Empty)),
            (
                br#"{"command":"summary"} garbage"#,
                Err(ParseError::InvalidJson),
            ),
            (
                br#"{"command":"summary"}{"x":1}"#,
                Err(ParseError::InvalidJson),
            ),
            (
                b"{\"command\":\"summary\"} \n\0",
                ok(Format::Json, "summary", None),
            ),
            (br#"{"parameter":"1"}"#, Err(ParseError::MissingCommand)),
            (br#"{"command":5}"#, Err(ParseError::CommandNotString)),
        ];
        for (input, want) in cases {
            assert_eq!(parse(input), *want, "{:?}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn join_drops_empty_parts_and_duplicates() {
        let r = parse(br#"{"command":"summary++pools+summary+"}"#).unwrap();
        assert!(r.is_join());
        assert_eq!(r.joined(), ["summary", "pools"]);
    }

    #[test]
    fn garbage_never_panics() {
        // A cheap deterministic sweep; the cargo-fuzz target in fuzz/ goes further.
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        for len in 0..512 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    b"{}[]\":,|+ summary0\\\x00\xff"[(state % 21) as usize]
                })
                .collect();
            if let Frame::Complete(n) = frame(&bytes) {
                let _ = parse(&bytes[..n]);
            }
            let _ = parse(&bytes);
        }
    }
}
