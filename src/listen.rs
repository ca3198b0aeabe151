//! Listeners and their connections: the sockets every listener accepts on (TCP, and the Unix
//! socket of docs/API.md §1.1, §8: a leftover socket file that nobody listens on is removed, any other
//! file at the path is an error, the socket gets `server.uds_mode`), and [`Connections`],
//! the one count of open connections that `server.max_connections` bounds across every
//! listener (HTTP and frames, TCP and Unix): [`Acceptor::accept`] refuses what is past it, and
//! the drain at shutdown reads it to tell when the connections are gone.
//!
//! A new listener joins the limit by accepting through an [`Acceptor`] with its own label in
//! [`LISTENERS`].

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, UnixListener};

/// The `listener` label of HTTP connections (TCP and Unix socket).
pub const HTTP: &str = "http";
/// The `listener` label of binary-frames connections (TCP and Unix socket).
pub const FRAMES: &str = "frames";
/// The `listener` label of Redis-protocol connections (TCP and Unix socket).
pub const RESP: &str = "resp";
/// Every `listener` label, so that the refusal series exist from the start.
pub const LISTENERS: [&str; 3] = [HTTP, FRAMES, RESP];

/// The metrics of every listener's connections, against `server.max_connections`
/// (`vx_connections_open`, `vx_connections_refused_total{listener}`); registered by
/// [`crate::metrics::Metrics::new`].
#[derive(Clone, Debug, Default)]
pub struct ConnectionHandles {
    pub open: Gauge,
    pub(crate) refused: Family<ListenerLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ListenerLabels {
    pub(crate) listener: &'static str,
}

impl ConnectionHandles {
    /// Count a connection of `listener` refused past the limit.
    pub fn refused(&self, listener: &'static str) {
        self.refused
            .get_or_create(&ListenerLabels { listener })
            .inc();
    }
}

/// A connection's byte stream, TCP or Unix.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// Open connections across every listener, and their bound (`server.max_connections`).
#[derive(Clone, Debug)]
pub struct Connections(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    open: AtomicUsize,
    max: usize,
    metrics: ConnectionHandles,
}

impl Connections {
    pub fn new(max: u64, metrics: ConnectionHandles) -> Connections {
        Connections(Arc::new(Shared {
            open: AtomicUsize::new(0),
            max: usize::try_from(max).unwrap_or(usize::MAX),
            metrics,
        }))
    }

    pub fn open(&self) -> usize {
        self.0.open.load(Ordering::Acquire)
    }

    /// A place for one more connection, unless `server.max_connections` are open.
    fn try_open(&self) -> Option<Slot> {
        let max = self.0.max;
        self.0
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()?;
        self.0.metrics.open.inc();
        Some(Slot(Arc::clone(&self.0)))
    }
}

/// One open connection's place in [`Connections`], given back when dropped.
#[derive(Debug)]
struct Slot(Arc<Shared>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
        self.0.metrics.open.dec();
    }
}

/// A bound socket, TCP or Unix.
pub enum Socket {
    Tcp(TcpListener),
    Unix(UnixListener),
}

/// A socket that admits connections within [`Connections`]' bound.
pub struct Acceptor {
    socket: Socket,
    /// The `listener` label its refusals are counted under.
    listener: &'static str,
    connections: Connections,
    /// Written (best effort, never waited for) to a refused connection before it is closed.
    refusal: Arc<[u8]>,
}

impl Acceptor {
    /// Accept connections until `stop`, each served by the task `serve` makes of it; then close
    /// the listener at once and wait for the open connections to finish (each answers what it
    /// has in flight). Dropping this future (the server's deadline) aborts the connections.
    /// The frames and Redis-protocol listeners run this way.
    pub(crate) async fn serve_each<F, Fut>(
        self,
        stop: tokio_util::sync::CancellationToken,
        mut serve: F,
    ) where
        F: FnMut(Box<dyn Io>, String) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let mut connections = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                (io, peer) = self.accept() => {
                    connections.spawn(serve(Box::new(io), peer));
                }
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        drop(self);
        while connections.join_next().await.is_some() {}
    }

    pub fn new(
        socket: Socket,
        listener: &'static str,
        connections: Connections,
        refusal: Arc<[u8]>,
    ) -> Acceptor {
        Acceptor {
            socket,
            listener,
            connections,
            refusal,
        }
    }

    /// The next connection within the bound, with its peer (`unix` for the Unix socket).
    /// Connections past the bound are refused on the way: the refusal is written if the
    /// socket takes it at once, and the connection is closed.
    pub async fn accept(&self) -> (Counted, String) {
        loop {
            let accepted = match &self.socket {
                Socket::Tcp(l) => l.accept().await.map(|(s, peer)| {
                    // Small answers (acks, a streamed body's chunks) must not wait for the
                    // client's delayed ACK.
                    let _ = s.set_nodelay(true);
                    Stream::Tcp(s, peer.to_string())
                }),
                Socket::Unix(l) => l.accept().await.map(|(s, _)| Stream::Unix(s)),
            };
            let stream = match accepted {
                Ok(s) => s,
                Err(e) => {
                    // Out of file descriptors, most likely: back off rather than spin.
                    tracing::warn!(listener = self.listener, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            match self.connections.try_open() {
                Some(slot) => return stream.counted(slot),
                None => {
                    self.connections.0.metrics.refused(self.listener);
                    tracing::debug!(
                        listener = self.listener,
                        "refusing a connection: server.max_connections are open"
                    );
                    stream.refuse(&self.refusal);
                }
            }
        }
    }
}

/// An accepted stream before admission.
enum Stream {
    Tcp(tokio::net::TcpStream, String),
    Unix(tokio::net::UnixStream),
}

impl Stream {
    fn counted(self, slot: Slot) -> (Counted, String) {
        let (io, peer): (Box<dyn Io>, String) = match self {
            Stream::Tcp(s, peer) => (Box::new(s), peer),
            Stream::Unix(s) => (Box::new(s), "unix".to_string()),
        };
        let counted = Counted {
            io,
            _slot: slot,
            on_read: None,
        };
        (counted, peer)
    }

    /// Write what the socket buffer takes of `answer` without waiting, then close: a refused
    /// connection must not hold a descriptor past the bound.
    fn refuse(self, answer: &[u8]) {
        if answer.is_empty() {
            return;
        }
        let _ = match &self {
            Stream::Tcp(s, _) => s.try_write(answer),
            Stream::Unix(s) => s.try_write(answer),
        };
    }
}

/// A connection that holds its place in [`Connections`] until it is dropped (with a
/// WebSocket, after the upgrade too: the stream moves into it).
pub struct Counted {
    io: Box<dyn Io>,
    _slot: Slot,
    on_read: Option<Arc<dyn OnRead>>,
}

/// Told whenever a read of a [`Counted`] connection returns bytes.
pub trait OnRead: Send + Sync {
    fn read(&self);
}

impl Counted {
    pub fn on_read(mut self, hook: Arc<dyn OnRead>) -> Counted {
        self.on_read = Some(hook);
        self
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if let Some(hook) = &self.on_read
            && buf.filled().len() > before
        {
            hook.read();
        }
        polled
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum UdsError {
    #[error("{}: another process is listening on this unix socket", path.display())]
    InUse { path: PathBuf },
    #[error("{}: the path exists and is not a socket; refusing to replace it", path.display())]
    NotSocket { path: PathBuf },
    #[error("{}: {what}: {source}", path.display())]
    Io {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// A bound Unix socket with its path (removed again at shutdown).
pub struct UnixSocket {
    listener: tokio::net::UnixListener,
    path: PathBuf,
}

impl UnixSocket {
    /// Bind `path` with permission bits `mode`, clearing a stale socket file first.
    /// Must run inside a tokio runtime.
    pub fn bind(path: &Path, mode: u32) -> Result<UnixSocket, UdsError> {
        let io = |what, source| UdsError::Io {
            path: path.to_path_buf(),
            what,
            source,
        };
        clear_stale(path)?;
        let listener = tokio::net::UnixListener::bind(path).map_err(|e| io("cannot bind", e))?;
        // The socket exists with the umask's bits for a moment before this; a client that
        // connects in that window still has to pass auth when tokens are configured.
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .map_err(|e| io("cannot set the socket's mode", e))?;
        Ok(UnixSocket {
            listener,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn into_socket(self) -> Socket {
        Socket::Unix(self.listener)
    }
}

/// Remove a socket file left by a process that is gone; refuse anything else.
fn clear_stale(path: &Path) -> Result<(), UdsError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(UdsError::Io {
                path: path.to_path_buf(),
                what: "cannot inspect the path",
                source,
            });
        }
    };
    if !meta.file_type().is_socket() {
        return Err(UdsError::NotSocket {
            path: path.to_path_buf(),
        });
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(UdsError::InUse {
            path: path.to_path_buf(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            tracing::info!(path = %path.display(), "removing a stale unix socket");
            std::fs::remove_file(path).map_err(|source| UdsError::Io {
                path: path.to_path_buf(),
                what: "cannot remove the stale socket",
                source,
            })
        }
        Err(source) => Err(UdsError::Io {
            path: path.to_path_buf(),
            what: "cannot check whether the socket is in use",
            source,
        }),
    }
}

/// Poll `fut` once: its result if it is ready, `Pending` if not (it can be awaited later).
/// The connections use it where a future's first poll does what must happen now, in order:
/// a write's first poll hands its record to the log writer, an admission's first poll says
/// whether the connection must stall.
pub(crate) async fn poll_once<F: std::future::Future + ?Sized>(
    mut fut: Pin<&mut F>,
) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stale_socket_is_replaced_and_live_one_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vx.sock");
        // A socket file whose listener is gone.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let sock = UnixSocket::bind(&path, 0o600).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // Now someone listens: a second bind must refuse, not steal the path.
        assert!(matches!(
            UnixSocket::bind(&path, 0o600),
            Err(UdsError::InUse { .. })
        ));
        drop(sock);
    }

    #[tokio::test]
    async fn regular_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("not-a-socket");
        std::fs::write(&path, b"x").unwrap();
        assert!(matches!(
            UnixSocket::bind(&path, 0o660),
            Err(UdsError::NotSocket { .. })
        ));
        assert!(path.exists());
    }
}
