//! Reading one request body into a batch: chunk by chunk, each chunk accounted in the
//! in-flight budget before it is decoded, the body limit checked as bytes arrive, and events
//! decoded as soon as they are complete. The whole body is never buffered.

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use vx_proto::decode::Decoder;
use vx_proto::{Batch, InputError};

use crate::{Format, InflightBudget, InflightPermit, IngestError, LIMIT_BODY_BYTES, Limits};

/// Decode the body `body` in `format` into a batch. `now_ms` is the `ts` of events without one.
///
/// Each chunk is counted in `budget` once read and before it is decoded; while the budget is
/// spent this waits, leaving the rest of the body unread. A body over `max_body_bytes` is
/// refused (413) by the chunk that crosses the limit. The returned permit holds the request's
/// budget: drop it once the batch has been admitted or refused. On error the budget is
/// released at once.
pub async fn decode_body<S, E>(
    mut body: S,
    format: Format,
    limits: &Limits,
    budget: &InflightBudget,
    now_ms: i64,
) -> Result<(Batch, InflightPermit), IngestError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let mut permit = budget.begin();
    let mut decoder = Decoder::new(format, limits.max_event_bytes, now_ms);
    let mut batch = Batch::new();
    let mut read: u64 = 0;
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| IngestError::Body(e.to_string()))?;
        read = read.saturating_add(chunk.len() as u64);
        if read > limits.max_body_bytes {
            let max = limits.max_body_bytes;
            return Err(InputError::too_large(
                LIMIT_BODY_BYTES,
                max,
                format!("request body is larger than {max} bytes (ingest.max_body_bytes)"),
            )
            .into());
        }
        permit.grow(chunk.len() as u64).await;
        decoder.feed(&chunk, &mut batch)?;
        // Decoding is CPU work on a runtime worker: let other tasks in between chunks.
        tokio::task::consume_budget().await;
    }
    decoder.finish(&mut batch)?;
    Ok((batch, permit))
}
