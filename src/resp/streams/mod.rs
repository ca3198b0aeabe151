//! Redis's stream commands on the Redis-protocol listener (docs/RESP.md, "Streams";
//! docs/API.md §6.6): a Veltrix stream is a Redis stream whose entries are its events.
//!
//! - [`xadd`]: `XADD`, one event through the one write path, like a `POST /v1/events`.
//! - [`read`]: `XRANGE`, `XREVRANGE`, `XLEN`, `XINFO STREAM`, and where a stream is read:
//!   this node's store (a cursor, on the blocking pool), or in cluster mode its owner over
//!   HTTP.
//! - [`xread`]: `XREAD`, with `BLOCK`: woken by the store's watch of each stream, holding a
//!   place against `server.max_followers` while it waits.
//! - [`entry`]: an event as an entry (its id and fields), and a reply's bounded entries.
//! - [`ids`]: entry ids and the ranges they delimit.
//!
//! The commands that need consumer groups or remove entries (`XGROUP`, `XREADGROUP`, `XACK`,
//! …) are answered with an error that says so ([`refused`]).
//!
//! Bounds: a reply holds at most [`MAX_COUNT`] entries (a larger `COUNT` is an error; no
//! `COUNT` is that many) and stops after the entry that takes it past [`MAX_REPLY_BYTES`];
//! a blocked `XREAD` holds one watch per stream it names and nothing else.

mod entry;
mod ids;
mod read;
mod xadd;
mod xread;

use super::Ctx;
use super::session::{READ, Session, Spec, WRITE, WriteFuture, spec};
use bytes::Bytes;
use std::sync::Arc;
use vx_proto::resp::Reply;

/// Entries one reply holds at most: the HTTP replay's largest `limit` (docs/API.md §5).
pub(super) const MAX_COUNT: u64 = 100_000;
/// A reply stops after the entry that takes it past this many bytes (at least one entry).
pub(super) const MAX_REPLY_BYTES: usize = 16 << 20;

/// The stream commands, as Redis 7's `COMMAND` reports them.
pub(super) const TABLE: &[Spec] = &[
    spec("xadd", -5, &["write", "denyoom", "fast"], 1, 1, WRITE),
    spec("xrange", -4, &["readonly"], 1, 1, READ),
    spec("xrevrange", -4, &["readonly"], 1, 1, READ),
    spec("xlen", 2, &["readonly", "fast"], 1, 1, READ),
    spec(
        "xread",
        -4,
        &["readonly", "blocking", "movablekeys"],
        0,
        0,
        READ,
    ),
    spec("xinfo", -2, &[], 0, 0, READ),
];

/// A stream read, checked: answered already, or a future of its reply. `Blocking` may wait
/// for new events (`XREAD … BLOCK`): the connection sends its earlier replies first, and
/// watches its socket meanwhile.
pub(crate) enum StreamRead {
    Reply(Vec<u8>),
    Read(WriteFuture),
    Blocking(WriteFuture),
}

/// A command's arguments from strings (the unit tests of the commands).
#[cfg(test)]
pub(super) fn test_args(list: &[&str]) -> Vec<Bytes> {
    list.iter()
        .map(|s| Bytes::copy_from_slice(s.as_bytes()))
        .collect()
}

/// A reply built by `f`.
pub(super) fn reply(resp3: bool, f: impl FnOnce(&mut Reply<'_>)) -> Vec<u8> {
    let mut out = Vec::new();
    f(&mut Reply {
        out: &mut out,
        resp3,
    });
    out
}

/// The error a stream command that is not offered gets, if `name` is one.
pub(crate) fn refused(name: &[u8]) -> Option<&'static str> {
    const GROUPS: &str = "consumer groups are not offered by Veltrix: use XREAD (with BLOCK to \
                          wait for new entries) and keep each consumer's last entry id";
    const REMOVE: &str = "entries are not removed one by one in Veltrix: retention \
                          (retention.max_age, retention.max_bytes) trims streams and DELETE \
                          /v1/streams/{stream} deletes one";
    let is = |c: &str| name.eq_ignore_ascii_case(c.as_bytes());
    if [
        "xgroup",
        "xreadgroup",
        "xack",
        "xpending",
        "xclaim",
        "xautoclaim",
    ]
    .iter()
    .any(|c| is(c))
    {
        Some(GROUPS)
    } else if ["xdel", "xtrim"].iter().any(|c| is(c)) {
        Some(REMOVE)
    } else if is("xsetid") {
        Some("XSETID is not offered by Veltrix: it assigns entry ids (<seq>-0) itself")
    } else {
        None
    }
}

impl Session {
    /// A stream read command (`XRANGE`, `XREVRANGE`, `XLEN`, `XINFO`, `XREAD`), admitted
    /// (arity, scope, readiness) and checked; `None` for any other command.
    pub(crate) fn stream_read(&self, ctx: &Arc<Ctx>, args: &[Bytes]) -> Option<StreamRead> {
        let name = args.first()?;
        let spec = TABLE
            .iter()
            .find(|s| s.needs == READ && s.name.as_bytes().eq_ignore_ascii_case(name))?;
        let mut out = Vec::new();
        let router = match self.admit(ctx, spec, args, &mut out) {
            Some(Some(r)) => r,
            _ => return Some(StreamRead::Reply(out)),
        };
        let reader = read::Reader {
            ctx: Arc::clone(ctx),
            router,
            min: self.position.lock().clone(),
            auth: self.authorization(),
            resp3: self.resp3,
        };
        Some(match spec.name {
            "xrange" => reader.range(args, false),
            "xrevrange" => reader.range(args, true),
            "xlen" => reader.len(args),
            "xinfo" => reader.info(args),
            _ => reader.xread(args),
        })
    }
}
