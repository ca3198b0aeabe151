//! The status page (docs/API.md §7: `GET /` serves it, embedded, no external assets) and the JSON it
//! polls, `GET /v1/status` ([`crate::status`] builds it).
//!
//! The page is three files compiled into the binary (`src/http/ui/`): `index.html` at `/`, and
//! `app.js` and `app.css` under `/ui/`. No build step, no CDN; a Content-Security-Policy lets
//! the page load only its own scripts and styles and talk only to its own origin, so it makes
//! no external request even if an event's content tried to. All routes need the `read` scope
//! when tokens are configured; the page's routes challenge with HTTP Basic so that a browser
//! prompts for the token (see [`crate::auth::http_token`]).

use super::AppError;
use super::openapi::schemas::ErrorBody;
use super::params::Params;
use crate::state::AppState;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderName, HeaderValue};
use axum::http::{HeaderMap, Uri};
use axum::response::{IntoResponse, Response};

/// The routes of the page itself (not its data): their 401 carries a Basic challenge.
pub const PAGE_ROUTES: [&str; 2] = ["/", "/ui/{asset}"];

const INDEX: &str = include_str!("ui/index.html");

/// The assets under `/ui/`: name, content type, body.
const ASSETS: [(&str, &str, &str); 2] = [
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("ui/app.js"),
    ),
    (
        "app.css",
        "text/css; charset=utf-8",
        include_str!("ui/app.css"),
    ),
];

/// Only the page's own origin: scripts and styles from `/ui/`, requests to the API, the
/// `data:` favicon. No inline script or style, no frames, no form posts elsewhere.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self' data:; base-uri 'none'; form-action 'none'; \
                   frame-ancestors 'none'";

/// Headers of every page response. `no-cache`: the browser revalidates, so a new binary's
/// page is never mixed with an old script.
fn page_headers(content_type: &'static str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        HeaderName::from_static("x-content-type-options"),
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        HeaderName::from_static("referrer-policy"),
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        HeaderName::from_static("content-security-policy"),
        HeaderValue::from_static(CSP),
    );
    h
}

/// Status page
///
/// The embedded status page (docs/API.md §7.4); it polls `GET /v1/status`.
#[utoipa::path(
    get,
    path = "/",
    operation_id = "status_page",
    tag = "operations",
    responses((status = 200, description = "The page", content((String = "text/html; charset=utf-8")), headers(
            ("Cache-Control" = String, description = "`no-cache`"),
            ("X-Content-Type-Options" = String, description = "`nosniff`"),
            ("Referrer-Policy" = String, description = "`no-referrer`"),
            ("Content-Security-Policy" = String, description = "only the page's own origin")))),
)]
pub async fn index() -> Response {
    (page_headers("text/html; charset=utf-8"), INDEX).into_response()
}

/// Status page asset
///
/// One of the page's embedded assets, `app.js` or `app.css`; 404 for any other name.
#[utoipa::path(
    get,
    path = "/ui/{asset}",
    operation_id = "status_page_asset",
    tag = "operations",
    params(("asset" = String, Path, description = "`app.js` or `app.css`")),
    responses(
        (status = 200, description = "The asset", content(
            (String = "text/javascript; charset=utf-8"),
            (String = "text/css; charset=utf-8"),
        ), headers(
            ("Cache-Control" = String, description = "`no-cache`"),
            ("X-Content-Type-Options" = String, description = "`nosniff`"),
            ("Referrer-Policy" = String, description = "`no-referrer`"),
            ("Content-Security-Policy" = String, description = "only the page's own origin"))),
        (status = 404, description = "`not_found`: no such asset", body = ErrorBody),
    ),
)]
pub async fn asset(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|(n, _, _)| *n == name) {
        Some((_, content_type, body)) => (page_headers(content_type), *body).into_response(),
        None => AppError::not_found(format!("no asset {name:?}")).into_response(),
    }
}

/// Status
///
/// One JSON object of counters and gauges for the status page (docs/API.md §7.4,
/// OPERATIONS.md); what needs the open store is `null` while starting. Never cached.
#[utoipa::path(
    get,
    path = "/v1/status",
    operation_id = "status",
    tag = "operations",
    responses(
        (status = 200, description = "The snapshot", body = crate::status::Status, headers(("Cache-Control" = String, description = "`no-store`"))),
        (status = 400, description = "`bad_request`: a query parameter (there are none)", body = ErrorBody),
    ),
)]
pub async fn status(State(state): State<AppState>, uri: Uri) -> Result<Response, AppError> {
    Params::parse(&uri, &[])?;
    let snapshot = crate::status::snapshot(&state).await;
    let mut resp = Json(snapshot).into_response();
    resp.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(resp)
}
