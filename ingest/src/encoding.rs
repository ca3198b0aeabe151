//! `Content-Encoding` of request bodies (docs/API.md §3): `gzip` and `zstd`, decompressed as the body
//! arrives, in chunks of at most [`CHUNK_BYTES`], so memory stays bounded whatever the
//! compression ratio. The caller counts the decompressed bytes against `ingest.max_body_bytes`
//! (a zip bomb is refused once that much has come out); the compressed bytes are held to the
//! same limit here, so a stream that decompresses to nothing cannot be read forever.
//!
//! Decoders: async-compression's `tokio::bufread` adapters over `flate2` (gzip, pure Rust
//! miniz_oxide backend) and `zstd` (libzstd, built from source and linked statically). Gzip
//! members and zstd frames may be concatenated (RFC 1952, RFC 8878); anything else after the
//! last one is an error. A zstd frame may ask for a window of up to 8 MiB (RFC 8878 §3.1:
//! the HTTP content coding's limit), so a crafted frame cannot make the decoder allocate more.

use std::fmt::Display;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use async_compression::tokio::bufread::{GzipDecoder, ZstdDecoder};
use async_compression::zstd::DParameter;
use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
use tokio::io::AsyncReadExt;
use tokio_util::io::StreamReader;
use vx_proto::InputError;

use crate::{IngestError, body_too_large};

/// Largest decompressed chunk handed to a decoder at once.
pub const CHUNK_BYTES: usize = 64 << 10;
/// zstd window limit: 2^23 = 8 MiB (RFC 8878 §3.1).
const ZSTD_WINDOW_LOG_MAX: u32 = 23;

/// The content codings accepted, for the 415 answer.
pub const SUPPORTED_ENCODINGS: &[&str] = &["identity", "gzip", "zstd"];

/// A request body's content coding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Identity,
    Gzip,
    Zstd,
}

impl Encoding {
    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::Identity => "identity",
            Encoding::Gzip => "gzip",
            Encoding::Zstd => "zstd",
        }
    }
}

/// The `Content-Encoding` is not one of [`SUPPORTED_ENCODINGS`] (415).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unsupported Content-Encoding {shown:?}; supported: {}", SUPPORTED_ENCODINGS.join(", "), shown = .encoding.chars().take(100).collect::<String>())]
pub struct UnsupportedEncoding {
    /// The header as sent.
    pub encoding: String,
}

/// Map a `Content-Encoding` header to an [`Encoding`]. Codings compare case-insensitively,
/// `x-gzip` is gzip (RFC 9110 §8.4.1.3), and `identity` entries are no-ops; more than one
/// real coding (a body compressed twice) is not supported.
pub fn encoding_for(header: Option<&str>) -> Result<Encoding, UnsupportedEncoding> {
    let Some(header) = header else {
        return Ok(Encoding::Identity);
    };
    let unsupported = || UnsupportedEncoding {
        encoding: header.to_string(),
    };
    let mut found = Encoding::Identity;
    for coding in header.split(',').map(str::trim).filter(|c| !c.is_empty()) {
        let is = |name: &str| coding.eq_ignore_ascii_case(name);
        let this = if is("identity") {
            continue;
        } else if is("gzip") || is("x-gzip") {
            Encoding::Gzip
        } else if is("zstd") {
            Encoding::Zstd
        } else {
            return Err(unsupported());
        };
        if found != Encoding::Identity {
            return Err(unsupported());
        }
        found = this;
    }
    Ok(found)
}

/// Why the compressed stream stopped, carried through the decompressor inside an
/// [`io::Error`] so that it can be told apart from bad compressed data.
#[derive(Debug, thiserror::Error)]
enum RawStop {
    #[error("reading the request body failed: {0}")]
    Read(String),
    #[error("the compressed body is larger than the body limit")]
    TooLarge,
}

/// The compressed body as `io::Result` chunks, counted against the body limit.
struct Raw<S> {
    inner: S,
    read: u64,
    max: u64,
}

impl<S, E> Stream for Raw<S>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: Display,
{
    type Item = io::Result<Bytes>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_next(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                this.read = this.read.saturating_add(chunk.len() as u64);
                if this.read > this.max {
                    Poll::Ready(Some(Err(io::Error::other(RawStop::TooLarge))))
                } else {
                    Poll::Ready(Some(Ok(chunk)))
                }
            }
            Poll::Ready(Some(Err(e))) => {
                Poll::Ready(Some(Err(io::Error::other(RawStop::Read(e.to_string())))))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

enum Kind<S> {
    Identity(S),
    Gzip(GzipDecoder<StreamReader<Raw<S>, Bytes>>),
    Zstd(ZstdDecoder<StreamReader<Raw<S>, Bytes>>),
}

/// A request body as decompressed chunks.
pub struct Decoded<S> {
    kind: Kind<S>,
    encoding: Encoding,
    max_body_bytes: u64,
}

impl<S, E> Decoded<S>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: Display,
{
    /// `body` decoded from `encoding`; `max_body_bytes` bounds the compressed bytes read.
    pub fn new(body: S, encoding: Encoding, max_body_bytes: u64) -> Decoded<S> {
        let raw = |inner| {
            StreamReader::new(Raw {
                inner,
                read: 0,
                max: max_body_bytes,
            })
        };
        let kind = match encoding {
            Encoding::Identity => Kind::Identity(body),
            Encoding::Gzip => {
                let mut d = GzipDecoder::new(raw(body));
                d.multiple_members(true);
                Kind::Gzip(d)
            }
            Encoding::Zstd => {
                let mut d = ZstdDecoder::with_params(
                    raw(body),
                    &[DParameter::window_log_max(ZSTD_WINDOW_LOG_MAX)],
                );
                d.multiple_members(true);
                Kind::Zstd(d)
            }
        };
        Decoded {
            kind,
            encoding,
            max_body_bytes,
        }
    }

    /// The next decompressed chunk (at most [`CHUNK_BYTES`] when decompressing), or `None` at
    /// the end of the body.
    pub async fn next(&mut self) -> Result<Option<Bytes>, IngestError> {
        if let Kind::Identity(body) = &mut self.kind {
            // Chunks pass through as they arrived, without a copy.
            return match body.next().await {
                None => Ok(None),
                Some(Ok(chunk)) => Ok(Some(chunk)),
                Some(Err(e)) => Err(IngestError::Body(e.to_string())),
            };
        }
        let mut buf = BytesMut::with_capacity(CHUNK_BYTES);
        let read = match &mut self.kind {
            Kind::Gzip(d) => d.read_buf(&mut buf).await,
            Kind::Zstd(d) => d.read_buf(&mut buf).await,
            Kind::Identity(_) => Ok(0),
        };
        match read {
            Ok(0) => Ok(None),
            Ok(_) => Ok(Some(buf.freeze())),
            Err(e) => Err(self.error(e)),
        }
    }

    fn error(&self, e: io::Error) -> IngestError {
        match e
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<RawStop>())
        {
            Some(RawStop::Read(msg)) => IngestError::Body(msg.clone()),
            Some(RawStop::TooLarge) => IngestError::Input(body_too_large(self.max_body_bytes)),
            None => IngestError::Input(InputError::malformed(format!(
                "the body is not valid {} data: {e}",
                self.encoding.as_str()
            ))),
        }
    }
}
