//! `XREAD [COUNT n] [BLOCK ms] STREAMS key… id…`: the entries after each id, for the streams
//! that have some (`$`: the stream's last entry when the command is taken).
//!
//! Without `BLOCK` it answers at once (a null array when no stream has any). With it, and
//! nothing to answer yet, it waits on the store's watch of each stream (pushed by the log
//! writer when events become visible, whichever interface wrote them) until one of them
//! moves past its id, the time is up (a null array; `BLOCK 0` waits for ever), a stream is
//! deleted (a null array, as for a timeout), or the server drains (a null array). While it
//! waits it holds a place against `server.max_followers` like a live follower (past it: an
//! error) and nothing else but one watch per stream; the connection behind it sends the
//! replies before it first and reads nothing more (Redis's order: the commands after it
//! wait), but notices a client that goes away.
//!
//! Cluster mode: streams owned by other nodes are read from their owners; `BLOCK` waits on
//! this node's watches, so it is answered only when this node owns every stream it names
//! (otherwise an error names the owner to connect to).

use super::entry::Entries;
use super::ids::read_after;
use super::read::{Reader, Source, count_arg, stream_name};
use super::{MAX_COUNT, MAX_REPLY_BYTES, StreamRead, reply};
use crate::failure::Failure;
use crate::live::Transport;
use bytes::Bytes;
use std::time::Duration;
use tokio::sync::watch;
use vx_proto::ErrorCode;
use vx_proto::resp::Reply;
use vx_storage::watch::Visible;

/// How long a client refused at `server.max_followers` is told to wait.
const FULL_RETRY_MS: u64 = 1000;

/// An `XREAD`, parsed.
#[derive(Debug)]
struct XRead {
    count: u64,
    /// `None`: answer at once; `Some(None)`: wait for ever (`BLOCK 0`).
    block: Option<Option<Duration>>,
    /// Each stream (`None`: a key that names no stream) and what to read after
    /// (`None`: `$`).
    streams: Vec<(Option<String>, Option<u64>)>,
}

/// One stream being read: where, and after which seq.
struct Target {
    name: String,
    source: Source,
    after: Option<u64>,
    /// While blocked: its watch, and the deletes it had counted when taken.
    watch: Option<(watch::Receiver<Visible>, u64)>,
}

fn parse(args: &[Bytes]) -> Result<XRead, String> {
    let mut q = XRead {
        count: MAX_COUNT,
        block: None,
        streams: Vec::new(),
    };
    let mut i = 1;
    let keys = loop {
        let Some(opt) = args.get(i) else {
            return Err("syntax error".into());
        };
        let value = args.get(i + 1);
        if opt.eq_ignore_ascii_case(b"STREAMS") {
            break &args[i + 1..];
        } else if opt.eq_ignore_ascii_case(b"COUNT") && value.is_some() {
            q.count = count_arg(value.map_or(&b""[..], |v| v))?.unwrap_or(MAX_COUNT);
        } else if opt.eq_ignore_ascii_case(b"BLOCK") && value.is_some() {
            let ms = value
                .and_then(|v| std::str::from_utf8(v).ok())
                .and_then(|v| v.parse::<i64>().ok())
                .ok_or("timeout is not an integer or out of range")?;
            let ms = u64::try_from(ms).map_err(|_| "timeout is negative")?;
            q.block = Some((ms > 0).then(|| Duration::from_millis(ms)));
        } else {
            return Err("syntax error".into());
        }
        i += 2;
    };
    if keys.is_empty() || !keys.len().is_multiple_of(2) {
        return Err(
            "Unbalanced 'xread' list of streams: for each stream key an ID or '$' \
                    must be specified."
                .into(),
        );
    }
    let (names, ids) = keys.split_at(keys.len() / 2);
    for (name, id) in names.iter().zip(ids) {
        let after = read_after(id)?;
        q.streams
            .push((stream_name(name).map(str::to_string), after));
    }
    Ok(q)
}

/// The reply: each stream that has entries with them (RESP3: a map; RESP2: an array of
/// pairs), or a null array.
fn answer(resp3: bool, got: Vec<(String, Entries)>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut r = Reply {
        out: &mut out,
        resp3,
    };
    if got.is_empty() {
        r.null_array();
        return out;
    }
    if resp3 {
        r.map(got.len());
    } else {
        r.array(got.len());
    }
    for (name, entries) in got {
        if !resp3 {
            r.array(2);
        }
        r.bulk(name.as_bytes());
        entries.write(r.out, false);
    }
    out
}

impl Reader {
    pub(super) fn xread(self, args: &[Bytes]) -> StreamRead {
        let q = match parse(args) {
            Ok(q) => q,
            Err(e) => return StreamRead::Reply(reply(self.resp3, |r| r.error("ERR", &e))),
        };
        let resp3 = self.resp3;
        let blocks = q.block.is_some();
        let fut = Box::pin(async move {
            match self.run(q).await {
                Ok(got) => answer(resp3, got),
                Err(f) => reply(resp3, |r| {
                    // Not `LOADING` (what `not_ready` is otherwise): the server is not starting.
                    let full = f.details.limit.as_deref() == Some("server.max_followers");
                    let (prefix, message) = f.into_resp();
                    r.error(if full { "ERR" } else { prefix }, &message);
                }),
            }
        });
        if blocks {
            StreamRead::Blocking(fut)
        } else {
            StreamRead::Read(fut)
        }
    }

    async fn run(&self, q: XRead) -> Result<Vec<(String, Entries)>, Failure> {
        let started = tokio::time::Instant::now();
        let mut targets = Vec::with_capacity(q.streams.len());
        for (name, after) in q.streams {
            // A key that names no stream has no entries, and never will.
            let Some(name) = name else { continue };
            let source = Source::of(self, &name).await?;
            targets.push(Target {
                name,
                source,
                after,
                watch: None,
            });
        }
        let Some(block) = q.block else {
            return self.read_all(&targets, q.count).await;
        };
        self.watch(&mut targets).await?;
        let got = self.read_all(&targets, q.count).await?;
        if !got.is_empty() {
            return Ok(got);
        }
        let _slot = self
            .ctx
            .state
            .hub()
            .reserve(Transport::Resp)
            .map_err(|full| {
                Failure::new(
                    ErrorCode::NotReady,
                    format!(
                        "this server has {} followers and blocked XREADs, its \
                         server.max_followers",
                        full.max
                    ),
                )
                .retry_after(FULL_RETRY_MS)
                .limit("server.max_followers", Some(full.max as u64))
            })?;
        let deadline = block.and_then(|d| started.checked_add(d));
        self.wait(&mut targets, deadline, q.count).await
    }

    /// Take each stream's watch (so that no write after this is missed) and resolve `$` to
    /// the last seq it shows. Every stream must be this node's.
    async fn watch(&self, targets: &mut [Target]) -> Result<(), Failure> {
        if let Some(t) = targets.iter().find(|t| !t.source.is_local()) {
            return Err(Failure::new(
                ErrorCode::BadRequest,
                format!(
                    "XREAD BLOCK waits on the node that owns the stream, and {:?} is another \
                     node's: connect to its owner (X-Vx-Node of GET /v1/streams/{{stream}}), \
                     or read without BLOCK",
                    t.name
                ),
            ));
        }
        let store = self.router.store().clone();
        let names: Vec<String> = targets.iter().map(|t| t.name.clone()).collect();
        // Blocking only for a stream whose metadata is in the carry file.
        let watches = tokio::task::spawn_blocking(move || {
            names.iter().map(|n| store.watch(n)).collect::<Vec<_>>()
        })
        .await
        .map_err(|e| Failure::new(ErrorCode::Internal, e.to_string()))?;
        for (t, mut rx) in targets.iter_mut().zip(watches) {
            let v = *rx.borrow_and_update();
            t.after.get_or_insert(v.last_seq);
            t.watch = Some((rx, v.deletes));
        }
        Ok(())
    }

    /// Wait until a watched stream moves past its id, then read; `Ok(empty)` at the
    /// deadline, when a stream is deleted, or when the server drains.
    async fn wait(
        &self,
        targets: &mut [Target],
        deadline: Option<tokio::time::Instant>,
        count: u64,
    ) -> Result<Vec<(String, Entries)>, Failure> {
        let closing = self.ctx.state.hub().closing.clone();
        loop {
            let changed = async {
                let waits = targets
                    .iter_mut()
                    .filter_map(|t| t.watch.as_mut())
                    .map(|(rx, _)| Box::pin(rx.changed()));
                let waits: Vec<_> = waits.collect();
                if waits.is_empty() {
                    return std::future::pending().await;
                }
                futures_util::future::select_all(waits).await.0.is_ok()
            };
            let sleep = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            let alive = tokio::select! {
                alive = changed => alive,
                () = sleep => return Ok(Vec::new()),
                () = closing.cancelled() => return Ok(Vec::new()),
            };
            // The store is gone (shutdown), or a stream was deleted: answer as for a timeout.
            if !alive || self.deleted(targets) {
                return Ok(Vec::new());
            }
            let got = self.read_all(targets, count).await?;
            if !got.is_empty() {
                return Ok(got);
            }
        }
    }

    /// Whether a watched stream was deleted since its watch was taken.
    fn deleted(&self, targets: &mut [Target]) -> bool {
        targets.iter_mut().any(|t| match &mut t.watch {
            Some((rx, deletes)) => rx.borrow().deletes != *deletes,
            None => false,
        })
    }

    /// Each stream's entries after its id (at most `count` each, the reply's byte bound
    /// shared); the streams that have none are left out. A watched stream is read only
    /// when its watch shows events past its id.
    async fn read_all(
        &self,
        targets: &[Target],
        count: u64,
    ) -> Result<Vec<(String, Entries)>, Failure> {
        let mut got = Vec::new();
        let mut used = 0;
        for t in targets {
            let Some(after) = t.after else { continue };
            if let Some((rx, _)) = &t.watch
                && rx.borrow().last_seq <= after
            {
                continue;
            }
            if used >= MAX_REPLY_BYTES {
                break;
            }
            if after == u64::MAX {
                continue;
            }
            let entries = Entries::new(MAX_REPLY_BYTES - used, false);
            let read = t
                .source
                .range(&t.name, (after + 1, u64::MAX, count), entries);
            if let Some(e) = read.await?.filter(|e| !e.is_empty()) {
                used += e.bytes();
                got.push((t.name.clone(), e));
            }
        }
        Ok(got)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    use crate::resp::streams::test_args as args;

    #[test]
    fn parses_as_redis_does() {
        let q = parse(&args(&[
            "XREAD", "COUNT", "5", "BLOCK", "100", "STREAMS", "a", "b", "$", "7-0",
        ]))
        .unwrap();
        assert_eq!(q.count, 5);
        assert_eq!(q.block, Some(Some(Duration::from_millis(100))));
        assert_eq!(
            q.streams,
            vec![(Some("a".into()), None), (Some("b".into()), Some(7))]
        );
        let q = parse(&args(&["XREAD", "block", "0", "streams", "a", "0"])).unwrap();
        assert_eq!(q.block, Some(None));
        assert_eq!(q.count, MAX_COUNT);
        let err = |l: &[&str]| parse(&args(l)).err().unwrap();
        assert!(err(&["XREAD", "STREAMS", "a", "b", "0"]).starts_with("Unbalanced"));
        assert_eq!(err(&["XREAD", "COUNT", "1", "a", "0"]), "syntax error");
        assert_eq!(
            err(&["XREAD", "BLOCK", "-1", "STREAMS", "a", "0"]),
            "timeout is negative"
        );
        assert_eq!(
            err(&["XREAD", "STREAMS", "a", "x"]),
            super::super::ids::INVALID_ID
        );
    }
}
