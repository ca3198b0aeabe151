//! Golden bytes and round trips of the format.

#![allow(clippy::unwrap_used)]

use super::*;
use crate::vfs::{OpenMode, Vfs};
use std::path::Path;

fn span(first_seq: u64, count: u32) -> Span {
    Span {
        first_seq,
        min_ts: 1,
        max_ts: 2,
        count,
        off: 100,
        len: 50,
        rec_end: 60,
    }
}

fn summary() -> SegSummary {
    SegSummary {
        segment: 5,
        next_lsn: 9,
        log_len: 4096,
        min_append_ms: 10,
        max_append_ms: 20,
        ids: 3,
    }
}

fn entry(name: &str, first_seq: u64) -> Entry {
    Entry {
        name: name.into(),
        flags: F_EVENTS,
        first_seq,
        last_seq: first_seq + 9,
        count: 10,
        bytes: 500,
        own: Some(TsRange {
            min_ts: 1,
            max_ts: 2,
        }),
        depth: 3,
        parent: NodeRef {
            seg: 2,
            depth: 2,
            first_seq: 1,
        },
        jump: NodeRef {
            seg: 1,
            depth: 1,
            first_seq: 1,
        },
        agg: Some(TsRange {
            min_ts: 0,
            max_ts: 2,
        }),
        ..Entry::default()
    }
}

#[test]
fn write_read_lookup() {
    let fs = crate::sim::SimFs::new();
    fs.create_dir_all(Path::new("/d")).unwrap();
    let mut b = IdxBuilder::new();
    let names: Vec<String> = (0..100).map(|i| format!("stream-{i}")).collect();
    for (i, n) in names.iter().enumerate() {
        let spans: Vec<Span> = (0..i % 3 + 1)
            .map(|k| span(k as u64 * 10 + 1, 10))
            .collect();
        let mut e = entry(n, 1);
        e.spans_n = spans.len() as u32;
        b.add(&e, &spans).unwrap();
    }
    let bytes = b.finish(&summary()).unwrap();
    let f = fs.open(Path::new("/d/x.idx"), OpenMode::CreateNew).unwrap();
    f.write_all_at(&bytes, 0).unwrap();
    let all = IdxContents::read(&*f).unwrap();
    assert_eq!(all.header.entries, 100);
    let entries = all.entries().unwrap();
    assert_eq!(entries[7].name, "stream-7");
    assert_eq!(all.spans(&entries[8]).unwrap().len(), 3);
    let h = read_header(&*f).unwrap();
    assert_eq!(h, all.header);
    for (i, n) in names.iter().enumerate() {
        let e = lookup(&*f, &h, n).unwrap().unwrap();
        assert_eq!(e.name, *n);
        assert_eq!(e.spans_n as usize, i % 3 + 1);
        assert_eq!(e.parent.seg, 2);
        let spans = read_spans(&*f, &h, &e, 0, 10).unwrap();
        assert_eq!(spans.len(), i % 3 + 1);
        assert_eq!(spans.last().unwrap().first_seq, (i % 3) as u64 * 10 + 1);
    }
    assert_eq!(lookup(&*f, &h, "missing").unwrap(), None);
    let mut bad = bytes.clone();
    bad[100] ^= 1;
    f.write_all_at(&bad, 0).unwrap();
    assert!(IdxContents::read(&*f).is_err());
}

#[test]
fn golden_bytes_of_an_empty_index() {
    let bytes = IdxBuilder::new().finish(&summary()).unwrap();
    let mut want = b"VXIX".to_vec();
    want.extend_from_slice(&[1, 0, 0, 0]);
    for v in [5u64, 9, 4096] {
        want.extend_from_slice(&v.to_le_bytes());
    }
    want.extend_from_slice(&10i64.to_le_bytes());
    want.extend_from_slice(&20i64.to_le_bytes());
    want.extend_from_slice(&3u64.to_le_bytes());
    want.extend_from_slice(&0u32.to_le_bytes()); // entries
    want.extend_from_slice(&1u32.to_le_bytes()); // slots
    want.extend_from_slice(&0u64.to_le_bytes()); // entries_len
    want.extend_from_slice(&0u64.to_le_bytes()); // spans
    want.extend_from_slice(&[0u8; 8]); // one empty slot
    let crc = crc32c::crc32c(&want);
    want.extend_from_slice(&crc.to_le_bytes());
    assert_eq!(bytes, want);
}

#[test]
fn golden_bytes_of_one_entry() {
    let mut b = IdxBuilder::new();
    let mut e = entry("ab", 11);
    e.floor = 4;
    e.flags = F_EVENTS | F_TOMBSTONE;
    b.add(&e, &[span(11, 10)]).unwrap();
    let bytes = b.finish(&summary()).unwrap();
    let h = IdxHeader::parse(&bytes).unwrap();
    assert_eq!((h.entries, h.slots, h.spans), (1, 2, 1));
    let at = HEADER_LEN + 2 * SLOT_LEN;
    let mut want = Vec::new();
    want.extend_from_slice(&2u16.to_le_bytes());
    want.extend_from_slice(&3u16.to_le_bytes());
    want.extend_from_slice(&1u32.to_le_bytes());
    want.extend_from_slice(&0u64.to_le_bytes());
    for v in [11u64, 20, 10, 500] {
        want.extend_from_slice(&v.to_le_bytes());
    }
    for v in [1i64, 2] {
        want.extend_from_slice(&v.to_le_bytes());
    }
    for v in [4u64, 3, 2, 2, 1, 1, 1, 1, 0, 0, 0] {
        want.extend_from_slice(&v.to_le_bytes());
    }
    for v in [0i64, 2, i64::MAX, i64::MIN] {
        want.extend_from_slice(&v.to_le_bytes());
    }
    want.extend_from_slice(b"ab");
    assert_eq!(bytes[at..at + want.len()], want[..]);
    let s = &bytes[at + want.len()..at + want.len() + SPAN_LEN];
    let mut ws = Vec::new();
    ws.extend_from_slice(&11u64.to_le_bytes());
    ws.extend_from_slice(&1i64.to_le_bytes());
    ws.extend_from_slice(&2i64.to_le_bytes());
    for v in [10u32, 100, 50, 60] {
        ws.extend_from_slice(&v.to_le_bytes());
    }
    assert_eq!(s, &ws[..]);
}

fn tables() -> Tables {
    use crate::api::{Origin, OriginTopic};
    Tables {
        // Out of order on purpose: the file sorts them.
        origins: vec![
            Origin {
                topic: OriginTopic::Entities,
                partition: 0,
                offset: 7,
            },
            Origin {
                topic: OriginTopic::Streams,
                partition: 2,
                offset: 0x0102_0304_0506_0708,
            },
        ],
        resets: vec![(3, 40)],
    }
}

/// Version 2 byte by byte: the 88-byte header (version 2, the two table sizes), the slot,
/// then the origins table sorted by (topic, partition) and the resets table, then the CRC.
#[test]
fn golden_bytes_of_an_index_with_tables() {
    let bytes = IdxBuilder::new()
        .finish_with(&summary(), &tables())
        .unwrap();
    let mut want = b"VXIX".to_vec();
    want.extend_from_slice(&[2, 0, 0, 0]);
    for v in [5u64, 9, 4096] {
        want.extend_from_slice(&v.to_le_bytes());
    }
    want.extend_from_slice(&10i64.to_le_bytes());
    want.extend_from_slice(&20i64.to_le_bytes());
    want.extend_from_slice(&3u64.to_le_bytes());
    want.extend_from_slice(&0u32.to_le_bytes()); // entries
    want.extend_from_slice(&1u32.to_le_bytes()); // slots
    want.extend_from_slice(&0u64.to_le_bytes()); // entries_len
    want.extend_from_slice(&0u64.to_le_bytes()); // spans
    want.extend_from_slice(&2u32.to_le_bytes()); // origins
    want.extend_from_slice(&1u32.to_le_bytes()); // resets
    want.extend_from_slice(&[0u8; 8]); // one empty slot
    want.extend_from_slice(&[0, 0, 0, 0]); // streams topic, padding
    want.extend_from_slice(&2u32.to_le_bytes());
    want.extend_from_slice(&[8, 7, 6, 5, 4, 3, 2, 1]);
    want.extend_from_slice(&[1, 0, 0, 0]); // entities topic, padding
    want.extend_from_slice(&0u32.to_le_bytes());
    want.extend_from_slice(&7u64.to_le_bytes());
    want.extend_from_slice(&3u32.to_le_bytes()); // shard 3
    want.extend_from_slice(&0u32.to_le_bytes());
    want.extend_from_slice(&40u64.to_le_bytes()); // its last reset at LSN 40
    let crc = crc32c::crc32c(&want);
    want.extend_from_slice(&crc.to_le_bytes());
    assert_eq!(bytes, want);
}

/// Both versions read: a version 2 file with entries and tables round-trips through the
/// readers (lookup, spans, tables), and a version 1 file has empty tables.
#[test]
fn versions_1_and_2_read() {
    let fs = crate::sim::SimFs::new();
    fs.create_dir_all(Path::new("/d")).unwrap();
    for (name, t) in [("v1", Tables::default()), ("v2", tables())] {
        let mut b = IdxBuilder::new();
        for i in 0..20u64 {
            b.add(&entry(&format!("s{i}"), 1), &[span(1, 10)]).unwrap();
        }
        let bytes = b.finish_with(&summary(), &t).unwrap();
        let path = Path::new("/d").join(name);
        let f = fs.open(&path, OpenMode::CreateNew).unwrap();
        f.write_all_at(&bytes, 0).unwrap();
        let all = IdxContents::read(&*f).unwrap();
        let want_version = if t.is_empty() { 1 } else { 2 };
        assert_eq!(all.header.version, want_version);
        assert_eq!(all.header.file_len(), bytes.len() as u64);
        let mut got = all.tables().unwrap();
        let mut want = t.clone();
        for x in [&mut got, &mut want] {
            x.origins.sort_unstable_by_key(|o| (o.topic, o.partition));
        }
        assert_eq!(got, want);
        let h = read_header(&*f).unwrap();
        assert_eq!(h, all.header);
        for i in 0..20u64 {
            let e = lookup(&*f, &h, &format!("s{i}")).unwrap().unwrap();
            assert_eq!(read_spans(&*f, &h, &e, 0, 4).unwrap(), vec![span(1, 10)]);
        }
        assert_eq!(all.entries().unwrap().len(), 20);
    }
}
