#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::document;
use crate::config::Config;
use crate::state::AppState;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use tower::ServiceExt;

const CHECKED_IN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.json");

fn doc() -> Value {
    serde_json::from_str(document()).unwrap()
}

/// docs/openapi.json is the document the server serves, byte for byte. `VX_BLESS=1` writes
/// it instead (after a change to a route's documentation).
#[test]
fn checked_in_document_is_current() {
    if std::env::var_os("VX_BLESS").is_some() {
        std::fs::write(CHECKED_IN, document()).unwrap();
    }
    let file = std::fs::read_to_string(CHECKED_IN).unwrap_or_default();
    assert!(
        file == document(),
        "docs/openapi.json is not the served document: regenerate it with \
         `VX_BLESS=1 cargo test -p veltrix --lib http::openapi`"
    );
}

/// The routes the router serves, `path → methods`, read from its `Debug` form: axum has no
/// API that lists them, and this reads the router itself, not the table it was built from.
fn served() -> BTreeMap<String, BTreeSet<String>> {
    let router = crate::http::app(AppState::new(&Config::default()));
    let text = format!("{router:?}");
    // The matched routes; the fallbacks come after.
    let text = &text[..text
        .find("fallback_router")
        .expect("axum's Router Debug form")];
    let mut methods = BTreeMap::new();
    for part in text.split("RouteId(").skip(1) {
        let Some((id, rest)) = part.split_once(')') else {
            continue;
        };
        if let Some(allow) = rest.split("allow_header: Bytes(b\"").nth(1) {
            let allow = allow.split('"').next().unwrap_or("");
            methods.insert(
                id.to_string(),
                allow.split(',').map(str::to_string).collect(),
            );
        }
    }
    let paths = &text[text.rfind("paths: {").expect("the router's paths")..];
    let mut out = BTreeMap::new();
    for part in paths.split("RouteId(").skip(1) {
        let (id, rest) = part.split_once("): \"").unwrap();
        let path = rest.split('"').next().unwrap().to_string();
        let m: BTreeSet<String> = methods.get(id).cloned().unwrap_or_default();
        out.insert(path, m);
    }
    assert!(
        out.len() > 10 && out.values().all(|m| !m.is_empty()),
        "axum's Debug form changed: {out:?}"
    );
    out
}

/// The document's routes, `path → methods` (a `GET` also answers `HEAD`, axum's rule).
fn documented() -> BTreeMap<String, BTreeSet<String>> {
    let doc = doc();
    let mut out = BTreeMap::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        let mut m = BTreeSet::new();
        for method in item.as_object().unwrap().keys() {
            m.insert(method.to_uppercase());
            if method == "get" {
                m.insert("HEAD".to_string());
            }
        }
        out.insert(path.clone(), m);
    }
    out
}

#[test]
fn every_route_served_is_documented_and_every_documented_route_served() {
    assert_eq!(served(), documented());
}

/// The same from the outside: on every documented path, each method is answered 405 exactly
/// when the document does not list it.
#[tokio::test]
async fn methods_the_document_lists_are_the_methods_answered() {
    let state = AppState::new(&Config::default());
    state.force_ready_without_router();
    for (path, methods) in documented() {
        let uri = path.replace(['{', '}'], "");
        for method in ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH"] {
            let req = Request::builder()
                .method(Method::from_bytes(method.as_bytes()).unwrap())
                .uri(&uri)
                .body(Body::empty())
                .unwrap();
            let status = crate::http::app(state.clone())
                .oneshot(req)
                .await
                .unwrap()
                .status();
            assert_eq!(
                status == StatusCode::METHOD_NOT_ALLOWED,
                !methods.contains(method),
                "{method} {path}: {status}"
            );
        }
    }
}

/// Every `$ref` names a schema the document holds.
#[test]
fn every_reference_resolves() {
    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(r)) = m.get("$ref") {
                    out.push(r.clone());
                }
                m.values().for_each(|v| refs(v, out));
            }
            Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }
    let doc = doc();
    assert_eq!(doc["openapi"], "3.1.0");
    let mut found = Vec::new();
    refs(&doc, &mut found);
    assert!(!found.is_empty());
    for r in found {
        let name = r.strip_prefix("#/components/schemas/").unwrap_or(&r);
        assert!(
            doc["components"]["schemas"].get(name).is_some(),
            "{r} does not resolve"
        );
    }
}

/// What the middleware adds is in the document: the scope of each route as the auth check
/// decides it, 401/403 where a scope is needed, 503 where the readiness gate applies.
#[test]
fn scopes_and_middleware_answers_are_documented() {
    let doc = doc();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let m = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let scope = crate::http::guard::required_scope(&m, path).map(crate::auth::scope_name);
            let documented = op["security"][0]["bearer"][0].as_str();
            assert_eq!(documented, scope, "{method} {path}");
            let responses = &op["responses"];
            assert_eq!(
                responses.get("401").is_some(),
                scope.is_some(),
                "{method} {path}"
            );
            if !crate::http::guard::always_open(path) {
                assert!(
                    responses["503"]["headers"]["Retry-After"]["required"] == true,
                    "{method} {path}"
                );
            }
            let ids = op["operationId"].as_str().unwrap_or("");
            assert!(!ids.is_empty(), "{method} {path} has an operationId");
        }
    }
    let ingest = &doc["paths"]["/v1/events"]["post"]["responses"];
    for (status, r) in ingest.as_object().unwrap() {
        assert_eq!(
            r["headers"]["X-Vx-Queue-Fill"]["required"], true,
            "{status}"
        );
    }
}
