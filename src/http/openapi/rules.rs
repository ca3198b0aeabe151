//! What every route's documentation gets from the middleware rather than from its handler,
//! decided by the functions the middleware itself decides with, so that the document cannot
//! drift from them:
//! - auth (`guard::required_scope`): the bearer and Basic schemes with the route's scope, and
//!   401 (with `WWW-Authenticate`) and 403;
//! - the readiness gate (`guard::always_open`): 503 `not_ready` with `Retry-After`;
//! - `X-Vx-Queue-Fill` on every answer of the ingest routes (`guard::reports_queue_fill`);
//! - cluster mode's reads (`cluster::forward::forwards`): `X-Vx-Min-Position` and `X-Vx-Node`;
//! - the OTLP routes (`otlp::is_otlp`): errors in OTLP's shape, JSON or protobuf;
//! - response headers are marked required, but for the few that only some answers carry.

use super::schemas::{
    Binary, ContentEncoding, Durability, DurabilityAsked, ErrorBody, Event, OtlpErrorBody,
    Timestamp, count, string,
};
use crate::config::Scope;
use crate::http::{cluster, guard, otlp};
use axum::http::Method;
use utoipa::openapi::header::{Header, HeaderBuilder};
use utoipa::openapi::path::{Operation, ParameterBuilder, ParameterIn};
use utoipa::openapi::response::{Response, ResponseBuilder};
use utoipa::openapi::schema::{Schema, SchemaType, Type};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{Content, OpenApi, Ref, RefOr, Required};
use utoipa::{PartialSchema, ToSchema};

const BEARER: &str = "bearer";
const BASIC: &str = "basic";

/// Response headers that only some answers carry: all others are marked required.
const CONDITIONAL_HEADERS: [&str; 3] = ["X-Vx-Position", "X-Vx-Node", "X-Vx-Next-Seq"];

pub fn apply(doc: &mut OpenApi) {
    let components = doc.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        BEARER,
        SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
    );
    components.add_security_scheme(
        BASIC,
        SecurityScheme::Http(Http::new(HttpAuthScheme::Basic)),
    );
    // utoipa collects the schemas of bodies, not of parameters: those, the ones named by
    // the rules below, and `Event`, which `EventsJson` refers to.
    for schema in [
        (ErrorBody::name(), ErrorBody::schema()),
        (OtlpErrorBody::name(), OtlpErrorBody::schema()),
        (Event::name(), Event::schema()),
        (Durability::name(), Durability::schema()),
        (DurabilityAsked::name(), DurabilityAsked::schema()),
        (ContentEncoding::name(), ContentEncoding::schema()),
        (Timestamp::name(), Timestamp::schema()),
    ] {
        components.schemas.insert(schema.0.into_owned(), schema.1);
    }
    for (path, item) in doc.paths.paths.iter_mut() {
        let ops = [
            (Method::GET, &mut item.get),
            (Method::POST, &mut item.post),
            (Method::PUT, &mut item.put),
            (Method::DELETE, &mut item.delete),
        ];
        for (method, op) in ops {
            if let Some(op) = op {
                route(path, &method, op);
            }
        }
    }
}

/// One operation's middleware answers, parameters and headers.
fn route(path: &str, method: &Method, op: &mut Operation) {
    if let Some(scope) = guard::required_scope(method, path) {
        secured(path, scope, op);
    }
    if !guard::always_open(path) {
        add(
            op,
            503,
            "`not_ready`: starting or draining (docs/API.md §1.3)",
        );
    }
    parameters(path, method, op);
    for (status, resp) in op.responses.responses.iter_mut() {
        if let RefOr::T(resp) = resp {
            response(path, method, status, resp);
        }
    }
}

/// Cluster mode's `X-Vx-Min-Position` on the reads it forwards; no parameter is nullable.
fn parameters(path: &str, method: &Method, op: &mut Operation) {
    if cluster::forward::forwards(method, path) {
        let param = ParameterBuilder::new()
            .name("X-Vx-Min-Position")
            .parameter_in(ParameterIn::Header)
            .required(Required::False)
            .description(Some(
                "cluster mode: wait (at most 10 s) until the owner applied this position \
                 (docs/API.md §12.2); ignored by a single node",
            ))
            .schema(Some(string()))
            .build();
        op.parameters
            .get_or_insert_with(Vec::new)
            .push(RefOr::T(param));
    }
    for param in op.parameters.iter_mut().flatten() {
        if let RefOr::T(param) = param
            && let Some(schema) = param.schema.as_mut()
        {
            not_null(schema);
        }
    }
}

/// One answer's headers from the middleware, OTLP's error shapes, and `required` on the
/// headers every such answer carries.
fn response(path: &str, method: &Method, status: &str, resp: &mut Response) {
    if guard::reports_queue_fill(path) {
        resp.headers.insert(
            "X-Vx-Queue-Fill".into(),
            header(
                string().pattern(Some("^(?:0\\.[0-9]{2}|1\\.00)$")),
                "the fill (0.00–1.00) of the fullest shard the request touched",
            ),
        );
    }
    if cluster::forward::forwards(method, path) && status.starts_with('2') {
        resp.headers.insert(
            "X-Vx-Node".into(),
            header(string(), "cluster mode: the node that answered"),
        );
    }
    // 503 `not_ready` always says when to come back; so does 429 where documented.
    if status == "503" || resp.headers.contains_key("Retry-After") {
        resp.headers.insert(
            "Retry-After".into(),
            header(count().minimum(Some(1)), "whole seconds, at least 1"),
        );
    }
    if otlp::is_otlp(path) && !status.starts_with('2') {
        resp.content = [
            (
                "application/json".to_string(),
                RefOr::T(content_ref::<OtlpErrorBody>()),
            ),
            (
                "application/x-protobuf".to_string(),
                RefOr::T(content_ref::<Binary>()),
            ),
        ]
        .into_iter()
        .collect();
    }
    for (name, h) in resp.headers.iter_mut() {
        if let RefOr::T(h) = h
            && !CONDITIONAL_HEADERS.contains(&name.as_str())
        {
            // utoipa's Header has no `required` field (OpenAPI's Header Object has): it
            // goes in as its one extension-map entry, serialized among the fields.
            h.extensions
                .get_or_insert_with(Default::default)
                .insert("required".into(), true.into());
        }
    }
}

/// The schemes with the route's scope, and the answers of auth. The status page's own
/// routes challenge with Basic (a browser prompts), the others with Bearer; both schemes
/// are accepted everywhere (docs/API.md §8).
fn secured(path: &str, scope: Scope, op: &mut Operation) {
    let scope = crate::auth::scope_name(scope);
    op.security = Some(vec![
        SecurityRequirement::new(BEARER, [scope]),
        SecurityRequirement::new(BASIC, [scope]),
    ]);
    let challenge = if crate::http::status::PAGE_ROUTES.contains(&path) {
        "`Basic realm=\"veltrix\", charset=\"UTF-8\"`"
    } else {
        "`Bearer`"
    };
    add(op, 401, "`unauthorized`: no token, or an unknown one");
    if let Some(RefOr::T(r)) = op.responses.responses.get_mut("401") {
        r.headers.insert(
            "WWW-Authenticate".into(),
            header(string(), &format!("the challenge: {challenge}")),
        );
    }
    add(
        op,
        403,
        &format!("`forbidden`: the token lacks the `{scope}` scope"),
    );
}

/// An error answer in the one shape, unless the handler documented that status itself.
fn add(op: &mut Operation, status: u16, description: &str) {
    op.responses
        .responses
        .entry(status.to_string())
        .or_insert_with(|| {
            RefOr::T(
                ResponseBuilder::new()
                    .description(description)
                    .content("application/json", content_ref::<ErrorBody>())
                    .build(),
            )
        });
}

fn content_ref<T: ToSchema>() -> Content {
    Content::new(Some(Ref::from_schema_name(T::name())))
}

fn header(
    schema: impl Into<RefOr<utoipa::openapi::schema::Schema>>,
    description: &str,
) -> RefOr<Header> {
    RefOr::T(
        HeaderBuilder::new()
            .schema(Some(schema))
            .description(Some(description))
            .build(),
    )
}

/// A parameter is left out by being absent, never sent as `null`: utoipa makes an `Option`
/// parameter's schema nullable, this takes the `null` away again.
fn not_null(schema: &mut RefOr<Schema>) {
    let RefOr::T(s) = schema else { return };
    match s {
        Schema::Object(o) => {
            if let SchemaType::Array(types) = &mut o.schema_type {
                types.retain(|t| *t != Type::Null);
                if let [one] = types.as_slice() {
                    o.schema_type = SchemaType::Type(one.clone());
                }
            }
        }
        Schema::OneOf(one_of) => {
            one_of.items.retain(|i| {
                !matches!(i, RefOr::T(Schema::Object(o))
                    if o.schema_type == SchemaType::Type(Type::Null))
            });
            if one_of.items.len() == 1 {
                *schema = one_of.items.remove(0);
            }
        }
        _ => {}
    }
}
