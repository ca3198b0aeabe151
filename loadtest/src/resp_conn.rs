//! A RESP connection for what happens around the load: `AUTH` when the workload has a token
//! (every RESP connection, the lanes' too), which server answers ([`RespServer`]), and the
//! commands that prepare a run (a stream's length and ends, a fill). The lanes themselves
//! write and read their sockets directly (lanes/pipe_io.rs).

use crate::resp::{self, RespError, Value};
use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[derive(Debug, thiserror::Error)]
pub enum RespConnError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Resp(#[from] RespError),
    #[error("the server closed the connection")]
    Closed,
    #[error("AUTH: {0}")]
    Auth(String),
}

/// Which server a RESP endpoint is, asked once per run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RespServer {
    /// Veltrix's Redis-protocol listener: `XADD` takes only `*` and assigns `<seq>-0`.
    Veltrix,
    /// Redis, or another server speaking its protocol (named as its `HELLO` says): `XADD`
    /// takes explicit ids.
    Other(String),
}

impl RespServer {
    pub fn name(&self) -> &str {
        match self {
            RespServer::Veltrix => "veltrix",
            RespServer::Other(name) => name,
        }
    }
}

pub struct RespConn {
    pub tcp: TcpStream,
    /// Read and not yet parsed.
    pub buf: BytesMut,
}

impl RespConn {
    /// Connect (TCP_NODELAY) and, with a token, `AUTH <token>` (Redis: the default user's
    /// password; Veltrix: a bearer token of `auth.tokens`).
    pub async fn connect(addr: &str, token: Option<&str>) -> Result<RespConn, RespConnError> {
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let mut c = RespConn {
            tcp,
            buf: BytesMut::with_capacity(64 << 10),
        };
        if let Some(t) = token
            && let Value::Error(e) = c.call(&[b"AUTH", t.as_bytes()]).await?
        {
            return Err(RespConnError::Auth(e));
        }
        Ok(c)
    }

    /// Send one command and read its reply.
    pub async fn call(&mut self, args: &[&[u8]]) -> Result<Value, RespConnError> {
        let mut out = Vec::new();
        resp::encode(args, &mut out);
        self.tcp.write_all(&out).await?;
        self.read().await
    }

    /// Read the next reply whole.
    pub async fn read(&mut self) -> Result<Value, RespConnError> {
        loop {
            if let Some((v, n)) = resp::parse_value(&self.buf)? {
                self.buf.advance(n);
                return Ok(v);
            }
            self.buf.reserve(64 << 10);
            if self.tcp.read_buf(&mut self.buf).await? == 0 {
                return Err(RespConnError::Closed);
            }
        }
    }

    /// Which server this is: `HELLO 2` answers a map whose `server` is `redis` (Redis 6 and
    /// later), `veltrix` (Veltrix), or another name; without `HELLO` (Redis before 6),
    /// `INFO server`, which Veltrix's listener answers with a `veltrix_version` line.
    /// `HELLO 2` keeps the connection on RESP2.
    pub async fn server(&mut self) -> Result<RespServer, RespConnError> {
        let hello = self.call(&[b"HELLO", b"2"]).await?;
        if let Some(name) = hello.field("server").and_then(Value::bytes) {
            let name = String::from_utf8_lossy(name).to_ascii_lowercase();
            return Ok(if name == "veltrix" {
                RespServer::Veltrix
            } else {
                RespServer::Other(name)
            });
        }
        let info = self.call(&[b"INFO", b"server"]).await?;
        let text = info
            .bytes()
            .map(String::from_utf8_lossy)
            .unwrap_or_default();
        Ok(if text.contains("veltrix_version:") {
            RespServer::Veltrix
        } else {
            RespServer::Other("redis".into())
        })
    }
}
