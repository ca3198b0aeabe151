//! RESP2, the Redis protocol, as far as the `kv` scenario and the stream lanes need it:
//! commands are arrays of bulk strings (written by vx-proto's encoder), and replies are parsed
//! incrementally from a buffer: [`parse`] frames a reply without copying it (the load), [`parse_value`] returns
//! one whole (the few answers a run reads: `HELLO`, `XLEN`, an entry's id), and
//! [`RangeReader`] walks an `XRANGE` reply entry by entry as its bytes arrive, checking each
//! entry's id. Hand-written because it is a few hundred lines, and a Redis client crate would
//! bring its own connection management between the schedule and the socket, where the load
//! generator must control every send.

/// Append a command (`GET key`, `SET key value`, `DEL key`) to `out`: the server's own
/// encoder (vx-proto), which writes its length lines with `itoa`.
pub use vx_proto::resp::encode_command as encode;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Simple(String),
    Error(String),
    Int(i64),
    /// A bulk string's length, or `None` for nil (a GET miss).
    Bulk(Option<usize>),
    /// An array's element count (elements are consumed, not returned).
    Array(Option<usize>),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("not RESP: {0}")]
pub struct RespError(String);

/// Nesting of arrays the parser follows; Redis answers these commands with flat replies.
const MAX_DEPTH: usize = 8;
/// The largest bulk string accepted (Redis's own proto-max-bulk-len default).
const MAX_BULK: usize = 512 << 20;

/// Where the first CRLF of `b` starts. A search for `\n` first: a two-byte `memmem` search
/// builds its searcher on every call.
fn crlf(b: &[u8]) -> Option<usize> {
    memchr::memchr_iter(b'\n', b).find_map(|i| {
        let cr = i.checked_sub(1)?;
        (b.get(cr) == Some(&b'\r')).then_some(cr)
    })
}

/// Parse one reply from the front of `buf`: `Ok(None)` if it is not complete yet, else the
/// reply and the bytes it took.
pub fn parse(buf: &[u8]) -> Result<Option<(Reply, usize)>, RespError> {
    parse_at(buf, 0, 0)
}

fn parse_at(buf: &[u8], at: usize, depth: usize) -> Result<Option<(Reply, usize)>, RespError> {
    if depth > MAX_DEPTH {
        return Err(RespError("arrays nested too deep".into()));
    }
    let Some(rest) = buf.get(at..) else {
        return Ok(None);
    };
    let Some(end) = crlf(rest) else {
        if rest.len() > 64 << 10 {
            return Err(RespError("a line over 64 KiB".into()));
        }
        return Ok(None);
    };
    let Some((&tag, line)) = rest[..end].split_first() else {
        return Err(RespError("an empty line".into()));
    };
    let line = std::str::from_utf8(line).map_err(|_| RespError("a line is not UTF-8".into()))?;
    let next = at + end + 2;
    let int = |s: &str| {
        s.parse::<i64>()
            .map_err(|_| RespError(format!("bad integer {s:?}")))
    };
    match tag {
        b'+' => Ok(Some((Reply::Simple(line.into()), next))),
        b'-' => Ok(Some((Reply::Error(line.into()), next))),
        b':' => Ok(Some((Reply::Int(int(line)?), next))),
        b'$' => {
            let n = int(line)?;
            if n < 0 {
                return Ok(Some((Reply::Bulk(None), next)));
            }
            let n = usize::try_from(n).map_err(|_| RespError("bulk length".into()))?;
            if n > MAX_BULK {
                return Err(RespError(format!("a bulk string of {n} bytes")));
            }
            if buf.len() < next + n + 2 {
                return Ok(None);
            }
            if &buf[next + n..next + n + 2] != b"\r\n" {
                return Err(RespError("a bulk string without its CRLF".into()));
            }
            Ok(Some((Reply::Bulk(Some(n)), next + n + 2)))
        }
        b'*' => {
            let n = int(line)?;
            if n < 0 {
                return Ok(Some((Reply::Array(None), next)));
            }
            let count = usize::try_from(n).map_err(|_| RespError("array length".into()))?;
            let mut pos = next;
            for _ in 0..count {
                match parse_at(buf, pos, depth + 1)? {
                    Some((_, p)) => pos = p,
                    None => return Ok(None),
                }
            }
            Ok(Some((Reply::Array(Some(count)), pos)))
        }
        other => Err(RespError(format!("unknown reply type {:?}", other as char))),
    }
}

/// A reply with its contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Simple(String),
    Error(String),
    Int(i64),
    /// A bulk string, or `None` for nil.
    Bulk(Option<Vec<u8>>),
    /// An array, or `None` for a nil array.
    Array(Option<Vec<Value>>),
}

impl Value {
    /// The bytes of a bulk or simple string.
    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Bulk(Some(b)) => Some(b),
            Value::Simple(s) => Some(s.as_bytes()),
            _ => None,
        }
    }

    /// The elements of an array (a nil array has none).
    pub fn items(&self) -> Option<&[Value]> {
        match self {
            Value::Array(Some(v)) => Some(v),
            Value::Array(None) => Some(&[]),
            _ => None,
        }
    }

    /// The value of `name` in a map, which RESP2 sends as a flat array of names and values
    /// (`HELLO 2`'s answer).
    pub fn field(&self, name: &str) -> Option<&Value> {
        self.items()?
            .chunks_exact(2)
            .find(|kv| kv[0].bytes() == Some(name.as_bytes()))
            .map(|kv| &kv[1])
    }
}

/// Parse one whole reply with its contents from the front of `buf`, as [`parse`] does.
pub fn parse_value(buf: &[u8]) -> Result<Option<(Value, usize)>, RespError> {
    value_at(buf, 0, 0)
}

fn value_at(buf: &[u8], at: usize, depth: usize) -> Result<Option<(Value, usize)>, RespError> {
    let Some((reply, next)) = parse_at(buf, at, depth)? else {
        return Ok(None);
    };
    Ok(Some(match reply {
        Reply::Simple(s) => (Value::Simple(s), next),
        Reply::Error(e) => (Value::Error(e), next),
        Reply::Int(i) => (Value::Int(i), next),
        Reply::Bulk(None) => (Value::Bulk(None), next),
        Reply::Bulk(Some(n)) => {
            // The bulk string ends with CRLF at `next`; its bytes are the n before.
            (
                Value::Bulk(Some(buf[next - 2 - n..next - 2].to_vec())),
                next,
            )
        }
        Reply::Array(None) => (Value::Array(None), next),
        Reply::Array(Some(n)) => {
            // The whole array is in `buf` (parse_at checked): walk its elements again.
            let mut pos = at + crlf(&buf[at..]).unwrap_or(0) + 2;
            let mut items = Vec::with_capacity(n.min(1024));
            for _ in 0..n {
                match value_at(buf, pos, depth + 1)? {
                    Some((v, p)) => {
                        items.push(v);
                        pos = p;
                    }
                    None => return Ok(None),
                }
            }
            (Value::Array(Some(items)), next)
        }
    }))
}

/// A stream entry id `<ms>-<seq>` as its two numbers (Veltrix's ids are `<seq>-0`).
pub fn parse_id(id: &[u8]) -> Option<(u64, u64)> {
    let text = std::str::from_utf8(id).ok()?;
    let (a, b) = text.split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// What an `XRANGE` reply held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Range {
    /// `entries` entries in `bytes` bytes of reply; `unexpected` of them did not have the id
    /// asked for (`<from + i>-0` for the i-th).
    Entries {
        entries: u64,
        bytes: u64,
        unexpected: u64,
    },
    /// An error reply.
    Error(String),
    /// Something other than an array of entries (the reply's first line).
    Other(String),
}

/// Reads one `XRANGE` reply entry by entry as its bytes arrive: a page of 10,000 entries is
/// walked once, not again from its start at every read, and what was read of it need not stay
/// buffered. Each entry's id is checked against the one expected: the range asked for is
/// `<from>-0` onwards, and a stream of `<seq>-0` ids without holes (Veltrix's, or a Redis
/// stream the run filled) holds exactly `<from>-0`, `<from + 1>-0`, … in it.
#[derive(Clone, Debug)]
pub struct RangeReader {
    /// Entries left in the reply; `None` before its first line.
    left: Option<u64>,
    next_seq: u64,
    entries: u64,
    bytes: u64,
    unexpected: u64,
}

impl RangeReader {
    /// A reply whose first entry should be `<from>-0`.
    pub fn new(from: u64) -> RangeReader {
        RangeReader {
            left: None,
            next_seq: from,
            entries: 0,
            bytes: 0,
            unexpected: 0,
        }
    }

    /// Read what `buf` holds of the reply: the bytes used (the caller drops them) and the
    /// reply once it is whole.
    pub fn read(&mut self, buf: &[u8]) -> Result<(usize, Option<Range>), RespError> {
        let mut pos = 0;
        let mut left = match self.left {
            Some(n) => n,
            None => {
                let Some(end) = crlf(buf) else {
                    return Ok((0, None));
                };
                if buf.first() != Some(&b'*') {
                    // An error or another type: take the whole reply.
                    let Some((reply, n)) = parse(buf)? else {
                        return Ok((0, None));
                    };
                    let what = match reply {
                        Reply::Error(e) => Range::Error(e),
                        _ => Range::Other(String::from_utf8_lossy(&buf[..end]).into_owned()),
                    };
                    return Ok((n, Some(what)));
                }
                let n = std::str::from_utf8(&buf[1..end])
                    .ok()
                    .and_then(|s| s.parse::<i64>().ok())
                    .ok_or_else(|| RespError("bad array length".into()))?;
                pos = end + 2;
                self.bytes += pos as u64;
                // A nil array (`*-1`) holds no entries.
                u64::try_from(n).unwrap_or(0)
            }
        };
        while left > 0 {
            let Some((_, end)) = parse_at(buf, pos, 0)? else {
                self.left = Some(left);
                return Ok((pos, None));
            };
            let id = entry_id(&buf[pos..end]);
            if id.and_then(parse_id) != Some((self.next_seq, 0)) {
                self.unexpected += 1;
            }
            self.next_seq += 1;
            self.entries += 1;
            self.bytes += (end - pos) as u64;
            pos = end;
            left -= 1;
        }
        self.left = Some(0);
        Ok((
            pos,
            Some(Range::Entries {
                entries: self.entries,
                bytes: self.bytes,
                unexpected: self.unexpected,
            }),
        ))
    }
}

/// The id of an entry `*2 $<n> <id> *<fields>…` (`None` if it is not of that shape).
fn entry_id(entry: &[u8]) -> Option<&[u8]> {
    let rest = entry.strip_prefix(b"*2\r\n$")?;
    let end = crlf(rest)?;
    let n: usize = std::str::from_utf8(&rest[..end]).ok()?.parse().ok()?;
    rest.get(end + 2..end + 2 + n)
}

/// The pause a `-TRYAGAIN` asks for: Veltrix's backpressure ends its message with
/// `(retry after N ms)`.
pub fn retry_after(message: &str) -> Option<std::time::Duration> {
    let (_, rest) = message.rsplit_once("retry after ")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok().map(std::time::Duration::from_millis)
}

/// An error reply as the report lists it: `RESP` and the message up to its first `,` or `:`
/// (at most 80 characters), so that Veltrix's `ERR invalid_event: …` reads `RESP ERR
/// invalid_event` and Redis's `ERR unknown command 'XADD', with args …` reads `RESP ERR
/// unknown command 'XADD'`, without a kind per argument.
pub fn error_label(message: &str) -> String {
    let cut = message.find([',', ':']).unwrap_or(message.len());
    let mut label = String::from("RESP ");
    label.extend(message[..cut].trim_end().chars().take(80));
    label
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_encode_as_arrays_of_bulk_strings() {
        let mut out = Vec::new();
        encode(&[b"SET", b"key:1", b"v"], &mut out);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$5\r\nkey:1\r\n$1\r\nv\r\n");
    }

    #[test]
    fn replies_parse_whole_or_wait_for_more() {
        let all: &[(&[u8], Reply)] = &[
            (b"+OK\r\n", Reply::Simple("OK".into())),
            (b"-ERR wrong\r\n", Reply::Error("ERR wrong".into())),
            (b":42\r\n", Reply::Int(42)),
            (b"$-1\r\n", Reply::Bulk(None)),
            (b"$3\r\nabc\r\n", Reply::Bulk(Some(3))),
            (b"*2\r\n$1\r\na\r\n:1\r\n", Reply::Array(Some(2))),
        ];
        for (bytes, reply) in all {
            assert_eq!(parse(bytes), Ok(Some((reply.clone(), bytes.len()))));
            for cut in 0..bytes.len() {
                assert_eq!(parse(&bytes[..cut]), Ok(None), "{bytes:?} cut at {cut}");
            }
        }
        // A bare LF inside a line is part of it; the line ends at the first CRLF.
        assert_eq!(
            parse(b"-ERR a\nb\r\n"),
            Ok(Some((Reply::Error("ERR a\nb".into()), 10)))
        );
        // Two replies in one buffer: the first is taken, the rest left.
        assert_eq!(parse(b":1\r\n:2\r\n"), Ok(Some((Reply::Int(1), 4))));
        for bad in [&b"?x\r\n"[..], b":x\r\n", b"$3\r\nabcd\r\n", b"\r\n"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn values_parse_with_their_contents() {
        let hello = b"*4\r\n$6\r\nserver\r\n$5\r\nredis\r\n$5\r\nproto\r\n:2\r\n";
        let (v, n) = parse_value(hello)
            .ok()
            .flatten()
            .unwrap_or((Value::Int(0), 0));
        assert_eq!(n, hello.len());
        assert_eq!(
            v.field("server").and_then(Value::bytes),
            Some(&b"redis"[..])
        );
        assert_eq!(v.field("proto"), Some(&Value::Int(2)));
        assert_eq!(v.field("nope"), None);
        for cut in 0..hello.len() {
            assert_eq!(parse_value(&hello[..cut]), Ok(None), "cut at {cut}");
        }
        assert_eq!(
            parse_value(b"*2\r\n*-1\r\n$-1\r\n"),
            Ok(Some((
                Value::Array(Some(vec![Value::Array(None), Value::Bulk(None)])),
                14
            )))
        );
        assert_eq!(parse_id(b"42-0"), Some((42, 0)));
        assert_eq!(parse_id(b"1712345678901-3"), Some((1_712_345_678_901, 3)));
        for bad in [&b"42"[..], b"-0", b"a-0", b"1-", b""] {
            assert_eq!(parse_id(bad), None, "{bad:?}");
        }
    }

    /// An XRANGE reply of the entries `ids`, each with the fields `type lt data xx`.
    fn xrange_reply(ids: &[&str]) -> Vec<u8> {
        let mut out = format!("*{}\r\n", ids.len()).into_bytes();
        for id in ids {
            out.extend_from_slice(format!("*2\r\n${}\r\n{id}\r\n", id.len()).as_bytes());
            encode(&[b"type", b"lt", b"data", b"xx"], &mut out);
        }
        out
    }

    /// Feed `reply` to a reader in pieces of `piece` bytes, as reads would bring it, dropping
    /// what it used; what it returns at the end.
    fn read_in_pieces(from: u64, reply: &[u8], piece: usize) -> (Range, usize) {
        let mut r = RangeReader::new(from);
        let mut buf = Vec::new();
        let mut used = 0;
        for chunk in reply.chunks(piece.max(1)) {
            buf.extend_from_slice(chunk);
            let (n, done) = r.read(&buf).unwrap_or((0, None));
            buf.drain(..n);
            used += n;
            if let Some(d) = done {
                return (d, used);
            }
        }
        (Range::Other("incomplete".into()), used)
    }

    #[test]
    fn xrange_replies_are_read_entry_by_entry_in_any_pieces() {
        let reply = xrange_reply(&["7-0", "8-0", "9-0"]);
        let whole = Range::Entries {
            entries: 3,
            bytes: reply.len() as u64,
            unexpected: 0,
        };
        for piece in 1..=reply.len() {
            assert_eq!(
                read_in_pieces(7, &reply, piece),
                (whole.clone(), reply.len()),
                "pieces of {piece}"
            );
        }
        // Ids other than those asked for are counted, not taken for a broken reply.
        for (from, ids, unexpected) in [
            (6, &["7-0", "8-0", "9-0"][..], 3),
            (7, &["7-0", "9-0", "10-0"][..], 2),
            (7, &["7-0", "8-1", "9-0"][..], 1),
            (1, &["1712345678901-0"][..], 1),
        ] {
            let reply = xrange_reply(ids);
            let (got, _) = read_in_pieces(from, &reply, 5);
            assert!(
                matches!(got, Range::Entries { unexpected: u, .. } if u == unexpected),
                "{ids:?} from {from}: {got:?}"
            );
        }
        // Empty, nil, an error, another type; and the next reply is left in the buffer.
        let mut r = RangeReader::new(1);
        assert_eq!(
            r.read(b"*0\r\n:1\r\n"),
            Ok((
                4,
                Some(Range::Entries {
                    entries: 0,
                    bytes: 4,
                    unexpected: 0
                })
            ))
        );
        let mut r = RangeReader::new(1);
        assert!(matches!(
            r.read(b"*-1\r\n"),
            Ok((5, Some(Range::Entries { entries: 0, .. })))
        ));
        let mut r = RangeReader::new(1);
        assert_eq!(
            r.read(b"-ERR no such key\r\n*0\r\n"),
            Ok((18, Some(Range::Error("ERR no such key".into()))))
        );
        let mut r = RangeReader::new(1);
        assert_eq!(r.read(b"-ERR no"), Ok((0, None)));
        let mut r = RangeReader::new(1);
        assert_eq!(r.read(b":3\r\n"), Ok((4, Some(Range::Other(":3".into())))));
        let mut r = RangeReader::new(1);
        assert!(r.read(b"*x\r\n").is_err());
    }

    #[test]
    fn errors_are_labelled_and_tryagain_gives_its_pause() {
        assert_eq!(
            error_label("ERR unknown command 'XADD', with args beginning with: 'lt-0' '*'"),
            "RESP ERR unknown command 'XADD'"
        );
        assert_eq!(
            error_label("ERR invalid_event: type must be a string"),
            "RESP ERR invalid_event"
        );
        assert_eq!(error_label("WRONGTYPE"), "RESP WRONGTYPE");
        assert_eq!(error_label(&"x".repeat(300)).len(), 5 + 80);
        assert_eq!(
            retry_after("TRYAGAIN backpressure: queue full (retry after 25 ms)"),
            Some(std::time::Duration::from_millis(25))
        );
        assert_eq!(retry_after("TRYAGAIN backpressure: queue full"), None);
    }
}
