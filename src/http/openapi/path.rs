//! Where the OpenAPI document is served: a leaf of its own, because the middleware that keeps
//! the route open in every phase and without a token (`guard`) is itself described by the
//! document's rules (`rules`), which read the middleware's.

/// Where the document is served.
pub const PATH: &str = "/v1/openapi.json";
