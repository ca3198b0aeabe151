//! The snapshot format's tests: the archive layout byte for byte (golden), and the round trip
//! over a file in memory: what is written loads back as the same tables, damaged files are
//! refused without a panic, changed declarations are redone.

#![allow(clippy::unwrap_used)]

use super::*;
use crate::Features;
use crate::LogPos;
use crate::decl::{Agg, DistinctOf, FeatureDecl, FeatureValue};
use parking_lot::Mutex;
use rkyv::rancor;
use std::io;
use std::time::Duration;

/// A file in memory.
#[derive(Default)]
struct MemFile(Mutex<Vec<u8>>);

impl SnapFile for MemFile {
    fn read_exact_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        let b = self.0.lock();
        let src = usize::try_from(off)
            .ok()
            .and_then(|o| b.get(o..o + buf.len()))
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(src);
        Ok(())
    }
    fn write_all_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let mut b = self.0.lock();
        let off = off as usize;
        if b.len() < off + buf.len() {
            b.resize(off + buf.len(), 0);
        }
        b[off..off + buf.len()].copy_from_slice(buf);
        Ok(())
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.lock().len() as u64)
    }
}

fn sample_decls() -> Vec<FeatureDecl> {
    let decl = |name: &str, agg, window: Option<u64>, of| FeatureDecl {
        name: name.into(),
        from: "hit".into(),
        agg,
        window: window.map(Duration::from_secs),
        ttl: None,
        of,
    };
    vec![
        decl("n", Agg::Count, Some(60), DistinctOf::Stream),
        decl("s", Agg::Sum, None, DistinctOf::Stream),
        decl("l", Agg::Last, Some(600), DistinctOf::Stream),
        decl("d", Agg::Distinct, Some(3600), DistinctOf::Stream),
        decl("da", Agg::Distinct, None, DistinctOf::Value),
    ]
}

/// Tables with every kind of state: plain values of each type, windows, both sketches.
fn sample_tables() -> Features {
    let f = Features::new(4, sample_decls(), u64::MAX);
    let mut lsn = 1;
    for i in 0..40i64 {
        let entity = format!("entity-{i}-{}", "x".repeat((i % 30) as usize));
        let stream = format!("s{}", i % 3);
        let at = LogPos {
            lsn,
            append_ms: 10_000,
        };
        let mut events = f.events(at, None).unwrap();
        for k in 0..3 {
            let ev = vx_proto::EventView {
                stream: &stream,
                entity: Some(&entity),
                ty: "hit",
                ts: 1_000 * k,
                kind: vx_proto::Kind::Counter,
                value: Some(vx_proto::Num::Int(i + k)),
                id: None,
                data: None,
            };
            events.apply(&ev).unwrap();
        }
        lsn += 1;
        let s = "v".repeat(i as usize);
        let set = [
            ("str", Some(FeatureValue::Str(s.into()))),
            ("f", Some(FeatureValue::Float(i as f64 / 3.0))),
            ("b", Some(FeatureValue::Bool(i % 2 == 0))),
        ];
        let at = LogPos {
            lsn,
            append_ms: 10_000,
        };
        f.put(at, &entity, &set, None).unwrap();
        lsn += 1;
    }
    f
}

fn dump(f: &Features) -> Vec<String> {
    (0..40)
        .map(|i| crate::read::text_of(f, &format!("entity-{i}-{}", "x".repeat(i % 30))))
        .collect()
}

/// A snapshot written and loaded gives the same tables; any damage to its bytes (a flipped
/// byte, a truncation, bytes appended) is refused or, at worst, loads something valid,
/// and never panics.
#[test]
fn round_trip_and_damage_is_refused_without_panic() {
    let f = sample_tables();
    let file = MemFile::default();
    let written = write_to(&f, &file, 5).unwrap();
    assert_eq!(written.covered_max, 80);
    let bytes = file.0.lock().clone();
    assert_eq!(written.bytes, bytes.len() as u64);
    let fresh = Features::new(4, sample_decls(), u64::MAX);
    let loaded = load(&file, &fresh).unwrap();
    assert_eq!((loaded.covered_max, loaded.created_ms), (80, 5));
    let from = fresh.install(loaded);
    assert_eq!(from.redo, [false; 5]);
    assert_eq!(dump(&fresh), dump(&f));
    if let Err(e) = verify(&file, 4) {
        panic!("{e} at {}", e.at);
    }
    assert!(matches!(verify(&file, 3), Err(VerifyError { at: 0, .. })));

    let mut rng = 0x5EED_u64;
    let mut next = |n: usize| {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((rng >> 33) as usize) % n.max(1)
    };
    let mut refused = 0;
    for case in 0..600 {
        let mut b = bytes.clone();
        match case % 3 {
            0 => {
                let at = next(b.len());
                b[at] ^= 1 << next(8);
            }
            1 => b.truncate(next(b.len())),
            _ => b.extend((0..1 + next(64)).map(|_| next(256) as u8)),
        }
        let damaged = MemFile(Mutex::new(b));
        if load(&damaged, &Features::new(4, sample_decls(), u64::MAX)).is_err() {
            refused += 1;
        }
    }
    assert!(
        refused > 590,
        "only {refused} of 600 damaged snapshots refused"
    );
}

/// A changed declaration is dropped from the snapshot's state and recomputed.
#[test]
fn changed_declarations_are_redone() {
    let f = sample_tables();
    let file = MemFile::default();
    write_to(&f, &file, 5).unwrap();
    let mut decls = sample_decls();
    decls[1].agg = Agg::Max;
    let fresh = Features::new(4, decls, u64::MAX);
    let from = fresh.install(load(&file, &fresh).unwrap());
    assert_eq!(from.redo, [false, true, false, false, false]);
    assert!(!fresh.exists("entity-1-x", Some("s")));
    assert!(fresh.exists("entity-1-x", Some("n")));
}

/// The archive of a small shard, byte for byte: any change to the archived types (or to
/// rkyv's format) changes it, and must come with a new SCHEMA. The record encoding inside
/// `packed` has its own golden test (`crate::rec`'s `golden_encoding`).
#[test]
fn golden_archive() {
    let mut packed = vec![2, b'p', b'1'];
    // flags (events, as_of), as_of 1000, events 3, one feature: name 2, updated at as_of, held.
    let enc = [0x09, 0xd0, 0x0f, 0x06, 0x01, 0x02, 0x00, 0x03];
    packed.push(enc.len() as u8);
    packed.extend_from_slice(&enc);
    let shard = SnapShard {
        covered: 42,
        names: vec!["events".into(), "last_ts".into(), "hp".into()],
        entities: 1,
        packed,
        held: vec![SnapHeld::Win(vec![SnapBucket {
            idx: 7,
            n: 2,
            a: 1.5,
        }])],
    };
    let bytes = rkyv::to_bytes::<rancor::Error>(&shard).unwrap();
    let a = rkyv::access::<ArchivedSnapShard, rancor::Error>(&bytes).unwrap();
    assert_eq!(a.covered.to_native(), 42);
    assert_eq!(&a.packed[..3], b"\x02p1");
    assert_eq!(
        (bytes.len(), xxhash_rust::xxh3::xxh3_64(&bytes)),
        (GOLDEN_LEN, GOLDEN_HASH),
        "the snapshot archive layout changed: bump SCHEMA"
    );
    assert_eq!(schema_hash(), xxhash_rust::xxh3::xxh3_64(SCHEMA.as_bytes()));
    // The shard loads: its entity has the window.
    let f = Features::new(1, vec![], u64::MAX);
    let mut sh = f.empty_shard();
    load::build_shard_for_test(&mut sh, a, &f).unwrap();
    assert_eq!(sh.entities.len(), 1);
}

const GOLDEN_LEN: usize = 128;
const GOLDEN_HASH: u64 = 12893373029786374683;

/// Plain names come back at their own ids (a freed id stays free) with their uses counted:
/// after a load, deleting the last use of a name frees it, and the byte counts stay exact.
#[test]
fn names_come_back_with_their_uses() {
    let f = Features::new(1, vec![], u64::MAX);
    let at = |lsn| LogPos { lsn, append_ms: 1 };
    let int = |i| Some(FeatureValue::Int(i));
    f.put(at(1), "a", &[("x", int(1)), ("y", int(2))], None)
        .unwrap();
    f.put(at(2), "b", &[("z", int(3)), ("x", int(4))], None)
        .unwrap();
    f.delete(at(3), "a", &[Some("y")], None).unwrap();
    let file = MemFile::default();
    write_to(&f, &file, 5).unwrap();
    let fresh = Features::new(1, vec![], u64::MAX);
    fresh.install(load(&file, &fresh).unwrap());
    {
        let (was, now) = (f.shards[0].read(), fresh.shards[0].read());
        assert!(was.names.id("y").is_none());
        assert_eq!(
            was.names.iter().collect::<Vec<_>>(),
            now.names.iter().collect::<Vec<_>>()
        );
        // (The load reserves every index table at once: the bytes are its own.)
        assert_eq!(now.bytes, now.measure());
    }
    fresh.delete(at(4), "a", &[Some("x")], None).unwrap();
    assert!(fresh.shards[0].read().names.id("x").is_some());
    fresh.delete(at(5), "b", &[Some("x")], None).unwrap();
    let g = fresh.shards[0].read();
    assert!(g.names.id("x").is_none());
    assert!(g.names.id("z").is_some());
    assert_eq!(g.bytes, g.measure());
}

/// A whole snapshot file, byte for byte: the head, the declarations, each shard's chunk
/// (length, checksum, shard, archive, padding) and the trailer, as docs/ARCHITECTURE.md
/// describes them. One shard's archive is larger than a write piece, so a chunk written in
/// several writes must come out as the same bytes.
#[test]
fn golden_file() {
    let f = sample_tables();
    // 200,000 more entities: each of the four shards' archives is over a megabyte.
    let names: Vec<String> = (0..200_000).map(|i| format!("bulk-{i}")).collect();
    let evs: Vec<vx_proto::EventView<'_>> = names
        .iter()
        .map(|n| vx_proto::EventView {
            stream: "s0",
            entity: Some(n),
            ty: "other",
            ts: 5_000,
            kind: vx_proto::Kind::Counter,
            value: Some(vx_proto::Num::Int(7)),
            id: None,
            data: None,
        })
        .collect();
    let at = LogPos {
        lsn: 1_000,
        append_ms: 10_000,
    };
    for chunk in evs.chunks(1000) {
        f.events(at, None).unwrap().apply_all(chunk).unwrap();
    }
    let file = MemFile::default();
    let written = write_to(&f, &file, 1_700_000_000_000).unwrap();
    let bytes = file.0.lock().clone();
    assert_eq!(written.bytes, bytes.len() as u64);
    assert_eq!(
        (bytes.len(), xxhash_rust::xxh3::xxh3_64(&bytes)),
        (GOLDEN_FILE_LEN, GOLDEN_FILE_HASH),
        "the snapshot file's bytes changed: bump SCHEMA if the format did"
    );
    // Walk the chunks: each on a 16-byte boundary, its length, checksum and shard, then the
    // archive; the trailer after the last.
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap());
    let meta_len = u32_at(48) as usize;
    let mut off = HEAD_LEN + meta_len.next_multiple_of(16);
    let mut largest = 0;
    for shard in 0..f.shards() {
        assert_eq!(off % 16, 0);
        let len = u64_at(off) as usize;
        let archive = &bytes[off + 16..off + 16 + len];
        assert_eq!(u32_at(off + 8), crc32c::crc32c(archive));
        assert_eq!(u32_at(off + 12), shard);
        assert!(
            bytes[off + 16 + len..(off + 16 + len).next_multiple_of(16)]
                .iter()
                .all(|&b| b == 0)
        );
        largest = largest.max(len);
        off = (off + 16 + len).next_multiple_of(16);
    }
    assert!(
        largest > super::write::WRITE_PIECE,
        "a chunk in several writes"
    );
    assert_eq!(&bytes[off..off + 8], TRAILER);
    assert_eq!(u64_at(off + 8), bytes.len() as u64);
}

// Since issue 30 a small `distinct` is held as its exact values (hll.rs): the sample tables'
// sketches are exact sets now, in the same archived type (`SnapHeld::Hll`), so the bytes
// changed and the format (SCHEMA) did not; a sketch written before still loads as one.
const GOLDEN_FILE_LEN: usize = 5_103_696;
const GOLDEN_FILE_HASH: u64 = 17279111976084147611;
