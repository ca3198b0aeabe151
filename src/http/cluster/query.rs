//! `POST /v1/features/query` in cluster mode: the entities whose shard another node owns are
//! asked of that node, one query per node (their results come back as they were encoded
//! there); the rest are read here. An entity whose shard is moving makes the query wait
//! (bounded) for it, then fail with 503 — a result is never made up.

use crate::cluster::{Cluster, FORWARDED, WAIT};
use crate::http::AppError;
use axum::http::HeaderValue;
use axum::http::header::{AUTHORIZATION, RETRY_AFTER};
use serde_json::value::RawValue;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;
use vx_cluster::Route;
use vx_cluster::txn::Topic;

#[derive(serde::Deserialize)]
struct Results {
    results: Vec<Box<RawValue>>,
}

/// The results of the entities (by their index in the query) that other nodes own.
pub async fn remote(
    cluster: &Cluster,
    entities: &[String],
    names: Option<&[String]>,
    auth: Option<&HeaderValue>,
) -> Result<HashMap<usize, Box<RawValue>>, AppError> {
    let shards = cluster.node.shards();
    let deadline = tokio::time::Instant::now() + WAIT;
    // Owner URL → the indices of its entities.
    let mut by_owner: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, e) in entities.iter().enumerate() {
        let shard = vx_proto::shard::shard_of(e, shards);
        loop {
            match cluster.node.route(Topic::Entities, shard) {
                Route::Local => break,
                Route::Remote(o) => {
                    by_owner.entry(o.url).or_default().push(i);
                    break;
                }
                Route::CatchingUp | Route::Unknown => {
                    if tokio::time::Instant::now() >= deadline {
                        return Err(AppError::new(
                            vx_proto::ErrorCode::NotReady,
                            format!("shard {shard} of entity {e:?} is moving between nodes"),
                        )
                        .with_header(RETRY_AFTER, 1));
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
    let mut out = HashMap::new();
    for (url, idx) in by_owner {
        let body = serde_json::json!({
            "entities": idx.iter().map(|&i| &entities[i]).collect::<Vec<_>>(),
            "names": names,
        });
        let mut req = cluster
            .client()
            .post(format!("{url}/v1/features/query"))
            .header(FORWARDED, cluster.node_header())
            .header("content-type", "application/json")
            .body(body.to_string())
            .timeout(WAIT);
        if let Some(a) = auth {
            req = req.header(AUTHORIZATION, a.clone());
        }
        let failed = |why: String| {
            AppError::new(
                vx_proto::ErrorCode::NotReady,
                format!("the node at {url} did not answer the query: {why}"),
            )
            .with_header(RETRY_AFTER, 1)
        };
        let resp = req.send().await.map_err(|e| failed(e.to_string()))?;
        if !resp.status().is_success() {
            return Err(failed(format!("HTTP {}", resp.status())));
        }
        let bytes = resp.bytes().await.map_err(|e| failed(e.to_string()))?;
        let r: Results = serde_json::from_slice(&bytes).map_err(|e| failed(e.to_string()))?;
        if r.results.len() != idx.len() {
            return Err(failed("another number of results".into()));
        }
        out.extend(idx.into_iter().zip(r.results));
    }
    Ok(out)
}
