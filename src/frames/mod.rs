//! The binary-frames listeners (docs/API.md §9, §4.3; wire
//! format in docs/PROTOCOL.md): `server.frames_listen` (TCP) and
//! `server.frames_uds` (a Unix socket, with `server.uds_mode` and stale-socket handling like
//! `server.uds`).
//!
//! This lives in the binary's crate rather than in `vx-ingest` because a connection needs the
//! whole service: the router (admission, the writer), the auth tokens, the life-cycle phase and
//! the metrics; `vx-ingest` stays a library of body decoding that knows no router or storage.
//!
//! # Layout
//! - this module: binding and the accept loop, which stops at shutdown and then waits for its
//!   connections (each finishes its in-flight batches, see [`conn`]).
//! - [`handshake`]: magic, HELLO, version choice, readiness and bearer-token auth, WELCOME.
//! - [`conn`]: one connection after the handshake: reading frames, pipelined submission,
//!   flow control, acks.

mod conn;
mod handshake;

use crate::listen::Acceptor;
pub(crate) use crate::listen::Io;
use crate::state::AppState;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_util::sync::CancellationToken;

/// Batches a connection keeps in flight before it stops reading (told to clients in WELCOME).
pub const WINDOW: u16 = 64;
/// How long a new connection may take to send its magic and HELLO.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The `limit` of the ERROR `timeout` that closes a connection idle between frames.
const LIMIT_IDLE_TIMEOUT: &str = "server.frames_idle_timeout";
/// After a connection-level error, how long (and how many bytes) the server keeps reading and
/// discarding what the client still sends before it closes: closing a socket with unread
/// input makes the kernel reset the connection, which can destroy the error frame in flight.
const LINGER: Duration = Duration::from_secs(1);
const LINGER_BYTES: usize = 1 << 20;

/// Read and discard until the client closes, [`LINGER`] passes or [`LINGER_BYTES`] arrived.
pub(crate) async fn linger<R: AsyncRead + Unpin>(rd: &mut R) {
    let mut buf = vec![0u8; 16 << 10];
    let mut read = 0;
    let drain = async {
        while read < LINGER_BYTES {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => read += n,
            }
        }
    };
    let _ = tokio::time::timeout(LINGER, drain).await;
}

/// What every connection shares.
pub(crate) struct Ctx {
    pub(crate) state: AppState,
    /// `ingest.max_body_bytes`, capped at what a length prefix can say.
    pub(crate) max_frame: u32,
    pub(crate) window: usize,
    /// `ingest.body_timeout`, inside a frame.
    pub(crate) body_timeout: std::time::Duration,
    /// `server.frames_idle_timeout`, between frames with nothing in flight.
    pub(crate) idle_timeout: std::time::Duration,
    /// `server.header_timeout`, on each write: a client that stops reading its acks is
    /// closed rather than left to block the connection's task.
    pub(crate) write_timeout: std::time::Duration,
}

impl Ctx {
    pub(crate) fn new(
        state: AppState,
        idle_timeout: std::time::Duration,
        write_timeout: std::time::Duration,
    ) -> Arc<Ctx> {
        let max_frame = u32::try_from(state.limits().max_body_bytes).unwrap_or(u32::MAX);
        let body_timeout = state.limits().body_timeout;
        Arc::new(Ctx {
            state,
            max_frame,
            window: usize::from(WINDOW),
            body_timeout,
            idle_timeout,
            write_timeout,
        })
    }
}

/// Accept connections until `stop`, then close the listener at once and wait for the open
/// connections to finish their in-flight batches (see [`Acceptor::serve_each`]).
pub(crate) async fn serve(listener: Acceptor, ctx: Arc<Ctx>, stop: CancellationToken) {
    let conn_stop = stop.clone();
    listener
        .serve_each(stop, |io, peer| {
            conn::serve(io, peer, Arc::clone(&ctx), conn_stop.clone())
        })
        .await;
}
