//! YAML bodies on a bounded pool of blocking decoders (docs/API.md §3: "YAML is decoded on a bounded
//! blocking pool so that it cannot starve the other formats").
//!
//! The YAML parser pulls its input from an `io::Read`, so each YAML body gets a thread from
//! tokio's blocking pool, fed by the request's task through a channel of
//! [`CHANNEL_CHUNKS`] chunks; the task still reads the body chunk by chunk, under the body
//! limit and the in-flight budget, exactly as for the other formats.
//!
//! Two bounds keep YAML from crowding out the rest:
//! - **CPU slots**: at most `max(1, cores / 2)` decoders parse at once. A decoder holds a slot
//!   only while it has input to parse and gives it back while it waits for the network, so a
//!   slow upload does not keep other YAML bodies from being parsed.
//! - **Threads**: at most `max(8, 4 × slots)` YAML bodies are being decoded at once (each
//!   holds a blocking thread, parsing or waiting); more wait their turn before any of their
//!   body is read, so slow YAML uploads cannot use up the blocking pool that replay reads use.
//!
//! When the decoder stops early (a bad event), the channel closes and the task stops reading
//! the body at once; when the body fails (over the limit, client gone), the task answers at
//! once and the decoder ends at the closed channel.

use std::io::{self, Read};
use std::sync::{Arc, Condvar, LazyLock, Mutex, PoisonError};

use bytes::{Buf, Bytes};
use futures_util::Stream;
use tokio::sync::{Semaphore, mpsc};
use vx_proto::Batch;
use vx_proto::decode::decode_yaml;

use crate::reader::BodyReader;
use crate::{InflightPermit, IngestError};

/// Chunks buffered between the task reading the body and the decoder.
pub const CHANNEL_CHUNKS: usize = 4;

/// The pool's bounds, sized once from the machine's cores.
struct Pool {
    threads: Arc<Semaphore>,
    cpu: Arc<CpuSlots>,
}

static POOL: LazyLock<Pool> = LazyLock::new(|| {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let slots = (cores / 2).max(1);
    Pool {
        threads: Arc::new(Semaphore::new((4 * slots).max(8))),
        cpu: Arc::new(CpuSlots::new(slots)),
    }
});

/// How many YAML decoders may parse at once (the CPU slots).
pub fn parallelism() -> usize {
    POOL.cpu.total
}

/// A counting semaphore for blocking threads (the decoders take and give back slots from
/// inside the blocking pool, where an async semaphore would need a runtime handle).
struct CpuSlots {
    free: Mutex<usize>,
    freed: Condvar,
    total: usize,
}

impl CpuSlots {
    fn new(total: usize) -> CpuSlots {
        CpuSlots {
            free: Mutex::new(total),
            freed: Condvar::new(),
            total,
        }
    }

    /// Wait for a slot.
    fn take(self: &Arc<Self>) -> CpuSlot {
        // The critical sections cannot panic, so a poisoned lock is still consistent.
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        while *free == 0 {
            free = self
                .freed
                .wait(free)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *free -= 1;
        CpuSlot(Arc::clone(self))
    }
}

/// A held CPU slot, given back when dropped.
struct CpuSlot(Arc<CpuSlots>);

impl Drop for CpuSlot {
    fn drop(&mut self) {
        let mut free = self.0.free.lock().unwrap_or_else(PoisonError::into_inner);
        *free += 1;
        drop(free);
        self.0.freed.notify_one();
    }
}

/// The decoder's view of the body: chunks from the channel, holding a CPU slot while there
/// is input to parse.
struct ChannelReader {
    rx: mpsc::Receiver<Bytes>,
    chunk: Bytes,
    cpu: Arc<CpuSlots>,
    slot: Option<CpuSlot>,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.chunk.is_empty() {
            match self.rx.try_recv() {
                Ok(chunk) => self.chunk = chunk,
                Err(mpsc::error::TryRecvError::Disconnected) => return Ok(0),
                Err(mpsc::error::TryRecvError::Empty) => {
                    // Waiting for the network: let another decoder parse meanwhile.
                    self.slot = None;
                    match self.rx.blocking_recv() {
                        Some(chunk) => self.chunk = chunk,
                        None => return Ok(0),
                    }
                }
            }
        }
        if self.slot.is_none() {
            self.slot = Some(self.cpu.take());
        }
        let n = buf.len().min(self.chunk.len());
        if let (Some(dst), Some(src)) = (buf.get_mut(..n), self.chunk.get(..n)) {
            dst.copy_from_slice(src);
        }
        self.chunk.advance(n);
        Ok(n)
    }
}

/// Decode the YAML body `body` into a batch on the pool; see the module docs.
pub(crate) async fn decode<S, E>(
    body: &mut BodyReader<S>,
    permit: &mut InflightPermit,
    max_event_bytes: usize,
    max_body_bytes: u64,
    now_ms: i64,
) -> Result<Batch, IngestError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let thread = Arc::clone(&POOL.threads)
        .acquire_owned()
        .await
        .map_err(|_| IngestError::Internal("the YAML decoder pool is closed".into()))?;
    let (tx, rx) = mpsc::channel::<Bytes>(CHANNEL_CHUNKS);
    let reader = ChannelReader {
        rx,
        chunk: Bytes::new(),
        cpu: Arc::clone(&POOL.cpu),
        slot: None,
    };
    let mut decoder = tokio::task::spawn_blocking(move || {
        let _thread = thread;
        let mut batch = Batch::new();
        decode_yaml(reader, max_event_bytes, max_body_bytes, now_ms, &mut batch).map(|()| batch)
    });
    let pump = async move {
        while let Some(chunk) = body.next(permit).await? {
            if tx.send(chunk).await.is_err() {
                // The decoder stopped: its answer says why.
                break;
            }
        }
        Ok::<(), IngestError>(())
    };
    let first = tokio::select! {
        decoded = &mut decoder => Ok(decoded),
        pumped = pump => Err(pumped),
    };
    let decoded = match first {
        Ok(decoded) => decoded,
        Err(pumped) => {
            // The body ended (the channel is closed, so the decoder sees its end) or failed,
            // which is the answer whatever the decoder makes of a cut-off body.
            pumped?;
            decoder.await
        }
    };
    match decoded {
        Ok(Ok(batch)) => Ok(batch),
        Ok(Err(e)) => Err(IngestError::Input(e)),
        Err(e) => Err(IngestError::Internal(format!(
            "the YAML decoder failed: {e}"
        ))),
    }
}
