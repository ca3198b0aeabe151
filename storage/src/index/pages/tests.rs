//! The index page cache: reads through it equal the file's, a page is read once, refused reads
//! stay refused, the bound holds, and retention's removals leave it.

#![allow(clippy::unwrap_used)]

use super::*;
use crate::index::idxfile;
use proptest::prelude::*;
use std::sync::atomic::AtomicBool;

/// An index file in memory that counts its reads and can refuse them as an uncached read
/// under `cached_only` is refused.
struct Mem {
    bytes: Vec<u8>,
    reads: AtomicU64,
    refuse: AtomicBool,
}

impl Mem {
    fn new(len: usize) -> Arc<Mem> {
        Arc::new(Mem {
            bytes: (0..len).map(|i| (i * 7 + i / 4096) as u8).collect(),
            reads: AtomicU64::new(0),
            refuse: AtomicBool::new(false),
        })
    }
    fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }
}

impl VFile for Mem {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        if self.refuse.load(Ordering::Relaxed) {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.reads.fetch_add(1, Ordering::Relaxed);
        let off = usize::try_from(off).unwrap().min(self.bytes.len());
        let k = buf.len().min(self.bytes.len() - off);
        buf[..k].copy_from_slice(&self.bytes[off..off + k]);
        Ok(k)
    }
    fn write_all_at(&self, _: &[u8], _: u64) -> io::Result<()> {
        unreachable!()
    }
    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }
    fn set_len(&self, _: u64) -> io::Result<()> {
        unreachable!()
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.bytes.len() as u64)
    }
}

fn cached(pages: &Arc<IndexPages>, seg: u64, mem: &Arc<Mem>) -> Arc<dyn VFile> {
    let file: Arc<dyn VFile> = Arc::clone(mem) as Arc<dyn VFile>;
    pages.file(seg, file, mem.bytes.len() as u64)
}

proptest! {
    /// Any read through the cache answers the file's bytes, whatever pages it spans, up to the
    /// end of the file; past the end it answers 0 bytes, as a file does.
    #[test]
    fn a_read_through_the_cache_equals_the_file(
        len in 1usize..20_000,
        reads in proptest::collection::vec((0u64..21_000, 0usize..9_000), 1..20),
        capacity in prop_oneof![Just(0u64), Just(3 * PAGE), Just(1 << 20)],
    ) {
        let mem = Mem::new(len);
        let pages = Arc::new(IndexPages::new(capacity));
        let f = cached(&pages, 7, &mem);
        for (off, n) in reads {
            let mut got = vec![0u8; n];
            let k = f.read_full_at(&mut got, off).unwrap();
            let mut want = vec![0u8; n];
            let wk = mem.read_full_at(&mut want, off).unwrap();
            prop_assert_eq!(k, wk);
            prop_assert_eq!(&got[..k], &want[..wk]);
        }
        prop_assert!(pages.stats().bytes <= capacity);
    }
}

/// The second read of the same bytes costs the file nothing; another segment's pages are
/// its own.
#[test]
fn a_page_is_read_from_the_file_once() {
    let mem = Mem::new(3 * PAGE as usize + 100);
    let pages = Arc::new(IndexPages::new(1 << 20));
    let f = cached(&pages, 1, &mem);
    let mut buf = [0u8; 48];
    f.read_exact_at(&mut buf, 4080).unwrap(); // spans pages 0 and 1
    assert_eq!(mem.reads(), 2);
    for off in [0, 10, 4080, 4096, 8000] {
        f.read_exact_at(&mut buf, off).unwrap();
    }
    assert_eq!(mem.reads(), 2, "pages 0 and 1 came from the cache");
    let s = pages.stats();
    assert_eq!((s.misses, s.hits), (2, 6));
    let other = cached(&pages, 2, &mem);
    other.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(mem.reads(), 3, "segment 2's page 0 is not segment 1's");
}

/// A read the backend refuses (`cached_only` and cold) is refused through the cache too, and
/// leaves nothing cached; once the backend answers, the page is kept.
#[test]
fn a_refused_read_is_refused_and_caches_nothing() {
    let mem = Mem::new(10_000);
    let pages = Arc::new(IndexPages::new(1 << 20));
    let f = cached(&pages, 1, &mem);
    mem.refuse.store(true, Ordering::Relaxed);
    let mut buf = [0u8; 16];
    let e = f.read_exact_at(&mut buf, 5000).unwrap_err();
    assert!(crate::vfs::would_block(&e), "{e}");
    assert_eq!(pages.stats().bytes, 0);
    mem.refuse.store(false, Ordering::Relaxed);
    f.read_exact_at(&mut buf, 5000).unwrap();
    mem.refuse.store(true, Ordering::Relaxed);
    f.read_exact_at(&mut buf, 5000).unwrap(); // from the cache: the backend is not asked
}

/// The cache never holds more than its capacity, and a segment that retention removed leaves
/// it.
#[test]
fn the_cache_is_bounded_and_forgets_removed_segments() {
    let mem = Mem::new(64 * PAGE as usize);
    let capacity = 8 * (PAGE + PAGE_OVERHEAD);
    let pages = Arc::new(IndexPages::new(capacity));
    let mut buf = [0u8; 8];
    for seg in 1..=4 {
        let f = cached(&pages, seg, &mem);
        for p in 0..64 {
            f.read_exact_at(&mut buf, p * PAGE).unwrap();
            assert!(pages.stats().bytes <= capacity);
        }
    }
    assert!(pages.stats().bytes > 0);
    for seg in 1..=4 {
        pages.forget(seg);
    }
    assert_eq!(pages.stats().bytes, 0);
}

/// Without a cache (`storage.index_cache_bytes: 0`) the file is the file itself.
#[test]
fn a_zero_capacity_reads_the_file() {
    let mem = Mem::new(5000);
    let pages = Arc::new(IndexPages::new(0));
    let f = cached(&pages, 1, &mem);
    let mut buf = [0u8; 8];
    f.read_exact_at(&mut buf, 0).unwrap();
    f.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(mem.reads(), 2);
    assert_eq!(pages.stats(), PageStats::default());
}

/// A sealed index file cannot be written through the cache.
#[test]
fn a_cached_index_file_is_read_only() {
    let mem = Mem::new(100);
    let pages = Arc::new(IndexPages::new(1 << 20));
    let f = cached(&pages, 1, &mem);
    assert_eq!(
        f.write_all_at(b"x", 0).unwrap_err().kind(),
        io::ErrorKind::PermissionDenied
    );
    assert_eq!(f.len().unwrap(), 100);
}

/// The index file `b` builds, of segment 1 with a log of `log_len` bytes, in memory.
fn index_file(b: idxfile::IdxBuilder, log_len: u64) -> (Arc<Mem>, IdxHeader) {
    let bytes = b
        .finish(&idxfile::SegSummary {
            segment: 1,
            next_lsn: 2,
            log_len,
            min_append_ms: 0,
            max_append_ms: 0,
            ids: 0,
        })
        .unwrap();
    let mem = Arc::new(Mem {
        bytes,
        reads: AtomicU64::new(0),
        refuse: AtomicBool::new(false),
    });
    let h = idxfile::read_header(&*mem).unwrap();
    (mem, h)
}

/// An index file holding two entries: `small` with 3 spans and `big` with one span more than
/// [`DECODED_SPANS`].
fn two_entries() -> (Arc<Mem>, IdxHeader, Entry, Entry) {
    use crate::index::idxfile::{F_EVENTS, IdxBuilder};
    let span = |i: u32| Span {
        first_seq: u64::from(i) * 10 + 1,
        min_ts: 1,
        max_ts: 2,
        count: 10,
        off: i * 100,
        len: 50,
        rec_end: 60,
        samples_at: 0,
        samples_n: 0,
    };
    let mut b = IdxBuilder::new();
    for (name, n) in [("small", 3), ("big", DECODED_SPANS + 1)] {
        let spans: Vec<Span> = (0..n).map(span).collect();
        let e = Entry {
            name: name.into(),
            flags: F_EVENTS,
            first_seq: 1,
            last_seq: u64::from(n) * 10,
            count: u64::from(n) * 10,
            spans_n: n,
            depth: 1,
            ..Entry::default()
        };
        b.add(&e, &spans, &[]).unwrap();
    }
    let (mem, h) = index_file(b, 1 << 20);
    let small = idxfile::lookup(&*mem, &h, "small").unwrap().unwrap();
    let big = idxfile::lookup(&*mem, &h, "big").unwrap().unwrap();
    (mem, h, small, big)
}

/// A node's spans come back decoded, equal to the file's, and the second time from memory; a
/// node of more than `DECODED_SPANS` spans is not kept (it is searched through the pages).
#[test]
fn a_nodes_spans_are_kept_decoded() {
    let (mem, h, small, big) = two_entries();
    let pages = Arc::new(IndexPages::new(1 << 20));
    let f = cached(&pages, 1, &mem);
    let want = idxfile::read_spans(&*mem, &h, &small, 0, small.spans_n).unwrap();
    let got = pages.spans(1, &*f, &h, &small).unwrap().unwrap();
    assert_eq!(&got[..], &want[..]);
    let reads = mem.reads();
    let again = pages.spans(1, &*f, &h, &small).unwrap().unwrap();
    assert!(Arc::ptr_eq(&got, &again));
    assert_eq!(mem.reads(), reads, "the second time reads nothing");
    assert!(pages.spans(1, &*f, &h, &big).unwrap().is_none());
    pages.forget(1);
    assert_eq!(pages.stats().bytes, 0);
    let none = Arc::new(IndexPages::new(0));
    assert!(none.spans(1, &*f, &h, &small).unwrap().is_none());
}

/// A stream's entry is looked up in the file once, then comes from memory; a stream the
/// segment does not hold is looked up every time (nothing is kept for it).
#[test]
fn an_entry_is_looked_up_once() {
    let (mem, h, small, _) = two_entries();
    let pages = Arc::new(IndexPages::new(1 << 20));
    let lookups = std::cell::Cell::new(0);
    let find = |name: &str| {
        pages
            .entry(1, name, || {
                lookups.set(lookups.get() + 1);
                idxfile::lookup(&*mem, &h, name)
            })
            .unwrap()
    };
    assert_eq!(find("small"), Some(small.clone()));
    assert_eq!(find("small"), Some(small));
    assert_eq!(lookups.get(), 1);
    assert_eq!(find("missing"), None);
    assert_eq!(find("missing"), None);
    assert_eq!(lookups.get(), 3);
}

/// One stream's spans in an index file: one with `n` samples for each `n` of `samples_n`,
/// every span 100 events of 20 bytes, a sample every 10 events.
fn sampled_spans(samples_n: &[u32]) -> (Arc<Mem>, IdxHeader, Vec<Span>) {
    use crate::index::idxfile::{F_EVENTS, IdxBuilder};
    let mut spans = Vec::new();
    let mut samples = Vec::new();
    let mut first_seq = 1u64;
    let mut off = 0u32;
    for &n in samples_n {
        let count = (n + 1) * 10;
        spans.push(Span {
            first_seq,
            min_ts: 1,
            max_ts: 2,
            count,
            off,
            len: count * 20 + 50,
            rec_end: count * 20 + 50,
            samples_at: u32::try_from(samples.len()).unwrap(),
            samples_n: n,
        });
        samples.extend((1..=n).map(|i| Sample {
            seq: first_seq + u64::from(i) * 10,
            off: off + 50 + i * 200,
            left: count - i * 10,
            after: off + count * 20 + 50,
        }));
        first_seq += u64::from(count);
        off += count * 20 + 50;
    }
    let e = Entry {
        name: "s".into(),
        flags: F_EVENTS,
        first_seq: 1,
        last_seq: first_seq - 1,
        count: first_seq - 1,
        spans_n: u32::try_from(spans.len()).unwrap(),
        depth: 1,
        ..Entry::default()
    };
    let mut b = IdxBuilder::new();
    b.add(&e, &spans, &samples).unwrap();
    let (mem, h) = index_file(b, u64::from(off));
    let e = idxfile::lookup(&*mem, &h, "s").unwrap().unwrap();
    let spans = idxfile::read_spans(&*mem, &h, &e, 0, e.spans_n).unwrap();
    (mem, h, spans)
}

/// A span's samples come back decoded, equal to the file's, and the second time from memory;
/// a span without samples has none and keeps nothing (its `samples_at` names no samples of
/// its own), and one of more than `DECODED_SAMPLES` samples is not kept.
#[test]
fn a_spans_samples_are_kept_decoded() {
    let (mem, h, spans) = sampled_spans(&[5, 0, DECODED_SAMPLES + 1, 3]);
    let pages = Arc::new(IndexPages::new(1 << 20));
    let f = cached(&pages, 1, &mem);
    for i in [0, 3] {
        let span = &spans[i];
        let want = idxfile::read_samples(&*mem, &h, span, 0, span.samples_n).unwrap();
        assert_eq!(want.len(), span.samples_n as usize);
        let got = pages.samples(1, &*f, &h, span).unwrap().unwrap();
        assert_eq!(&got[..], &want[..]);
        let reads = mem.reads();
        let again = pages.samples(1, &*f, &h, span).unwrap().unwrap();
        assert!(Arc::ptr_eq(&got, &again));
        assert_eq!(mem.reads(), reads, "the second time reads nothing");
    }
    let kept = pages.stats().bytes;
    assert!(
        pages
            .samples(1, &*f, &h, &spans[1])
            .unwrap()
            .unwrap()
            .is_empty()
    );
    assert!(pages.samples(1, &*f, &h, &spans[2]).unwrap().is_none());
    assert_eq!(pages.stats().bytes, kept, "neither is kept");
    // The first span's samples are still its own, not the empty span's.
    let first = pages.samples(1, &*f, &h, &spans[0]).unwrap().unwrap();
    assert_eq!(first.len(), 5);
    pages.forget(1);
    assert_eq!(pages.stats().bytes, 0);
    let none = Arc::new(IndexPages::new(0));
    assert!(none.samples(1, &*f, &h, &spans[0]).unwrap().is_none());
}
