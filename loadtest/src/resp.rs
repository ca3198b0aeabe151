//! RESP2, the Redis protocol, as far as the `kv` scenario needs it: commands are arrays of
//! bulk strings (written by vx-proto's encoder), and replies are parsed incrementally from a
//! buffer. Hand-written because it is forty lines, and a Redis client crate would bring its own connection management between
//! the schedule and the socket, where the load generator must control every send.

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
}
