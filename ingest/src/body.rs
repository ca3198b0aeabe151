//! Reading one request body into a batch: chunk by chunk (decompressed first if the body is
//! encoded), each chunk accounted in the in-flight budget before it is decoded, the body
//! limit checked as bytes arrive, and events decoded as soon as they are complete. The whole
//! body is never buffered. JSON and NDJSON (and frames) are decoded here, on the task reading
//! the body; YAML is handed to [`crate::yaml`]'s bounded pool of blocking decoders.

use bytes::Bytes;
use futures_util::Stream;
use std::time::{Duration, Instant};
use vx_proto::Batch;
use vx_proto::decode::Decoder;

use crate::encoding::Encoding;
use crate::reader::BodyReader;
use crate::{Format, InflightBudget, InflightPermit, IngestError, Limits};

/// Decode the body `body` in `format` into a batch. `now_ms` is the `ts` of events without one.
///
/// Each chunk is counted in `budget` once read and before it is decoded; while the budget is
/// spent this waits, leaving the rest of the body unread. A body over `max_body_bytes` is
/// refused (413) by the chunk that crosses the limit. The returned permit holds the request's
/// budget: drop it once the batch has been admitted or refused. On error the budget is
/// released at once.
pub async fn decode_body<S, E>(
    body: S,
    format: Format,
    limits: &Limits,
    budget: &InflightBudget,
    now_ms: i64,
) -> Result<(Batch, InflightPermit), IngestError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    decode_encoded_body(body, format, Encoding::Identity, limits, budget, now_ms).await
}

/// [`decode_body`] for a body sent with a `Content-Encoding`: it is decompressed as it
/// arrives, and the decompressed size is what `max_body_bytes` and the budget count (the
/// compressed size is held to `max_body_bytes` too). Bad compressed data is 400 `malformed`.
pub async fn decode_encoded_body<S, E>(
    body: S,
    format: Format,
    encoding: Encoding,
    limits: &Limits,
    budget: &InflightBudget,
    now_ms: i64,
) -> Result<(Batch, InflightPermit), IngestError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let mut decoding = Duration::ZERO;
    decode_encoded_body_timed(
        body,
        format,
        encoding,
        limits,
        budget,
        now_ms,
        &mut decoding,
    )
    .await
}

/// [`decode_encoded_body`], adding to `decoding` the time spent decoding (the rest of its
/// time went to waiting for the body, its budget and its decompression). A YAML body is
/// decoded on the blocking pool while it arrives: all its time counts as decoding.
pub async fn decode_encoded_body_timed<S, E>(
    body: S,
    format: Format,
    encoding: Encoding,
    limits: &Limits,
    budget: &InflightBudget,
    now_ms: i64,
    decoding: &mut Duration,
) -> Result<(Batch, InflightPermit), IngestError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let began = Instant::now();
    let mut permit = budget.begin();
    let mut body = BodyReader::new(body, encoding, limits);
    let Some(mut decoder) = Decoder::new(format, limits.max_event_bytes, now_ms) else {
        let batch = crate::yaml::decode(
            &mut body,
            &mut permit,
            limits.max_event_bytes,
            limits.max_body_bytes,
            now_ms,
        )
        .await?;
        *decoding += began.elapsed();
        return Ok((batch, permit));
    };
    let mut batch = Batch::new();
    while let Some(chunk) = body.next(&mut permit).await? {
        let t = Instant::now();
        decoder.feed(&chunk, &mut batch)?;
        *decoding += t.elapsed();
        // Decoding is CPU work on a runtime worker: let other tasks in between chunks.
        tokio::task::consume_budget().await;
    }
    let t = Instant::now();
    decoder.finish(&mut batch)?;
    *decoding += t.elapsed();
    Ok((batch, permit))
}

/// Read a whole body (decompressed from `encoding`) into memory, for formats that cannot be
/// decoded before their end (an OTLP protobuf message: a field may come last). The same
/// `max_body_bytes` limit (413), `body_timeout` (408), bad-compression answer (400) and
/// in-flight budget accounting as [`decode_encoded_body`]; the permit holds the body's bytes.
pub async fn read_encoded_body<S, E>(
    body: S,
    encoding: Encoding,
    limits: &Limits,
    budget: &InflightBudget,
) -> Result<(Bytes, InflightPermit), IngestError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let mut permit = budget.begin();
    let mut body = BodyReader::new(body, encoding, limits);
    let mut chunks: Vec<Bytes> = Vec::new();
    while let Some(chunk) = body.next(&mut permit).await? {
        chunks.push(chunk);
    }
    // One chunk (the usual small body) is passed on without a copy; more are joined once,
    // into a buffer of exactly their size.
    let whole = match chunks.as_slice() {
        [] => Bytes::new(),
        // A reference count, not a copy.
        [one] => one.clone(),
        _ => {
            let mut buf = bytes::BytesMut::with_capacity(chunks.iter().map(Bytes::len).sum());
            for c in &chunks {
                buf.extend_from_slice(c);
            }
            buf.freeze()
        }
    };
    Ok((whole, permit))
}
