//! The OpenAPI 3.1 document of the HTTP API, `GET /v1/openapi.json`, and the route table the
//! router is built from.
//!
//! Each handler carries a `#[utoipa::path]` attribute (its path, parameters, headers, bodies and
//! statuses) and [`routes`] registers the handlers through `utoipa_axum::routes!`, which
//! builds the axum routes and the document's paths from the same attributes: a route cannot be
//! served without being documented, nor documented under another path or method. What every
//! route gets from the middleware rather than from its handler (auth scopes and their 401/403,
//! the readiness gate's 503, `X-Vx-Queue-Fill`, cluster mode's read headers) is added by
//! [`rules::apply`] from the same functions the middleware decides with.
//!
//! The document is built once, serialized pretty with a final newline, and served as those
//! bytes; `docs/openapi.json` is a copy that a test keeps equal to them (regenerate it with
//! `VX_BLESS=1 cargo test -p veltrix --lib http::openapi`).

pub mod path;
mod rules;
pub mod schemas;

use super::{cluster, features, ingest, ops, otlp, replay, status, streams};
use crate::state::AppState;
use axum::http::HeaderValue;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use std::sync::LazyLock;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use path::PATH;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Veltrix",
        description = "Event-stream ingestion: ingest, replay and live follow of streams, \
                       per-entity features, operations. The reference is docs/API.md; every \
                       error has the one shape `Error`.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    tags(
        (name = "ingest", description = "Writing events (docs/API.md §3, §7.5)"),
        (name = "streams", description = "Stream metadata, replay and live follow (docs/API.md §5)"),
        (name = "features", description = "Per-entity features (docs/API.md §6)"),
        (name = "operations", description = "Health, metrics, status, this document (docs/API.md §7)"),
        (name = "cluster", description = "Between the nodes of a cluster (docs/API.md §12.4)"),
    ),
)]
struct Base;

/// The route table: every route the HTTP API serves, with its handler and its documentation.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(Base::openapi())
        .routes(routes!(ingest::ingest))
        .routes(routes!(otlp::traces))
        .routes(routes!(otlp::logs))
        .routes(routes!(streams::list))
        .routes(routes!(streams::one, streams::delete))
        .routes(routes!(replay::events))
        .routes(routes!(replay::ws))
        .routes(routes!(features::query))
        .routes(routes!(
            features::get,
            features::put,
            features::delete_entity
        ))
        .routes(routes!(features::delete_one))
        .routes(routes!(ops::healthz))
        .routes(routes!(ops::readyz))
        .routes(routes!(ops::metrics))
        .routes(routes!(status::status))
        .routes(routes!(status::index))
        .routes(routes!(status::asset))
        .routes(routes!(cluster::internal::outcome))
        .routes(routes!(openapi_json))
}

/// The document as served: pretty JSON with a final newline, built once.
pub fn document() -> &'static str {
    static DOC: LazyLock<String> = LazyLock::new(|| {
        let mut doc = routes().into_openapi();
        rules::apply(&mut doc);
        // Serializing the document's maps and strings cannot fail; should it, serve an
        // empty object rather than panic.
        let text = serde_json::to_string_pretty(&doc).unwrap_or_else(|_| "{}".into());
        unsigned_formats(text) + "\n"
    });
    &DOC
}

/// utoipa spells the unsigned formats of `non_strict_integers` in kebab case (`u-int64`); the
/// formats' usual names are `uint64` and `uint32`. Replaced as whole JSON tokens: inside a
/// string their quotes would be escaped.
fn unsigned_formats(text: String) -> String {
    ["8", "16", "32", "64"].iter().fold(text, |t, bits| {
        t.replace(
            &format!("\"format\": \"u-int{bits}\""),
            &format!("\"format\": \"uint{bits}\""),
        )
    })
}

/// This document
///
/// The OpenAPI 3.1 document of every route, parameter, header, status and error shape,
/// generated from the code. Needs no token.
#[utoipa::path(
    get,
    path = "/v1/openapi.json",
    operation_id = "openapi",
    tag = "operations",
    responses((status = 200, description = "The document", body = schemas::AnyObject)),
)]
pub async fn openapi_json() -> Response {
    let mut resp = document().into_response();
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

#[cfg(test)]
mod tests;
