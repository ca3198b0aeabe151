//! The index page cache: the parts of sealed segments' index files that readers touched, kept
//! in memory as 4 KiB pages, bounded by `storage.index_cache_bytes`.
//!
//! A point read in a sealed segment looks up its stream's entry (a slot probe and the entry),
//! walks the stream's chain of nodes (one entry per node), binary-searches the node's spans and
//! reads the span's samples: about fifteen `pread`s of a few dozen bytes each before the one
//! read of events. Index files never change once sealed, so their pages can be kept without
//! invalidation: with the hot pages in memory a point read costs one `pread`, of the events.
//!
//! The cache is [`quick_cache`]'s (S3-FIFO: a scan of a long stream's spans does not push out
//! the pages every point read touches), keyed by (segment, page), weighted by bytes. A segment
//! removed by retention drops its pages ([`IndexPages::forget`]). A page is read whole, through
//! the file's own backend, so that a read under [`crate::vfs::cached_only`] that misses both
//! caches is refused as before ([`crate::vfs::would_block`]) and caches nothing.
//!
//! Beside the pages, the same cache (and bound) keeps streams' entries decoded
//! ([`IndexPages::entry`]: a chain walk reads one per node it visits) and a node's spans decoded
//! ([`IndexPages::spans`], for nodes of at most [`DECODED_SPANS`] spans): finding the span of a
//! seq is then a binary search in memory, where through pages it was a dozen lookups and
//! parses (about 10% of a point read's CPU). A span's samples are kept decoded the same way
//! ([`IndexPages::samples`], spans of at most [`DECODED_SAMPLES`] samples): the best sample
//! for a seq was otherwise a binary search of one-sample reads, each a page lookup, a copy and
//! an allocation.

use crate::index::idxfile::{self, Entry, IdxHeader, Sample, Span};
use crate::vfs::VFile;
use quick_cache::Weighter;
use quick_cache::sync::Cache;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes of a page: the page cache's unit, and about what one index `pread` of the kernel's
/// costs anyway.
pub const PAGE: u64 = 4096;

/// Bytes counted per page beyond its data: the key, the `Arc` header and the cache's slot.
const PAGE_OVERHEAD: u64 = 64;

/// A node's spans are kept decoded up to this many (48 bytes each in memory): longer nodes,
/// rare (a stream written in many small runs between other streams' runs), are searched
/// through the pages.
pub const DECODED_SPANS: u32 = 2048;

/// A span's samples are kept decoded up to this many (24 bytes each in memory); a span has
/// one per few KiB of its events, so only spans of many MiB have more.
pub const DECODED_SAMPLES: u32 = 2048;

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    /// Page `no` of segment `seg`'s index file.
    Page { seg: u64, no: u64 },
    /// The spans of the entry of segment `seg` whose spans start at index `at`.
    Spans { seg: u64, at: u64 },
    /// The entry of segment `seg` of the stream whose name hashes to `name` (xxh3-64; the
    /// name is compared on a hit).
    Entry { seg: u64, name: u64 },
    /// The samples of the span of segment `seg` whose samples start at index `at`.
    Samples { seg: u64, at: u32 },
}

#[derive(Clone)]
enum Val {
    Page(Arc<[u8]>),
    Spans(Arc<[Span]>),
    Entry(Arc<Entry>),
    Samples(Arc<[Sample]>),
}

impl Key {
    fn seg(&self) -> u64 {
        match *self {
            Key::Page { seg, .. }
            | Key::Spans { seg, .. }
            | Key::Entry { seg, .. }
            | Key::Samples { seg, .. } => seg,
        }
    }
}

/// What the cache keeps as a list: a page's bytes, a node's spans decoded, a span's samples
/// decoded.
trait Decoded: Sized {
    fn wrap(all: Arc<[Self]>) -> Val;
    /// `None` for a value of another kind (keys of each kind name only values of that kind).
    fn unwrap(v: Val) -> Option<Arc<[Self]>>;
}

/// Each kind of list is one variant of [`Val`].
macro_rules! decoded {
    ($($t:ty => $variant:ident),+ $(,)?) => {$(
        impl Decoded for $t {
            fn wrap(all: Arc<[$t]>) -> Val {
                Val::$variant(all)
            }
            fn unwrap(v: Val) -> Option<Arc<[$t]>> {
                match v {
                    Val::$variant(all) => Some(all),
                    _ => None,
                }
            }
        }
    )+};
}

decoded!(u8 => Page, Span => Spans, Sample => Samples);

#[derive(Clone)]
struct Bytes;

impl Weighter<Key, Val> for Bytes {
    fn weight(&self, _key: &Key, v: &Val) -> u64 {
        let bytes = match v {
            Val::Page(p) => p.len(),
            Val::Spans(s) => std::mem::size_of_val::<[Span]>(s),
            Val::Entry(e) => std::mem::size_of::<Entry>() + e.name.len(),
            Val::Samples(s) => std::mem::size_of_val::<[Sample]>(s),
        };
        bytes as u64 + PAGE_OVERHEAD
    }
}

/// What the cache did, for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageStats {
    /// Bytes held now (pages and their overhead).
    pub bytes: u64,
    pub hits: u64,
    pub misses: u64,
}

/// Pages of sealed index files, shared by every reader.
pub struct IndexPages {
    /// `None` when `storage.index_cache_bytes` is 0: every read goes to the file.
    cache: Option<Cache<Key, Val, Bytes>>,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl IndexPages {
    /// A cache of at most `capacity` bytes (0: none).
    pub fn new(capacity: u64) -> Self {
        let cache = (capacity > 0).then(|| {
            let pages = usize::try_from(capacity / (PAGE + PAGE_OVERHEAD)).unwrap_or(usize::MAX);
            Cache::with_weighter(pages.max(1), capacity, Bytes)
        });
        IndexPages {
            cache,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// `file`, segment `seg`'s index file of `len` bytes, read through this cache.
    pub fn file(self: &Arc<Self>, seg: u64, file: Arc<dyn VFile>, len: u64) -> Arc<dyn VFile> {
        if self.cache.is_none() {
            return file;
        }
        Arc::new(CachedIdx {
            seg,
            len,
            file,
            pages: Arc::clone(self),
        })
    }

    /// Drop segment `seg`'s pages (retention removed it).
    pub fn forget(&self, seg: u64) {
        if let Some(c) = &self.cache {
            c.retain(|k, _| k.seg() != seg);
        }
    }

    pub fn stats(&self) -> PageStats {
        PageStats {
            bytes: self.cache.as_ref().map_or(0, Cache::weight),
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
        }
    }

    /// Every span of entry `e` of segment `seg`'s index file `file` (read through this cache),
    /// decoded and kept; `None` for an entry of more than [`DECODED_SPANS`] spans, or without
    /// a cache.
    pub fn spans(
        &self,
        seg: u64,
        file: &dyn VFile,
        h: &IdxHeader,
        e: &Entry,
    ) -> io::Result<Option<Arc<[Span]>>> {
        let Some(cache) = self.cache.as_ref() else {
            return Ok(None);
        };
        if e.spans_n > DECODED_SPANS {
            return Ok(None);
        }
        let key = Key::Spans {
            seg,
            at: e.spans_at,
        };
        self.decoded(cache, key, || idxfile::read_spans(file, h, e, 0, e.spans_n))
            .map(Some)
    }

    /// Every sample of `span` in segment `seg`'s index file `file` (read through this cache),
    /// decoded and kept; `None` for a span of more than [`DECODED_SAMPLES`] samples, or
    /// without a cache. A span without samples (or an index file from before them) has none.
    pub fn samples(
        &self,
        seg: u64,
        file: &dyn VFile,
        h: &IdxHeader,
        span: &Span,
    ) -> io::Result<Option<Arc<[Sample]>>> {
        let Some(cache) = self.cache.as_ref() else {
            return Ok(None);
        };
        // Without samples there is nothing to keep (and `samples_at` names no samples).
        if span.samples_n == 0 || h.version < idxfile::VERSION_SAMPLES {
            return Ok(Some(Arc::new([])));
        }
        if span.samples_n > DECODED_SAMPLES {
            return Ok(None);
        }
        let key = Key::Samples {
            seg,
            at: span.samples_at,
        };
        self.decoded(cache, key, || {
            idxfile::read_samples(file, h, span, 0, span.samples_n)
        })
        .map(Some)
    }

    /// The list under `key`, from the cache (a hit), or read with `read` and kept (a miss).
    fn decoded<T: Decoded>(
        &self,
        cache: &Cache<Key, Val, Bytes>,
        key: Key,
        read: impl FnOnce() -> io::Result<Vec<T>>,
    ) -> io::Result<Arc<[T]>> {
        if let Some(all) = cache.get(&key).and_then(T::unwrap) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(all);
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let all: Arc<[T]> = read()?.into();
        cache.insert(key, T::wrap(Arc::clone(&all)));
        Ok(all)
    }

    /// Stream `name`'s entry in segment `seg`'s index file, from the cache, or found with
    /// `lookup` and kept.
    pub fn entry(
        &self,
        seg: u64,
        name: &str,
        lookup: impl FnOnce() -> io::Result<Option<Entry>>,
    ) -> io::Result<Option<Entry>> {
        let Some(cache) = self.cache.as_ref() else {
            return lookup();
        };
        let key = Key::Entry {
            seg,
            name: xxhash_rust::xxh3::xxh3_64(name.as_bytes()),
        };
        if let Some(Val::Entry(e)) = cache.get(&key)
            && e.name == name
        {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(Some(Entry::clone(&e)));
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let found = lookup()?;
        if let Some(e) = &found {
            // Two names of one hash in one segment (never seen with 64 bits) would only take
            // turns in the cache: the name is compared on every hit.
            cache.insert(key, Val::Entry(Arc::new(e.clone())));
        }
        Ok(found)
    }

    /// Page `no` of `f`, from the cache or read whole (`page_len` bytes) and kept.
    fn page(&self, f: &CachedIdx, no: u64, page_len: usize) -> io::Result<Arc<[u8]>> {
        let read = || {
            let mut buf = vec![0u8; page_len];
            f.file.read_exact_at(&mut buf, no * PAGE)?;
            Ok(buf)
        };
        match self.cache.as_ref() {
            Some(cache) => self.decoded(cache, Key::Page { seg: f.seg, no }, read),
            // Not built without a cache ([`IndexPages::file`]); read as a miss would be.
            None => {
                self.misses.fetch_add(1, Ordering::Relaxed);
                read().map(Arc::from)
            }
        }
    }
}

/// A sealed index file read through [`IndexPages`]. Read only: index files are written whole
/// before they are sealed, and never after.
struct CachedIdx {
    seg: u64,
    /// The file's length, from its header (sealed: it does not change).
    len: u64,
    file: Arc<dyn VFile>,
    pages: Arc<IndexPages>,
}

impl VFile for CachedIdx {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        let mut n = 0usize;
        while n < buf.len() {
            let at = off.saturating_add(n as u64);
            if at >= self.len {
                break;
            }
            let no = at / PAGE;
            let page_len = usize::try_from((self.len - no * PAGE).min(PAGE))
                .map_err(|_| io::Error::other("page length"))?;
            let page = self.pages.page(self, no, page_len)?;
            let within = usize::try_from(at - no * PAGE).map_err(|_| io::Error::other("offset"))?;
            let k = (buf.len() - n).min(page.len() - within);
            buf[n..n + k].copy_from_slice(&page[within..within + k]);
            n += k;
        }
        Ok(n)
    }

    fn write_all_at(&self, _buf: &[u8], _off: u64) -> io::Result<()> {
        Err(read_only())
    }

    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }

    fn set_len(&self, _len: u64) -> io::Result<()> {
        Err(read_only())
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.len)
    }
}

fn read_only() -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        "a sealed index file is read only",
    )
}

#[cfg(test)]
mod tests;
