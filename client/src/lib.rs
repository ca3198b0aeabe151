//! `vx-client`: a client of the Veltrix binary frames protocol (docs/PROTOCOL.md) over TCP or a
//! Unix socket. It connects, runs the handshake, sends BATCH frames with request ids it assigns,
//! and reads ACK and ERROR frames, which may arrive in any order.
//!
//! The server stops reading a connection while its shards are full (flow control), and a
//! client that does not read its answers eventually stops the server from writing them; so a
//! pipelining client must read while it writes: [`Client::split`] gives a [`Sender`] and a
//! [`Receiver`] to drive from two tasks.
//!
//! ```no_run
//! # async fn demo() -> Result<(), vx_client::ClientError> {
//! use vx_client::{Client, Options, Reply, WireEvent, Kind};
//! let client = Client::connect_tcp("127.0.0.1:7101", &Options::default()).await?;
//! let (mut tx, mut rx) = client.split();
//! let reader = tokio::spawn(async move {
//!     while let Ok(reply) = rx.next_reply().await {
//!         if let Reply::Ack(ack) = reply { println!("stored {}", ack.accepted); }
//!     }
//! });
//! let ev = WireEvent { stream: "s", entity: None, ty: "t", ts: None, kind: Kind::Event,
//!                      value: None, id: None, data: None };
//! let id = tx.send_batch(&[ev], None).await?;
//! tx.close().await?;
//! # let _ = (id, reader.await);
//! # Ok(()) }
//! ```
//!
//! # Layout
//! - [`Client`]: connecting and the handshake.
//! - [`Sender`]: encoding and writing batches (and pings).
//! - [`Receiver`]: reading answers.
//! - [`http_body`] and [`for_each_replayed`]: the same frames over HTTP (ingest bodies of type
//!   `application/vnd.veltrix.frames`, replay output in that type).

use bytes::{Buf, BytesMut};
use std::io;
use std::path::Path;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, ToSocketAddrs, UnixStream};
use vx_proto::frames::{
    self, BatchHead, EventDecoder, Frame, FrameIter, FrameType, Hello, MAGIC, MAX_VERSION,
    MIN_VERSION, encode_batch, parse_frame,
};

pub use vx_proto::frames::{Ack, Durability, EncodeError, ErrorFrame, FrameError, WireEvent};
pub use vx_proto::{EventView, Kind, Num};

/// Connection options.
#[derive(Clone, Debug)]
pub struct Options {
    /// Bearer token, for a server with `auth.tokens` (it needs the `ingest` scope).
    pub token: Option<String>,
    /// The largest frame body accepted from the server.
    pub max_frame_in: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            token: None,
            max_frame_in: 64 << 20,
        }
    }
}

/// Per-batch options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchOptions {
    /// `None`: the server mode's default.
    pub durability: Option<Durability>,
    /// Store only if the (single) stream's last seq is this (0: the stream must be empty).
    pub expected_last_seq: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
    /// The server refused the connection or ended it (an ERROR with request id 0).
    #[error("the server ended the connection: {} ({})", .0.message, .0.code)]
    Server(Box<ErrorFrame>),
    #[error("protocol: {0}")]
    Frame(#[from] FrameError),
    #[error("protocol: {0}")]
    Protocol(String),
    #[error("cannot encode: {0}")]
    Encode(#[from] EncodeError),
    /// The server closed the connection without a connection-level error.
    #[error("the connection is closed")]
    Closed,
}

/// An answer from the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// A batch was stored.
    Ack(Ack),
    /// A batch was refused (nothing of it is stored); the connection goes on.
    Rejected(ErrorFrame),
    Pong(u64),
}

impl Reply {
    /// The request id answered, if this answers a batch.
    pub fn request_id(&self) -> Option<u64> {
        match self {
            Reply::Ack(a) => Some(a.request_id),
            Reply::Rejected(e) => Some(e.request_id),
            Reply::Pong(_) => None,
        }
    }
}

type ReadHalf = Box<dyn AsyncRead + Send + Unpin>;
type WriteHalf = Box<dyn AsyncWrite + Send + Unpin>;

/// What the handshake agreed on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Session {
    pub version: u16,
    /// The largest BATCH body the server accepts.
    pub max_frame: u32,
    /// Batches the server keeps in flight before it stops reading: a good pipeline depth.
    pub window: u16,
}

/// A connection after a successful handshake.
pub struct Client {
    tx: Sender,
    rx: Receiver,
}

impl Client {
    pub async fn connect_tcp(
        addr: impl ToSocketAddrs,
        opts: &Options,
    ) -> Result<Client, ClientError> {
        let s = TcpStream::connect(addr).await?;
        // Batches are written whole; do not let Nagle hold the last segment of one back.
        s.set_nodelay(true)?;
        let (r, w) = s.into_split();
        Client::handshake(Box::new(r), Box::new(w), opts).await
    }

    pub async fn connect_unix(
        path: impl AsRef<Path>,
        opts: &Options,
    ) -> Result<Client, ClientError> {
        let (r, w) = UnixStream::connect(path).await?.into_split();
        Client::handshake(Box::new(r), Box::new(w), opts).await
    }

    /// Run the handshake over an already connected byte stream.
    pub async fn handshake(
        mut rd: ReadHalf,
        mut wr: WriteHalf,
        opts: &Options,
    ) -> Result<Client, ClientError> {
        let mut out = MAGIC.to_vec();
        Frame::Hello(Hello {
            min_version: MIN_VERSION,
            max_version: MAX_VERSION,
            token: opts.token.clone(),
        })
        .encode(&mut out)?;
        wr.write_all(&out).await?;
        wr.flush().await?;
        let mut buf = BytesMut::with_capacity(64 << 10);
        while buf.len() < MAGIC.len() {
            if rd.read_buf(&mut buf).await? == 0 {
                return Err(ClientError::Closed);
            }
        }
        if buf.get(..MAGIC.len()) != Some(&MAGIC[..]) {
            return Err(ClientError::Protocol(
                "not a Veltrix frames server (no \"VXFR\" magic)".into(),
            ));
        }
        buf.advance(MAGIC.len());
        let mut rx = Receiver {
            rd,
            buf,
            max_frame_in: opts.max_frame_in,
        };
        let session = match rx.next_frame().await? {
            Frame::Welcome(w) => Session {
                version: w.version,
                max_frame: w.max_frame,
                window: w.window,
            },
            Frame::Error(e) => return Err(ClientError::Server(Box::new(e))),
            other => {
                return Err(ClientError::Protocol(format!(
                    "expected WELCOME, got {other:?}"
                )));
            }
        };
        Ok(Client {
            tx: Sender {
                wr,
                out: Vec::new(),
                next_id: 1,
                session,
            },
            rx,
        })
    }

    pub fn session(&self) -> Session {
        self.tx.session
    }

    /// Send one batch; returns its request id. See [`Sender::send_batch`].
    pub async fn send_batch(
        &mut self,
        events: &[WireEvent<'_>],
        durability: Option<Durability>,
    ) -> Result<u64, ClientError> {
        self.tx.send_batch(events, durability).await
    }

    /// The next answer. See [`Receiver::next_reply`].
    pub async fn next_reply(&mut self) -> Result<Reply, ClientError> {
        self.rx.next_reply().await
    }

    /// Separate the writing and reading sides, to drive them from two tasks.
    pub fn split(self) -> (Sender, Receiver) {
        (self.tx, self.rx)
    }
}

/// The writing side of a connection.
pub struct Sender {
    wr: WriteHalf,
    /// Encoded frames not written yet.
    out: Vec<u8>,
    next_id: u64,
    session: Session,
}

impl Sender {
    pub fn session(&self) -> Session {
        self.session
    }

    /// Encode and write one batch; returns its request id (assigned in sending order, never
    /// 0). Not cancel-safe: a batch cut off mid-write leaves the connection unusable.
    pub async fn send_batch(
        &mut self,
        events: &[WireEvent<'_>],
        durability: Option<Durability>,
    ) -> Result<u64, ClientError> {
        let opts = BatchOptions {
            durability,
            expected_last_seq: None,
        };
        self.send_batch_with(events, opts).await
    }

    pub async fn send_batch_with(
        &mut self,
        events: &[WireEvent<'_>],
        opts: BatchOptions,
    ) -> Result<u64, ClientError> {
        let id = self.queue_batch(events, opts)?;
        self.flush().await?;
        Ok(id)
    }

    /// Encode a batch into the send buffer without writing it ([`Sender::flush`] does), so
    /// that many small batches go out in one write. A batch over the server's frame limit is
    /// refused here.
    pub fn queue_batch(
        &mut self,
        events: &[WireEvent<'_>],
        opts: BatchOptions,
    ) -> Result<u64, ClientError> {
        let id = self.next_id;
        let head = BatchHead {
            request_id: id,
            durability: opts.durability,
            expected_last_seq: opts.expected_last_seq,
        };
        let start = self.out.len();
        encode_batch(&mut self.out, &head, events)?;
        let body = (self.out.len() - start - frames::HEAD_LEN) as u64;
        if body > u64::from(self.session.max_frame) {
            self.out.truncate(start);
            return Err(EncodeError::FrameTooLarge {
                len: body,
                max: u64::from(self.session.max_frame),
            }
            .into());
        }
        self.next_id = self.next_id.checked_add(1).unwrap_or(1);
        Ok(id)
    }

    /// Write what is buffered.
    pub async fn flush(&mut self) -> Result<(), ClientError> {
        if !self.out.is_empty() {
            self.wr.write_all(&self.out).await?;
            self.wr.flush().await?;
            self.out.clear();
        }
        Ok(())
    }

    /// Ask for a PONG carrying `nonce`.
    pub async fn ping(&mut self, nonce: u64) -> Result<(), ClientError> {
        Frame::Ping(nonce).encode(&mut self.out)?;
        self.flush().await
    }

    /// Write raw bytes as they are: for tests of the server's handling of bad input.
    pub async fn send_raw(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        self.flush().await?;
        self.wr.write_all(bytes).await?;
        self.wr.flush().await?;
        Ok(())
    }

    /// Flush and close the writing side; the server then answers what it has read and closes.
    pub async fn close(&mut self) -> Result<(), ClientError> {
        self.flush().await?;
        self.wr.shutdown().await?;
        Ok(())
    }
}

/// The reading side of a connection.
pub struct Receiver {
    rd: ReadHalf,
    buf: BytesMut,
    max_frame_in: u32,
}

impl Receiver {
    /// The next ACK, batch ERROR or PONG. A connection-level ERROR is
    /// [`ClientError::Server`]; the end of the connection without one is
    /// [`ClientError::Closed`]. Cancel-safe: nothing is lost if the future is dropped.
    pub async fn next_reply(&mut self) -> Result<Reply, ClientError> {
        match self.next_frame().await? {
            Frame::Ack(a) => Ok(Reply::Ack(a)),
            Frame::Error(e) if e.is_fatal() => Err(ClientError::Server(Box::new(e))),
            Frame::Error(e) => Ok(Reply::Rejected(e)),
            Frame::Pong(n) => Ok(Reply::Pong(n)),
            other => Err(ClientError::Protocol(format!(
                "unexpected frame from the server: {other:?}"
            ))),
        }
    }

    async fn next_frame(&mut self) -> Result<Frame, ClientError> {
        loop {
            if let Some((frame, n)) = parse_frame(&self.buf, self.max_frame_in)? {
                self.buf.advance(n);
                return Ok(frame);
            }
            if self.buf.capacity() - self.buf.len() < 4096 {
                self.buf.reserve(64 << 10);
            }
            if self.rd.read_buf(&mut self.buf).await? == 0 {
                return Err(ClientError::Closed);
            }
        }
    }
}

/// An HTTP ingest body (`Content-Type: application/vnd.veltrix.frames`) holding `events` as
/// one BATCH frame. Durability and an expected last seq go in the HTTP headers.
pub fn http_body(events: &[WireEvent<'_>]) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::new();
    encode_batch(&mut out, &BatchHead::default(), events)?;
    Ok(out)
}

/// Call `f` with each event of a replay body received with
/// `Accept: application/vnd.veltrix.frames`, in order, with its seq.
pub fn for_each_replayed(
    body: &[u8],
    mut f: impl FnMut(u64, EventView<'_>),
) -> Result<(), ClientError> {
    let mut frames = FrameIter::new(body);
    let mut decoder = EventDecoder::new();
    for (head, frame) in frames.by_ref() {
        if head.ty != FrameType::Event as u8 {
            return Err(ClientError::Protocol(format!(
                "replay body holds a frame of type 0x{:02x}",
                head.ty
            )));
        }
        let (seq, ev) = frames::decode_event_frame(frame, &mut decoder)
            .map_err(|e| ClientError::Protocol(format!("bad EVENT frame: {e}")))?;
        f(seq, ev);
    }
    if !frames.rest().is_empty() {
        return Err(ClientError::Protocol(
            "the replay body ends inside a frame".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use vx_proto::frames::{Welcome, fill_to_basis_points};

    fn ev(stream: &str) -> WireEvent<'_> {
        WireEvent {
            stream,
            entity: None,
            ty: "t",
            ts: Some(1),
            kind: Kind::Event,
            value: None,
            id: None,
            data: None,
        }
    }

    /// A scripted server on the other end of a duplex pipe: checks the hello, welcomes, then
    /// answers two batches in reverse order.
    #[tokio::test]
    async fn handshake_send_and_out_of_order_replies() {
        let (client_io, mut server_io) = tokio::io::duplex(1 << 16);
        let server = tokio::spawn(async move {
            let mut buf = vec![0u8; 4 + 5 + 6 + 3];
            server_io.read_exact(&mut buf).await.unwrap();
            assert_eq!(&buf[..4], b"VXFR");
            let (hello, _) = parse_frame(&buf[4..], 1 << 16).unwrap().unwrap();
            assert_eq!(
                hello,
                Frame::Hello(Hello {
                    min_version: 1,
                    max_version: 1,
                    token: Some("tok".into())
                })
            );
            let mut out = MAGIC.to_vec();
            let w = Welcome {
                version: 1,
                max_frame: 1 << 20,
                window: 8,
            };
            Frame::Welcome(w).encode(&mut out).unwrap();
            server_io.write_all(&out).await.unwrap();
            // Read two batch frames, answer the second first.
            let mut got = BytesMut::new();
            let mut ids = Vec::new();
            while ids.len() < 2 {
                server_io.read_buf(&mut got).await.unwrap();
                for (h, body) in FrameIter::new(&got.clone()) {
                    assert_eq!(h.ty, FrameType::Batch as u8);
                    ids.push(u64::from_le_bytes(body[..8].try_into().unwrap()));
                    got.advance(h.frame_len());
                }
            }
            let mut out = Vec::new();
            for id in ids.iter().rev() {
                Frame::Ack(Ack {
                    request_id: *id,
                    accepted: 1,
                    duplicates: 0,
                    durability: Durability::Fsync,
                    queue_fill: fill_to_basis_points(0.5),
                    last_seq: vec![("s".into(), *id)],
                    position: None,
                })
                .encode(&mut out)
                .unwrap();
            }
            Frame::Error(ErrorFrame::new(0, "not_ready", "bye"))
                .encode(&mut out)
                .unwrap();
            server_io.write_all(&out).await.unwrap();
        });
        let (r, w) = tokio::io::split(client_io);
        let opts = Options {
            token: Some("tok".into()),
            ..Options::default()
        };
        let client = Client::handshake(Box::new(r), Box::new(w), &opts)
            .await
            .unwrap();
        assert_eq!(client.session().window, 8);
        let (mut tx, mut rx) = client.split();
        let a = tx.send_batch(&[ev("s")], None).await.unwrap();
        let b = tx
            .send_batch(&[ev("s")], Some(Durability::Write))
            .await
            .unwrap();
        assert_eq!((a, b), (1, 2));
        let first = rx.next_reply().await.unwrap();
        let second = rx.next_reply().await.unwrap();
        assert_eq!(
            (first.request_id(), second.request_id()),
            (Some(2), Some(1))
        );
        match rx.next_reply().await {
            Err(ClientError::Server(e)) => assert_eq!(e.code, "not_ready"),
            other => panic!("{other:?}"),
        }
        server.await.unwrap();
    }

    #[tokio::test]
    async fn a_refused_handshake_is_a_server_error() {
        let (client_io, mut server_io) = tokio::io::duplex(1 << 16);
        tokio::spawn(async move {
            let mut out = MAGIC.to_vec();
            Frame::Error(ErrorFrame::new(0, "unauthorized", "who are you"))
                .encode(&mut out)
                .unwrap();
            server_io.write_all(&out).await.unwrap();
            let mut sink = Vec::new();
            let _ = server_io.read_to_end(&mut sink).await;
        });
        let (r, w) = tokio::io::split(client_io);
        match Client::handshake(Box::new(r), Box::new(w), &Options::default()).await {
            Err(ClientError::Server(e)) => assert_eq!(e.code, "unauthorized"),
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("handshake succeeded"),
        }
    }

    #[test]
    fn oversized_batches_are_refused_before_writing() {
        let mut out = Vec::new();
        let ids: Vec<String> = (0..100).map(|i| format!("id-{i}")).collect();
        let evs: Vec<WireEvent<'_>> = ids
            .iter()
            .map(|id| WireEvent {
                id: Some(id),
                ..ev("s")
            })
            .collect();
        encode_batch(&mut out, &BatchHead::default(), &evs).unwrap();
        let (_, w) = tokio::io::split(tokio::io::duplex(16).0);
        let mut tx = Sender {
            wr: Box::new(w),
            out: Vec::new(),
            next_id: 1,
            session: Session {
                version: 1,
                max_frame: 100,
                window: 1,
            },
        };
        assert!(matches!(
            tx.queue_batch(&evs, BatchOptions::default()),
            Err(ClientError::Encode(EncodeError::FrameTooLarge { .. }))
        ));
        assert!(tx.out.is_empty());
        assert_eq!(
            tx.queue_batch(&evs[..1], BatchOptions::default()).unwrap(),
            1
        );
    }

    #[test]
    fn http_bodies_and_replay_bodies() {
        let body = http_body(&[ev("a"), ev("b")]).unwrap();
        let mut d = vx_proto::frames::FramesDecoder::new(1 << 20, 0);
        let mut b = vx_proto::Batch::new();
        d.feed(&body, &mut b).unwrap();
        d.finish(&mut b).unwrap();
        assert_eq!(b.len(), 2);
        let mut replay = Vec::new();
        for (i, e) in b.iter().enumerate() {
            frames::encode_event_frame(&mut replay, &e, i as u64 + 1).unwrap();
        }
        let mut seen = Vec::new();
        for_each_replayed(&replay, |seq, e| seen.push((seq, e.stream.to_string()))).unwrap();
        assert_eq!(seen, [(1, "a".to_string()), (2, "b".to_string())]);
        assert!(for_each_replayed(&replay[..replay.len() - 1], |_, _| {}).is_err());
    }
}
