//! Listeners: the Unix socket (SPEC §1, §8: a leftover socket file that nobody listens on is
//! removed, any other file at the path is an error, the socket gets `server.uds_mode`), and
//! [`Gated`], which closes a listener at shutdown while counting the connections still open,
//! so the drain can tell when they are gone.

use axum::serve::Listener;
use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::sync::CancellationToken;

/// Open connections across the listeners that share it.
#[derive(Clone, Debug, Default)]
pub struct Connections(Arc<AtomicUsize>);

impl Connections {
    pub fn open(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }
}

/// A listener that stops accepting — and drops its socket, so that new connections are
/// refused rather than left in the backlog — once `stop` is cancelled, while the connections
/// it accepted are served on (axum's graceful shutdown is signalled separately, later).
pub struct Gated<L> {
    inner: Option<L>,
    stop: CancellationToken,
    connections: Connections,
}

impl<L> Gated<L> {
    pub fn new(inner: L, stop: CancellationToken, connections: Connections) -> Self {
        Gated {
            inner: Some(inner),
            stop,
            connections,
        }
    }
}

impl<L: Listener> Listener for Gated<L> {
    type Io = Counted<L::Io>;
    type Addr = L::Addr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let Gated {
            inner,
            stop,
            connections,
        } = self;
        loop {
            let Some(listener) = inner.as_mut() else {
                return std::future::pending().await;
            };
            tokio::select! {
                () = stop.cancelled() => *inner = None,
                (io, addr) = listener.accept() => {
                    connections.0.fetch_add(1, Ordering::AcqRel);
                    return (Counted { io, connections: connections.clone() }, addr);
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        match &self.inner {
            Some(l) => l.local_addr(),
            None => Err(io::Error::other("the listener is closed")),
        }
    }
}

/// A connection that is counted in [`Connections`] until it is dropped.
pub struct Counted<Io> {
    io: Io,
    connections: Connections,
}

impl<Io> Drop for Counted<Io> {
    fn drop(&mut self) {
        self.connections.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl<Io: AsyncRead + Unpin> AsyncRead for Counted<Io> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<Io: AsyncWrite + Unpin> AsyncWrite for Counted<Io> {
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

    pub fn into_listener(self) -> tokio::net::UnixListener {
        self.listener
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
