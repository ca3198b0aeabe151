use super::*;
use proptest::prelude::*;

/// An owned [`Event`], to compare.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Owned {
    id: Option<Id>,
    name: Option<String>,
    data: Vec<u8>,
    has_data: bool,
    comment: bool,
}

fn parse_with(p: &mut SseParser, pieces: &[&[u8]]) -> Result<Vec<Owned>, SseError> {
    let mut out = Vec::new();
    for piece in pieces {
        p.feed(piece, &mut |e| {
            out.push(Owned {
                id: e.id,
                name: e.name.map(str::to_string),
                data: e.data.to_vec(),
                has_data: e.has_data,
                comment: e.comment,
            })
        })?;
    }
    Ok(out)
}

fn parse(keep: KeepData, pieces: &[&[u8]]) -> Result<Vec<Owned>, SseError> {
    parse_with(&mut SseParser::new(keep, 1 << 10), pieces)
}

/// `input` cut at `cuts` (ascending offsets).
fn cut<'a>(input: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut pieces = Vec::with_capacity(cuts.len() + 1);
    let mut start = 0;
    for &at in cuts {
        pieces.push(&input[start..at]);
        start = at;
    }
    pieces.push(&input[start..]);
    pieces
}

/// `input` cut in two at every offset, then into pieces of one byte and of seven.
fn splits(input: &[u8]) -> Vec<Vec<&[u8]>> {
    let every = |n: usize| (n..input.len()).step_by(n).collect::<Vec<_>>();
    (0..=input.len())
        .map(|at| cut(input, &[at]))
        .chain([cut(input, &every(1)), cut(input, &every(7))])
        .collect()
}

fn ev(id: Option<Id>, name: Option<&str>, data: &str) -> Owned {
    Owned {
        id,
        name: name.map(str::to_string),
        data: data.as_bytes().to_vec(),
        has_data: true,
        comment: false,
    }
}

/// What the server writes (src/live, src/http/follow.rs), and what a bad peer might.
const BODY: &[u8] =
    b"retry: 3000\n\n: heartbeat\n\nid: 41\ndata: {\"seq\":41,\"data\":\"a: b\\nid: 7\"}\n\n\
id:42\r\ndata: {\"seq\":42}\r\n\r\n\
: heartbeat\r\rid: 43\rdata: x\r\r\
event: message\nid: 44\ndata: two\ndata:  lines\n\n\
event: retained\ndata: {\"from\":45,\"first_seq\":50}\n\n\
unknown-field-longer-than-a-name: 1\nid: 52\ndata\n\n\
id: x9\ndata: z\n\n\
data: no id\n\n\
id: 99999999999999999999999\nid\ndata: overflows\n\n\n\n\
event: deleted\ndata: {\"stream\":\"s\"}\n\n";

fn expected(keep: KeepData) -> Vec<Owned> {
    let kept = |d: &'static str| if keep == KeepData::All { d } else { "" };
    let retry = Owned {
        id: None,
        name: None,
        data: Vec::new(),
        has_data: false,
        comment: false,
    };
    let heartbeat = Owned {
        comment: true,
        ..retry.clone()
    };
    vec![
        retry,
        heartbeat.clone(),
        ev(
            Some(Id::Seq(41)),
            None,
            kept("{\"seq\":41,\"data\":\"a: b\\nid: 7\"}"),
        ),
        ev(Some(Id::Seq(42)), None, kept("{\"seq\":42}")),
        heartbeat,
        ev(Some(Id::Seq(43)), None, kept("x")),
        ev(Some(Id::Seq(44)), Some("message"), kept("two\n lines")),
        ev(None, Some("retained"), "{\"from\":45,\"first_seq\":50}"),
        ev(Some(Id::Seq(52)), None, ""),
        ev(Some(Id::Invalid), None, kept("z")),
        ev(None, None, kept("no id")),
        ev(Some(Id::Invalid), None, kept("overflows")),
        ev(None, Some("deleted"), "{\"stream\":\"s\"}"),
    ]
}

#[test]
fn blocks_are_the_same_from_any_split_with_lf_crlf_or_cr() {
    for keep in [KeepData::All, KeepData::Named] {
        for pieces in splits(BODY) {
            assert_eq!(parse(keep, &pieces), Ok(expected(keep)), "{keep:?}");
        }
    }
}

#[test]
fn an_event_is_a_message_unless_named() {
    let events = |body: &[u8]| {
        let mut names = Vec::new();
        let mut p = SseParser::default();
        let r = p.feed(body, &mut |e| names.push(e.is_message()));
        (r, names)
    };
    assert_eq!(
        events(b"data: a\n\nevent: message\ndata: b\n\nevent:\ndata: c\n\nevent: deleted\n\n"),
        (Ok(()), vec![true, true, true, false])
    );
}

#[test]
fn data_kept_is_bounded_and_names_are_checked() {
    let mut p = SseParser::new(KeepData::All, 8);
    assert_eq!(
        parse_with(&mut p, &[b"data: 1234\ndata: 567\n\n"]).map(|e| e.len()),
        Ok(1)
    );
    // Nine bytes over two lines (with the LF that joins them), however it arrives.
    for pieces in splits(b"data: 1234\ndata: 5678\n\n") {
        let mut p = SseParser::new(KeepData::All, 8);
        assert_eq!(
            parse_with(&mut p, &pieces),
            Err(SseError::DataTooLarge { limit: 8 })
        );
    }
    // A line that never ends is refused once it passes the bound, not buffered.
    let mut p = SseParser::new(KeepData::All, 1 << 10);
    let long = vec![b'x'; 600];
    assert_eq!(p.feed(b"data: ", &mut |_| {}), Ok(()));
    assert_eq!(p.feed(&long, &mut |_| {}), Ok(()));
    assert_eq!(
        p.feed(&long, &mut |_| {}),
        Err(SseError::DataTooLarge { limit: 1 << 10 })
    );
    // Skipped data, comments and unknown fields are not stored, whatever their length.
    let mut p = SseParser::new(KeepData::Named, 4);
    let mut body = b"id: 1\ndata: ".to_vec();
    body.extend_from_slice(&vec![b'x'; 1 << 16]);
    body.extend_from_slice(b"\n: ");
    body.extend_from_slice(&vec![b'y'; 1 << 16]);
    body.extend_from_slice(b"\nother: ");
    body.extend_from_slice(&vec![b'z'; 1 << 16]);
    body.extend_from_slice(b"\n\n");
    let got = parse_with(&mut p, &[&body]);
    assert_eq!(got, Ok(vec![ev(Some(Id::Seq(1)), None, "")]));
    assert_eq!(p.data.capacity(), 0);
    // Event names are short and UTF-8.
    let long_name = format!("event: {}\n\n", "n".repeat(MAX_EVENT_NAME + 1));
    assert_eq!(
        parse(KeepData::All, &[long_name.as_bytes()]),
        Err(SseError::BadEventName)
    );
    assert_eq!(
        parse(KeepData::All, &[b"event: \xff\n\n"]),
        Err(SseError::BadEventName)
    );
}

#[test]
fn a_large_block_does_not_stay_allocated() {
    let mut p = SseParser::new(KeepData::All, 1 << 20);
    let mut body = b"data: ".to_vec();
    body.extend_from_slice(&vec![b'x'; 1 << 16]);
    body.extend_from_slice(b"\n\n");
    assert_eq!(parse_with(&mut p, &[&body]).map(|e| e.len()), Ok(1));
    assert_eq!(p.data.capacity(), 0);
    assert_eq!(
        parse_with(&mut p, &[b"data: x\n\n"]).map(|e| e.len()),
        Ok(1)
    );
    assert!(p.data.capacity() > 0 && p.data.capacity() <= KEEP_CAPACITY);
}

/// A line-at-a-time reading of the format, for the property test to compare against.
fn reference(body: &[u8], keep: KeepData) -> Vec<Owned> {
    let mut lines = Vec::new();
    let mut rest = body;
    while let Some(i) = memchr2(b'\n', b'\r', rest) {
        lines.push(&rest[..i]);
        let crlf = rest[i] == b'\r' && rest.get(i + 1) == Some(&b'\n');
        rest = &rest[i + 1 + usize::from(crlf)..];
    }
    let mut out = Vec::new();
    let mut cur: Option<Owned> = None;
    let mut data_lines: Vec<&[u8]> = Vec::new();
    for line in lines {
        if line.is_empty() {
            if let Some(mut e) = cur.take() {
                e.data = data_lines.join(&b'\n');
                out.push(e);
            }
            data_lines.clear();
            continue;
        }
        let e = cur.get_or_insert(Owned {
            id: None,
            name: None,
            data: Vec::new(),
            has_data: false,
            comment: true,
        });
        if line[0] == b':' {
            continue;
        }
        e.comment = false;
        let (name, value) = match memchr::memchr(b':', line) {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match name {
            b"id" => {
                let seq = std::str::from_utf8(value).ok().and_then(|s| {
                    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                        .then(|| s.parse().ok())
                        .flatten()
                });
                e.id = Some(seq.map_or(Id::Invalid, Id::Seq));
            }
            b"event" => e.name = Some(String::from_utf8_lossy(value).into_owned()),
            b"data" => {
                e.has_data = true;
                let named = e
                    .name
                    .as_deref()
                    .is_some_and(|n| !n.is_empty() && n != "message");
                if keep == KeepData::All || named {
                    data_lines.push(value);
                }
            }
            _ => {}
        }
    }
    out
}

/// One line of a body: what the server writes and what it might get wrong.
fn line() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(Vec::new()),
        Just(Vec::new()),
        (0u64..u64::MAX).prop_map(|s| format!("id: {s}").into_bytes()),
        "[0-9a-z ]{0,25}".prop_map(|s| format!("id:{s}").into_bytes()),
        prop_oneof![Just("retained"), Just("deleted"), Just("message"), Just("")]
            .prop_map(|n| format!("event: {n}").into_bytes()),
        "[ -~]{0,40}".prop_map(|s| format!("data: {s}").into_bytes()),
        "[ -~]{0,40}".prop_map(|s| format!("data:{s}").into_bytes()),
        Just(b"data".to_vec()),
        "[ -~]{0,20}".prop_map(|s| format!(": {s}").into_bytes()),
        "[a-z]{1,8}(: [ -~]{0,10})?".prop_map(String::into_bytes),
    ]
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    let ending = prop_oneof![Just(&b"\n"[..]), Just(&b"\r\n"[..]), Just(&b"\r"[..])];
    prop::collection::vec((line(), ending), 0..40).prop_map(|lines| {
        let mut body = Vec::new();
        for (l, end) in lines {
            body.extend_from_slice(&l);
            body.extend_from_slice(end);
        }
        body
    })
}

proptest! {
    #[test]
    fn split_points_anywhere_give_the_same_blocks(
        body in body(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        named in any::<bool>(),
    ) {
        let keep = if named { KeepData::Named } else { KeepData::All };
        let whole = parse(keep, &[&body]);
        // A trailing CR then LF is one line end whether or not a cut falls between them: the
        // reference sees the whole body at once.
        prop_assert_eq!(&whole, &Ok(reference(&body, keep)));
        let mut at: Vec<usize> = cuts.iter().map(|i| i.index(body.len() + 1)).collect();
        at.sort_unstable();
        let pieces = cut(&body, &at);
        prop_assert_eq!(parse(keep, &pieces), whole);
    }
}
