//! Property tests of the YAML decoder: any valid event (`vx_proto::testing`), written by the
//! canonical YAML writer or as a producer writes it, decodes to the same canonical event
//! whatever the reads; any bytes (and YAML-looking token soup) decode or fail with an
//! `InputError`, never panic, and the outcome does not depend on how the reader splits the
//! body.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use vx_proto::canonical::write_event;
use vx_proto::canonical_yaml::write_document;
use vx_proto::decode::decode_yaml;
use vx_proto::testing::{NOW, Pieces, event};
use vx_proto::{Batch, InputError};

fn decode(body: &[u8], sizes: Vec<usize>, max: usize) -> Result<Vec<Vec<u8>>, InputError> {
    let mut batch = Batch::new();
    let reader = Pieces::new(body, sizes);
    decode_yaml(reader, max, u64::MAX, NOW, &mut batch)?;
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

/// YAML-looking tokens, so that random bodies reach past the parser into the event rules.
fn soup() -> impl Strategy<Value = Vec<u8>> {
    const TOKENS: &[&str] = &[
        "- ",
        "---\n",
        "...\n",
        "\n",
        "  ",
        " ",
        ": ",
        ",",
        "{",
        "}",
        "[",
        "]",
        "stream",
        "type",
        "data",
        "ts",
        "kind",
        "value",
        "id",
        "entity",
        "counter",
        "gauge",
        "s",
        "t",
        "1",
        "-7",
        "0x1F",
        "1.5",
        ".inf",
        "~",
        "null",
        "true",
        "\"x\"",
        "'y'",
        "&a ",
        "*a",
        "&b ",
        "*b",
        "!!str ",
        "!!int ",
        "!x ",
        "<<",
        "? ",
        "| \n",
        "> \n",
        "# c\n",
        "2024-01-01T00:00:00Z",
        "\"\\u00e9\"",
        "é",
        "\t",
        "%YAML 1.2\n",
    ];
    prop::collection::vec(prop::sample::select(TOKENS), 0..80).prop_map(|t| t.concat().into_bytes())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn canonical_yaml_decodes_to_the_same_events(
        events in prop::collection::vec(event(6), 1..5),
        sizes in prop::collection::vec(0usize..64, 0..4),
    ) {
        let mut body = Vec::new();
        let mut expected = Vec::new();
        for (i, e) in events.iter().enumerate() {
            // The event as stored, its `data` in the form the YAML decoder writes (canonical
            // string escapes, number literals as sent), for which canonical YAML round-trips.
            let data = e.data_plain();
            let view = e.stored(NOW, data.as_deref());
            write_document(&mut body, &view, None);
            let mut out = Vec::new();
            write_event(&mut out, &view, i as u64 + 1);
            expected.push(out);
        }
        let got = decode(&body, sizes, 1 << 20);
        prop_assert!(got.is_ok(), "{}: {:?}", String::from_utf8_lossy(&body), got);
        let got = got.unwrap();
        prop_assert_eq!(
            got.iter().map(|g| String::from_utf8_lossy(g).into_owned()).collect::<Vec<_>>(),
            expected.iter().map(|g| String::from_utf8_lossy(g).into_owned()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn producer_yaml_decodes_to_the_stored_events(
        events in prop::collection::vec(event(6), 1..5),
        sizes in prop::collection::vec(0usize..64, 0..4),
    ) {
        // As a producer writes it: `ts` absent or as an RFC 3339 string, an empty entity, a
        // counter's whole float, `data` with any escapes.
        let mut body = Vec::new();
        let mut expected = Vec::new();
        for (i, e) in events.iter().enumerate() {
            body.extend(e.to_yaml());
            let data = e.data_plain();
            let mut out = Vec::new();
            write_event(&mut out, &e.stored(NOW, data.as_deref()), i as u64 + 1);
            expected.push(out);
        }
        let got = decode(&body, sizes, 1 << 20);
        prop_assert!(got.is_ok(), "{}: {:?}", String::from_utf8_lossy(&body), got);
        prop_assert_eq!(
            got.unwrap().iter().map(|g| String::from_utf8_lossy(g).into_owned()).collect::<Vec<_>>(),
            expected.iter().map(|g| String::from_utf8_lossy(g).into_owned()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        body in prop::collection::vec(any::<u8>(), 0..512),
        sizes in prop::collection::vec(0usize..16, 1..4),
        max in prop_oneof![Just(1usize << 20), 1usize..256],
    ) {
        let whole = decode(&body, Vec::new(), max);
        let split = decode(&body, sizes, max);
        prop_assert_eq!(whole, split);
    }

    #[test]
    fn token_soup_never_panics(
        body in soup(),
        sizes in prop::collection::vec(0usize..16, 1..4),
        max in prop_oneof![Just(1usize << 20), 1usize..256],
    ) {
        let whole = decode(&body, Vec::new(), max);
        let split = decode(&body, sizes, max);
        prop_assert_eq!(whole, split);
    }
}
