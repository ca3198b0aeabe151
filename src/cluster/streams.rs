//! One stream's metadata and events from its owner over HTTP (`GET /v1/streams/{stream}` and
//! `GET /v1/streams/{stream}/events`), for the readers that are not HTTP requests (the
//! Redis-protocol listener's stream commands; HTTP reads are forwarded whole by
//! `crate::http::cluster::forward`). Each request names this node as the forwarder, passes
//! the client's token on, and asks the owner to have applied the reader's minimum position
//! first (read-your-writes).

use super::read::{moving_to, owner_refused};
use super::{Cluster, FORWARDED, MIN_POSITION, WAIT};
use crate::failure::Failure;
use axum::http::HeaderValue;
use std::time::Duration;
use vx_cluster::position::Position;
use vx_proto::ErrorCode;

/// What a stream's owner says of it: the members of `GET /v1/streams/{stream}` the readers
/// use.
#[derive(Clone, Copy, Debug, serde::Deserialize)]
pub struct StreamMeta {
    pub first_seq: u64,
    pub last_seq: u64,
    pub events: u64,
}

/// Where a reader's requests go and what they carry.
pub struct Owner<'a> {
    pub url: &'a str,
    pub min: &'a Position,
    pub auth: Option<&'a HeaderValue>,
}

impl Cluster {
    fn owner_get(&self, owner: &Owner<'_>, target: String) -> reqwest::RequestBuilder {
        let mut req = self
            .client()
            .get(target)
            .header(FORWARDED, self.node_header())
            .timeout(WAIT + Duration::from_secs(2));
        if !owner.min.is_empty() {
            req = req.header(MIN_POSITION, owner.min.to_string());
        }
        if let Some(a) = owner.auth {
            req = req.header(axum::http::header::AUTHORIZATION, a.clone());
        }
        self.forwarded
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        req
    }

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
        let resp = self
            .owner_get(owner, target)
            .send()
            .await
            .map_err(|_| moving_to(owner.url))?;
        match resp.status().as_u16() {
            200 => {}
            404 => return Ok(None),
            status => {
                let body = resp.text().await.unwrap_or_default();
                return Err(owner_refused(status, &body));
            }
        }
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
        let mut resp = self
            .owner_get(owner, target)
            .header(axum::http::header::ACCEPT, "application/x-ndjson")
            .send()
            .await
            .map_err(|_| moving_to(owner.url))?;
        match resp.status().as_u16() {
            200 => {}
            404 => return Ok(false),
            status => {
                let body = resp.text().await.unwrap_or_default();
                return Err(owner_refused(status, &body));
            }
        }
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
