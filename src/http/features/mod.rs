//! The feature store's routes (docs/API.md §6): `GET`/`PUT`/`DELETE /v1/features/{entity}`,
//! `DELETE /v1/features/{entity}/{name}` and `POST /v1/features/query`.
//!
//! Reads are answered from the in-memory tables on the async worker (a shard's read lock and
//! a JSON rendering, no I/O). Writes are log records admitted like events (`X-Vx-Durability`,
//! 429 under backpressure, 507 past `storage.max_feature_bytes`), applied before they are
//! answered, so a read after a 200 sees them. Every response carries `X-Vx-Shard`.

mod render;

use super::AppError;
use super::openapi::schemas::{
    DurabilityAsked, EntityFeatures, ErrorBody, FeatureQuery, FeatureResults, FeatureValues,
    FeatureWritten,
};
use super::params::Params;
use super::streams::{engine, with_shard};
use crate::failure::Failure;
use crate::state::AppState;
use crate::write::{Change, Features as Write};
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use render::write_entity;
use serde::Deserialize;
use vx_proto::ErrorCode;
use vx_storage::features::{self as f, FeatureValue, Features, ReadAt};
use vx_sys::now_ms;

/// Most entities one batch query may name.
pub const QUERY_MAX_ENTITIES: usize = 10_000;
/// Largest body of a PUT and of a batch query.
const PUT_MAX_BODY: usize = 1 << 20;
const QUERY_MAX_BODY: usize = 8 << 20;

fn json(status: StatusCode, body: Vec<u8>) -> Response {
    let mut resp = (status, body).into_response();
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

fn invalid(field: &str, message: String) -> AppError {
    let mut e = AppError::new(ErrorCode::InvalidEvent, message);
    e.details.field = Some(field.to_string());
    e
}

fn too_large(limit: &str, max: usize, message: String) -> AppError {
    let mut e = AppError::new(ErrorCode::TooLarge, message);
    e.details.limit = Some(limit.to_string());
    e.details.max = Some(max as u64);
    e
}

/// The `{entity}` path segment, percent-decoded, checked against docs/API.md §2's entity rule.
fn entity_of(path: Result<Path<String>, PathRejection>) -> Result<String, AppError> {
    let Path(entity) = path.map_err(|e| AppError::bad_request(e.body_text()))?;
    check_entity(&entity)?;
    Ok(entity)
}

fn check_entity(entity: &str) -> Result<(), AppError> {
    if entity.is_empty() || !vx_proto::rules::valid_entity(entity) {
        return Err(AppError::bad_request(format!(
            "entity {entity:?} must be 1-256 bytes of UTF-8 without control characters"
        )));
    }
    Ok(())
}

/// Read a whole body of at most `max` bytes; past it, 413 naming `limit`.
async fn body_bytes(body: Body, max: usize, limit: &str) -> Result<Vec<u8>, AppError> {
    use futures_util::StreamExt;
    let mut out = Vec::new();
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk =
            chunk.map_err(|e| AppError::malformed(format!("reading the body failed: {e}")))?;
        if out.len() + chunk.len() > max {
            return Err(too_large(
                limit,
                max,
                format!("the body is larger than {max} bytes"),
            ));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

fn check_json_type(headers: &HeaderMap) -> Result<(), AppError> {
    let Some(ct) = headers.get(CONTENT_TYPE) else {
        return Ok(());
    };
    let ct = ct.to_str().unwrap_or("");
    let essence = ct.split(';').next().unwrap_or("").trim();
    if essence.eq_ignore_ascii_case("application/json") {
        Ok(())
    } else {
        Err(AppError::unsupported_media_type(
            format!("content type {ct:?} is not supported here; send application/json"),
            &["application/json"],
        ))
    }
}

fn names_param(params: &Params) -> Result<Option<Vec<&str>>, AppError> {
    let Some(v) = params.get("names") else {
        return Ok(None);
    };
    let names: Vec<&str> = v.split(',').filter(|n| !n.is_empty()).collect();
    if names.len() > f::MAX_PUT_NAMES {
        return Err(AppError::bad_request(format!(
            "names lists at most {} features",
            f::MAX_PUT_NAMES
        )));
    }
    Ok(Some(names))
}

/// An entity's features
///
/// Read from the in-memory tables (docs/API.md §6.2); reflects every write acknowledged
/// before it.
#[utoipa::path(
    get,
    path = "/v1/features/{entity}",
    operation_id = "get_features",
    tag = "features",
    params(
        ("entity" = String, Path, min_length = 1, max_length = 256, pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]+$", description = "the entity: 1–256 bytes of UTF-8 without control characters, one percent-encoded segment"),
        ("names" = Option<String>, Query, description = "a comma list of at most 1024 feature names: only these (unknown names are left out)"),
    ),
    responses(
        (status = 200, description = "The entity's features", body = EntityFeatures, headers(("X-Vx-Shard" = u32, description = "the entity's shard"))),
        (status = 400, description = "`bad_request`: the entity, or a parameter", body = ErrorBody),
        (status = 404, description = "`not_found`: unknown entity", body = ErrorBody, headers(("X-Vx-Shard" = u32, description = "the entity's shard"))),
    ),
)]
pub async fn get(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    uri: Uri,
) -> Result<Response, AppError> {
    let entity = entity_of(path)?;
    let params = Params::parse(&uri, &["names"])?;
    let names = names_param(&params)?;
    let router = engine(&state)?;
    let features = router.store().features();
    let shard = features.shard_of(&entity);
    let mut out = Vec::with_capacity(256);
    let at = ReadAt { now_ms: now_ms() };
    state.metrics().feature_reads.inc();
    if write_entity(features, &entity, names.as_deref(), at, true, &mut out) {
        Ok(with_shard(json(StatusCode::OK, out), shard))
    } else {
        Ok(with_shard(
            AppError::not_found(format!("unknown entity {entity:?}")).into_response(),
            shard,
        ))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QueryBody {
    entities: Vec<String>,
    #[serde(default)]
    names: Option<Vec<String>>,
}

/// Features of many entities
///
/// `{"entities": [...], "names": [...]?}` → results in request order, `null` for an unknown
/// entity (docs/API.md §6.3).
#[utoipa::path(
    post,
    path = "/v1/features/query",
    operation_id = "query_features",
    tag = "features",
    request_body(content = FeatureQuery, content_type = "application/json", description = "at most 8 MiB, 10000 entities, 1024 names"),
    responses(
        (status = 200, description = "One result per entity", body = FeatureResults),
        (status = 400, description = "`malformed`: not JSON; `bad_request`: a query parameter", body = ErrorBody),
        (status = 413, description = "`too_large`: `query.body_bytes`, `query.entities` or `query.names`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`: send application/json (or no Content-Type)", body = ErrorBody),
        (status = 422, description = "`invalid_event`: JSON of another shape (`field`: `entities`)", body = ErrorBody),
    ),
)]
pub async fn query(
    State(state): State<AppState>,
    headers: HeaderMap,
    uri: Uri,
    body: Body,
) -> Result<Response, AppError> {
    Params::parse(&uri, &[])?;
    check_json_type(&headers)?;
    let bytes = body_bytes(body, QUERY_MAX_BODY, "query.body_bytes").await?;
    let q: QueryBody = serde_json::from_slice(&bytes).map_err(|e| {
        if e.is_syntax() || e.is_eof() {
            AppError::malformed(format!("the body is not JSON: {e}"))
        } else {
            invalid(
                "entities",
                format!("expected {{\"entities\": [...], \"names\": [...]}}: {e}"),
            )
        }
    })?;
    if q.entities.len() > QUERY_MAX_ENTITIES {
        return Err(too_large(
            "query.entities",
            QUERY_MAX_ENTITIES,
            format!(
                "{} entities in one query; at most {QUERY_MAX_ENTITIES}",
                q.entities.len()
            ),
        ));
    }
    if let Some(n) = &q.names
        && n.len() > f::MAX_PUT_NAMES
    {
        return Err(too_large(
            "query.names",
            f::MAX_PUT_NAMES,
            format!(
                "{} names in one query; at most {}",
                n.len(),
                f::MAX_PUT_NAMES
            ),
        ));
    }
    let router = engine(&state)?;
    let features = router.store().features();
    let names: Option<Vec<&str>> = q
        .names
        .as_ref()
        .map(|n| n.iter().map(String::as_str).collect());
    let at = ReadAt { now_ms: now_ms() };
    // Cluster mode: entities another node owns are asked of it, in one query per node.
    let remote = match state.cluster() {
        Some(cluster) if !headers.contains_key(crate::cluster::FORWARDED) => {
            let auth = headers.get(axum::http::header::AUTHORIZATION);
            super::cluster::query::remote(cluster, &q.entities, q.names.as_deref(), auth).await?
        }
        _ => Default::default(),
    };
    let mut out = Vec::with_capacity(64 + q.entities.len() * 96);
    out.extend_from_slice(b"{\"results\":[");
    for (i, e) in q.entities.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        if let Some(r) = remote.get(&i) {
            out.extend_from_slice(r.get().as_bytes());
        } else if !write_entity(features, e, names.as_deref(), at, false, &mut out) {
            out.extend_from_slice(b"null");
        }
    }
    out.extend_from_slice(b"]}");
    state
        .metrics()
        .feature_reads
        .inc_by(q.entities.len() as u64);
    Ok(json(StatusCode::OK, out))
}

/// Whether a PUT (or the Redis protocol's `HSET`) may set feature `name`: a valid name that is
/// not a declared aggregate (those are computed from events; a DELETE resets them).
pub(crate) fn check_name(features: &Features, name: &str) -> Result<(), Failure> {
    let invalid = |message: String| {
        let mut f = Failure::new(ErrorCode::InvalidEvent, message);
        f.details.field = Some(name.to_string());
        f
    };
    if !f::valid_name(name) {
        return Err(invalid(format!(
            "feature name {name:?} must be 1-128 bytes of [A-Za-z0-9_.:-]"
        )));
    }
    if features.is_declared(name) {
        return Err(invalid(format!(
            "feature {name:?} is a declared aggregate: it is computed from events and cannot be set (DELETE resets it)"
        )));
    }
    Ok(())
}

/// Whether feature `name` may hold `v` (`None`: deleted): the built-ins hold integers.
pub(crate) fn check_value(name: &str, v: Option<&FeatureValue>) -> Result<(), Failure> {
    if (name == f::EVENTS || name == f::LAST_TS) && !matches!(v, None | Some(FeatureValue::Int(_)))
    {
        let mut f = Failure::new(
            ErrorCode::InvalidEvent,
            format!("feature {name:?} is built in: it holds an integer (or null to delete it)"),
        );
        f.details.field = Some(name.to_string());
        return Err(f);
    }
    Ok(())
}

/// A PUT body's value: number, string or boolean; `null` deletes the feature.
fn value_of(name: &str, v: serde_json::Value) -> Result<Option<FeatureValue>, AppError> {
    use serde_json::Value as J;
    Ok(match v {
        J::Null => None,
        J::Bool(b) => Some(FeatureValue::Bool(b)),
        J::Number(n) => Some(match n.as_i64() {
            Some(i) => FeatureValue::Int(i),
            None => match n.as_f64() {
                Some(x) if x.is_finite() => FeatureValue::Float(x),
                _ => {
                    return Err(invalid(
                        name,
                        format!("feature {name:?}: not a finite number"),
                    ));
                }
            },
        }),
        J::String(s) => {
            if s.len() > f::MAX_STRING_VALUE {
                let mut e = too_large(
                    "features.max_string_bytes",
                    f::MAX_STRING_VALUE,
                    format!("feature {name:?}: a string of {} bytes", s.len()),
                );
                e.details.field = Some(name.to_string());
                return Err(e);
            }
            Some(FeatureValue::Str(s.into()))
        }
        J::Array(_) | J::Object(_) => {
            return Err(invalid(
                name,
                format!("feature {name:?}: values are numbers, strings, booleans or null"),
            ));
        }
    })
}

/// Set features
///
/// `{"name": value, …}`: set each (a `null` deletes that feature), durable like events and
/// applied before the answer (docs/API.md §6.4). A PUT wins over everything earlier in the log.
#[utoipa::path(
    put,
    path = "/v1/features/{entity}",
    operation_id = "put_features",
    tag = "features",
    params(
        ("entity" = String, Path, min_length = 1, max_length = 256, pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]+$", description = "the entity: 1–256 bytes of UTF-8 without control characters, one percent-encoded segment"),
        ("X-Vx-Durability" = Option<DurabilityAsked>, Header, description = "as for writes (docs/API.md §3.5)"),
    ),
    request_body(content = FeatureValues, content_type = "application/json", description = "at most 1 MiB and 1024 names"),
    responses(
        (status = 200, description = "Written", body = FeatureWritten, headers(
            ("X-Vx-Shard" = u32, description = "the entity's shard"),
            ("X-Vx-Position" = String, description = "cluster mode: the write's position"))),
        (status = 400, description = "`malformed`: not JSON; `bad_request`: the entity, a parameter or a header", body = ErrorBody),
        (status = 413, description = "`too_large`: `features.max_put_bytes`, `features.max_put_names` or `features.max_string_bytes`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`: send application/json (or no Content-Type)", body = ErrorBody),
        (status = 422, description = "`invalid_event`: not an object, a bad name or value, a declared aggregate (`field`)", body = ErrorBody),
        (status = 429, description = "`backpressure`", body = ErrorBody, headers(
            ("Retry-After" = u64, description = "whole seconds, at least 1"),
            ("X-Vx-Retry-After-Ms" = u64, description = "the same delay in milliseconds"))),
        (status = 507, description = "`storage_full`: the log cannot be written, or past `storage.max_feature_bytes`", body = ErrorBody),
    ),
)]
pub async fn put(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    uri: Uri,
    body: Body,
) -> Result<Response, AppError> {
    let entity = entity_of(path)?;
    Params::parse(&uri, &[])?;
    check_json_type(&headers)?;
    let asked = super::ingest::durability(&headers, state.cluster().is_some())?;
    let bytes = body_bytes(body, PUT_MAX_BODY, "features.max_put_bytes").await?;
    let map: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes).map_err(|e| {
            if e.is_syntax() || e.is_eof() {
                AppError::malformed(format!("the body is not JSON: {e}"))
            } else {
                invalid("", format!("expected a JSON object of feature values: {e}"))
            }
        })?;
    if map.len() > f::MAX_PUT_NAMES {
        return Err(too_large(
            "features.max_put_names",
            f::MAX_PUT_NAMES,
            format!(
                "{} features in one PUT; at most {}",
                map.len(),
                f::MAX_PUT_NAMES
            ),
        ));
    }
    let router = engine(&state)?;
    let features = router.store().features();
    let shard = features.shard_of(&entity);
    let mut set = Vec::with_capacity(map.len());
    for (name, v) in map {
        check_name(features, &name)?;
        let v = value_of(&name, v)?;
        check_value(&name, v.as_ref())?;
        set.push((name, v));
    }
    let writes = state.writes().ok_or_else(AppError::starting)?;
    let written = writes
        .features(Write {
            entity: entity.clone(),
            change: Change::Put(set),
            asked,
            auth: super::ingest::auth(&headers),
        })
        .await;
    Ok(with_shard(outcome(&state, &entity, written), shard))
}

/// The answer to a feature write, as both modes give it.
fn outcome(
    state: &AppState,
    entity: &str,
    written: Result<crate::write::FeaturesWritten, crate::write::Refusal>,
) -> Response {
    let w = match written {
        Ok(w) => w,
        Err(refused) => return refused.into_app().into_response(),
    };
    state.metrics().feature_writes.inc();
    let position = w.position.as_ref().map(ToString::to_string);
    let mut body = serde_json::json!({
        "entity": entity,
        "set": w.set,
        "deleted": w.deleted,
        "durability": w.durability.as_str(),
    });
    if let Some(p) = &position {
        body["position"] = serde_json::Value::String(p.clone());
    }
    let mut resp = json(StatusCode::OK, body.to_string().into_bytes());
    if let Some(p) = position.and_then(|p| axum::http::HeaderValue::from_str(&p).ok()) {
        resp.headers_mut().insert(crate::cluster::POSITION, p);
    }
    resp
}

/// Delete an entity
///
/// Every feature of the entity (docs/API.md §6.5); 404 if unknown, with nothing written.
#[utoipa::path(
    delete,
    path = "/v1/features/{entity}",
    operation_id = "delete_entity",
    tag = "features",
    params(
        ("entity" = String, Path, min_length = 1, max_length = 256, pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]+$", description = "the entity: 1–256 bytes of UTF-8 without control characters, one percent-encoded segment"),
        ("X-Vx-Durability" = Option<DurabilityAsked>, Header, description = "as for writes (docs/API.md §3.5)"),
    ),
    responses(
        (status = 200, description = "Written", body = FeatureWritten, headers(
            ("X-Vx-Shard" = u32, description = "the entity's shard"),
            ("X-Vx-Position" = String, description = "cluster mode: the write's position"))),
        (status = 400, description = "`bad_request`: the entity, a parameter or a header", body = ErrorBody),
        (status = 404, description = "`not_found`: unknown entity", body = ErrorBody, headers(("X-Vx-Shard" = u32, description = "the entity's shard"))),
        (status = 429, description = "`backpressure`", body = ErrorBody, headers(
            ("Retry-After" = u64, description = "whole seconds, at least 1"),
            ("X-Vx-Retry-After-Ms" = u64, description = "the same delay in milliseconds"))),
        (status = 507, description = "`storage_full`: the log cannot be written, or past `storage.max_feature_bytes`", body = ErrorBody),
    ),
)]
pub async fn delete_entity(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Response, AppError> {
    let entity = entity_of(path)?;
    Params::parse(&uri, &[])?;
    delete(state, entity, None, &headers).await
}

/// Delete a feature
///
/// One feature (a declared aggregate starts over; docs/API.md §6.5); 404 if the entity or the
/// feature is unknown, with nothing written.
#[utoipa::path(
    delete,
    path = "/v1/features/{entity}/{name}",
    operation_id = "delete_feature",
    tag = "features",
    params(
        ("entity" = String, Path, min_length = 1, max_length = 256, pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]+$", description = "the entity: 1–256 bytes of UTF-8 without control characters, one percent-encoded segment"),
        ("name" = String, Path, min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_.:-]+$", description = "the feature: 1–128 bytes of [A-Za-z0-9_.:-]"),
        ("X-Vx-Durability" = Option<DurabilityAsked>, Header, description = "as for writes (docs/API.md §3.5)"),
    ),
    responses(
        (status = 200, description = "Written", body = FeatureWritten, headers(
            ("X-Vx-Shard" = u32, description = "the entity's shard"),
            ("X-Vx-Position" = String, description = "cluster mode: the write's position"))),
        (status = 400, description = "`bad_request`: the entity or name, a parameter or a header", body = ErrorBody),
        (status = 404, description = "`not_found`: unknown entity or feature", body = ErrorBody, headers(("X-Vx-Shard" = u32, description = "the entity's shard"))),
        (status = 429, description = "`backpressure`", body = ErrorBody, headers(
            ("Retry-After" = u64, description = "whole seconds, at least 1"),
            ("X-Vx-Retry-After-Ms" = u64, description = "the same delay in milliseconds"))),
        (status = 507, description = "`storage_full`: the log cannot be written, or past `storage.max_feature_bytes`", body = ErrorBody),
    ),
)]
pub async fn delete_one(
    State(state): State<AppState>,
    path: Result<Path<(String, String)>, PathRejection>,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Response, AppError> {
    let Path((entity, name)) = path.map_err(|e| AppError::bad_request(e.body_text()))?;
    check_entity(&entity)?;
    if !f::valid_name(&name) {
        return Err(AppError::bad_request(format!(
            "feature name {name:?} must be 1-128 bytes of [A-Za-z0-9_.:-]"
        )));
    }
    Params::parse(&uri, &[])?;
    delete(state, entity, Some(name), &headers).await
}

async fn delete(
    state: AppState,
    entity: String,
    name: Option<String>,
    headers: &HeaderMap,
) -> Result<Response, AppError> {
    let asked = super::ingest::durability(headers, state.cluster().is_some())?;
    let writes = state.writes().ok_or_else(AppError::starting)?;
    let shard = writes.router().store().features().shard_of(&entity);
    let written = writes
        .features(Write {
            entity: entity.clone(),
            change: Change::Delete(vec![(entity.clone(), name)]),
            asked,
            auth: super::ingest::auth(headers),
        })
        .await;
    Ok(with_shard(outcome(&state, &entity, written), shard))
}
