//! The `yaml` target: YAML bodies through [`decode_yaml`], read from a reader that hands the
//! body out in the pieces the input's prefix picks (same layout as the chunked targets).

use std::io::{self, Read};

use vx_proto::Batch;
use vx_proto::canonical::write_event;
use vx_proto::canonical_yaml::write_document;
use vx_proto::decode::decode_yaml;
use vx_proto::decode::yaml::ANCHOR_BUDGET_EVENTS;

use crate::{MAX_BODY, NOW, canonical_all, canonical_reparses, plan};

/// `max_event_bytes` for decoding one canonical document again: the document of an event
/// within any limit the plan picks, escapes and all, stays far below it.
const REDECODE_MAX_EVENT_BYTES: usize = 1 << 20;

/// A reader handing out the body in pieces of the given sizes, cycled (0 counts as 1: a
/// `read` of 0 bytes is the end of the input).
struct Pieces<'a> {
    rest: &'a [u8],
    sizes: &'a [u8],
    next: usize,
}

impl Read for Pieces<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let size = match self.sizes.get(self.next % self.sizes.len().max(1)) {
            Some(&s) => usize::from(s).max(1),
            None => usize::MAX,
        };
        self.next += 1;
        let n = size.min(buf.len()).min(self.rest.len());
        let (head, tail) = self.rest.split_at(n);
        if let Some(dst) = buf.get_mut(..n) {
            dst.copy_from_slice(head);
        }
        self.rest = tail;
        Ok(n)
    }
}

fn decode(
    body: &[u8],
    sizes: &[u8],
    max_event_bytes: usize,
) -> Result<Batch, vx_proto::InputError> {
    let mut batch = Batch::new();
    let reader = Pieces {
        rest: body,
        sizes,
        next: 0,
    };
    // As in the server, the decoded request is held to the body limit, which is at least the
    // body's own length.
    let max_body_bytes = body.len().max(64 << 10) as u64;
    decode_yaml(reader, max_event_bytes, max_body_bytes, NOW, &mut batch)?;
    Ok(batch)
}

/// The most canonical JSON a body of `body_len` bytes may decode to: what the body spells out
/// (a byte of YAML can become a few bytes of JSON: `\x85` → `\u0085`, or a field name and
/// punctuation around a one-byte scalar), plus what aliases can add, which the anchor budget
/// bounds per document and `max_event_bytes` per event.
fn expansion_bound(body_len: usize, max_event_bytes: usize) -> usize {
    let per_byte = 64;
    body_len
        .saturating_mul(per_byte)
        .saturating_add(max_event_bytes.saturating_mul(ANCHOR_BUDGET_EVENTS + 1))
        .max(64 << 10)
}

/// Decoding a YAML body never panics; the outcome (events or the whole error) does not depend
/// on where the reads split; what it decodes to is bounded by the body's size (aliases
/// included); and each accepted event, written as its canonical YAML document without `seq`
/// ([`write_document`]), decodes back to the same canonical JSON.
pub fn yaml_roundtrips(data: &[u8]) {
    let p = plan(data);
    if p.body.len() > MAX_BODY {
        return;
    }
    let whole = decode(p.body, &[], p.max_event_bytes).map(|b| canonical_all(&b));
    let chunked = decode(p.body, p.sizes, p.max_event_bytes).map(|b| canonical_all(&b));
    assert_eq!(
        whole,
        chunked,
        "yaml body {:?} (max_event_bytes {}, read sizes {:?}): one read and pieces disagree",
        String::from_utf8_lossy(p.body),
        p.max_event_bytes,
        p.sizes
    );
    let Ok(events) = whole else {
        return;
    };
    let total: usize = events.iter().map(Vec::len).sum();
    let bound = expansion_bound(p.body.len(), p.max_event_bytes);
    assert!(
        total <= bound,
        "yaml body of {} bytes {:?} (max_event_bytes {}) decodes to {} events, {total} bytes of \
         canonical JSON: more than the {bound} its size allows",
        p.body.len(),
        String::from_utf8_lossy(p.body),
        p.max_event_bytes,
        events.len(),
    );
    for ev in &events {
        canonical_reparses(ev);
    }
    let Ok(batch) = decode(p.body, &[], p.max_event_bytes) else {
        unreachable!("decoded once already");
    };
    for ev in batch.iter() {
        let mut canonical = Vec::new();
        write_event(&mut canonical, &ev, 1);
        let mut doc = Vec::new();
        write_document(&mut doc, &ev, None);
        let back = decode(&doc, &[], REDECODE_MAX_EVENT_BYTES).map(|b| canonical_all(&b));
        assert_eq!(
            back.as_ref()
                .map(|v| v.iter().map(|e| String::from_utf8_lossy(e)).collect()),
            Ok(vec![String::from_utf8_lossy(&canonical)]),
            "yaml body {:?}: the event {:?} as canonical YAML {:?} does not decode back to it",
            String::from_utf8_lossy(p.body),
            String::from_utf8_lossy(&canonical),
            String::from_utf8_lossy(&doc),
        );
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::seeds;

    #[test]
    fn pieces_hand_out_the_sizes() {
        let mut r = Pieces {
            rest: b"abcdef",
            sizes: &[2, 0],
            next: 0,
        };
        let mut buf = [0; 8];
        let mut got = Vec::new();
        loop {
            let n = r.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            got.push(buf[..n].to_vec());
        }
        assert_eq!(got, [&b"ab"[..], b"c", b"de", b"f"]);
    }

    #[test]
    fn seeds_decode_and_roundtrip() {
        let seeds = seeds::yaml();
        assert!(!seeds.is_empty());
        for s in &seeds {
            let p = plan(s);
            let batch = decode(p.body, p.sizes, p.max_event_bytes).unwrap();
            assert!(!batch.is_empty(), "{:?}", String::from_utf8_lossy(s));
            yaml_roundtrips(s);
        }
    }

    /// The finding of docs/FUZZING.md ("YAML alias amplification"): one anchored node of
    /// ~26 KB, aliased as the `data` of 2000 events of 33 bytes each, turns a 68 KB body
    /// into 52 MB of events (×770), each event within `max_event_bytes`. Ignored until the
    /// decoder bounds alias expansion per body; then this must pass (a 413, or a batch
    /// within the bound).
    #[test]
    fn alias_expansion_is_bounded_per_body() {
        let mut body = vec![0, 0];
        body.extend_from_slice(b"- {stream: s, type: t, data: {a0: &a0 \"");
        body.extend_from_slice(&[b'x'; 200]);
        body.push(b'"');
        for i in 1..8 {
            body.extend_from_slice(format!(", a{i}: &a{i} [*a{p}, *a{p}]", p = i - 1).as_bytes());
        }
        body.extend_from_slice(b"}}\n");
        for _ in 0..2000 {
            body.extend_from_slice(b"- {stream: s, type: t, data: *a7}\n");
        }
        yaml_roundtrips(&body);
    }

    #[test]
    fn errors_are_fine_too() {
        for body in [
            &b"\x00\x00[{"[..],
            b"\x00\x00- 1",
            b"\x00\x00\xff",
            b"\x00\x01\x03a: b\n",
        ] {
            yaml_roundtrips(body);
        }
    }
}
