//! The route the nodes of a cluster ask each other on: `GET /v1/cluster/outcome`, what
//! applying one record did, for a write whose client asked for `X-Vx-Durability: applied`
//! on another node. It needs the `ingest` scope (the asking node passes its client's
//! token on), waits up to `wait_ms` (at most [`crate::cluster::WAIT`]) for the record to be applied,
//! and answers the outcome as JSON (200), 404 when it is too old to say, or 503 when this
//! node does not apply that partition or has not applied the record yet.

use crate::cluster::WAIT;
use crate::http::AppError;
use crate::http::openapi::schemas::{ErrorBody, Outcome};
use crate::http::params::Params;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::Uri;
use axum::http::header::RETRY_AFTER;
use axum::response::{IntoResponse, Response};
use std::time::Duration;
use vx_cluster::outcomes::Lookup;
use vx_cluster::txn::Topic;

pub use crate::cluster::OUTCOME;

/// What applying a record did
///
/// Asked by the node that took a write with `X-Vx-Durability: applied`, with its client's
/// token (docs/API.md §12.4). A single node answers 404.
#[utoipa::path(
    get,
    path = "/v1/cluster/outcome",
    operation_id = "cluster_outcome",
    tag = "cluster",
    params(
        ("topic" = String, Query, pattern = "^(streams|entities)$", description = "`streams` or `entities`"),
        ("partition" = u32, Query, description = "the partition"),
        ("offset" = u64, Query, description = "the record's offset"),
        ("wait_ms" = Option<u64>, Query, description = "how long to wait for it to be applied (at most 10 s)"),
    ),
    responses(
        (status = 200, description = "The outcome", body = Outcome),
        (status = 400, description = "`bad_request`: a missing or invalid parameter", body = ErrorBody),
        (status = 404, description = "`not_found`: not a cluster node, or applied too long ago to say", body = ErrorBody),
        (status = 503, description = "`not_ready`: this node does not apply the partition, or has not applied the record yet", body = ErrorBody),
    ),
)]
pub async fn outcome(State(state): State<AppState>, uri: Uri) -> Result<Response, AppError> {
    let params = Params::parse(&uri, &["topic", "partition", "offset", "wait_ms"])?;
    let Some(cluster) = state.cluster() else {
        return Err(AppError::not_found("not a cluster node"));
    };
    let topic = match params.get("topic") {
        Some("streams") => Topic::Streams,
        Some("entities") => Topic::Entities,
        other => {
            return Err(AppError::bad_request(format!(
                "topic must be streams or entities, not {other:?}"
            )));
        }
    };
    let number = |name: &str| -> Result<u64, AppError> {
        params
            .get(name)
            .ok_or_else(|| AppError::bad_request(format!("{name} is required")))?
            .parse()
            .map_err(|_| AppError::bad_request(format!("{name} is not a number")))
    };
    let partition = u32::try_from(number("partition")?)
        .map_err(|_| AppError::bad_request("partition is out of range"))?;
    let offset = number("offset")?;
    let wait = params
        .get("wait_ms")
        .and_then(|w| w.parse().ok())
        .map_or(WAIT, Duration::from_millis)
        .min(WAIT);
    let node = &cluster.node;
    let entities = topic == Topic::Entities;
    if !node.ownership().owns(topic, partition) {
        return Err(not_here(partition));
    }
    node.outcomes()
        .wait_for(wait, |o| o.is_applied(entities, partition, offset))
        .await;
    match node.outcomes().lookup(entities, partition, offset) {
        Lookup::Applied(o) => Ok(Json(o).into_response()),
        Lookup::Forgotten => Err(AppError::not_found(
            "applied too long ago to say what it did",
        )),
        Lookup::Pending => Err(not_here(partition)),
    }
}

fn not_here(partition: u32) -> AppError {
    AppError::new(
        vx_proto::ErrorCode::NotReady,
        format!("partition {partition} is not applied here (yet)"),
    )
    .with_header(RETRY_AFTER, 1)
}
