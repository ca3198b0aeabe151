//! One stream's metadata and events from its owner over HTTP (`GET /v1/streams/{stream}` and
//! `GET /v1/streams/{stream}/events`), for the readers that are not HTTP requests (the
//! Redis-protocol listener's stream commands; HTTP reads are forwarded whole by
//! `crate::http::cluster::forward`). Each request names this node as the forwarder, passes
//! the client's token on, and asks the owner to have applied the reader's minimum position
//! first (read-your-writes).

use super::Cluster;
pub use super::read::Owner;
use super::read::moving_to;
use crate::failure::Failure;
use vx_proto::ErrorCode;

/// What a stream's owner says of it: the members of `GET /v1/streams/{stream}` the readers
/// use.
#[derive(Clone, Copy, Debug, serde::Deserialize)]
pub struct StreamMeta {
    pub first_seq: u64,
    pub last_seq: u64,
    pub events: u64,
}

impl Cluster {
    /// A stream's metadata from its owner; `None` for an unknown (or deleted) stream.
    pub async fn owner_stream(
        &self,
        owner: &Owner<'_>,
        stream: &str,
    ) -> Result<Option<StreamMeta>, Failure> {
        let target = format!(
            "{}/v1/streams/{}",
            owner.url,
            crate::remote::segment(stream)
        );
        let Some(resp) = self.ask_owner(owner, target, None).await? else {
            return Ok(None);
        };
        let body = resp.bytes().await.map_err(|_| moving_to(owner.url))?;
        serde_json::from_slice(&body)
            .map(Some)
            .map_err(|e| Failure::new(ErrorCode::Internal, format!("a stream owner's answer: {e}")))
    }

    /// A stream's events `from..=to` (at most `limit`) from its owner, each line of its
    /// NDJSON answer (an event's canonical JSON) handed to `line` as it arrives, until
    /// `line` returns false. `Ok(false)` for an unknown stream.
    pub async fn owner_events(
        &self,
        owner: &Owner<'_>,
        stream: &str,
        (from, to, limit): (u64, u64, u64),
        line: &mut (dyn FnMut(&[u8]) -> bool + Send),
    ) -> Result<bool, Failure> {
        let mut target = format!(
            "{}/v1/streams/{}/events?from={from}&limit={limit}",
            owner.url,
            crate::remote::segment(stream)
        );
        if to < u64::MAX {
            target.push_str(&format!("&to={to}"));
        }
        let Some(mut resp) = self
            .ask_owner(owner, target, Some("application/x-ndjson"))
            .await?
        else {
            return Ok(false);
        };
        let mut partial: Vec<u8> = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|_| moving_to(owner.url))? {
            partial.extend_from_slice(&chunk);
            let mut start = 0;
            while let Some(n) = memchr::memchr(b'\n', &partial[start..]) {
                if !line(&partial[start..start + n]) {
                    return Ok(true);
                }
                start += n + 1;
            }
            partial.drain(..start);
        }
        if !partial.is_empty() {
            line(&partial);
        }
        Ok(true)
    }
}
