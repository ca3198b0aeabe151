//! The Redis-protocol listener of the feature store (docs/RESP.md, docs/API.md §6):
//! `server.resp_listen` (TCP) and `server.resp_uds` (a Unix socket, with `server.uds_mode` and
//! stale-socket handling like `server.uds`), off by default.
//!
//! An entity is a Redis hash of its features: `HGET entity name` reads the same tables as
//! `GET /v1/features/{entity}`, `HSET`/`HDEL`/`DEL` are the same log records as a feature
//! `PUT`/`DELETE`, admitted, written and acknowledged the same way, and the same bearer tokens
//! and scopes apply (`AUTH`). A stream is a Redis stream of its events: `XADD` is a one-event
//! `POST /v1/events`, `XRANGE`/`XREAD` read what any interface wrote. Errors come from the
//! one [`crate::failure::Failure`] mapping.
//!
//! # Layout
//! - this module: binding and the accept loop, which stops at shutdown and then waits for its
//!   connections to answer what they have read.
//! - [`conn`]: one connection: reading, pipelining, bounded buffers, timeouts.
//! - [`session`]: a connection's session (protocol, token) and the checks every command
//!   passes (arity, auth, readiness).
//! - [`command`]: the command table, and the execution of the commands that read.
//! - [`hash`]: the hash write commands (`HSET`, `HDEL`, `DEL`, `HINCRBY`, `HINCRBYFLOAT`).
//! - [`connect`]: the connection and server commands (`AUTH`, `HELLO`, `CLIENT`, `SELECT`,
//!   `COMMAND`, `INFO`).
//! - [`streams`]: Redis's stream commands (`XADD`, `XRANGE`, `XREAD`, …) over the streams.
//! - [`value`]: feature values to and from RESP.

mod cluster;
mod command;
mod conn;
mod connect;
mod hash;
mod session;
mod streams;
mod value;

use crate::listen::{Acceptor, Io};
use crate::state::AppState;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Writes a connection keeps in flight before it waits for the oldest (pipelined `HSET`s are
/// submitted together, so they share a group commit).
const WINDOW: usize = 64;

/// What every connection shares.
pub(crate) struct Ctx {
    pub(crate) state: AppState,
    /// `server.resp_idle_timeout`: no byte between commands for this long closes the connection.
    pub(crate) idle_timeout: Duration,
    /// `ingest.body_timeout`: inside a command.
    pub(crate) body_timeout: Duration,
    /// `server.header_timeout`: a client that takes no byte of its replies for this long is
    /// closed, so one that never reads cannot hold its task and buffers forever.
    pub(crate) write_timeout: Duration,
    pub(crate) limits: vx_proto::resp::Limits,
    /// The next connection's id (`CLIENT ID`, `HELLO`'s `id`).
    pub(crate) next_id: AtomicU64,
}

impl Ctx {
    pub(crate) fn new(
        state: AppState,
        idle_timeout: Duration,
        write_timeout: Duration,
    ) -> Arc<Ctx> {
        let body_timeout = state.limits().body_timeout;
        let f = vx_storage::features::MAX_PUT_NAMES;
        let limits = vx_proto::resp::Limits {
            // `HSET entity` and a value per feature a PUT may set.
            max_args: 2 + 2 * f,
            // The largest string value; entities and names are far shorter.
            max_bulk: vx_storage::features::MAX_STRING_VALUE,
            max_inline: 64 << 10,
        };
        Arc::new(Ctx {
            state,
            idle_timeout,
            body_timeout,
            write_timeout,
            limits,
            next_id: AtomicU64::new(1),
        })
    }
}

/// Accept connections until `stop`, then close the listener and wait for the open connections
/// to answer what they have read (see [`Acceptor::serve_each`]).
pub(crate) async fn serve(listener: Acceptor, ctx: Arc<Ctx>, stop: CancellationToken) {
    let conn_stop = stop.clone();
    listener
        .serve_each(stop, |io, _peer| {
            conn::serve(io, Arc::clone(&ctx), conn_stop.clone())
        })
        .await;
}
