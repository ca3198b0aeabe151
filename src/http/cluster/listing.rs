//! `GET /v1/streams` in cluster mode: every owner lists the streams of its own shards, and
//! the node that was asked merges their pages in name order (bytewise, as one node's
//! listing is). Each node is asked with the client's query; what one node cannot answer
//! fails the listing (503), since a page without it would silently miss streams.

use crate::cluster::{Cluster, FORWARDED};
use crate::http::AppError;
use axum::http::HeaderValue;
use axum::http::header::{AUTHORIZATION, RETRY_AFTER};
use vx_storage::StreamInfo;

/// One node's page: its streams and whether it has more.
pub type Page = (Vec<StreamInfo>, Option<String>);

#[derive(serde::Deserialize)]
struct PageJson {
    streams: Vec<StreamJson>,
    next: Option<String>,
}

#[derive(serde::Deserialize)]
struct StreamJson {
    stream: String,
    first_seq: u64,
    last_seq: u64,
    events: u64,
    bytes: u64,
    first_ts: Option<i64>,
    last_ts: Option<i64>,
}

/// The pages of every other node of the cluster.
pub async fn pages(
    cluster: &Cluster,
    query: Option<&str>,
    auth: Option<&HeaderValue>,
) -> Result<Vec<Page>, AppError> {
    let me = &cluster.node.settings.node;
    let mut out = Vec::new();
    for owner in cluster.node.members().owners() {
        if &owner.node == me {
            continue;
        }
        let url = match query {
            Some(q) => format!("{}/v1/streams?{q}", owner.url),
            None => format!("{}/v1/streams", owner.url),
        };
        let mut req = cluster
            .client()
            .get(url)
            .header(FORWARDED, cluster.node_header())
            .timeout(crate::cluster::WAIT);
        if let Some(a) = auth {
            req = req.header(AUTHORIZATION, a.clone());
        }
        let unreachable = |why: String| {
            AppError::new(
                vx_proto::ErrorCode::NotReady,
                format!("node {} did not list its streams: {why}", owner.node),
            )
            .with_header(RETRY_AFTER, 1)
        };
        let resp = req.send().await.map_err(|e| unreachable(e.to_string()))?;
        if !resp.status().is_success() {
            return Err(unreachable(format!("HTTP {}", resp.status())));
        }
        let page: PageJson = resp.json().await.map_err(|e| unreachable(e.to_string()))?;
        out.push((
            page.streams
                .into_iter()
                .map(|s| StreamInfo {
                    stream: s.stream,
                    shard: 0,
                    first_seq: s.first_seq,
                    last_seq: s.last_seq,
                    events: s.events,
                    bytes: s.bytes,
                    first_ts: s.first_ts,
                    last_ts: s.last_ts,
                })
                .collect(),
            page.next,
        ));
    }
    Ok(out)
}

/// The first `limit` streams of all pages in name order; `next` when any node has more.
pub fn merge(local: Page, others: Vec<Page>, limit: usize) -> Page {
    let mut more = local.1.is_some();
    let mut all = local.0;
    for (streams, next) in others {
        more |= next.is_some();
        all.extend(streams);
    }
    all.sort_by(|a, b| a.stream.as_bytes().cmp(b.stream.as_bytes()));
    // During a move two nodes can both list a stream: once is enough.
    all.dedup_by(|a, b| a.stream == b.stream);
    if all.len() > limit {
        more = true;
        all.truncate(limit);
    }
    let next = if more {
        all.last().map(|s| s.stream.clone())
    } else {
        None
    };
    (all, next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str) -> StreamInfo {
        StreamInfo {
            stream: name.into(),
            shard: 0,
            first_seq: 1,
            last_seq: 1,
            events: 1,
            bytes: 1,
            first_ts: None,
            last_ts: None,
        }
    }

    fn names(p: &Page) -> Vec<&str> {
        p.0.iter().map(|s| s.stream.as_str()).collect()
    }

    #[test]
    fn pages_merge_in_name_order() {
        let page = |ns: &[&str], next: bool| -> Page {
            (
                ns.iter().map(|n| info(n)).collect(),
                next.then(|| ns.last().map(|s| s.to_string()).unwrap_or_default()),
            )
        };
        let m = merge(page(&["a", "d"], false), vec![page(&["b", "c"], false)], 10);
        assert_eq!(names(&m), ["a", "b", "c", "d"]);
        assert_eq!(m.1, None);
        let m = merge(page(&["a", "d"], false), vec![page(&["b", "c"], false)], 3);
        assert_eq!(names(&m), ["a", "b", "c"]);
        assert_eq!(m.1.as_deref(), Some("c"));
        let m = merge(page(&["a"], true), vec![page(&["a", "b"], false)], 10);
        assert_eq!(names(&m), ["a", "b"]);
        assert_eq!(m.1.as_deref(), Some("b"));
    }
}
