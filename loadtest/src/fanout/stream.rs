//! Before a fanout run: the stream to follow (its last seq, written first if it is new) and
//! enough file descriptors for every follower.

use crate::acks::parse_ack;
use crate::endpoint::Endpoint;
use crate::error::RunError;
use crate::http::{HttpConn, retry_pause, segment};
use crate::ops::IngestGen;
use crate::workload::Workload;
use bytes::Bytes;
use std::time::Duration;

/// Why the open-file limit cannot hold the run.
#[derive(Debug, thiserror::Error)]
pub enum NofileError {
    #[error(
        "fanout needs about {needed} open files (followers + connections + 64) but the hard limit is {hard}: raise it (ulimit -Hn, LimitNOFILE=) or spread the followers over several load hosts"
    )]
    HardLimit { needed: u64, hard: u64 },
    #[error(
        "fanout needs about {needed} open files; raising the soft limit to the hard one failed: {source} (ulimit -n {needed})"
    )]
    Raise { needed: u64, source: std::io::Error },
}

/// The stream's last seq (docs/API.md §5 `GET /v1/streams/{stream}`); an unknown stream gets one
/// event first, so that it exists and has a seq to follow from.
pub async fn last_seq_or_create(
    w: &Workload,
    ep: &Endpoint,
    stream: &str,
) -> Result<u64, RunError> {
    let prep = |e: String| RunError::Prepare(format!("fanout: {stream} at {ep}: {e}"));
    let timeout = Duration::from_secs_f64(w.timeout_s);
    let mut conn = HttpConn::connect(ep, w.token.as_deref()).await?;
    let path = format!("/v1/streams/{}", segment(stream));
    // One request, its timeout and its failure in the terms of the run.
    let mut call = async |method, path: &str, headers: &[(&'static str, &str)], body, late| {
        match tokio::time::timeout(timeout, conn.call(method, path, headers, body, true)).await {
            Ok(reply) => reply.map_err(|e| prep(e.to_string())),
            Err(_) => Err(prep(format!("no answer to {late}"))),
        }
    };
    let reply = call("GET", &path, &[], Bytes::new(), "GET").await?;
    match reply.status {
        200 => {
            return reply
                .body
                .as_ref()
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
                .and_then(|v| v["last_seq"].as_u64())
                .ok_or_else(|| {
                    prep("the stream's metadata has no last_seq (docs/API.md §5)".into())
                });
        }
        404 => {}
        _ => return Err(prep(format!("GET {path}: {}", reply.failure()))),
    }
    // With ids, the event's id must be new: a rerun's first event is not a retry of this one.
    let tag = format!(
        "fanout-start-{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0)
    );
    let mut g = IngestGen::new(w, u32::MAX, &tag)?;
    let body = Bytes::from(g.ndjson_for(stream, 1));
    let mut headers = vec![("content-type", "application/x-ndjson")];
    if let Some(d) = w.durability {
        headers.push(("x-vx-durability", d.as_str()));
    }
    loop {
        let reply = call(
            "POST",
            "/v1/events",
            &headers,
            body.clone(),
            "the first event's POST",
        )
        .await?;
        match reply.status {
            200 => {
                return reply
                    .body
                    .as_ref()
                    .and_then(|b| parse_ack(b, stream))
                    .map(|(_, last)| last)
                    .ok_or_else(|| {
                        prep("the ingest answer has no last_seq (docs/API.md §3)".into())
                    });
            }
            429 => tokio::time::sleep(retry_pause(reply.retry_after())).await,
            _ => {
                return Err(prep(format!(
                    "writing its first event: {}",
                    reply.failure()
                )));
            }
        }
    }
}

/// Followers and connections need a descriptor each: raise the soft limit to the hard one
/// (as the server does, through the same `vx_sys` call), and say what to do when even that is
/// too low.
pub fn raise_nofile(needed: u64) -> Result<(), NofileError> {
    let (_soft, hard) =
        vx_sys::raise_nofile_limit().map_err(|source| NofileError::Raise { needed, source })?;
    if hard < needed {
        return Err(NofileError::HardLimit { needed, hard });
    }
    Ok(())
}
