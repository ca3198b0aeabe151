//! One Redis-protocol connection: commands are read, parsed and answered in order, pipelined.
//!
//! # Order and read-your-writes
//! Replies go out in the order the commands came. Reads answer at once from the tables;
//! writes are submitted and kept in flight (up to [`super::WINDOW`]), so that pipelined
//! `HSET`s share a group commit. Before a read, and before a write to an entity a write in
//! flight touches, everything in flight is awaited: a read sees every write before it on the
//! connection, and two writes to one entity are applied in the order they were sent.
//! `XADD`s wait for nothing: the log writer keeps their order. Stream reads (`XRANGE`,
//! `XREAD`, …) are answered one at a time after everything before them; a blocked `XREAD`
//! first sends the replies before it, then holds the commands after it (Redis's order),
//! reading the socket meanwhile (at most [`MAX_COMMAND`] bytes) only to notice a client
//! that goes away.
//!
//! # Per batch, not per command
//! The commands one read of the socket brought are a batch. The first of them are parsed once,
//! ahead ([`parse_ahead`], which also loads the entities a pipeline reads); the batch's reads
//! see one instant (TTLs, windows), taken at its first read and again after any wait; and its
//! reads are added to `vx_feature_reads_total` once, when it is answered. Each was once per
//! command: at a million `HGET`s a second, the clock, the shared counter and the second parse
//! were each a few percent of the server's CPU.
//!
//! # Bounds
//! - Input: one command at most [`super::Ctx::limits`] (arguments, argument size, header and
//!   inline lines) and [`MAX_COMMAND`] bytes in all; past any of them the connection gets
//!   `-ERR Protocol error` and is closed, as Redis does.
//! - Output: replies are written once [`CHUNK`] bytes are buffered, and whenever the input
//!   holds no further whole command. While a write to the socket waits, nothing is read, so a
//!   client that sends a deep pipeline and never reads fills its socket buffers, then stops;
//!   once it has taken no byte for `server.header_timeout`, the connection is closed. So
//!   the output held is one reply past [`CHUNK`] at most (a stream reply stops past
//!   `streams::MAX_REPLY_BYTES`, 16 MiB).
//! - Time: no byte between commands for `server.resp_idle_timeout`, or inside a command for
//!   `ingest.body_timeout`, closes the connection (with `-ERR` saying which).
//!
//! # Shutdown
//! At shutdown the connection stops reading, answers the commands it has read (a blocked
//! `XREAD` with a null array), and closes.

use super::command::is_write;
use super::session::{Flow, Prepared, Session, WriteFuture};
use super::streams::StreamRead;
use super::{Ctx, Io, WINDOW};
use crate::state::Phase;
use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use vx_proto::resp::{Parsed, Reply, parse_command};
use vx_storage::features::PREFETCH_READS;

/// Output size at which replies are written without waiting for the input to run dry.
const CHUNK: usize = 64 << 10;
/// Most bytes one command may take (a `HSET` of every feature a `PUT` may set).
const MAX_COMMAND: usize = 2 << 20;

/// A reply in the pipeline: ready, or a write whose reply comes when it is applied.
enum Slot {
    Ready(Vec<u8>),
    Write(WriteFuture),
}

struct Conn {
    /// The socket, not split: reads and writes never overlap (a blocked `XREAD` flushes
    /// before it reads on), and a split stream takes a lock around every read and write.
    io: Box<dyn Io>,
    out: Vec<u8>,
    inflight: VecDeque<Slot>,
    /// The entities the writes in flight touch.
    entities: Vec<Bytes>,
    write_timeout: Duration,
}

impl Conn {
    /// Await every write in flight, their replies (and those queued behind them) into `out`.
    async fn settle(&mut self) {
        while let Some(slot) = self.inflight.pop_front() {
            match slot {
                Slot::Ready(b) => self.out.extend_from_slice(&b),
                Slot::Write(f) => {
                    let b = f.await;
                    self.out.extend_from_slice(&b);
                }
            }
        }
        self.entities.clear();
    }

    /// Write what `out` holds; false if the client took no byte for the write timeout (or
    /// the socket failed): the connection ends.
    async fn flush(&mut self) -> bool {
        if self.out.is_empty() {
            return true;
        }
        let ok = matches!(
            tokio::time::timeout(self.write_timeout, self.io.write_all(&self.out)).await,
            Ok(Ok(()))
        );
        self.out.clear();
        ok
    }

    /// A reply behind the writes in flight, or straight into `out` if there are none.
    fn push_reply(&mut self, b: Vec<u8>) {
        if self.inflight.is_empty() {
            self.out.extend_from_slice(&b);
        } else {
            self.inflight.push_back(Slot::Ready(b));
        }
    }
}

/// Parse the first whole commands buffered (at most [`PREFETCH_READS`]) into `ahead`, in
/// order, for the loop to run without parsing them again; and when several of them read an
/// entity (a pipeline), start loading those entities, so that their cache misses overlap
/// (vx-features' `prefetch_reads`): each read is several dependent misses once the tables
/// outgrow the caches. The loading is a hint only: it changes nothing a command sees.
fn parse_ahead(ctx: &Ctx, buf: &[u8], ahead: &mut VecDeque<(Vec<Range<usize>>, usize)>) {
    let mut keys: Vec<&str> = Vec::new();
    let mut rest = buf;
    for _ in 0..PREFETCH_READS {
        let Ok(Parsed::Command { args, len }) = parse_command(rest, &ctx.limits) else {
            break;
        };
        if let (Some(name), Some(key)) = (args.first(), args.get(1))
            && rest.get(name.clone()).is_some_and(reads_an_entity)
            && let Some(key) = rest
                .get(key.clone())
                .and_then(|k| std::str::from_utf8(k).ok())
        {
            keys.push(key);
        }
        rest = rest.get(len..).unwrap_or_default();
        ahead.push_back((args, len));
    }
    if keys.len() < 2 {
        return;
    }
    if let (Phase::Ready, Some(router)) = (ctx.state.phase(), ctx.state.router()) {
        router.store().features().prefetch_reads(&keys);
    }
}

/// Whether a command reads the entity named by its first argument.
fn reads_an_entity(name: &[u8]) -> bool {
    ["hget", "hmget", "hgetall", "hexists", "exists"]
        .iter()
        .any(|c| name.eq_ignore_ascii_case(c.as_bytes()))
}

/// A stream read's reply (the connection has nothing in flight): at once, or once read; a
/// blocked read (`XREAD … BLOCK`) sends the replies before it first, as Redis does. `None`:
/// the client went away.
async fn stream_reply(
    read: StreamRead,
    conn: &mut Conn,
    buf: &mut BytesMut,
    stop: &CancellationToken,
    resp3: bool,
) -> Option<Vec<u8>> {
    match read {
        StreamRead::Reply(b) => Some(b),
        StreamRead::Read(fut) => Some(fut.await),
        StreamRead::Blocking(fut) => {
            if !conn.flush().await {
                return None;
            }
            blocked(fut, &mut conn.io, buf, stop, resp3).await
        }
    }
}

/// Await a blocked read (`XREAD … BLOCK`): its reply; `None` if the client closed the
/// connection meanwhile (the read is dropped, giving back what it held). What the client
/// sends meanwhile is kept in `buf` for after it (up to [`MAX_COMMAND`] bytes; past that
/// nothing more is read until the read is answered). At shutdown the read is answered with
/// a null array.
async fn blocked(
    mut fut: WriteFuture,
    io: &mut Box<dyn Io>,
    buf: &mut BytesMut,
    stop: &CancellationToken,
    resp3: bool,
) -> Option<Vec<u8>> {
    loop {
        tokio::select! {
            b = &mut fut => return Some(b),
            () = stop.cancelled() => {
                let mut out = Vec::new();
                Reply { out: &mut out, resp3 }.null_array();
                return Some(out);
            }
            r = io.read_buf(buf), if buf.len() < MAX_COMMAND => match r {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            },
        }
    }
}

pub(crate) async fn serve(io: Box<dyn Io>, ctx: Arc<Ctx>, stop: CancellationToken) {
    let mut conn = Conn {
        io,
        out: Vec::with_capacity(4096),
        inflight: VecDeque::new(),
        entities: Vec::new(),
        write_timeout: ctx.write_timeout,
    };
    let mut session = Session::new(&ctx);
    let mut buf = BytesMut::with_capacity(16 << 10);
    // Commands parsed ahead, each relative to the start of `buf` when its turn comes.
    let mut ahead: VecDeque<(Vec<Range<usize>>, usize)> = VecDeque::new();
    // One timer and one shutdown wait for the connection's life, moved on before each wait
    // for input: made anew per wait, each registered and deregistered under a lock every
    // command.
    let input_timer = tokio::time::sleep(ctx.idle_timeout);
    tokio::pin!(input_timer);
    let stopped = stop.cancelled();
    tokio::pin!(stopped);
    loop {
        parse_ahead(&ctx, &buf, &mut ahead);
        // Answer every whole command buffered.
        let need = loop {
            let parsed = match ahead.pop_front() {
                Some((args, len)) => Ok(Parsed::Command { args, len }),
                None => match parse_command(&buf, &ctx.limits) {
                    Ok(Parsed::Need(n)) if n > MAX_COMMAND => {
                        Err(format!("a command of more than {MAX_COMMAND} bytes"))
                    }
                    Ok(p) => Ok(p),
                    Err(e) => Err(e.to_string()),
                },
            };
            let (args, len) = match parsed {
                Ok(Parsed::Need(n)) => break n,
                Ok(Parsed::Command { args, len }) => (args, len),
                Err(e) => {
                    conn.settle().await;
                    session.end_batch(&ctx);
                    Reply {
                        out: &mut conn.out,
                        resp3: session.resp3,
                    }
                    .error("ERR", &format!("Protocol error: {e}"));
                    let _ = conn.flush().await;
                    let _ = conn.io.shutdown().await;
                    crate::frames::linger(&mut conn.io).await;
                    return;
                }
            };
            let cmd = buf.split_to(len).freeze();
            let args: Vec<Bytes> = args.into_iter().map(|r| cmd.slice(r)).collect();
            let Some(name) = args.first() else { continue };
            if is_write(name) {
                let touches = if name.eq_ignore_ascii_case(b"del") {
                    &args[1..]
                } else if name.eq_ignore_ascii_case(b"xadd") {
                    // Appends keep their order through the log writer: none waits for another.
                    &args[..0]
                } else {
                    &args[1..args.len().min(2)]
                };
                if conn.inflight.len() >= WINDOW
                    || touches.iter().any(|e| conn.entities.contains(e))
                {
                    conn.settle().await;
                    session.waited();
                }
                match session.prepare_write(&ctx, &args) {
                    Prepared::Reply(b) => conn.push_reply(b),
                    Prepared::Submit(mut fut) => {
                        // The first poll hands the record to the writer, so writes enter the
                        // log in the order they were sent.
                        let first = crate::listen::poll_once(fut.as_mut()).await;
                        match first {
                            Poll::Ready(b) => conn.push_reply(b),
                            Poll::Pending => {
                                conn.inflight.push_back(Slot::Write(fut));
                                conn.entities.extend(touches.iter().cloned());
                            }
                        }
                    }
                }
            } else {
                if !conn.inflight.is_empty() {
                    conn.settle().await;
                    session.waited();
                }
                if let Some(read) = session.stream_read(&ctx, &args) {
                    let resp3 = session.resp3;
                    let Some(reply) = stream_reply(read, &mut conn, &mut buf, &stop, resp3).await
                    else {
                        // The client went away.
                        session.end_batch(&ctx);
                        return;
                    };
                    session.waited();
                    conn.push_reply(reply);
                } else if let Some(read) = session.cluster_read(&ctx, &args) {
                    match read {
                        Prepared::Reply(b) => conn.push_reply(b),
                        Prepared::Submit(fut) => {
                            // A later write to these entities waits for this read.
                            conn.inflight.push_back(Slot::Write(fut));
                            conn.entities.extend(args[1..].iter().cloned());
                        }
                    }
                } else if let Flow::Close = session.execute(&ctx, &args, &mut conn.out) {
                    session.end_batch(&ctx);
                    let _ = conn.flush().await;
                    let _ = conn.io.shutdown().await;
                    return;
                }
            }
            if conn.out.len() >= CHUNK {
                session.waited();
                if !conn.flush().await {
                    session.end_batch(&ctx);
                    return;
                }
            }
        };
        // The input holds no whole command: answer everything before waiting for more.
        conn.settle().await;
        session.end_batch(&ctx);
        if !conn.flush().await {
            return;
        }
        let (limit, what) = if buf.is_empty() {
            (ctx.idle_timeout, "server.resp_idle_timeout")
        } else {
            (ctx.body_timeout, "ingest.body_timeout")
        };
        buf.reserve(need.saturating_sub(buf.len()).clamp(16 << 10, MAX_COMMAND));
        input_timer
            .as_mut()
            .reset(tokio::time::Instant::now() + limit);
        let read = tokio::select! {
            biased;
            () = stopped.as_mut() => None,
            r = conn.io.read_buf(&mut buf) => Some(Ok(r)),
            () = input_timer.as_mut() => Some(Err(())),
        };
        match read {
            // Shutdown: everything read is answered (above); close.
            None => {
                let _ = conn.io.shutdown().await;
                return;
            }
            Some(Ok(Ok(0) | Err(_))) => return,
            Some(Ok(Ok(_))) => {}
            Some(Err(())) => {
                Reply {
                    out: &mut conn.out,
                    resp3: session.resp3,
                }
                .error(
                    "ERR",
                    &format!(
                        "timeout: no byte for {} ({what})",
                        crate::config::units::format_duration(limit)
                    ),
                );
                let _ = conn.flush().await;
                let _ = conn.io.shutdown().await;
                return;
            }
        }
    }
}
