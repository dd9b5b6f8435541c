//! Accept any HTTP/2 `:authority` on a Unix-socket gRPC server.
//!
//! Standard gRPC clients derive `:authority` from the target. For `unix:/run/svcos/auth.sock`
//! grpc-core (grpc-python, grpc-c++, ...) sends the percent-encoded path, `run%2Fsvcos%2Fauth.sock`;
//! the h2 crate under tonic parses `:authority` as a URI authority, refuses a `%` outside an IPv6
//! literal, and resets the stream with PROTOCOL_ERROR before tonic sees the request. On a Unix
//! socket the authority means nothing (there is no virtual hosting, the socket's mode is the access
//! control), so [`AnyAuthority`] sits between the socket and the server and rewrites an authority
//! that h2 would refuse into one it accepts.
//!
//! It rewrites the client's header blocks only, and only an `:authority` value that does not
//! parse: every other byte is passed through unchanged. The new value has the same decoded length
//! (each byte outside `[A-Za-z0-9.-]` becomes `-`), so the HPACK dynamic table the client's encoder
//! keeps and the one h2's decoder keeps stay the same size and in step, and a later request that
//! refers to the indexed entry gets the rewritten value too. The value is re-encoded as a plain
//! (non-Huffman) string, so a changed block is re-framed as one HEADERS frame plus CONTINUATION
//! frames of at most the protocol's minimum frame size.
//!
//! Only `:authority` named by the static table (index 1) or by a literal name is recognised; a
//! literal that names it through a dynamic-table entry is passed through as is (no client we know
//! encodes it that way: they send one authority per connection, indexed after the first request).
//! Anything that does not parse as HTTP/2 + HPACK is passed through untouched for h2 to refuse.

use std::io;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::codegen::http::uri::Authority;
use tonic::transport::server::Connected;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEADER: usize = 9;
const TYPE_HEADERS: u8 = 0x1;
const TYPE_CONTINUATION: u8 = 0x9;
const FLAG_END_HEADERS: u8 = 0x4;
const FLAG_PADDED: u8 = 0x8;
const FLAG_PRIORITY: u8 = 0x20;
/// SETTINGS_MAX_FRAME_SIZE's floor: every peer accepts frames this large.
const MIN_MAX_FRAME: usize = 16_384;
/// A frame longer than this is not buffered: h2 refuses it anyway (its limit is 16 KiB unless
/// raised), so the stream is passed through for h2 to answer.
const MAX_BUFFERED_FRAME: usize = 1 << 20;

/// A server-side connection whose client→server bytes pass through the `:authority` rewrite.
#[derive(Debug)]
pub struct AnyAuthority<S> {
    inner: S,
    rewrite: Rewriter,
}

impl<S> AnyAuthority<S> {
    /// Wrap an accepted connection.
    pub fn new(inner: S) -> Self {
        AnyAuthority {
            inner,
            rewrite: Rewriter::default(),
        }
    }
}

impl<S: Connected> Connected for AnyAuthority<S> {
    type ConnectInfo = S::ConnectInfo;
    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for AnyAuthority<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            if this.rewrite.take_output(buf) {
                return Poll::Ready(Ok(()));
            }
            // Nothing is held back any more: read straight into the caller's buffer.
            if this.rewrite.stage == Stage::Passthrough && this.rewrite.pending.is_empty() {
                return Pin::new(&mut this.inner).poll_read(cx, buf);
            }
            let mut chunk = [0u8; 8192];
            let mut chunk_buf = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut chunk_buf))?;
            let read = chunk_buf.filled();
            if read.is_empty() {
                // EOF: hand over whatever is held (an incomplete frame is h2's to refuse).
                this.rewrite.finish();
                this.rewrite.take_output(buf);
                return Poll::Ready(Ok(()));
            }
            this.rewrite.push(read);
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AnyAuthority<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Stage {
    #[default]
    Preface,
    Frames,
    Passthrough,
}

/// The byte-stream side of the rewrite, free of I/O so it can be tested with any chunking.
#[derive(Debug, Default)]
struct Rewriter {
    stage: Stage,
    /// Bytes read from the client and not yet released.
    pending: Vec<u8>,
    /// Bytes released for the server, from `out_pos` on.
    out: Vec<u8>,
    out_pos: usize,
}

impl Rewriter {
    /// Copy released bytes into `buf`; false when there were none.
    fn take_output(&mut self, buf: &mut ReadBuf<'_>) -> bool {
        let available = &self.out[self.out_pos..];
        if available.is_empty() || buf.remaining() == 0 {
            return false;
        }
        let n = available.len().min(buf.remaining());
        buf.put_slice(&available[..n]);
        self.out_pos += n;
        if self.out_pos == self.out.len() {
            self.out.clear();
            self.out_pos = 0;
        }
        true
    }

    fn push(&mut self, data: &[u8]) {
        self.pending.extend_from_slice(data);
        self.process();
    }

    fn finish(&mut self) {
        self.out.append(&mut self.pending);
        self.stage = Stage::Passthrough;
    }

    fn pass_through(&mut self) {
        self.stage = Stage::Passthrough;
        self.out.append(&mut self.pending);
    }

    fn process(&mut self) {
        if self.stage == Stage::Preface {
            let n = self.pending.len().min(PREFACE.len());
            if self.pending[..n] != PREFACE[..n] {
                return self.pass_through();
            }
            if n < PREFACE.len() {
                return;
            }
            self.out.extend(self.pending.drain(..PREFACE.len()));
            self.stage = Stage::Frames;
        }
        if self.stage == Stage::Passthrough {
            return self.pass_through();
        }
        let mut used = 0;
        loop {
            let rest = &self.pending[used..];
            let Some(first) = frame_at(rest) else {
                if rest.len() >= FRAME_HEADER && frame_len(rest) > MAX_BUFFERED_FRAME {
                    self.pending.drain(..used);
                    return self.pass_through();
                }
                break;
            };
            if first.kind != TYPE_HEADERS {
                self.out.extend_from_slice(&rest[..first.total]);
                used += first.total;
                continue;
            }
            // A header block: HEADERS, then CONTINUATION frames until END_HEADERS. Nothing else
            // may come between them, so wait until the whole block is here.
            let mut frames = vec![first];
            let mut end = first.total;
            while frames
                .last()
                .is_some_and(|f| f.flags & FLAG_END_HEADERS == 0)
            {
                match frame_at(&rest[end..]) {
                    Some(f) if f.kind == TYPE_CONTINUATION => {
                        end += f.total;
                        frames.push(f);
                    }
                    Some(_) => {
                        // A protocol error of the client's: h2 will say so.
                        self.pending.drain(..used);
                        return self.pass_through();
                    }
                    None => {
                        if rest.len() - end >= FRAME_HEADER
                            && frame_len(&rest[end..]) > MAX_BUFFERED_FRAME
                        {
                            self.pending.drain(..used);
                            return self.pass_through();
                        }
                        self.pending.drain(..used);
                        return;
                    }
                }
            }
            match rewrite_block(&rest[..end], &frames) {
                Some(framed) => self.out.extend_from_slice(&framed),
                None => self.out.extend_from_slice(&rest[..end]),
            }
            used += end;
        }
        self.pending.drain(..used);
    }
}

#[derive(Debug, Clone, Copy)]
struct Frame {
    kind: u8,
    flags: u8,
    stream: [u8; 4],
    /// Header plus payload.
    total: usize,
}

fn frame_len(bytes: &[u8]) -> usize {
    (usize::from(bytes[0]) << 16) | (usize::from(bytes[1]) << 8) | usize::from(bytes[2])
}

/// The complete frame at the start of `bytes`, if all of it is there.
fn frame_at(bytes: &[u8]) -> Option<Frame> {
    if bytes.len() < FRAME_HEADER {
        return None;
    }
    let total = FRAME_HEADER + frame_len(bytes);
    if bytes.len() < total || total - FRAME_HEADER > MAX_BUFFERED_FRAME {
        return None;
    }
    Some(Frame {
        kind: bytes[3],
        flags: bytes[4],
        stream: [bytes[5], bytes[6], bytes[7], bytes[8]],
        total,
    })
}

/// Re-frame a header block (`bytes` holds `frames`) if its `:authority` needed rewriting.
fn rewrite_block(bytes: &[u8], frames: &[Frame]) -> Option<Vec<u8>> {
    let head = frames[0];
    let payload = &bytes[FRAME_HEADER..head.total];
    let mut start = 0;
    let mut end = payload.len();
    if head.flags & FLAG_PADDED != 0 {
        let pad = usize::from(*payload.first()?);
        start = 1;
        end = end.checked_sub(pad)?;
    }
    let priority = if head.flags & FLAG_PRIORITY != 0 {
        let p = payload.get(start..start + 5)?;
        start += 5;
        Some(p)
    } else {
        None
    };
    let mut block = payload.get(start..end)?.to_vec();
    let mut at = head.total;
    for f in &frames[1..] {
        block.extend_from_slice(&bytes[at + FRAME_HEADER..at + f.total]);
        at += f.total;
    }
    let fixed = fix_header_block(&block)?;

    let mut out = Vec::with_capacity(fixed.len() + 2 * FRAME_HEADER + 5);
    let prio_len = priority.map_or(0, <[u8]>::len);
    let mut chunks = Vec::new();
    let first_len = fixed.len().min(MIN_MAX_FRAME - prio_len);
    chunks.push(&fixed[..first_len]);
    chunks.extend(fixed[first_len..].chunks(MIN_MAX_FRAME));
    let last = chunks.len() - 1;
    for (i, chunk) in chunks.iter().enumerate() {
        let (kind, mut flags, extra) = if i == 0 {
            (
                TYPE_HEADERS,
                head.flags & !(FLAG_PADDED | FLAG_END_HEADERS),
                priority.unwrap_or(&[]),
            )
        } else {
            (TYPE_CONTINUATION, 0, &[][..])
        };
        if i == last {
            flags |= FLAG_END_HEADERS;
        }
        let len = chunk.len() + extra.len();
        out.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags]);
        out.extend_from_slice(&head.stream);
        out.extend_from_slice(extra);
        out.extend_from_slice(chunk);
    }
    Some(out)
}

/// The header block with a refused `:authority` value replaced, or `None` when nothing needs to
/// change (or the block does not parse: h2 reports that itself).
fn fix_header_block(block: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(block.len() + 16);
    let mut changed = false;
    let mut i = 0;
    while i < block.len() {
        let b = block[i];
        let start = i;
        if b & 0x80 != 0 {
            // Indexed field: no string.
            i = read_int(block, i, 7)?.1;
            out.extend_from_slice(&block[start..i]);
            continue;
        }
        if b & 0xE0 == 0x20 {
            // Dynamic table size update.
            i = read_int(block, i, 5)?.1;
            out.extend_from_slice(&block[start..i]);
            continue;
        }
        let prefix = if b & 0xC0 == 0x40 { 6 } else { 4 };
        let (index, after_index) = read_int(block, i, prefix)?;
        i = after_index;
        let is_authority = if index == 0 {
            let name = read_string(block, i)?;
            i = name.end;
            name.decode()? == b":authority"
        } else {
            index == 1
        };
        let value = read_string(block, i)?;
        i = value.end;
        if is_authority {
            let decoded = value.decode()?;
            if Authority::try_from(decoded.as_slice()).is_err()
                && let Some(sane) = sanitize(&decoded)
            {
                out.extend_from_slice(&block[start..value.start]);
                write_raw_string(&mut out, &sane);
                changed = true;
                continue;
            }
        }
        out.extend_from_slice(&block[start..i]);
    }
    changed.then_some(out)
}

/// The same number of bytes, each outside `[A-Za-z0-9.-]` replaced by `-`, if that parses.
fn sanitize(value: &[u8]) -> Option<Vec<u8>> {
    let sane: Vec<u8> = value
        .iter()
        .map(|&c| {
            if c.is_ascii_alphanumeric() || c == b'.' || c == b'-' {
                c
            } else {
                b'-'
            }
        })
        .collect();
    Authority::try_from(sane.as_slice()).is_ok().then_some(sane)
}

/// An HPACK integer with an `prefix`-bit prefix at `block[i]`: (value, index after it).
fn read_int(block: &[u8], mut i: usize, prefix: u32) -> Option<(usize, usize)> {
    let max = (1usize << prefix) - 1;
    let mut value = usize::from(*block.get(i)?) & max;
    i += 1;
    if value < max {
        return Some((value, i));
    }
    let mut shift = 0u32;
    loop {
        let b = *block.get(i)?;
        i += 1;
        value = value.checked_add(usize::from(b & 0x7f).checked_shl(shift)?)?;
        if b & 0x80 == 0 {
            return Some((value, i));
        }
        shift += 7;
        if shift > 28 {
            return None;
        }
    }
}

fn write_int(out: &mut Vec<u8>, first_bits: u8, prefix: u32, mut value: usize) {
    let max = (1usize << prefix) - 1;
    if value < max {
        out.push(first_bits | value as u8);
        return;
    }
    out.push(first_bits | max as u8);
    value -= max;
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn write_raw_string(out: &mut Vec<u8>, s: &[u8]) {
    write_int(out, 0, 7, s.len());
    out.extend_from_slice(s);
}

struct HpackString<'a> {
    huffman: bool,
    bytes: &'a [u8],
    /// Where the representation starts and ends in the block.
    start: usize,
    end: usize,
}

impl HpackString<'_> {
    fn decode(&self) -> Option<Vec<u8>> {
        if self.huffman {
            huffman_decode(self.bytes)
        } else {
            Some(self.bytes.to_vec())
        }
    }
}

fn read_string(block: &[u8], i: usize) -> Option<HpackString<'_>> {
    let huffman = block.get(i)? & 0x80 != 0;
    let (len, data) = read_int(block, i, 7)?;
    let end = data.checked_add(len)?;
    Some(HpackString {
        huffman,
        bytes: block.get(data..end)?,
        start: i,
        end,
    })
}

/// Code length of every symbol of HPACK's Huffman code (RFC 7541, Appendix B; symbol 256 is EOS).
/// The code is canonical: codes of one length are consecutive in symbol order and each length's
/// first code follows the previous length's last, so the lengths alone define it.
const CODE_LENGTHS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, //
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28, //
    6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, //
    5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, //
    13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, //
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, //
    15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, //
    6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, //
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23, //
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, //
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, //
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23, //
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, //
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, //
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, //
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, //
    30,
];

const MAX_CODE_LEN: usize = 30;

/// The canonical decoding tables: symbols by (length, symbol), and per length its first code,
/// the index of its first symbol and how many symbols have it.
struct Canonical {
    symbols: [u16; 257],
    first_code: [u32; MAX_CODE_LEN + 1],
    first_index: [u16; MAX_CODE_LEN + 1],
    count: [u16; MAX_CODE_LEN + 1],
}

fn canonical() -> &'static Canonical {
    static TABLE: OnceLock<Canonical> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = Canonical {
            symbols: [0; 257],
            first_code: [0; MAX_CODE_LEN + 1],
            first_index: [0; MAX_CODE_LEN + 1],
            count: [0; MAX_CODE_LEN + 1],
        };
        let mut n = 0;
        for len in 1..=MAX_CODE_LEN {
            t.first_index[len] = n as u16;
            for (sym, &l) in CODE_LENGTHS.iter().enumerate() {
                if usize::from(l) == len {
                    t.symbols[n] = sym as u16;
                    n += 1;
                    t.count[len] += 1;
                }
            }
        }
        let mut code = 0u32;
        for len in 1..=MAX_CODE_LEN {
            t.first_code[len] = code;
            code = (code + u32::from(t.count[len])) << 1;
        }
        t
    })
}

/// Decode an HPACK Huffman string; `None` on EOS inside the string or bad padding.
fn huffman_decode(bytes: &[u8]) -> Option<Vec<u8>> {
    let t = canonical();
    let mut out = Vec::with_capacity(bytes.len() * 8 / 5);
    let mut code = 0u32;
    let mut len = 0usize;
    for &byte in bytes {
        for bit in (0..8).rev() {
            code = (code << 1) | u32::from((byte >> bit) & 1);
            len += 1;
            let offset = code.wrapping_sub(t.first_code[len]);
            if offset < u32::from(t.count[len]) {
                let sym = t.symbols[usize::from(t.first_index[len]) + offset as usize];
                if sym == 256 {
                    return None;
                }
                out.push(sym as u8);
                code = 0;
                len = 0;
            } else if len == MAX_CODE_LEN {
                return None;
            }
        }
    }
    // Padding: fewer than 8 bits, all ones (the most significant bits of EOS).
    (len < 8 && code == (1 << len) - 1).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Huffman-encode with the same canonical code (tests only: the server never encodes).
    fn huffman_encode(s: &[u8]) -> Vec<u8> {
        let t = canonical();
        let mut codes = [(0u32, 0u8); 257];
        for len in 1..=MAX_CODE_LEN {
            for k in 0..t.count[len] {
                let sym = t.symbols[usize::from(t.first_index[len] + k)];
                codes[usize::from(sym)] = (t.first_code[len] + u32::from(k), len as u8);
            }
        }
        let mut out = Vec::new();
        let (mut acc, mut bits) = (0u64, 0u32);
        for &c in s {
            let (code, len) = codes[usize::from(c)];
            acc = (acc << len) | u64::from(code);
            bits += u32::from(len);
            while bits >= 8 {
                bits -= 8;
                out.push((acc >> bits) as u8);
            }
        }
        if bits > 0 {
            out.push(((acc << (8 - bits)) as u8) | ((1u8 << (8 - bits)) - 1));
        }
        out
    }

    fn huffman_string(s: &[u8]) -> Vec<u8> {
        let enc = huffman_encode(s);
        let mut out = Vec::new();
        write_int(&mut out, 0x80, 7, enc.len());
        out.extend_from_slice(&enc);
        out
    }

    fn raw_string(s: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        write_raw_string(&mut out, s);
        out
    }

    /// Decode a block back into (name, value) pairs with a tiny static-table subset, to check
    /// what h2 would see.
    fn fields(block: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let statics: &[(&[u8], &[u8])] = &[
            (b":authority", b""),
            (b":method", b"GET"),
            (b":method", b"POST"),
            (b":path", b"/"),
            (b":path", b"/index.html"),
            (b":scheme", b"http"),
        ];
        let mut dynamic: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut out = Vec::new();
        let mut i = 0;
        while i < block.len() {
            let b = block[i];
            if b & 0x80 != 0 {
                let (idx, next) = read_int(block, i, 7).unwrap();
                i = next;
                let f = if idx <= 61 {
                    let (n, v) = statics[idx - 1];
                    (n.to_vec(), v.to_vec())
                } else {
                    dynamic[dynamic.len() - 1 - (idx - 62)].clone()
                };
                out.push(f);
                continue;
            }
            let prefix = if b & 0xC0 == 0x40 { 6 } else { 4 };
            let (idx, next) = read_int(block, i, prefix).unwrap();
            i = next;
            let name = if idx == 0 {
                let s = read_string(block, i).unwrap();
                i = s.end;
                s.decode().unwrap()
            } else {
                statics[idx - 1].0.to_vec()
            };
            let v = read_string(block, i).unwrap();
            i = v.end;
            let value = v.decode().unwrap();
            if prefix == 6 {
                dynamic.push((name.clone(), value.clone()));
            }
            out.push((name, value));
        }
        out
    }

    fn headers_frame(flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len();
        let mut f = vec![
            (len >> 16) as u8,
            (len >> 8) as u8,
            len as u8,
            TYPE_HEADERS,
            flags,
        ];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// What grpc-python sends for `unix:/tmp/fp/x.sock`, first request then the second.
    fn grpc_core_blocks(huffman: bool) -> (Vec<u8>, Vec<u8>) {
        let mut first = vec![0x83]; // :method POST
        first.push(0x86); // :scheme http
        first.push(0x44); // :path, literal with indexing
        first.extend(raw_string(b"/grpc.health.v1.Health/Check"));
        first.push(0x41); // :authority, literal with indexing (static name 1)
        let value = b"tmp%2Ffp%2Fx.sock";
        first.extend(if huffman {
            huffman_string(value)
        } else {
            raw_string(value)
        });
        first.push(0x40); // literal name, with indexing
        first.extend(huffman_string(b"te"));
        first.extend(huffman_string(b"trailers"));
        // Second request: everything indexed from the dynamic table.
        let second = vec![0x83, 0x86, 0xC0, 0xBF, 0xBE];
        (first, second)
    }

    #[test]
    fn huffman_round_trips_every_byte() {
        let all: Vec<u8> = (0..=255u8).collect();
        assert_eq!(huffman_decode(&huffman_encode(&all)).unwrap(), all);
        assert_eq!(
            huffman_decode(&huffman_encode(b"www.example.com")).unwrap(),
            b"www.example.com"
        );
        // RFC 7541 C.4.1: "www.example.com" Huffman-encoded.
        let rfc = [
            0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
        ];
        assert_eq!(huffman_decode(&rfc).unwrap(), b"www.example.com");
        // Padding that is not all ones, or 8 bits or more of it, is refused.
        assert!(
            huffman_decode(&[
                0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xfe
            ])
            .is_none()
        );
        assert!(huffman_decode(&[0xff, 0xff, 0xff, 0xff]).is_none());
    }

    #[test]
    fn a_percent_encoded_unix_path_becomes_a_valid_authority_of_the_same_length() {
        for huffman in [false, true] {
            let (first, second) = grpc_core_blocks(huffman);
            let fixed = fix_header_block(&first).expect("rewritten");
            let seen = fields(&fixed);
            let authority = &seen.iter().find(|(n, _)| n == b":authority").unwrap().1;
            assert_eq!(authority, b"tmp-2Ffp-2Fx.sock");
            assert!(Authority::try_from(authority.as_slice()).is_ok());
            // Every other field is unchanged.
            let before = fields(&first);
            assert_eq!(before.len(), seen.len());
            for (a, b) in before.iter().zip(&seen) {
                if a.0 != b":authority" {
                    assert_eq!(a, b);
                } else {
                    assert_eq!(a.1.len(), b.1.len(), "same size in the dynamic table");
                }
            }
            // The indexed second request needs no change.
            assert!(fix_header_block(&second).is_none());
        }
    }

    #[test]
    fn valid_authorities_and_literal_names_are_handled() {
        // A valid authority is left alone.
        let mut block = vec![0x83, 0x41];
        block.extend(raw_string(b"localhost:50051"));
        assert!(fix_header_block(&block).is_none());
        // :authority spelt as a literal name, without indexing.
        let mut block = vec![0x00];
        block.extend(huffman_string(b":authority"));
        block.extend(raw_string(b"/run/svcos/auth.sock"));
        let fixed = fix_header_block(&block).unwrap();
        assert_eq!(fields(&fixed)[0].1, b"-run-svcos-auth.sock");
        // A truncated block is left for h2 to refuse.
        assert!(fix_header_block(&[0x41, 0x85, b'a']).is_none());
    }

    fn run_through(input: &[u8], chunk: usize) -> Vec<u8> {
        let mut r = Rewriter::default();
        let mut out = Vec::new();
        for c in input.chunks(chunk) {
            r.push(c);
            out.extend(r.out.drain(r.out_pos..));
            r.out_pos = 0;
        }
        r.finish();
        out.extend(r.out.drain(r.out_pos..));
        out
    }

    #[test]
    fn the_stream_is_rewritten_whatever_the_chunking() {
        let (first, second) = grpc_core_blocks(true);
        let settings = [0, 0, 0, 4, 0, 0, 0, 0, 0];
        let data = [0, 0, 5, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0];
        // HEADERS split into HEADERS + CONTINUATION, padded, with priority.
        let mut payload = vec![3u8]; // pad length
        payload.extend([0x80, 0, 0, 0, 16]); // priority
        payload.extend(&first[..10]);
        payload.extend([0, 0, 0]);
        let mut input = PREFACE.to_vec();
        input.extend(settings);
        input.extend(headers_frame(FLAG_PADDED | FLAG_PRIORITY, 1, &payload));
        let cont_len = first.len() - 10;
        input.extend([
            (cont_len >> 16) as u8,
            (cont_len >> 8) as u8,
            cont_len as u8,
        ]);
        input.extend([TYPE_CONTINUATION, FLAG_END_HEADERS, 0, 0, 0, 1]);
        input.extend(&first[10..]);
        input.extend(data);
        input.extend(headers_frame(FLAG_END_HEADERS, 3, &second));
        for chunk in [1, 2, 7, 64, 4096] {
            let out = run_through(&input, chunk);
            assert!(out.starts_with(PREFACE));
            let mut rest = &out[PREFACE.len()..];
            assert_eq!(&rest[..9], &settings);
            rest = &rest[9..];
            let h = frame_at(rest).unwrap();
            assert_eq!(h.kind, TYPE_HEADERS);
            assert_eq!(h.flags, FLAG_PRIORITY | FLAG_END_HEADERS);
            assert_eq!(h.stream, [0, 0, 0, 1]);
            let block = &rest[FRAME_HEADER + 5..h.total];
            assert_eq!(&rest[FRAME_HEADER..FRAME_HEADER + 5], &[0x80, 0, 0, 0, 16]);
            let seen = fields(block);
            assert!(seen.contains(&(b":authority".to_vec(), b"tmp-2Ffp-2Fx.sock".to_vec())));
            rest = &rest[h.total..];
            assert_eq!(&rest[..data.len()], &data);
            rest = &rest[data.len()..];
            assert_eq!(rest, headers_frame(FLAG_END_HEADERS, 3, &second));
        }
    }

    #[test]
    fn non_http2_and_unchanged_streams_pass_through_byte_for_byte() {
        let http1 = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
        assert_eq!(run_through(http1, 3), http1);
        let mut input = PREFACE.to_vec();
        let mut block = vec![0x83, 0x86, 0x41];
        block.extend(raw_string(b"localhost"));
        input.extend(headers_frame(FLAG_END_HEADERS, 1, &block));
        input.extend([0, 0, 8, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(run_through(&input, 5), input);
    }
}
