//! The handshake of a frames connection (docs/PROTOCOL.md, "Handshake"): the client's magic and
//! HELLO, answered with the server's magic and either WELCOME or a connection-level ERROR after
//! which the server closes. Refusals, in the order they are checked: not a frames client (bad
//! magic, `malformed`), no common protocol version (`bad_request`), the service not ready
//! (`not_ready`), auth (`unauthorized`, `forbidden`: tokens need the `ingest` scope, as
//! `POST /v1/events` does).

use super::{Ctx, HANDSHAKE_TIMEOUT, WINDOW};
use crate::config::Scope;
use crate::failure::Failure;
use crate::state::Phase;
use bytes::{Buf, BytesMut};
use std::io;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use vx_proto::ErrorCode;
use vx_proto::frames::{
    Frame, FrameError, Hello, MAGIC, MAX_VERSION, MIN_VERSION, Welcome, parse_frame,
};

/// The largest HELLO body: two versions and a token of up to `u16::MAX` bytes.
const HELLO_MAX: u32 = 6 + u16::MAX as u32;

/// Run the handshake on `io`, reading into `buf` (bytes the client sent after its HELLO stay
/// there). `Ok(Some)` with the write path and the client's credentials once WELCOME is sent; `Ok(None)` when the connection was
/// refused (the ERROR is sent) or the client went away or took too long.
pub(super) async fn run<S>(
    io: &mut S,
    buf: &mut BytesMut,
    ctx: &Ctx,
) -> io::Result<Option<(crate::write::Writes, Option<axum::http::HeaderValue>)>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let hello = match tokio::time::timeout(HANDSHAKE_TIMEOUT, read_hello(io, buf)).await {
        Err(_) => {
            refuse(
                io,
                Failure::new(
                    ErrorCode::BadRequest,
                    "no HELLO within the handshake timeout",
                ),
            )
            .await?;
            return Ok(None);
        }
        Ok(read) => read?,
    };
    let hello = match hello {
        Read::Eof => return Ok(None),
        Read::Refused(e) => {
            refuse(io, e).await?;
            return Ok(None);
        }
        Read::Hello(h) => h,
    };
    match check(&hello, ctx) {
        Err(e) => {
            refuse(io, e).await?;
            Ok(None)
        }
        Ok((version, writes)) => {
            let mut out = MAGIC.to_vec();
            let welcome = Frame::Welcome(Welcome {
                version,
                max_frame: ctx.max_frame,
                window: WINDOW,
            });
            welcome.encode(&mut out).map_err(io::Error::other)?;
            io.write_all(&out).await?;
            io.flush().await?;
            Ok(Some(writes))
        }
    }
}

enum Read {
    Hello(Hello),
    Refused(Failure),
    Eof,
}

async fn read_hello<S>(io: &mut S, buf: &mut BytesMut) -> io::Result<Read>
where
    S: AsyncRead + Unpin,
{
    while buf.len() < MAGIC.len() {
        if io.read_buf(buf).await? == 0 {
            return Ok(Read::Eof);
        }
    }
    if buf.get(..MAGIC.len()) != Some(&MAGIC[..]) {
        return Ok(Read::Refused(Failure::new(
            ErrorCode::Malformed,
            "not a Veltrix frames client: a connection must begin with the magic \"VXFR\"",
        )));
    }
    buf.advance(MAGIC.len());
    loop {
        match parse_frame(buf, HELLO_MAX) {
            Ok(Some((Frame::Hello(h), n))) => {
                buf.advance(n);
                return Ok(Read::Hello(h));
            }
            Ok(Some(_)) | Err(FrameError::Unexpected(_)) => {
                return Ok(Read::Refused(Failure::new(
                    ErrorCode::Malformed,
                    "the first frame of a connection must be HELLO",
                )));
            }
            Err(e) => {
                return Ok(Read::Refused(Failure::new(
                    ErrorCode::Malformed,
                    format!("bad HELLO: {e}"),
                )));
            }
            Ok(None) => {
                if io.read_buf(buf).await? == 0 {
                    return Ok(Read::Eof);
                }
            }
        }
    }
}

/// The write path and the client's token as an `Authorization` value (cluster mode passes it
/// on when it asks an owner for a write's outcome).
type Granted = (crate::write::Writes, Option<axum::http::HeaderValue>);

/// Version, readiness and auth; the chosen version and the write path, or the refusal.
fn check(hello: &Hello, ctx: &Ctx) -> Result<(u16, Granted), Failure> {
    let version = hello.max_version.min(MAX_VERSION);
    if version < hello.min_version.max(MIN_VERSION) {
        return Err(Failure::new(
            ErrorCode::BadRequest,
            format!(
                "no common protocol version: the client speaks {}..={}, this server \
                 {MIN_VERSION}..={MAX_VERSION}",
                hello.min_version, hello.max_version
            ),
        )
        .limit("protocol version", Some(u64::from(MAX_VERSION))));
    }
    let state = &ctx.state;
    let writes = match (state.phase(), state.writes()) {
        (Phase::Ready, Some(writes)) => writes.clone(),
        (Phase::Draining, _) => return Err(Failure::shutting_down("the service is shutting down")),
        _ => return Err(Failure::starting()),
    };
    // A frames connection only ingests: it needs what `POST /v1/events` needs.
    crate::auth::authorize(state.tokens(), hello.token.as_deref(), Scope::Ingest)?;
    let auth = hello
        .token
        .as_deref()
        .and_then(|t| axum::http::HeaderValue::from_str(&format!("Bearer {t}")).ok());
    Ok((version, (writes, auth)))
}

/// Send the magic and a connection-level ERROR; the caller then closes.
async fn refuse<S>(io: &mut S, f: Failure) -> io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    tracing::debug!(code = %f.code, message = %f.message, "frames handshake refused");
    let mut out = MAGIC.to_vec();
    Frame::Error(f.into_frame(0))
        .encode(&mut out)
        .map_err(io::Error::other)?;
    io.write_all(&out).await?;
    io.shutdown().await?;
    super::linger(io).await;
    Ok(())
}
