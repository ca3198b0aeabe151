//! `XRANGE`, `XREVRANGE`, `XLEN` and `XINFO STREAM`, and where every stream read goes
//! ([`Source`]): this node's store, through a replay cursor on the blocking pool (cursor reads
//! are blocking I/O), or in cluster mode, for a stream whose shard another node owns, that
//! owner over HTTP (`crate::cluster::streams`), with the connection's token and after the
//! connection's writes (read-your-writes), as feature reads are (`super::super::cluster`).
//!
//! A reverse range reads its window forwards (the seqs of a stream have no gaps, so the
//! window of the newest `COUNT` is known from the stream's first and last seq) and answers
//! it the other way. No read holds more than its reply's entries ([`Entries`]).

use super::entry::Entries;
use super::ids::{entry_id, range_end, range_start};
use super::{MAX_COUNT, StreamRead, reply};
use crate::cluster::Cluster;
use crate::cluster::streams::Owner;
use crate::failure::Failure;
use crate::resp::Ctx;
use axum::http::HeaderValue;
use bytes::Bytes;
use std::sync::Arc;
use vx_cluster::Route;
use vx_cluster::position::Position;
use vx_cluster::txn::Topic;
use vx_proto::ErrorCode;
use vx_proto::resp::Reply;
use vx_router::Router;
use vx_storage::{ReadError, ReadQuery, Store};

/// Attempts at a read when retention removes what its cursor was about to read.
const ATTEMPTS: u32 = 4;

/// What a stream read needs, owned by its future.
pub(crate) struct Reader {
    pub(super) ctx: Arc<Ctx>,
    pub(super) router: Router,
    /// Cluster mode: the connection's writes, which an owner applies before it answers.
    pub(super) min: Position,
    pub(super) auth: Option<HeaderValue>,
    pub(super) resp3: bool,
}

/// Where one stream is read.
pub(super) enum Source {
    Local(Store),
    Remote(Remote),
}

/// A stream read from its owner: the node, and what the requests carry.
pub(super) struct Remote {
    cluster: Arc<Cluster>,
    url: String,
    min: Position,
    auth: Option<HeaderValue>,
}

impl Remote {
    fn owner(&self) -> Owner<'_> {
        Owner {
            url: &self.url,
            min: &self.min,
            auth: self.auth.as_ref(),
        }
    }
}

/// A stream's extent.
#[derive(Clone, Copy, Debug)]
pub(super) struct Meta {
    pub(super) first_seq: u64,
    pub(super) last_seq: u64,
    pub(super) events: u64,
}

/// A key that can name a stream (docs/API.md §2's stream rule); any other names none.
pub(super) fn stream_name(b: &Bytes) -> Option<&str> {
    std::str::from_utf8(b)
        .ok()
        .filter(|s| vx_proto::rules::valid_stream(s))
}

/// Ranges of at most this many entries are first read on the async worker from the page
/// cache only: bounded work (the index's samples bound the walk to the first entry), no hop
/// to the blocking pool. The same bound as HTTP's cached pages.
const CACHED_ENTRIES: u64 = 64;

fn read_failed(stream: &str, e: &ReadError) -> Failure {
    tracing::error!(stream, error = %e, "a RESP stream read failed");
    Failure::new(ErrorCode::Internal, format!("reading the log failed: {e}"))
}

fn write_failure(r: &mut Reply<'_>, f: Failure) {
    let (prefix, message) = f.into_resp();
    r.error(prefix, &message);
}

/// The forward range `from..=to` of a local stream, at most `limit` entries within `entries`'
/// bound; `None` for an unknown stream. Blocking.
fn local_range(
    store: &Store,
    stream: &str,
    (from, to, limit): (u64, u64, u64),
    entries: &Entries,
) -> Result<Option<Entries>, ReadError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let q = ReadQuery {
            from: Some(from),
            to: Some(to),
            limit,
            ..ReadQuery::default()
        };
        let Some(mut cursor) = store.read(stream, q) else {
            return Ok(None);
        };
        let mut got = entries.empty_like();
        let read = loop {
            if got.full() {
                break Ok(());
            }
            match cursor.next_event() {
                Ok(Some((seq, ev))) => got.push(seq, &ev),
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        match read {
            Ok(()) => return Ok(Some(got)),
            Err(ReadError::Retained { .. }) if attempt < ATTEMPTS => continue,
            Err(e) => return Err(e),
        }
    }
}

/// A local stream's extent from a cursor's metadata (no I/O but for a stream whose events
/// were all retained away).
fn local_meta(store: &Store, stream: &str) -> Option<Meta> {
    let probe = ReadQuery {
        limit: 1,
        ..ReadQuery::default()
    };
    let cursor = store.read(stream, probe)?;
    let (first_seq, last_seq) = (cursor.first_seq(), cursor.last_seq());
    Some(Meta {
        first_seq,
        last_seq,
        events: (last_seq + 1).saturating_sub(first_seq),
    })
}

/// The window of the newest `count` seqs of `lo..=hi` within a stream's extent.
fn newest_window(meta: Meta, lo: u64, hi: u64, count: u64) -> Option<(u64, u64)> {
    let hi = hi.min(meta.last_seq);
    let lo = lo.max(meta.first_seq);
    (lo <= hi).then(|| (lo.max(hi.saturating_sub(count - 1)), hi))
}

impl Source {
    /// Where `stream` is read: here in single-node mode and when this node owns its shard
    /// (once it applied the reader's writes), else its owner.
    pub(super) async fn of(reader: &Reader, stream: &str) -> Result<Source, Failure> {
        let min = &reader.min;
        let store = reader.router.store().clone();
        let Some(cluster) = reader.ctx.state.cluster() else {
            return Ok(Source::Local(store));
        };
        let shard = reader.router.shard_of(stream);
        if cluster
            .here(Some(min), false, Topic::Streams, shard)
            .await?
        {
            return Ok(Source::Local(store));
        }
        match cluster.node.route(Topic::Streams, shard) {
            Route::Remote(owner) => Ok(Source::Remote(Remote {
                cluster: Arc::clone(cluster),
                url: owner.url,
                min: min.clone(),
                auth: reader.auth.clone(),
            })),
            _ => Err(crate::cluster::read::moving(shard)),
        }
    }

    pub(super) fn is_local(&self) -> bool {
        matches!(self, Source::Local(_))
    }

    /// The stream's extent; `None` for an unknown (or deleted) stream.
    pub(super) async fn meta(&self, stream: &str) -> Result<Option<Meta>, Failure> {
        match self {
            Source::Local(store) => {
                let (store, name) = (store.clone(), stream.to_string());
                let info = tokio::task::spawn_blocking(move || store.stream(&name))
                    .await
                    .map_err(|e| Failure::new(ErrorCode::Internal, e.to_string()))?;
                Ok(info.map(|i| Meta {
                    first_seq: i.first_seq,
                    last_seq: i.last_seq,
                    events: i.events,
                }))
            }
            Source::Remote(r) => {
                let meta = r.cluster.owner_stream(&r.owner(), stream).await?;
                Ok(meta.map(|m| Meta {
                    first_seq: m.first_seq,
                    last_seq: m.last_seq,
                    events: m.events,
                }))
            }
        }
    }

    /// The entries `from..=to`, at most `limit`, within `entries`' bound (keeping the oldest,
    /// or with [`Entries`]' `newest` the newest); `None` for an unknown stream.
    pub(super) async fn range(
        &self,
        stream: &str,
        span: (u64, u64, u64),
        entries: Entries,
    ) -> Result<Option<Entries>, Failure> {
        match self {
            Source::Local(store) => {
                let (from, to, count) = span;
                if count.min(to.saturating_sub(from).saturating_add(1)) <= CACHED_ENTRIES {
                    // A few entries: read here from the page cache (as HTTP's small pages,
                    // src/http/replay.rs), else on the pool.
                    let cached =
                        vx_storage::vfs::cached_only(|| local_range(store, stream, span, &entries));
                    match cached {
                        Err(e) if e.is_uncached() => {}
                        done => return done.map_err(|e| read_failed(stream, &e)),
                    }
                }
                let (store, name) = (store.clone(), stream.to_string());
                let read = tokio::task::spawn_blocking(move || {
                    local_range(&store, &name, span, &entries).map_err(|e| read_failed(&name, &e))
                });
                read.await
                    .map_err(|e| Failure::new(ErrorCode::Internal, e.to_string()))?
            }
            Source::Remote(r) => {
                let mut entries = entries;
                let mut line = |l: &[u8]| entries.push_json(l) && !entries.full();
                let found = r
                    .cluster
                    .owner_events(&r.owner(), stream, span, &mut line)
                    .await?;
                Ok(found.then_some(entries))
            }
        }
    }

    /// The newest `count` entries of `lo..=hi`, in seq order (the caller reverses them);
    /// `None` for an unknown stream.
    pub(super) async fn newest(
        &self,
        stream: &str,
        (lo, hi, count): (u64, u64, u64),
    ) -> Result<Option<Entries>, Failure> {
        let meta = match self {
            Source::Local(store) => {
                // No I/O: the cursor's metadata is in memory.
                local_meta(store, stream)
            }
            Source::Remote(_) => self.meta(stream).await?,
        };
        let Some(meta) = meta else {
            return Ok(None);
        };
        match newest_window(meta, lo, hi, count) {
            Some((from, to)) => {
                self.range(stream, (from, to, count), Entries::whole(true))
                    .await
            }
            None => Ok(Some(Entries::whole(true))),
        }
    }
}

/// `COUNT n` after a range's ids: the count, `Ok(None)` for a count ≤ 0 (Redis answers a
/// null array), or the error.
fn range_count(args: &[Bytes]) -> Result<Option<u64>, String> {
    match args.len() {
        4 => Ok(Some(MAX_COUNT)),
        6 if args[4].eq_ignore_ascii_case(b"COUNT") => count_arg(&args[5]),
        _ => Err("syntax error".into()),
    }
}

/// A `COUNT`'s value: at most [`MAX_COUNT`]; `Ok(None)` for ≤ 0.
pub(super) fn count_arg(b: &[u8]) -> Result<Option<u64>, String> {
    let n = std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or("value is not an integer or out of range")?;
    match u64::try_from(n) {
        Ok(0) | Err(_) => Ok(None),
        Ok(n) if n > MAX_COUNT => Err(format!(
            "COUNT {n} is more than {MAX_COUNT}, the most entries Veltrix answers at once: \
             page with a smaller COUNT"
        )),
        Ok(n) => Ok(Some(n)),
    }
}

impl Reader {
    /// `XRANGE key start end [COUNT n]`, or (`reverse`) `XREVRANGE key end start [COUNT n]`.
    pub(super) fn range(self, args: &[Bytes], reverse: bool) -> StreamRead {
        let (a, b) = (&args[2], &args[3]);
        let (start, end) = if reverse { (b, a) } else { (a, b) };
        let parsed = range_start(start)
            .and_then(|s| Ok((s, range_end(end)?)))
            .map_err(str::to_string)
            .and_then(|(s, e)| Ok((s, e, range_count(args)?)));
        let (lo, hi, count) = match parsed {
            Ok(p) => p,
            Err(e) => return StreamRead::Reply(reply(self.resp3, |r| r.error("ERR", &e))),
        };
        let Some(count) = count else {
            return StreamRead::Reply(reply(self.resp3, |r| r.null_array()));
        };
        let (Some(lo), Some(hi), Some(stream)) = (lo, hi, stream_name(&args[1])) else {
            return StreamRead::Reply(reply(self.resp3, |r| r.array(0)));
        };
        if lo > hi {
            return StreamRead::Reply(reply(self.resp3, |r| r.array(0)));
        }
        let stream = stream.to_string();
        StreamRead::Read(Box::pin(async move {
            let got = match Source::of(&self, &stream).await {
                Ok(src) if reverse => src.newest(&stream, (lo, hi, count)).await,
                Ok(src) => {
                    src.range(&stream, (lo, hi, count), Entries::whole(false))
                        .await
                }
                Err(f) => Err(f),
            };
            let mut out = Vec::new();
            match got {
                Ok(Some(entries)) => entries.write(&mut out, reverse),
                Ok(None) => out.extend_from_slice(b"*0\r\n"),
                Err(f) => write_failure(
                    &mut Reply {
                        out: &mut out,
                        resp3: self.resp3,
                    },
                    f,
                ),
            }
            out
        }))
    }

    /// `XLEN key`: the stream's retained events; 0 for an unknown stream.
    pub(super) fn len(self, args: &[Bytes]) -> StreamRead {
        let Some(stream) = stream_name(&args[1]).map(str::to_string) else {
            return StreamRead::Reply(reply(self.resp3, |r| r.int(0)));
        };
        StreamRead::Read(Box::pin(async move {
            let meta = match Source::of(&self, &stream).await {
                Ok(src) => src.meta(&stream).await,
                Err(f) => Err(f),
            };
            reply(self.resp3, |r| match meta {
                Ok(m) => r.int(m.map_or(0, |m| i64::try_from(m.events).unwrap_or(i64::MAX))),
                Err(f) => write_failure(r, f),
            })
        }))
    }

    /// `XINFO STREAM key`; `XINFO HELP`; the other subcommands are refused.
    pub(super) fn info(self, args: &[Bytes]) -> StreamRead {
        let sub = args[1].to_ascii_uppercase();
        let error = |e: &str| StreamRead::Reply(reply(self.resp3, |r| r.error("ERR", e)));
        match (sub.as_slice(), args.len()) {
            (b"STREAM", 3) => {}
            (b"STREAM", 2) => {
                return error("wrong number of arguments for 'xinfo|stream' command");
            }
            (b"STREAM", n) if n > 3 && args[3].eq_ignore_ascii_case(b"FULL") => {
                return error(
                    "XINFO STREAM FULL is not offered by Veltrix (it has no consumer groups): \
                     use XINFO STREAM",
                );
            }
            (b"STREAM", _) => return error("syntax error"),
            (b"GROUPS" | b"CONSUMERS", _) => {
                return error(super::refused(b"xgroup").unwrap_or_default());
            }
            (b"HELP", _) => {
                return StreamRead::Reply(reply(self.resp3, |r| {
                    r.array(2);
                    r.simple("XINFO STREAM <key>");
                    r.simple("    Show information about the stream.");
                }));
            }
            _ => {
                return error(&format!(
                    "unknown subcommand '{}'. Try XINFO HELP.",
                    String::from_utf8_lossy(&args[1])
                ));
            }
        }
        let stream = stream_name(&args[2]).map(str::to_string);
        StreamRead::Read(Box::pin(async move { self.stream_info(stream).await }))
    }

    /// `XINFO STREAM`'s reply: Redis 7's members, with what Veltrix has (no radix tree, no
    /// consumer groups); the first and last entries read like `XRANGE`'s.
    async fn stream_info(self, stream: Option<String>) -> Vec<u8> {
        let no_key = |resp3| reply(resp3, |r| r.error("ERR", "no such key"));
        let Some(stream) = stream else {
            return no_key(self.resp3);
        };
        let got = async {
            let src = Source::of(&self, &stream).await?;
            let Some(meta) = src.meta(&stream).await? else {
                return Ok(None);
            };
            let mut ends = [None, None];
            if meta.events > 0 {
                for (i, seq) in [meta.first_seq, meta.last_seq].into_iter().enumerate() {
                    let one = src.range(&stream, (seq, seq, 1), Entries::whole(false));
                    ends[i] = one.await?.filter(|e| !e.is_empty());
                }
            }
            Ok::<_, Failure>(Some((meta, ends)))
        };
        let (meta, [first, last]) = match got.await {
            Ok(Some(m)) => m,
            Ok(None) => return no_key(self.resp3),
            Err(f) => return reply(self.resp3, |r| write_failure(r, f)),
        };
        let mut out = Vec::new();
        let mut r = Reply {
            out: &mut out,
            resp3: self.resp3,
        };
        let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        r.map(10);
        for (name, n) in [
            ("length", meta.events),
            ("radix-tree-keys", 0),
            ("radix-tree-nodes", 0),
        ] {
            r.bulk(name.as_bytes());
            r.int(int(n));
        }
        let recorded_first = if meta.events > 0 { meta.first_seq } else { 0 };
        for (name, seq) in [
            ("last-generated-id", meta.last_seq),
            ("max-deleted-entry-id", meta.first_seq.saturating_sub(1)),
        ] {
            r.bulk(name.as_bytes());
            r.bulk(entry_id(seq).as_bytes());
        }
        r.bulk(b"entries-added");
        r.int(int(meta.last_seq));
        r.bulk(b"recorded-first-entry-id");
        r.bulk(entry_id(recorded_first).as_bytes());
        r.bulk(b"groups");
        r.int(0);
        for (name, entry) in [("first-entry", first), ("last-entry", last)] {
            r.bulk(name.as_bytes());
            match entry {
                Some(e) => e.write_one(r.out),
                None => r.null(),
            }
        }
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_window_is_within_the_stream() {
        let m = Meta {
            first_seq: 3,
            last_seq: 10,
            events: 8,
        };
        assert_eq!(newest_window(m, 0, u64::MAX, 2), Some((9, 10)));
        assert_eq!(newest_window(m, 0, u64::MAX, 100), Some((3, 10)));
        assert_eq!(newest_window(m, 5, 8, 100), Some((5, 8)));
        assert_eq!(newest_window(m, 5, 8, 1), Some((8, 8)));
        assert_eq!(newest_window(m, 11, u64::MAX, 1), None);
        assert_eq!(newest_window(m, 0, 2, 1), None);
    }

    #[test]
    fn counts() {
        assert_eq!(count_arg(b"10"), Ok(Some(10)));
        assert_eq!(count_arg(b"0"), Ok(None));
        assert_eq!(count_arg(b"-3"), Ok(None));
        assert!(count_arg(b"x").is_err());
        assert!(count_arg(b"100001").unwrap_err().contains("100000"));
    }
}
