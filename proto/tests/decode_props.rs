//! Property tests of the JSON and NDJSON decoders: any valid event (`vx_proto::testing`), as a
//! producer writes it (field order, whitespace, escapes, number literals, `ts` as milliseconds
//! or RFC 3339), decodes to its canonical form whatever the chunking; any bytes decode or fail
//! cleanly, and the outcome never depends on where the chunks split.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use vx_proto::canonical::write_event;
use vx_proto::decode::{Decoder, Format};
use vx_proto::testing::{self, Event, NOW};
use vx_proto::{Batch, InputError};

/// The canonical JSON of `e` as the `seq`th event: its `data` compact, escapes and number
/// literals as sent.
fn expected(e: &Event, seq: u64) -> Vec<u8> {
    let data = e.data_compact();
    let mut out = Vec::new();
    write_event(&mut out, &e.stored(NOW, data.as_deref()), seq);
    out
}

/// The events as NDJSON: one line each (LF, or CRLF with a blank line after), each object
/// compact or spaced.
fn ndjson(events: &[Event], pretty: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for e in events {
        out.extend(e.to_json(true));
        out.extend_from_slice(if pretty { b"\r\n \n" } else { b"\n" });
    }
    out
}

/// The events as a JSON array: on one line, or one object a line (objects with their own
/// line breaks too).
fn json_array(events: &[Event], pretty: bool) -> Vec<u8> {
    let (open, sep, close): (&[u8], &[u8], &[u8]) = if pretty {
        (b"[\n", b",\n", b"\n]")
    } else {
        (b"[", b",", b"]")
    };
    let mut out = open.to_vec();
    for (i, e) in events.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(sep);
        }
        out.extend(e.to_json(!pretty));
    }
    out.extend_from_slice(close);
    out
}

fn decode(format: Format, body: &[u8], cuts: &[usize]) -> Result<Vec<Vec<u8>>, InputError> {
    let mut d = Decoder::new(format, 1 << 20, NOW).unwrap();
    let mut batch = Batch::new();
    let mut at = 0;
    for &c in cuts {
        let c = c % (body.len() + 1);
        if c > at {
            d.feed(&body[at..c], &mut batch)?;
            at = c;
        }
    }
    d.feed(&body[at..], &mut batch)?;
    d.finish(&mut batch)?;
    Ok(batch
        .iter()
        .enumerate()
        .map(|(i, ev)| {
            let mut out = Vec::new();
            write_event(&mut out, &ev, i as u64 + 1);
            out
        })
        .collect())
}

fn sorted(mut cuts: Vec<usize>, len: usize) -> Vec<usize> {
    for c in &mut cuts {
        *c %= len + 1;
    }
    cuts.sort_unstable();
    cuts
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn valid_events_decode_to_canonical_form(
        events in prop::collection::vec(testing::event(6), 1..5),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
        pretty in any::<bool>(),
    ) {
        let expected: Vec<Vec<u8>> =
            events.iter().enumerate().map(|(i, e)| expected(e, i as u64 + 1)).collect();

        let ndjson = ndjson(&events, pretty);
        let cuts_n = sorted(cuts.clone(), ndjson.len());
        prop_assert_eq!(decode(Format::Ndjson, &ndjson, &cuts_n).unwrap(), expected.clone());

        let json = json_array(&events, pretty);
        let cuts_j = sorted(cuts.clone(), json.len());
        prop_assert_eq!(decode(Format::Json, &json, &cuts_j).unwrap(), expected.clone());

        // A lone object is a body too.
        let one = events[0].to_json(false);
        prop_assert_eq!(decode(Format::Json, &one, &[]).unwrap(), vec![expected[0].clone()]);

        // serde_json, as an independent reader, sees the same JSON: the bodies are valid and
        // the names read back as drawn (so the renderer and the decoder cannot agree on a
        // wrong escaping).
        let array: serde_json::Value = serde_json::from_slice(&json).unwrap();
        for (e, v) in events.iter().zip(array.as_array().unwrap()) {
            prop_assert_eq!(v["stream"].as_str(), Some(e.stream.as_str()));
            prop_assert_eq!(v["type"].as_str(), Some(e.ty.as_str()));
            prop_assert_eq!(v.get("entity").and_then(|x| x.as_str()), e.entity.as_deref());
            prop_assert_eq!(v.get("id").and_then(|x| x.as_str()), e.id.as_deref());
        }
        for line in ndjson.split(|&b| b == b'\n').filter(|l| !l.trim_ascii().is_empty()) {
            prop_assert!(serde_json::from_slice::<serde_json::Value>(line).is_ok());
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        body in prop::collection::vec(any::<u8>(), 0..256),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        for format in [Format::Json, Format::Ndjson] {
            let whole = decode(format, &body, &[]);
            let cut = decode(format, &body, &sorted(cuts.clone(), body.len()));
            prop_assert_eq!(whole, cut);
        }
    }

    #[test]
    fn damaged_events_fail_cleanly_whatever_the_chunking(
        events in prop::collection::vec(testing::event(6), 1..3),
        damage in prop::collection::vec((any::<usize>(), any::<u8>()), 1..4),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        let mut body = json_array(&events, true);
        let mut lines = ndjson(&events, false);
        for (at, b) in damage {
            let n = body.len();
            body[at % n] = b;
            let n = lines.len();
            lines[at % n] = b;
        }
        for (format, body) in [(Format::Json, &body), (Format::Ndjson, &lines)] {
            let whole = decode(format, body, &[]);
            let cut = decode(format, body, &sorted(cuts.clone(), body.len()));
            prop_assert_eq!(whole, cut);
        }
    }
}
