//! The stream operations over RESP: `XADD` (ingest) and `XRANGE` (replay), seeded and exact.

use super::*;
use crate::resp::parse_value;

/// The arguments of every command in `buf`, parsed back with the RESP parser.
fn commands(buf: &[u8]) -> Vec<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < buf.len() {
        let Ok(Some((v, n))) = parse_value(&buf[at..]) else {
            panic!(
                "not RESP at {at}: {:?}",
                String::from_utf8_lossy(&buf[at..])
            );
        };
        let args = v
            .items()
            .unwrap_or_default()
            .iter()
            .map(|a| a.bytes().unwrap_or_default().to_vec())
            .collect();
        out.push(args);
        at += n;
    }
    out
}

fn ingest(w: &Workload, lane: u32) -> IngestGen {
    match IngestGen::new(w, lane, "t") {
        Ok(g) => g,
        Err(e) => panic!("{e}"),
    }
}

fn xadds(w: &Workload, lane: u32, n: usize) -> Vec<Vec<Vec<u8>>> {
    let mut g = ingest(w, lane);
    let mut out = Vec::new();
    for _ in 0..n {
        g.next_xadd(&mut out);
    }
    commands(&out)
}

#[test]
fn xadd_is_one_event_of_value_size_bytes_of_fields() {
    let w = Workload {
        streams: 16,
        stream_prefix: "xadd-".into(),
        value_size_b: 128,
        ..Workload::default()
    };
    for args in xadds(&w, 0, 200) {
        // XADD <stream> * type lt entity k<n> data <padding>
        assert_eq!(args.len(), 9, "{args:?}");
        assert_eq!(args[0], b"XADD");
        let stream = String::from_utf8_lossy(&args[1]).to_string();
        let n: u64 = stream
            .strip_prefix("xadd-")
            .and_then(|n| n.parse().ok())
            .unwrap_or(u64::MAX);
        assert!(n < 16, "{stream}");
        assert_eq!(args[2], b"*");
        assert_eq!(
            (&args[3][..], &args[4][..]),
            (&b"type"[..], EVENT_TYPE.as_bytes())
        );
        assert_eq!(args[5], b"entity");
        assert!(args[6].starts_with(b"k"));
        assert_eq!(args[7], b"data");
        assert!(args[8].iter().all(|&b| b == b'x'));
        let size: usize = args[3..].iter().map(Vec::len).sum();
        assert_eq!(size, 128, "fields and values add up to value_size_b");
    }
}

#[test]
fn xadd_the_same_seed_writes_the_same_events() {
    let w = Workload {
        streams: 8,
        key_space: 1_000,
        ..Workload::default()
    };
    assert_eq!(xadds(&w, 0, 300), xadds(&w, 0, 300));
    assert_ne!(xadds(&w, 0, 300), xadds(&w, 1, 300));
    let other = Workload {
        seed: 2,
        ..w.clone()
    };
    assert_ne!(xadds(&w, 0, 300), xadds(&other, 0, 300));
    // The stream and entity are the ones an HTTP request of one event on the same lane
    // carries: the same draws, in the same order.
    let mut g = ingest(&w, 0);
    let http: Vec<serde_json::Value> = (0..50)
        .map(|_| serde_json::from_slice(&g.next_body().0).unwrap_or_default())
        .collect();
    for (args, event) in xadds(&w, 0, 50).iter().zip(&http) {
        assert_eq!(
            args[1],
            event["stream"].as_str().unwrap_or_default().as_bytes()
        );
        assert_eq!(
            args[6],
            event["entity"].as_str().unwrap_or_default().as_bytes()
        );
    }
}

#[test]
fn xadd_fields_follow_ids_counter_entities_and_explicit_ids() {
    let w = Workload {
        ids: true,
        counter: true,
        entity_names: EntityNames::Keys,
        key_size_b: 16,
        value_size_b: 200,
        ..Workload::default()
    };
    let mut g = ingest(&w, 3);
    let mut out = Vec::new();
    g.encode_xadd(b"lt-0", b"7-0", &mut out);
    g.encode_xadd(b"lt-0", b"8-0", &mut out);
    let cmds = commands(&out);
    let fields: Vec<&[u8]> = cmds[0][3..].iter().step_by(2).map(Vec::as_slice).collect();
    assert_eq!(
        fields,
        [&b"type"[..], b"entity", b"id", b"kind", b"value", b"data"]
    );
    assert_eq!(
        (&cmds[0][1][..], &cmds[0][2][..]),
        (&b"lt-0"[..], &b"7-0"[..])
    );
    assert_eq!(cmds[1][2], b"8-0");
    assert!(cmds[0][6].starts_with(b"key:") && cmds[0][6].len() == 16);
    assert_eq!(cmds[0][8], b"t-3-1");
    assert_eq!(cmds[1][8], b"t-3-2", "ids are unique per lane");
    assert_eq!(
        (&cmds[0][10][..], &cmds[0][12][..]),
        (&b"counter"[..], &b"1"[..])
    );
    for c in &cmds {
        assert_eq!(c[3..].iter().map(Vec::len).sum::<usize>(), 200);
    }
    // Without entities; and a size too small for the fields: data is empty, never negative.
    let w = Workload {
        entities: false,
        value_size_b: 4,
        ..Workload::default()
    };
    let mut out = Vec::new();
    ingest(&w, 0).encode_xadd(b"s", b"*", &mut out);
    assert_eq!(
        commands(&out)[0],
        [&b"XADD"[..], b"s", b"*", b"type", b"lt", b"data", b""]
    );
}

fn streams() -> Vec<StreamInfo> {
    vec![
        StreamInfo {
            name: "lt-0".into(),
            first_seq: 1,
            last_seq: 100_000,
        },
        StreamInfo {
            name: "lt-1".into(),
            first_seq: 501,
            last_seq: 25_499,
        },
    ]
}

#[test]
fn a_page_is_one_xrange_of_its_ids_and_a_point_read_names_one_id() {
    let s = streams();
    let mut out = Vec::new();
    let op = ReplayOp::Page {
        stream: 0,
        from: 4242,
        limit: 1,
    };
    assert_eq!(encode_replay_resp(&op, &s, &mut out), (4242, 1));
    assert_eq!(
        commands(&out),
        [[
            &b"XRANGE"[..],
            b"lt-0",
            b"4242-0",
            b"4242-0",
            b"COUNT",
            b"1"
        ]]
    );
    out.clear();
    let op = ReplayOp::Page {
        stream: 1,
        from: 501,
        limit: 256,
    };
    assert_eq!(encode_replay_resp(&op, &s, &mut out), (501, 1));
    assert_eq!(
        commands(&out),
        [[
            &b"XRANGE"[..],
            b"lt-1",
            b"501-0",
            b"756-0",
            b"COUNT",
            b"256"
        ]]
    );
}

#[test]
fn a_scan_is_the_xrange_pages_of_the_whole_stream() {
    let s = streams();
    let mut out = Vec::new();
    let (from, replies) = encode_replay_resp(&ReplayOp::Scan { stream: 1 }, &s, &mut out);
    // 501..=25499: 24,999 entries, three pages of 10,000.
    assert_eq!((from, replies), (501, 3));
    let cmds = commands(&out);
    let ranges: Vec<(String, String)> = cmds
        .iter()
        .map(|c| {
            assert_eq!(
                (&c[0][..], &c[1][..], &c[4][..]),
                (&b"XRANGE"[..], &b"lt-1"[..], &b"COUNT"[..])
            );
            assert_eq!(c[5], RESP_SCAN_PAGE.to_string().as_bytes());
            (
                String::from_utf8_lossy(&c[2]).into(),
                String::from_utf8_lossy(&c[3]).into(),
            )
        })
        .collect();
    assert_eq!(
        ranges,
        [
            ("501-0".to_string(), "10500-0".to_string()),
            ("10501-0".into(), "20500-0".into()),
            ("20501-0".into(), "25499-0".into()),
        ]
    );
    out.clear();
    let (_, replies) = encode_replay_resp(&ReplayOp::Scan { stream: 0 }, &s, &mut out);
    assert_eq!(replies, 10);
}

#[test]
fn replay_over_resp_draws_what_replay_over_http_draws() {
    // One generator for both: the same seed reads the same positions whichever the protocol.
    let w = Workload {
        page_events: 1,
        scan_pct: 5.0,
        ..Workload::default()
    };
    let s = streams();
    let draw = || {
        let mut g = match ReplayGen::new(&w, 2, s.len()) {
            Ok(g) => g,
            Err(e) => panic!("{e}"),
        };
        (0..500).map(|_| g.next(&s)).collect::<Vec<_>>()
    };
    let ops = draw();
    assert_eq!(ops, draw());
    let mut out = Vec::new();
    for op in &ops {
        out.clear();
        let (from, replies) = encode_replay_resp(op, &s, &mut out);
        let cmds = commands(&out);
        assert_eq!(cmds.len(), replies as usize);
        if let ReplayOp::Page {
            stream, from: f, ..
        } = op
        {
            assert_eq!(from, *f);
            let id = format!("{f}-0");
            assert_eq!(cmds[0][2], id.as_bytes());
            assert_eq!(cmds[0][3], id.as_bytes(), "a point read");
            assert!((s[*stream].first_seq..=s[*stream].last_seq).contains(f));
        }
    }
}
