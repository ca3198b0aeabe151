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
        samples_at: 0,
        samples_n: 0,
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
        b.add(&e, &spans, &[]).unwrap();
    }
    let bytes = b.finish(&summary()).unwrap();
    let f = fs.open(Path::new("/d/x.idx"), OpenMode::CreateNew).unwrap();
    f.write_all_at(&bytes, 0).unwrap();
    let all = IdxContents::read(&*f).unwrap();
    assert_eq!(all.header.entries, 100);
    assert_eq!(all.header.version, VERSION_SAMPLES);
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

/// Version 1 (what a single-node log wrote before version 3): the 80-byte header, one empty
/// slot, the CRC.
#[test]
fn golden_bytes_of_an_empty_index() {
    let bytes = IdxBuilder::new()
        .finish_as(&summary(), &Tables::default(), VERSION_1)
        .unwrap();
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
    b.add(&e, &[span(11, 10)], &[]).unwrap();
    let bytes = b
        .finish_as(&summary(), &Tables::default(), VERSION_1)
        .unwrap();
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
        .finish_as(&summary(), &tables(), VERSION_TABLES)
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

/// The older versions read: a version 2 file with entries and tables round-trips through the
/// readers (lookup, spans, tables), a version 1 file has empty tables, and neither has samples.
#[test]
fn versions_1_and_2_read() {
    let fs = crate::sim::SimFs::new();
    fs.create_dir_all(Path::new("/d")).unwrap();
    for (name, t, version) in [
        ("v1", Tables::default(), VERSION_1),
        ("v2", tables(), VERSION_TABLES),
        ("v2-empty", Tables::default(), VERSION_TABLES),
        ("v3", tables(), VERSION_SAMPLES),
    ] {
        let mut b = IdxBuilder::new();
        for i in 0..20u64 {
            let (sp, samples) = span_with_samples(1, 10);
            b.add(&entry(&format!("s{i}"), 1), &[sp], &samples).unwrap();
        }
        let bytes = b.finish_as(&summary(), &t, version).unwrap();
        let path = Path::new("/d").join(name);
        let f = fs.open(&path, OpenMode::CreateNew).unwrap();
        f.write_all_at(&bytes, 0).unwrap();
        let all = IdxContents::read(&*f).unwrap();
        assert_eq!(all.header.version, version);
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
            let spans = read_spans(&*f, &h, &e, 0, 4).unwrap();
            let (mut want_span, want_samples) = span_with_samples(1, 10);
            if version < VERSION_SAMPLES {
                (want_span.samples_at, want_span.samples_n) = (0, 0);
                assert_eq!(h.samples, 0);
                assert_eq!(best_sample(&*f, &h, &spans[0], 9).unwrap(), None);
            } else {
                want_span.samples_at = u32::try_from(i).unwrap() * 2;
                assert_eq!(all.samples(&spans[0]).unwrap(), want_samples);
                assert_eq!(
                    best_sample(&*f, &h, &spans[0], 9).unwrap(),
                    Some(want_samples[1])
                );
            }
            assert_eq!(spans, vec![want_span]);
        }
        assert_eq!(all.entries().unwrap().len(), 20);
    }
}

/// `span(first_seq, count)` with two samples: a run header at `first_seq + 3` and an event
/// inside the run after it.
fn span_with_samples(first_seq: u64, count: u32) -> (Span, Vec<Sample>) {
    let mut s = span(first_seq, count);
    s.samples_n = 2;
    let samples = vec![
        Sample {
            seq: first_seq + 3,
            off: 110,
            left: 0,
            after: 130,
        },
        Sample {
            seq: first_seq + 6,
            off: 125,
            left: count - 6,
            after: 150,
        },
    ];
    (s, samples)
}

/// Version 3 byte by byte: the 96-byte header (version 3, the table sizes, the sample count),
/// two slots, one entry, its span of 48 bytes (with `samples_at`, `samples_n`), the samples
/// region (seq relative to the span's first, offset, events left, record end), the tables
/// (0 rows here), the CRC.
#[test]
fn golden_bytes_of_an_entry_with_samples() {
    let mut b = IdxBuilder::new();
    let (sp, samples) = span_with_samples(11, 10);
    let mut e = entry("ab", 11);
    e.floor = 4;
    e.flags = F_EVENTS | F_TOMBSTONE;
    b.add(&e, &[sp], &samples).unwrap();
    let bytes = b.finish(&summary()).unwrap();
    let mut want = b"VXIX".to_vec();
    want.extend_from_slice(&[3, 0, 0, 0]);
    for v in [5u64, 9, 4096] {
        want.extend_from_slice(&v.to_le_bytes());
    }
    want.extend_from_slice(&10i64.to_le_bytes());
    want.extend_from_slice(&20i64.to_le_bytes());
    want.extend_from_slice(&3u64.to_le_bytes()); // ids
    want.extend_from_slice(&1u32.to_le_bytes()); // entries
    want.extend_from_slice(&2u32.to_le_bytes()); // slots
    want.extend_from_slice(&(186u64).to_le_bytes()); // entries_len: 184 + "ab"
    want.extend_from_slice(&1u64.to_le_bytes()); // spans
    want.extend_from_slice(&0u32.to_le_bytes()); // origins
    want.extend_from_slice(&0u32.to_le_bytes()); // resets
    want.extend_from_slice(&2u64.to_le_bytes()); // samples
    assert_eq!(want.len(), HEADER_LEN_SAMPLES);
    // The slots: the entry's hash picks one of the two; its tag and offset + 1.
    let h = name_hash("ab");
    let mut slots = [0u8; 16];
    let at = (h & 1) as usize * 8;
    slots[at..at + 4].copy_from_slice(&((h >> 32) as u32).to_le_bytes());
    slots[at + 4..at + 8].copy_from_slice(&1u32.to_le_bytes());
    want.extend_from_slice(&slots);
    // The entry, as in version 1.
    want.extend_from_slice(&2u16.to_le_bytes()); // name_len
    want.extend_from_slice(&3u16.to_le_bytes()); // flags
    want.extend_from_slice(&1u32.to_le_bytes()); // spans_n
    want.extend_from_slice(&0u64.to_le_bytes()); // spans_at
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
    // The span: 40 bytes as before, then samples_at 0, samples_n 2.
    want.extend_from_slice(&11u64.to_le_bytes());
    want.extend_from_slice(&1i64.to_le_bytes());
    want.extend_from_slice(&2i64.to_le_bytes());
    for v in [10u32, 100, 50, 60, 0, 2] {
        want.extend_from_slice(&v.to_le_bytes());
    }
    // The samples: seq 14 (11 + 3) at its run header (left 0), seq 17 (11 + 6) inside a run
    // with 4 events left; each with the end of its run's record.
    for v in [3u32, 110, 0, 130, 6, 125, 4, 150] {
        want.extend_from_slice(&v.to_le_bytes());
    }
    let crc = crc32c::crc32c(&want);
    want.extend_from_slice(&crc.to_le_bytes());
    assert_eq!(bytes, want);
    let all = IdxContents::from_bytes(bytes).unwrap();
    let e = &all.entries().unwrap()[0];
    let spans = all.spans(e).unwrap();
    assert_eq!(spans, vec![sp]);
    assert_eq!(all.samples(&spans[0]).unwrap(), samples);
}

/// The best sample of a span is the one with the greatest seq at or before the target, read
/// whole (≤ 128 samples) or by binary search (more), and none at or before the span's start.
#[test]
fn best_sample_whole_and_by_binary_search() {
    let fs = crate::sim::SimFs::new();
    fs.create_dir_all(Path::new("/d")).unwrap();
    for n in [1u32, 2, 127, 128, 129, 1000] {
        let count = n * 10 + 5;
        let mut sp = span(1000, count);
        sp.len = count * 20;
        sp.samples_n = n;
        let samples: Vec<Sample> = (0..n)
            .map(|i| Sample {
                seq: 1000 + u64::from(i) * 10 + 3,
                off: 100 + i * 200 + 60,
                left: count - i * 10 - 3,
                after: 100 + count * 20,
            })
            .collect();
        let mut b = IdxBuilder::new();
        b.add(&entry("s", 1000), &[sp], &samples).unwrap();
        let bytes = b.finish(&summary()).unwrap();
        let path = Path::new("/d").join(format!("n{n}"));
        let f = fs.open(&path, OpenMode::CreateNew).unwrap();
        f.write_all_at(&bytes, 0).unwrap();
        let h = read_header(&*f).unwrap();
        let e = lookup(&*f, &h, "s").unwrap().unwrap();
        let spans = read_spans(&*f, &h, &e, 0, 1).unwrap();
        for seq in 1000..1000 + u64::from(count) {
            let want = crate::index::samples::best(&samples, seq);
            assert_eq!(
                best_sample(&*f, &h, &spans[0], seq).unwrap(),
                want,
                "{n} {seq}"
            );
        }
    }
}

/// [`with_version`] writes the same index in an older version: entries, spans and tables the
/// same, samples gone; back in version 3 it is the same file again only with them.
#[test]
fn an_index_written_again_in_older_versions() {
    let mut b = IdxBuilder::new();
    for i in 0..5u64 {
        let (sp, samples) = span_with_samples(1, 10);
        b.add(&entry(&format!("s{i}"), 1), &[sp, span(11, 3)], &samples)
            .unwrap();
    }
    let v3 = b.finish(&summary()).unwrap();
    assert_eq!(with_version(&v3, VERSION).unwrap(), v3);
    let a = IdxContents::from_bytes(v3.clone()).unwrap();
    for version in [VERSION_1, VERSION_TABLES] {
        let old = with_version(&v3, version).unwrap();
        let b = IdxContents::from_bytes(old).unwrap();
        assert_eq!(b.header.version, version);
        assert_eq!(b.header.samples, 0);
        let (ea, eb) = (a.entries().unwrap(), b.entries().unwrap());
        assert_eq!(ea, eb);
        for (x, y) in ea.iter().zip(&eb) {
            let strip = |v: Vec<Span>| {
                v.into_iter()
                    .map(|mut s| {
                        (s.samples_at, s.samples_n) = (0, 0);
                        s
                    })
                    .collect::<Vec<_>>()
            };
            assert_eq!(strip(a.spans(x).unwrap()), b.spans(y).unwrap());
        }
    }
    let with_tables = IdxBuilder::new()
        .finish_with(&summary(), &tables())
        .unwrap();
    assert!(with_version(&with_tables, VERSION_1).is_err());
}
