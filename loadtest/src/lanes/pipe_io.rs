//! The two pipelined protocols' connections, writers and readers: binary frames (ingest) and
//! RESP (kv).

use super::pipe_types::{Answer, Pending, PipeError, PipeReader, PipeWriter};
use super::*;
use bytes::Buf;

/// A connected pipelined connection, split.
pub enum PipeConn {
    Frames(FramesWriter, FramesReader),
    Resp(RespWriter, RespReader),
}

/// Open a frames or RESP connection.
pub async fn connect_pipe(ep: &Endpoint, token: Option<&str>) -> Result<PipeConn, PipeError> {
    let fail = |cause: PipeError| PipeError::Connect {
        endpoint: ep.to_string(),
        cause: Box::new(cause),
    };
    let opts = vx_client::Options {
        token: token.map(str::to_string),
        ..vx_client::Options::default()
    };
    match ep {
        Endpoint::Frames(addr) => {
            let c = vx_client::Client::connect_tcp(addr.as_str(), &opts)
                .await
                .map_err(|e| fail(e.into()))?;
            let (tx, rx) = c.split();
            Ok(PipeConn::Frames(FramesWriter::new(tx), FramesReader { rx }))
        }
        Endpoint::FramesUnix(path) => {
            let c = vx_client::Client::connect_unix(path, &opts)
                .await
                .map_err(|e| fail(e.into()))?;
            let (tx, rx) = c.split();
            Ok(PipeConn::Frames(FramesWriter::new(tx), FramesReader { rx }))
        }
        Endpoint::Resp(addr) => {
            let tcp = TcpStream::connect(addr.as_str())
                .await
                .map_err(|e| fail(e.into()))?;
            tcp.set_nodelay(true).map_err(|e| fail(e.into()))?;
            let (rd, wr) = tcp.into_split();
            Ok(PipeConn::Resp(
                RespWriter {
                    wr,
                    out: Vec::new(),
                    next: 0,
                    source: None,
                },
                RespReader {
                    rd,
                    buf: BytesMut::with_capacity(64 << 10),
                    next: 0,
                },
            ))
        }
        other => Err(PipeError::NotPipelined(other.to_string())),
    }
}

/// The frames writer; it owns an ingest generator while connected.
pub struct FramesWriter {
    tx: vx_client::Sender,
    pub(super) source: Option<IngestGen>,
    pub(super) durability: Option<vx_client::Durability>,
}

impl FramesWriter {
    fn new(tx: vx_client::Sender) -> FramesWriter {
        FramesWriter {
            tx,
            source: None,
            durability: None,
        }
    }
}

impl PipeWriter for FramesWriter {
    fn op(&self) -> Op {
        Op::Ingest
    }

    fn queue(&mut self, started: Instant) -> Result<(u64, Pending), PipeError> {
        let g = self
            .source
            .as_mut()
            .ok_or(PipeError::Scenario("frames carry the ingest scenario only"))?;
        let batch = g.next_batch();
        let wire = batch.wire();
        let opts = vx_client::BatchOptions {
            durability: self.durability,
            expected_last_seq: None,
        };
        let id = self.tx.queue_batch(&wire, opts)?;
        Ok((
            id,
            Pending {
                op: Op::Ingest,
                started,
                events: batch.len() as u64,
                bytes: 0,
            },
        ))
    }

    async fn flush(&mut self) -> Result<(), PipeError> {
        Ok(self.tx.flush().await?)
    }

    async fn close(&mut self) {
        let _ = self.tx.close().await;
    }
}

pub struct FramesReader {
    rx: vx_client::Receiver,
}

impl PipeReader for FramesReader {
    async fn next(&mut self) -> Result<(u64, Answer), PipeError> {
        loop {
            match self.rx.next_reply().await? {
                vx_client::Reply::Ack(a) => {
                    return Ok((
                        a.request_id,
                        Answer::Ok {
                            events: Some(a.accepted + a.duplicates),
                        },
                    ));
                }
                vx_client::Reply::Rejected(e) if e.code == "backpressure" => {
                    return Ok((
                        e.request_id,
                        Answer::Refused(e.retry_after_ms.map(Duration::from_millis)),
                    ));
                }
                vx_client::Reply::Rejected(e) => {
                    return Ok((e.request_id, Answer::Error(format!("frames {}", e.code))));
                }
                vx_client::Reply::Pong(_) => continue,
            }
        }
    }
}

/// The RESP writer; it owns a kv generator while connected.
pub struct RespWriter {
    wr: OwnedWriteHalf,
    out: Vec<u8>,
    next: u64,
    pub(super) source: Option<KvGen>,
}

impl PipeWriter for RespWriter {
    fn op(&self) -> Op {
        Op::Get
    }

    fn queue(&mut self, started: Instant) -> Result<(u64, Pending), PipeError> {
        let g = self
            .source
            .as_mut()
            .ok_or(PipeError::Scenario("RESP carries the kv scenario only"))?;
        let op = g.next_op();
        g.encode_resp(&op, &mut self.out);
        let n = self.next;
        self.next += 1;
        Ok((
            n,
            Pending {
                op: op.op(),
                started,
                events: op.events(),
                bytes: g.bytes_of(&op),
            },
        ))
    }

    async fn flush(&mut self) -> Result<(), PipeError> {
        if !self.out.is_empty() {
            self.wr.write_all(&self.out).await?;
            self.out.clear();
        }
        Ok(())
    }

    async fn close(&mut self) {
        let _ = self.wr.shutdown().await;
    }
}

pub struct RespReader {
    rd: OwnedReadHalf,
    buf: BytesMut,
    next: u64,
}

impl PipeReader for RespReader {
    async fn next(&mut self) -> Result<(u64, Answer), PipeError> {
        loop {
            if let Some(a) = self.ready()? {
                return Ok(a);
            }
            if self.buf.capacity() - self.buf.len() < 4096 {
                self.buf.reserve(64 << 10);
            }
            if self.rd.read_buf(&mut self.buf).await? == 0 {
                return Err(PipeError::Closed);
            }
        }
    }

    fn ready(&mut self) -> Result<Option<(u64, Answer)>, PipeError> {
        let Some((reply, n)) = resp::parse(&self.buf)? else {
            return Ok(None);
        };
        self.buf.advance(n);
        let key = self.next;
        self.next += 1;
        let answer = match reply {
            resp::Reply::Error(e) => Answer::Error(format!(
                "RESP {}",
                e.split_whitespace().next().unwrap_or("error")
            )),
            _ => Answer::Ok { events: None },
        };
        Ok(Some((key, answer)))
    }
}
