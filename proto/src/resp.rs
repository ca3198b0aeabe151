//! The Redis protocol (RESP2 and RESP3) as the feature listener speaks it (docs/RESP.md): an
//! incremental, bounded parser of client commands, and the writer of replies.
//!
//! A command is an array of bulk strings (`*2\r\n$4\r\nHGET\r\n…`) or an inline line
//! (`PING\r\n`, what a person types into `nc`). [`parse_command`] looks at the bytes buffered
//! so far and says either where one whole command is, how many bytes it needs at least before
//! it can say more, or why the input is not RESP. It never allocates more than the command's
//! argument list, and every length it reads is checked against [`Limits`] before anything is
//! sized by it, so no input makes the caller buffer without bound.

use std::ops::Range;

/// What one command may be.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Arguments of one command, its name included.
    pub max_args: usize,
    /// Bytes of one argument.
    pub max_bulk: usize,
    /// Bytes of an inline command line, and of a `*`/`$` header line.
    pub max_inline: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_args: 4096,
            max_bulk: 1 << 20,
            max_inline: 64 << 10,
        }
    }
}

/// What the buffered bytes hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// One command: its arguments as ranges of the buffer, and its length in bytes. An empty
    /// argument list (a blank inline line, `*0`) is a command that does nothing.
    Command { args: Vec<Range<usize>>, len: usize },
    /// The command is incomplete: nothing can be said before the buffer holds this many bytes.
    Need(usize),
}

/// Input that is not RESP, or past a limit: Redis answers `-ERR Protocol error: …` and closes
/// the connection, and so does Veltrix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RespError {
    #[error("invalid multibulk length")]
    ArrayLength,
    #[error("invalid bulk length")]
    BulkLength,
    #[error("expected '$', got '{0}'")]
    ExpectedBulk(char),
    #[error("too big inline request")]
    InlineTooBig,
    #[error("too big header line")]
    HeaderTooBig,
    #[error("a bulk string does not end with CRLF")]
    BulkEnd,
    #[error("unbalanced quotes in request")]
    Quotes,
}

/// One whole command at the start of `buf`, or how many bytes are needed first.
pub fn parse_command(buf: &[u8], limits: &Limits) -> Result<Parsed, RespError> {
    match buf.first() {
        None => Ok(Parsed::Need(1)),
        Some(b'*') => parse_array(buf, limits),
        Some(_) => parse_inline(buf, limits),
    }
}

/// The integer of a `*`/`$` header line starting at `at` (after the type byte), and where the
/// line ends (after CRLF); `Ok(None)` if the line is incomplete.
fn header(
    buf: &[u8],
    at: usize,
    limits: &Limits,
    bad: RespError,
) -> Result<Option<(i64, usize)>, RespError> {
    let rest = buf.get(at..).unwrap_or_default();
    let Some(nl) = memchr::memchr(b'\n', rest) else {
        if rest.len() > limits.max_inline {
            return Err(RespError::HeaderTooBig);
        }
        return Ok(None);
    };
    // `nl` is within `rest`: the line without its LF, which must end in CR.
    let line = &rest[..nl];
    let Some(digits) = line.strip_suffix(b"\r") else {
        return Err(bad);
    };
    let n = int(digits).ok_or(bad)?;
    Ok(Some((n, at + nl + 1)))
}

/// A decimal integer as `str::parse::<i64>` reads one (an optional sign, then at least one
/// digit, no overflow), without a UTF-8 check and a `str` first: every command has a header
/// line per argument.
fn int(digits: &[u8]) -> Option<i64> {
    let (neg, ds) = match digits.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, digits),
    };
    if ds.is_empty() {
        return None;
    }
    let mut v: i64 = 0;
    for &d in ds {
        if !d.is_ascii_digit() {
            return None;
        }
        let d = i64::from(d - b'0');
        v = v.checked_mul(10)?;
        v = if neg {
            v.checked_sub(d)?
        } else {
            v.checked_add(d)?
        };
    }
    Some(v)
}

fn parse_array(buf: &[u8], limits: &Limits) -> Result<Parsed, RespError> {
    let Some((n, mut pos)) = header(buf, 1, limits, RespError::ArrayLength)? else {
        return Ok(Parsed::Need(buf.len() + 1));
    };
    if n <= 0 {
        return Ok(Parsed::Command {
            args: Vec::new(),
            len: pos,
        });
    }
    let n = usize::try_from(n).map_err(|_| RespError::ArrayLength)?;
    if n > limits.max_args {
        return Err(RespError::ArrayLength);
    }
    let mut args = Vec::with_capacity(n);
    for _ in 0..n {
        match buf.get(pos) {
            None => return Ok(Parsed::Need(pos + 1)),
            Some(b'$') => {}
            Some(&c) => return Err(RespError::ExpectedBulk(char::from(c))),
        }
        let Some((len, start)) = header(buf, pos + 1, limits, RespError::BulkLength)? else {
            return Ok(Parsed::Need(buf.len() + 1));
        };
        let len = usize::try_from(len).map_err(|_| RespError::BulkLength)?;
        if len > limits.max_bulk {
            return Err(RespError::BulkLength);
        }
        let end = start + len;
        if buf.len() < end + 2 {
            return Ok(Parsed::Need(end + 2));
        }
        if &buf[end..end + 2] != b"\r\n" {
            return Err(RespError::BulkEnd);
        }
        args.push(start..end);
        pos = end + 2;
    }
    Ok(Parsed::Command { args, len: pos })
}

/// An inline command: words separated by spaces or tabs, double- or single-quoted words taken
/// whole (no escapes inside quotes: the words a person types).
fn parse_inline(buf: &[u8], limits: &Limits) -> Result<Parsed, RespError> {
    let Some(nl) = memchr::memchr(b'\n', buf) else {
        if buf.len() > limits.max_inline {
            return Err(RespError::InlineTooBig);
        }
        return Ok(Parsed::Need(buf.len() + 1));
    };
    if nl > limits.max_inline {
        return Err(RespError::InlineTooBig);
    }
    let end = if nl > 0 && buf[nl - 1] == b'\r' {
        nl - 1
    } else {
        nl
    };
    let mut args = Vec::new();
    let mut i = 0;
    while i < end {
        let c = buf[i];
        if c == b' ' || c == b'\t' {
            i += 1;
            continue;
        }
        if c == b'"' || c == b'\'' {
            let close = memchr::memchr(c, &buf[i + 1..end]).ok_or(RespError::Quotes)?;
            args.push(i + 1..i + 1 + close);
            i += close + 2;
        } else {
            let start = i;
            while i < end && buf[i] != b' ' && buf[i] != b'\t' {
                i += 1;
            }
            args.push(start..i);
        }
        if args.len() > limits.max_args {
            return Err(RespError::ArrayLength);
        }
    }
    Ok(Parsed::Command { args, len: nl + 1 })
}

/// The array form of a command, as clients send it.
pub fn encode_command(args: &[&[u8]], out: &mut Vec<u8>) {
    out.push(b'*');
    push_int(out, args.len() as i64);
    for a in args {
        out.push(b'$');
        push_int(out, a.len() as i64);
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

fn push_int(out: &mut Vec<u8>, n: i64) {
    let mut b = itoa::Buffer::new();
    out.extend_from_slice(b.format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Replies, written in the protocol version the connection chose (2 until `HELLO 3`).
pub struct Reply<'a> {
    pub out: &'a mut Vec<u8>,
    pub resp3: bool,
}

impl Reply<'_> {
    pub fn simple(&mut self, s: &str) {
        self.out.push(b'+');
        self.line(s);
    }

    /// `-PREFIX message`, on one line whatever `message` holds.
    pub fn error(&mut self, prefix: &str, message: &str) {
        self.out.push(b'-');
        self.out.extend_from_slice(prefix.as_bytes());
        if !message.is_empty() {
            self.out.push(b' ');
            self.line(message);
        } else {
            self.out.extend_from_slice(b"\r\n");
        }
    }

    /// Text on one line: CR and LF would end the reply early, so they become spaces.
    fn line(&mut self, s: &str) {
        self.out.extend(
            s.bytes()
                .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
        self.out.extend_from_slice(b"\r\n");
    }

    pub fn int(&mut self, n: i64) {
        self.out.push(b':');
        push_int(self.out, n);
    }

    pub fn bulk(&mut self, b: &[u8]) {
        self.out.push(b'$');
        push_int(self.out, b.len() as i64);
        self.out.extend_from_slice(b);
        self.out.extend_from_slice(b"\r\n");
    }

    /// No value: RESP3's null, RESP2's null bulk string.
    pub fn null(&mut self) {
        self.out
            .extend_from_slice(if self.resp3 { b"_\r\n" } else { b"$-1\r\n" });
    }

    /// No array: RESP3's null, RESP2's null array (`*-1`), as Redis answers an `XREAD` that
    /// found nothing.
    pub fn null_array(&mut self) {
        self.out
            .extend_from_slice(if self.resp3 { b"_\r\n" } else { b"*-1\r\n" });
    }

    /// RESP3's boolean; in RESP2 the integer 1 or 0, as Redis converts them.
    pub fn boolean(&mut self, b: bool) {
        if self.resp3 {
            self.out
                .extend_from_slice(if b { b"#t\r\n" } else { b"#f\r\n" });
        } else {
            self.int(i64::from(b));
        }
    }

    pub fn array(&mut self, n: usize) {
        self.out.push(b'*');
        push_int(self.out, n as i64);
    }

    /// A map of `n` pairs; in RESP2 a flat array of `2n` elements.
    pub fn map(&mut self, n: usize) {
        if self.resp3 {
            self.out.push(b'%');
            push_int(self.out, n as i64);
        } else {
            self.array(2 * n);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn args_of(buf: &[u8], p: &Parsed) -> Vec<Vec<u8>> {
        match p {
            Parsed::Command { args, .. } => args.iter().map(|r| buf[r.clone()].to_vec()).collect(),
            Parsed::Need(_) => panic!("incomplete"),
        }
    }

    #[test]
    fn array_and_inline_commands() {
        let l = Limits::default();
        let buf = b"*3\r\n$4\r\nHGET\r\n$8\r\nplayer-7\r\n$6\r\ndamage\r\nPING";
        let p = parse_command(buf, &l).unwrap();
        assert_eq!(
            args_of(buf, &p),
            vec![b"HGET".to_vec(), b"player-7".to_vec(), b"damage".to_vec()]
        );
        let Parsed::Command { len, .. } = p else {
            unreachable!()
        };
        assert_eq!(&buf[len..], b"PING");
        assert_eq!(parse_command(&buf[len..], &l).unwrap(), Parsed::Need(5));

        let buf = b"hset  p1 \"two words\" 'x y'\r\n";
        let p = parse_command(buf, &l).unwrap();
        assert_eq!(
            args_of(buf, &p),
            vec![
                b"hset".to_vec(),
                b"p1".to_vec(),
                b"two words".to_vec(),
                b"x y".to_vec()
            ]
        );
        assert_eq!(
            parse_command(b"\r\n", &l).unwrap(),
            Parsed::Command {
                args: vec![],
                len: 2
            }
        );
    }

    #[test]
    fn incomplete_input_says_how_much_it_needs() {
        let l = Limits::default();
        let full = b"*2\r\n$4\r\nECHO\r\n$5\r\nhello\r\n";
        // Inside the last bulk: its end is known exactly.
        assert_eq!(
            parse_command(&full[..20], &l).unwrap(),
            Parsed::Need(full.len())
        );
        for cut in 0..full.len() {
            match parse_command(&full[..cut], &l).unwrap() {
                Parsed::Need(n) => assert!(n > cut && n <= full.len(), "cut {cut}: {n}"),
                Parsed::Command { .. } => panic!("cut {cut}: a command from a prefix"),
            }
        }
    }

    #[test]
    fn bad_input_and_limits() {
        let l = Limits {
            max_args: 3,
            max_bulk: 8,
            max_inline: 16,
        };
        let e = |b: &[u8]| parse_command(b, &l).unwrap_err();
        assert_eq!(e(b"*x\r\n"), RespError::ArrayLength);
        assert_eq!(e(b"*4\r\n"), RespError::ArrayLength);
        assert_eq!(e(b"*1\r\n:1\r\n"), RespError::ExpectedBulk(':'));
        assert_eq!(e(b"*1\r\n$9\r\n"), RespError::BulkLength);
        assert_eq!(e(b"*1\r\n$-1\r\n"), RespError::BulkLength);
        assert_eq!(e(b"*1\r\n$2\r\nabcd"), RespError::BulkEnd);
        assert_eq!(e(b"*1\n"), RespError::ArrayLength);
        assert_eq!(e(&[b'*'; 40]), RespError::HeaderTooBig);
        assert_eq!(e(&[b'a'; 40]), RespError::InlineTooBig);
        assert_eq!(e(b"a \"b\r\n"), RespError::Quotes);
        assert_eq!(e(b"a b c d\r\n"), RespError::ArrayLength);
    }

    #[test]
    fn replies_in_both_versions() {
        let mut out = Vec::new();
        let mut r = Reply {
            out: &mut out,
            resp3: false,
        };
        r.map(1);
        r.bulk(b"a");
        r.int(-3);
        r.null();
        r.boolean(true);
        r.error("ERR", "two\r\nlines");
        r.simple("OK");
        assert_eq!(
            out,
            b"*2\r\n$1\r\na\r\n:-3\r\n$-1\r\n:1\r\n-ERR two  lines\r\n+OK\r\n"
        );
        let mut out = Vec::new();
        let mut r = Reply {
            out: &mut out,
            resp3: true,
        };
        r.map(1);
        r.null();
        r.boolean(false);
        assert_eq!(out, b"%1\r\n_\r\n#f\r\n");
    }

    proptest! {
        /// A header's integer is read exactly as `str::parse::<i64>` reads it, for any bytes:
        /// numbers, their edges, signs and junk.
        #[test]
        fn header_integers_read_as_str_parse(
            b in prop_oneof![
                prop::collection::vec(any::<u8>(), 0..24),
                prop::collection::vec(prop::sample::select(b"+-0123456789".to_vec()), 0..24),
                any::<i64>().prop_map(|n| n.to_string().into_bytes()),
                prop::sample::select(vec![
                    b"9223372036854775807".to_vec(), b"9223372036854775808".to_vec(),
                    b"-9223372036854775808".to_vec(), b"-9223372036854775809".to_vec(),
                    b"+".to_vec(), b"-".to_vec(), b"".to_vec(), b"+-1".to_vec(), b"007".to_vec(),
                    b"+5".to_vec(), b"-0".to_vec(), b"+9223372036854775807".to_vec(),
                    b"1 ".to_vec(), b"\xff1".to_vec(),
                ]),
            ],
        ) {
            let want = std::str::from_utf8(&b).ok().and_then(|s| s.parse::<i64>().ok());
            prop_assert_eq!(int(&b), want);
        }

        /// Whatever the split of a stream of commands into reads, the parser finds the same
        /// commands, and never claims a command from fewer bytes than it has.
        #[test]
        fn any_split_finds_the_same_commands(
            cmds in prop::collection::vec(
                prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 1..6), 1..8),
            cut in any::<prop::sample::Index>(),
        ) {
            let l = Limits::default();
            let mut wire = Vec::new();
            for c in &cmds {
                let a: Vec<&[u8]> = c.iter().map(Vec::as_slice).collect();
                encode_command(&a, &mut wire);
            }
            let cut = cut.index(wire.len() + 1);
            let mut buf = wire[..cut].to_vec();
            let mut rest = &wire[cut..];
            let mut found = Vec::new();
            loop {
                match parse_command(&buf, &l).unwrap() {
                    Parsed::Command { args, len } => {
                        prop_assert!(len <= buf.len());
                        found.push(args.iter().map(|r| buf[r.clone()].to_vec()).collect::<Vec<_>>());
                        buf.drain(..len);
                    }
                    Parsed::Need(n) => {
                        prop_assert!(n > buf.len());
                        if rest.is_empty() { break; }
                        let take = (n - buf.len()).min(rest.len());
                        buf.extend_from_slice(&rest[..take]);
                        rest = &rest[take..];
                    }
                }
            }
            prop_assert_eq!(found, cmds);
            prop_assert!(buf.is_empty());
        }

        /// Any bytes: an answer, never a panic, and ranges inside the buffer.
        #[test]
        fn any_bytes_are_answered(buf in prop::collection::vec(any::<u8>(), 0..200)) {
            let l = Limits { max_args: 8, max_bulk: 64, max_inline: 64 };
            match parse_command(&buf, &l) {
                Ok(Parsed::Command { args, len }) => {
                    prop_assert!(len <= buf.len());
                    prop_assert!(args.len() <= 8);
                    for r in args { prop_assert!(r.end <= len); }
                }
                Ok(Parsed::Need(n)) => prop_assert!(n > buf.len()),
                Err(_) => {}
            }
        }
    }
}
