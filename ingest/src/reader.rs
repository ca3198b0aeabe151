//! [`BodyReader`]: a body's chunks, decompressed, each counted against `ingest.max_body_bytes`
//! and the in-flight budget and waited for at most `ingest.body_timeout`. What every body
//! decoder of this crate reads through ([`crate::body`] for JSON, NDJSON and frames and for
//! whole bodies, [`crate::yaml`] for YAML).

use bytes::Bytes;
use futures_util::Stream;

use crate::encoding::{Decoded, Encoding};
use crate::{InflightPermit, IngestError, Limits, body_too_large};

/// A body's (decompressed) chunks, counted against the body limit and the in-flight budget.
pub(crate) struct BodyReader<S> {
    source: Decoded<S>,
    read: u64,
    max: u64,
    timeout: std::time::Duration,
}

impl<S, E> BodyReader<S>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    pub(crate) fn new(body: S, encoding: Encoding, limits: &Limits) -> Self {
        BodyReader {
            source: Decoded::new(body, encoding, limits.max_body_bytes),
            read: 0,
            max: limits.max_body_bytes,
            timeout: limits.body_timeout,
        }
    }

    /// The next chunk, once it is within the body limit and accounted in `permit` (which may
    /// wait for budget: that wait is the server's, not the client's, and is not timed).
    /// Waiting for the client is limited to `ingest.body_timeout` per chunk.
    pub(crate) async fn next(
        &mut self,
        permit: &mut InflightPermit,
    ) -> Result<Option<Bytes>, IngestError> {
        let next = tokio::time::timeout(self.timeout, self.source.next())
            .await
            .map_err(|_| IngestError::Timeout(self.timeout))?;
        let Some(chunk) = next? else {
            return Ok(None);
        };
        self.read = self.read.saturating_add(chunk.len() as u64);
        if self.read > self.max {
            return Err(body_too_large(self.max).into());
        }
        permit.grow(chunk.len() as u64).await;
        Ok(Some(chunk))
    }
}
