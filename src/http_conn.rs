//! Serving the HTTP listeners: the accept loop and one task per connection (HTTP/1.1, and
//! HTTP/2 with prior knowledge, as `axum::serve` served them), bounded in time:
//!
//! - with no request in flight, a request head must arrive whole within
//!   `server.header_timeout`, counted from the accept on a new connection and from the head's
//!   first byte on a kept-alive one;
//! - a connection that was answered and then, with no request in flight, receives no byte for
//!   `server.keepalive_timeout` is idle and closed. HTTP/2 sends frames of its own between
//!   requests (SETTINGS acks, WINDOW_UPDATE, PING), so once a connection has carried an HTTP/2
//!   request its bytes start no head clock: it is idle while no stream is open.
//!
//! "In flight" runs from the moment hyper hands a request to the router to the moment its
//! answer's body is done (or dropped): slow bodies are `ingest.body_timeout`'s business, and
//! followers (SSE, NDJSON; WebSocket until the upgrade) are never idle. Either timeout asks
//! the connection to shut down gracefully (HTTP/2: GOAWAY) and drops it a second later; no
//! answer is written to a half-sent head. hyper's own `header_read_timeout` is not used: it
//! also runs between requests, which would cut kept-alive connections at the header timeout.
//!
//! At shutdown (`close`), connections finish what is in flight and close, as before; the
//! server's deadline aborts the tasks.

use crate::listen::{Acceptor, Counted, OnRead};
use axum::body::{Body, HttpBody};
use hyper::body::{Bytes, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// `server.header_timeout` and `server.keepalive_timeout`.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    pub header: Duration,
    pub keepalive: Duration,
}

/// After a timeout asked a connection to shut down, how long it may take before it is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// Accept until `stop`, then close the listener at once; connections are served on until
/// `close`, and this returns when they are all gone.
pub async fn serve(
    acceptor: Acceptor,
    app: axum::Router,
    timeouts: Timeouts,
    stop: CancellationToken,
    close: CancellationToken,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            (io, peer) = acceptor.accept() => {
                tracing::trace!(peer, "http connection accepted");
                connections.spawn(connection(io, app.clone(), timeouts, close.clone()));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    // Dropping the socket refuses new connections rather than leaving them in the backlog.
    drop(acceptor);
    while connections.join_next().await.is_some() {}
}

async fn connection(io: Counted, app: axum::Router, timeouts: Timeouts, close: CancellationToken) {
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(io.on_read(Arc::clone(&activity) as Arc<dyn OnRead>));
    let service = {
        let activity = Arc::clone(&activity);
        hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            let busy = Busy::begin(&activity, req.version() == hyper::Version::HTTP_2);
            let answer = app.clone().oneshot(req.map(Body::new));
            async move {
                let Ok(response) = answer.await;
                Ok::<_, Infallible>(response.map(|body| Body::new(Answer { body, _busy: busy })))
            }
        })
    };
    let mut builder = Builder::new(TokioExecutor::new());
    // The CONNECT protocol carries WebSocket over HTTP/2.
    builder.http2().enable_connect_protocol();
    let conn = builder.serve_connection_with_upgrades(io, service);
    tokio::pin!(conn);
    let timer = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(timer);
    let mut closing = false;
    loop {
        let deadline = activity.deadline(timeouts);
        if let Some(d) = deadline
            && timer.deadline() != d
        {
            timer.as_mut().reset(d);
        }
        tokio::select! {
            served = conn.as_mut() => {
                if let Err(e) = served {
                    tracing::trace!(error = %e, "http connection ended");
                }
                return;
            }
            () = close.cancelled(), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
            () = activity.wake.notified() => {}
            () = timer.as_mut(), if deadline.is_some() => {
                // The state may have moved on since the timer was set.
                if activity.deadline(timeouts).is_some_and(|d| d <= Instant::now()) {
                    tracing::debug!("closing an http connection: no request head in time, or idle");
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(CLOSE_GRACE, conn.as_mut()).await;
                    return;
                }
            }
        }
    }
}

/// What a connection's timeouts are computed from, updated by its reads and its requests.
/// Times are milliseconds since `born`.
struct Activity {
    born: Instant,
    in_flight: AtomicUsize,
    /// A request was answered: waiting for the next one is keep-alive.
    answered: AtomicBool,
    /// The connection carries HTTP/2: bytes between requests are not a request head.
    h2: AtomicBool,
    /// When the last request in flight finished.
    idle_since: AtomicU64,
    /// The first byte read since then, if any ([`NONE`]).
    head_since: AtomicU64,
    /// Told when the deadline may have come closer or gone.
    wake: Notify,
}

const NONE: u64 = u64::MAX;

impl Activity {
    fn new() -> Activity {
        Activity {
            born: Instant::now(),
            in_flight: AtomicUsize::new(0),
            answered: AtomicBool::new(false),
            h2: AtomicBool::new(false),
            idle_since: AtomicU64::new(0),
            head_since: AtomicU64::new(NONE),
            wake: Notify::new(),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.born.elapsed().as_millis()).unwrap_or(NONE - 1)
    }

    /// When the connection is to be closed, if nothing happens before; `None` while a request
    /// is in flight.
    fn deadline(&self, t: Timeouts) -> Option<Instant> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let (since, after) = if !self.answered.load(Ordering::Acquire) {
            (0, t.header)
        } else {
            match self.head_since.load(Ordering::Acquire) {
                NONE => (self.idle_since.load(Ordering::Acquire), t.keepalive),
                head => (head, t.header),
            }
        };
        self.born
            .checked_add(Duration::from_millis(since))?
            .checked_add(after)
    }
}

impl OnRead for Activity {
    /// Bytes arrived: the first since the connection went idle starts a head's clock.
    fn read(&self) {
        if self.in_flight.load(Ordering::Acquire) == 0
            && !self.h2.load(Ordering::Relaxed)
            && self.head_since.load(Ordering::Acquire) == NONE
            && self
                .head_since
                .compare_exchange(NONE, self.now(), Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            self.wake.notify_one();
        }
    }
}

/// A request in flight, from the router's call to the end of its answer's body.
struct Busy(Arc<Activity>);

impl Busy {
    fn begin(activity: &Arc<Activity>, h2: bool) -> Busy {
        if h2 {
            activity.h2.store(true, Ordering::Relaxed);
        }
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        activity.head_since.store(NONE, Ordering::Release);
        Busy(Arc::clone(activity))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let a = &self.0;
        if a.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            a.idle_since.store(a.now(), Ordering::Release);
            a.head_since.store(NONE, Ordering::Release);
            a.answered.store(true, Ordering::Release);
            a.wake.notify_one();
        }
    }
}

/// An answer's body, which keeps its request in flight until it is done or dropped.
struct Answer {
    body: Body,
    _busy: Busy,
}

impl HttpBody for Answer {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
