//! Entry ids of the stream commands (docs/RESP.md, "Streams"): the entry of the event with
//! `seq` n has the id `n-0`; the ids a client sends (`-`, `+`, `(` exclusive, `<seq>`,
//! `<seq>-<n>`) become ranges of seqs with Redis's semantics, and the invalid ones get
//! Redis's words.
//!
//! Redis compares ids as pairs `(ms, seq)`; an entry here is `(n, 0)`. So, as in Redis, an
//! inclusive start `5-1` starts after `5-0` (at seq 6), an exclusive start `(5` or `(5-0`
//! also starts at 6, an end `5` or `5-3` includes seq 5, and an exclusive end `(5-0` ends at
//! seq 4 (`(5` alone is `(5-<max>`: it includes seq 5, as Redis's missing sequence part of
//! an end id is the largest).

/// Redis's answer to an id it cannot parse.
pub(super) const INVALID_ID: &str = "Invalid stream ID specified as stream command argument";

/// An id as sent: its two numbers; `None` for a missing sequence part.
fn parse(s: &[u8]) -> Option<(u64, Option<u64>)> {
    let text = std::str::from_utf8(s).ok()?;
    let number = |t: &str| {
        (!t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
            .then(|| t.parse::<u64>().ok())
            .flatten()
    };
    match text.split_once('-') {
        Some((ms, seq)) => Some((number(ms)?, Some(number(seq)?))),
        None => Some((number(text)?, None)),
    }
}

/// The entry id of the event with `seq`.
pub(super) fn entry_id(seq: u64) -> String {
    format!("{seq}-0")
}

/// The first seq a range starting at `arg` may hold (`XRANGE`'s start, `XREVRANGE`'s last
/// argument); `Ok(None)` when no seq can be in it.
pub(super) fn range_start(arg: &[u8]) -> Result<Option<u64>, &'static str> {
    match arg {
        b"-" => return Ok(Some(0)),
        b"+" => return Ok(Some(u64::MAX)),
        _ => {}
    }
    if let Some(inner) = arg.strip_prefix(b"(").filter(|i| !i.is_empty()) {
        let (ms, seq) = parse(inner).ok_or(INVALID_ID)?;
        if ms == u64::MAX && seq == Some(u64::MAX) {
            return Err("invalid start ID for the interval");
        }
        // Past `(ms, seq)`: the next entry is `(ms + 1, 0)`.
        return Ok(ms.checked_add(1));
    }
    match parse(arg).ok_or(INVALID_ID)? {
        (ms, None | Some(0)) => Ok(Some(ms)),
        (ms, Some(_)) => Ok(ms.checked_add(1)),
    }
}

/// The last seq a range ending at `arg` may hold (`XRANGE`'s end, `XREVRANGE`'s first
/// argument); `Ok(None)` when no seq can be in it.
pub(super) fn range_end(arg: &[u8]) -> Result<Option<u64>, &'static str> {
    match arg {
        b"+" => return Ok(Some(u64::MAX)),
        b"-" => return Ok(Some(0)),
        _ => {}
    }
    if let Some(inner) = arg.strip_prefix(b"(").filter(|i| !i.is_empty()) {
        let (ms, seq) = parse(inner).ok_or(INVALID_ID)?;
        // A missing sequence part of an end is the largest: `(5` still includes `5-0`.
        let seq = seq.unwrap_or(u64::MAX);
        if ms == 0 && seq == 0 {
            return Err("invalid end ID for the interval");
        }
        return Ok(if seq > 0 { Some(ms) } else { ms.checked_sub(1) });
    }
    let (ms, _) = parse(arg).ok_or(INVALID_ID)?;
    Ok(Some(ms))
}

/// An `XREAD` id: entries after it are read. `Ok(None)` for `$` (the stream's last entry
/// when the command is taken).
pub(super) fn read_after(arg: &[u8]) -> Result<Option<u64>, &'static str> {
    match arg {
        b"$" => Ok(None),
        b"-" => Ok(Some(0)),
        _ => parse(arg).map(|(ms, _)| Some(ms)).ok_or(INVALID_ID),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts() {
        assert_eq!(range_start(b"-"), Ok(Some(0)));
        assert_eq!(range_start(b"+"), Ok(Some(u64::MAX)));
        assert_eq!(range_start(b"5"), Ok(Some(5)));
        assert_eq!(range_start(b"5-0"), Ok(Some(5)));
        assert_eq!(range_start(b"5-1"), Ok(Some(6)), "after 5-0");
        assert_eq!(range_start(b"(5"), Ok(Some(6)));
        assert_eq!(range_start(b"(5-0"), Ok(Some(6)));
        assert_eq!(range_start(b"(5-9"), Ok(Some(6)));
        assert_eq!(range_start(b"18446744073709551615-1"), Ok(None));
        assert_eq!(
            range_start(b"(18446744073709551615-18446744073709551615"),
            Err("invalid start ID for the interval")
        );
        for bad in [
            &b"(-"[..],
            b"(+",
            b"x",
            b"5-",
            b"-5",
            b"5-x",
            b"",
            b"+5",
            b"1-2-3",
        ] {
            assert_eq!(range_start(bad), Err(INVALID_ID), "{bad:?}");
        }
    }

    #[test]
    fn ends() {
        assert_eq!(range_end(b"+"), Ok(Some(u64::MAX)));
        assert_eq!(range_end(b"-"), Ok(Some(0)));
        assert_eq!(range_end(b"5"), Ok(Some(5)));
        assert_eq!(range_end(b"5-3"), Ok(Some(5)));
        assert_eq!(range_end(b"(5-0"), Ok(Some(4)));
        assert_eq!(range_end(b"(5-1"), Ok(Some(5)), "5-0 is before 5-1");
        assert_eq!(range_end(b"(5"), Ok(Some(5)), "as Redis: (5 is (5-<max>");
        assert_eq!(range_end(b"(1-0"), Ok(Some(0)));
        assert_eq!(range_end(b"(0-0"), Err("invalid end ID for the interval"));
        assert_eq!(range_end(b"(+"), Err(INVALID_ID));
    }

    #[test]
    fn reads() {
        assert_eq!(read_after(b"$"), Ok(None));
        assert_eq!(read_after(b"0"), Ok(Some(0)));
        assert_eq!(read_after(b"0-0"), Ok(Some(0)));
        assert_eq!(read_after(b"7-3"), Ok(Some(7)));
        assert_eq!(read_after(b"-"), Ok(Some(0)));
        assert_eq!(read_after(b"+"), Err(INVALID_ID));
        assert_eq!(entry_id(42), "42-0");
    }
}
