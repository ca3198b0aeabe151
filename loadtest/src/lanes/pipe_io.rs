//! The two pipelined protocols' connections, writers and readers: binary frames (ingest) and
//! RESP (kv; ingest as `XADD`, replay as `XRANGE`).

use super::pipe_types::{Answer, Pending, PipeError, PipeReader, PipeWriter};
use super::*;
use crate::ops::{RESP_SCAN_PAGE, encode_replay_resp};
use crate::resp::RangeReader;
use crate::resp_conn::RespConn;
use bytes::Buf;
use std::collections::VecDeque;

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
            let c = RespConn::connect(addr, token)
                .await
                .map_err(|e| fail(e.into()))?;
            let (rd, wr) = c.tcp.into_split();
            let expect = Arc::new(Mutex::new(VecDeque::new()));
            Ok(PipeConn::Resp(
                RespWriter {
                    wr,
                    out: Vec::new(),
                    next: 0,
                    source: None,
                    expect: expect.clone(),
                },
                RespReader {
                    rd,
                    buf: c.buf,
                    next: 0,
                    streams: false,
                    current: None,
                    expect,
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
                            bytes: None,
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

/// What a stream operation over RESP expects back, in the order sent: the writer pushes one
/// per operation before its bytes leave, the reader takes it when the answer begins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Expect {
    /// `XADD`: an entry id.
    Id,
    /// `replies` `XRANGE` replies; reply i's entries should be `<from + i × step>-0` on.
    Range { from: u64, step: u64, replies: u32 },
}

/// The RESP writer; it owns the lane's generator while connected: the kv mix, ingest (one
/// `XADD` per operation) or replay (`XRANGE` pages).
pub struct RespWriter {
    wr: OwnedWriteHalf,
    out: Vec<u8>,
    next: u64,
    pub(super) source: Option<LaneGen>,
    expect: Arc<Mutex<VecDeque<Expect>>>,
}

impl PipeWriter for RespWriter {
    fn op(&self) -> Op {
        match &self.source {
            Some(LaneGen::Kv(g)) => g.last_op(),
            Some(LaneGen::Replay(..)) => Op::Page,
            Some(LaneGen::Ingest(_)) => Op::Xadd,
            _ => Op::Get,
        }
    }

    fn queue(&mut self, started: Instant) -> Result<(u64, Pending), PipeError> {
        let n = self.next;
        let before = self.out.len();
        let pending = match self.source.as_mut() {
            Some(LaneGen::Kv(g)) => {
                let op = g.next_op();
                g.encode_resp(&op, &mut self.out);
                Pending {
                    op: op.op(),
                    started,
                    events: op.events(),
                    bytes: g.bytes_of(&op),
                }
            }
            Some(LaneGen::Ingest(g)) => {
                g.next_xadd(&mut self.out);
                self.expect.lock().push_back(Expect::Id);
                Pending {
                    op: Op::Xadd,
                    started,
                    events: 1,
                    bytes: (self.out.len() - before) as u64,
                }
            }
            Some(LaneGen::Replay(g, streams)) => {
                let op = g.next(streams);
                let (from, replies) = encode_replay_resp(&op, streams, &mut self.out);
                let step = u64::from(RESP_SCAN_PAGE);
                self.expect.lock().push_back(Expect::Range {
                    from,
                    step,
                    replies,
                });
                Pending {
                    op: match op {
                        ReplayOp::Page { .. } => Op::Page,
                        ReplayOp::Scan { .. } => Op::Scan,
                    },
                    started,
                    // From the answer.
                    events: 0,
                    bytes: 0,
                }
            }
            _ => {
                return Err(PipeError::Scenario(
                    "RESP carries the kv, ingest (XADD) and replay (XRANGE) scenarios only",
                ));
            }
        };
        self.next += 1;
        Ok((n, pending))
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

/// A stream operation whose answer is being read.
struct Current {
    expect: Expect,
    /// Replies read so far.
    replies: u32,
    range: RangeReader,
    events: u64,
    bytes: u64,
    /// The first failure among its replies; the others are still read.
    failed: Option<Answer>,
}

pub struct RespReader {
    rd: OwnedReadHalf,
    buf: BytesMut,
    next: u64,
    /// Stream operations (the lane's generator is not the kv mix): their answers are read as
    /// `expect` says. The kv mix reads one reply per operation and takes no lock.
    streams: bool,
    current: Option<Current>,
    /// What each stream operation expects, shared with the writer.
    expect: Arc<Mutex<VecDeque<Expect>>>,
}

impl RespReader {
    /// Read the answers of stream operations (ingest, replay) rather than the kv mix's.
    pub(super) fn streams(&mut self) {
        self.streams = true;
    }

    /// The next stream operation's answer, if what was read holds it whole.
    fn ready_stream(&mut self) -> Result<Option<(u64, Answer)>, PipeError> {
        loop {
            if self.current.is_none() {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                let Some(e) = self.expect.lock().pop_front() else {
                    return Err(PipeError::Unasked);
                };
                let from = match e {
                    Expect::Range { from, .. } => from,
                    Expect::Id => 0,
                };
                self.current = Some(Current {
                    expect: e,
                    replies: 0,
                    range: RangeReader::new(from),
                    events: 0,
                    bytes: 0,
                    failed: None,
                });
            }
            let Some(cur) = self.current.as_mut() else {
                return Ok(None);
            };
            match cur.expect {
                Expect::Id => {
                    let Some((reply, n)) = resp::parse(&self.buf)? else {
                        return Ok(None);
                    };
                    self.buf.advance(n);
                    let answer = match reply {
                        resp::Reply::Bulk(Some(_)) | resp::Reply::Simple(_) => Answer::Ok {
                            events: None,
                            bytes: None,
                        },
                        resp::Reply::Error(e) => error_answer(&e),
                        _ => Answer::Error("RESP XADD answered no entry id".into()),
                    };
                    return Ok(Some(self.finish(answer)));
                }
                Expect::Range {
                    from,
                    step,
                    replies,
                } => {
                    let (n, done) = cur.range.read(&self.buf)?;
                    self.buf.advance(n);
                    let Some(range) = done else {
                        return Ok(None);
                    };
                    cur.replies += 1;
                    match range {
                        resp::Range::Entries {
                            entries,
                            bytes,
                            unexpected,
                        } => {
                            cur.events += entries;
                            cur.bytes += bytes;
                            if unexpected > 0 && cur.failed.is_none() {
                                cur.failed = Some(Answer::Error(
                                    "RESP XRANGE answered entries other than the ids asked for (<seq>-0 in order)".into(),
                                ));
                            }
                        }
                        resp::Range::Error(e) => {
                            cur.failed.get_or_insert(error_answer(&e));
                        }
                        resp::Range::Other(line) => {
                            cur.failed.get_or_insert(Answer::Error(format!(
                                "RESP XRANGE answered {}",
                                line.chars().take(40).collect::<String>()
                            )));
                        }
                    }
                    if cur.replies < replies {
                        cur.range = RangeReader::new(
                            from.saturating_add(u64::from(cur.replies).saturating_mul(step)),
                        );
                        continue;
                    }
                    let answer = match cur.failed.take() {
                        Some(a) => a,
                        None => Answer::Ok {
                            events: Some(cur.events),
                            bytes: Some(cur.bytes),
                        },
                    };
                    return Ok(Some(self.finish(answer)));
                }
            }
        }
    }

    /// The current operation is answered.
    fn finish(&mut self, answer: Answer) -> (u64, Answer) {
        self.current = None;
        let key = self.next;
        self.next += 1;
        (key, answer)
    }
}

/// An error reply: `TRYAGAIN` is backpressure (Veltrix's, docs/RESP.md: refused, not an
/// error, with the pause it asks for), anything else an error labelled as
/// [`resp::error_label`] says.
fn error_answer(message: &str) -> Answer {
    if message.starts_with("TRYAGAIN") {
        Answer::Refused(resp::retry_after(message))
    } else {
        Answer::Error(resp::error_label(message))
    }
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
        if self.streams {
            return self.ready_stream();
        }
        let Some((reply, n)) = resp::parse(&self.buf)? else {
            return Ok(None);
        };
        self.buf.advance(n);
        let key = self.next;
        self.next += 1;
        let answer = match reply {
            resp::Reply::Error(e) => error_answer(&e),
            _ => Answer::Ok {
                events: None,
                bytes: None,
            },
        };
        Ok(Some((key, answer)))
    }
}
