//! The properties the fuzz targets check, kept apart from the `fuzz_target!` shims so that the
//! input layout and the invariants are written down in one place.
//!
//! # Input layout of the chunked targets (`ndjson`, `json`, `yaml`, `frames`)
//! `[limit][n][size_1 … size_n][body…]`:
//! - `limit`: below 128 → `ingest.max_event_bytes` = 64 KiB; otherwise `limit - 127` (1–128
//!   bytes), so that the over-the-limit paths of both framers are reached with short inputs.
//! - `n`: `n % 16` chunk sizes follow, each one byte (0–255; 0 feeds an empty chunk).
//! - the body is fed in chunks of those sizes, cycling through them until it is used up.
//!
//! Inputs too short for the prefix are decoded as a body in one chunk. The `yaml` and
//! `frames` targets use the same layout (for `yaml`, the sizes are those of the reads);
//! `content` has its own (`content`).
//!
//! # Modules
//! - here: the layout, the `ndjson`, `json` and `event` properties, and the canonical-form
//!   checks all targets share.
//! - `yaml`, `frames`, `content`, `otlp`: the properties of those targets.
//! - [`seeds`]: valid inputs for those three, written into the corpus by `examples/seeds.rs`.

mod cluster;
mod content;
mod frames;
mod otlp;
pub mod seeds;
mod yaml;

pub use cluster::cluster_record_roundtrips;
pub use content::content_is_bounded;
pub use frames::frames_roundtrip;
pub use otlp::otlp_maps_consistently;
pub use yaml::yaml_roundtrips;

use vx_proto::Batch;
use vx_proto::canonical::write_event;
use vx_proto::decode::{Decoder, EventParser, Format};

/// `ts` given to events without one (the property tests' too). The event target re-parses with
/// another, to show that the canonical form always carries its `ts`.
pub use vx_proto::testing::NOW;

/// The default `ingest.max_event_bytes` of the targets: large enough for any event the
/// fuzzer builds, small enough to bound each run's work.
pub const MAX_EVENT_BYTES: usize = 64 << 10;

/// Bodies beyond this are skipped: libFuzzer's default `-max_len` is 4 KiB anyway, and a
/// hand-fed corpus file should not turn one run into minutes.
const MAX_BODY: usize = 1 << 20;

/// A decoded body: each event's canonical JSON, or the error (compared in full: class, index,
/// field, line, column and message).
type Outcome = Result<Vec<Vec<u8>>, vx_proto::InputError>;

struct Plan<'a> {
    max_event_bytes: usize,
    sizes: &'a [u8],
    body: &'a [u8],
}

fn plan(data: &[u8]) -> Plan<'_> {
    let whole = Plan {
        max_event_bytes: MAX_EVENT_BYTES,
        sizes: &[],
        body: data,
    };
    let [limit, n, rest @ ..] = data else {
        return whole;
    };
    let n = usize::from(n % 16);
    let Some((sizes, body)) = rest.split_at_checked(n) else {
        return whole;
    };
    let max_event_bytes = if *limit < 128 {
        MAX_EVENT_BYTES
    } else {
        usize::from(limit - 127)
    };
    Plan {
        max_event_bytes,
        sizes,
        body,
    }
}

fn decode(format: Format, max_event_bytes: usize, body: &[u8], sizes: &[u8]) -> Outcome {
    decode_batch(format, max_event_bytes, body, sizes).map(|batch| canonical_all(&batch))
}

/// Each event of `batch` as canonical JSON, numbered from `seq` 1.
fn canonical_all(batch: &Batch) -> Vec<Vec<u8>> {
    batch
        .iter()
        .enumerate()
        .map(|(i, ev)| {
            let mut out = Vec::new();
            write_event(&mut out, &ev, i as u64 + 1);
            out
        })
        .collect()
}

/// `body` through the chunk-fed decoder of `format`, in chunks of `sizes` (cycled; see the
/// module docs), into a batch.
fn decode_batch(
    format: Format,
    max_event_bytes: usize,
    body: &[u8],
    sizes: &[u8],
) -> Result<Batch, vx_proto::InputError> {
    // JSON, NDJSON and frames are chunk-fed decoders; only YAML is read from a reader instead.
    let Some(mut d) = Decoder::new(format, max_event_bytes, NOW) else {
        panic!("{} has no chunk-fed decoder", format.as_str());
    };
    let mut batch = Batch::new();
    let mut rest = body;
    // Cycle through the sizes while they make progress; whatever is left goes in one chunk.
    if sizes.iter().any(|&s| s > 0) {
        for &s in sizes.iter().cycle() {
            if rest.is_empty() {
                break;
            }
            let (chunk, tail) = rest.split_at(usize::from(s).min(rest.len()));
            d.feed(chunk, &mut batch)?;
            rest = tail;
        }
    } else {
        for _ in sizes {
            d.feed(&[], &mut batch)?;
        }
    }
    d.feed(rest, &mut batch)?;
    d.finish(&mut batch)?;
    Ok(batch)
}

/// Decoding never panics, and the outcome does not depend on where the chunks split.
pub fn chunking_is_invisible(format: Format, data: &[u8]) {
    let p = plan(data);
    if p.body.len() > MAX_BODY {
        return;
    }
    let whole = decode(format, p.max_event_bytes, p.body, &[]);
    let chunked = decode(format, p.max_event_bytes, p.body, p.sizes);
    assert_eq!(
        whole,
        chunked,
        "{} body {:?} (max_event_bytes {}, chunk sizes {:?}): one chunk and chunked disagree",
        format.as_str(),
        String::from_utf8_lossy(p.body),
        p.max_event_bytes,
        p.sizes
    );
    if let Ok(events) = &whole {
        for ev in events {
            canonical_reparses(ev);
        }
    }
}

/// Parsing one event never panics, and an accepted event's canonical form parses back to the
/// same event (and so to the same canonical bytes).
pub fn event_roundtrips(data: &[u8]) {
    if data.len() > MAX_EVENT_BYTES {
        return;
    }
    let mut parser = EventParser::new();
    let Ok(ev) = parser.parse(data, NOW) else {
        return;
    };
    let mut canonical = Vec::new();
    write_event(&mut canonical, &ev, 0);
    canonical_reparses(&canonical);
    let body = without_seq(&canonical);
    let mut again = EventParser::new();
    let back = again.parse(&body, NOW + 1);
    assert_eq!(
        back.as_ref().ok(),
        Some(&ev),
        "input {:?}: canonical {:?} parses back to {back:?}",
        String::from_utf8_lossy(data),
        String::from_utf8_lossy(&canonical),
    );
}

/// `XADD`'s field/value pairs (`data` split at zero bytes, at most 64 arguments): mapping
/// them never panics, and an accepted event is one the JSON decoder accepts too, equal to it
/// (its canonical JSON, minus the `seq`, parses back to the same event).
pub fn xadd_maps(data: &[u8]) {
    if data.len() > MAX_EVENT_BYTES {
        return;
    }
    let pairs: Vec<&[u8]> = data.split(|&b| b == 0).take(64).collect();
    let mut buf = Vec::new();
    let Ok(ev) = vx_proto::xadd::event_of("s", &pairs, &mut buf, NOW) else {
        return;
    };
    let mut canonical = Vec::new();
    write_event(&mut canonical, &ev, 0);
    canonical_reparses(&canonical);
    let body = without_seq(&canonical);
    let mut parser = EventParser::new();
    let back = parser.parse(&body, NOW + 1);
    assert_eq!(
        back.as_ref().ok(),
        Some(&ev),
        "pairs {pairs:?}: canonical {:?} parses back to {back:?}",
        String::from_utf8_lossy(&canonical),
    );
}

/// The canonical JSON `canonical` (with its `seq`), minus the `seq`, is an event whose
/// canonical form is `canonical` again, whatever `now`: `ts` is always written out.
fn canonical_reparses(canonical: &[u8]) {
    let seq = seq_of(canonical);
    let body = without_seq(canonical);
    let mut parser = EventParser::new();
    let again = match parser.parse(&body, NOW + 1) {
        Ok(ev) => {
            let mut out = Vec::new();
            write_event(&mut out, &ev, seq);
            out
        }
        Err(e) => panic!(
            "canonical {:?} does not parse: {e:?}",
            String::from_utf8_lossy(canonical)
        ),
    };
    assert_eq!(
        String::from_utf8_lossy(&again),
        String::from_utf8_lossy(canonical),
        "canonical form is not a fixed point"
    );
}

/// Where the trailing `,"seq":N}` starts: `seq` is the last field and its text is digits, so
/// the last `,` of canonical JSON is the one before it.
fn seq_start(canonical: &[u8]) -> usize {
    match canonical.iter().rposition(|&b| b == b',') {
        Some(i) if canonical[i..].starts_with(b",\"seq\":") => i,
        _ => panic!(
            "canonical {:?} does not end with a seq",
            String::from_utf8_lossy(canonical)
        ),
    }
}

fn seq_of(canonical: &[u8]) -> u64 {
    let digits = &canonical[seq_start(canonical) + 7..canonical.len().saturating_sub(1)];
    match std::str::from_utf8(digits)
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(seq) => seq,
        None => panic!(
            "canonical {:?} has a bad seq",
            String::from_utf8_lossy(canonical)
        ),
    }
}

/// `canonical` with its `seq` field cut: the event object as a producer could send it.
fn without_seq(canonical: &[u8]) -> Vec<u8> {
    let mut body = canonical[..seq_start(canonical)].to_vec();
    body.push(b'}');
    body
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn prefix_picks_limit_and_chunk_sizes() {
        let p = plan(b"\x00\x02\x03\x00body");
        assert_eq!(
            (p.max_event_bytes, p.sizes, p.body),
            (MAX_EVENT_BYTES, &[3u8, 0][..], &b"body"[..])
        );
        let p = plan(b"\x80\x11\x05x");
        assert_eq!(
            (p.max_event_bytes, p.sizes, p.body),
            (1, &[5u8][..], &b"x"[..])
        );
        // Too short for the sizes it announces, or for the prefix: one chunk, default limit.
        assert_eq!(plan(b"\xff\x05ab").body, b"\xff\x05ab");
        assert_eq!(plan(b"x").body, b"x");
    }

    #[test]
    fn chunked_decoding_sees_the_same_events() {
        let body = b"{\"stream\":\"s\",\"type\":\"t\",\"value\":1.50}\n{\"stream\":\"\\u00e9\",\"type\":\"u\"}\n";
        let whole = decode(Format::Ndjson, MAX_EVENT_BYTES, body, &[]).unwrap();
        assert_eq!(whole.len(), 2);
        assert_eq!(
            decode(Format::Ndjson, MAX_EVENT_BYTES, body, &[1, 0, 7]),
            Ok(whole)
        );
        let mut input = vec![0, 2, 1, 3];
        input.extend_from_slice(body);
        chunking_is_invisible(Format::Ndjson, &input);
        chunking_is_invisible(Format::Json, &input);
    }

    #[test]
    fn canonical_minus_seq_is_an_event() {
        let canonical =
            br#"{"stream":"s,","type":"t","ts":5,"kind":"event","data":[1,","],"seq":42}"#;
        assert_eq!(seq_of(canonical), 42);
        assert_eq!(
            without_seq(canonical),
            br#"{"stream":"s,","type":"t","ts":5,"kind":"event","data":[1,","]}"#
        );
        canonical_reparses(canonical);
        event_roundtrips(
            br#"{ "type" : "t", "stream" : "a\"b", "data" : { "x" : [ 1 ] }, "value": -0 }"#,
        );
    }

    #[test]
    #[should_panic(expected = "not a fixed point")]
    fn a_canonical_form_that_moves_is_caught() {
        // Not canonical: `data` has whitespace, so writing the parsed event changes the bytes.
        canonical_reparses(
            br#"{"stream":"s","type":"t","ts":5,"kind":"event","data":[1, 2],"seq":1}"#,
        );
    }
}
