//! `veltrix`: the service binary's library — CLI, configuration, the HTTP API, metrics,
//! start-up and graceful shutdown — over the `vx-*` crates. `main.rs` only parses the command
//! line and calls [`server::run`]; tests call [`server::Server::bind`] and `run` in-process.
//!
//! # Layout
//! - [`cli`]: `veltrix serve` and its flags, and the client commands; [`remote`]: the commands
//!   that talk to a running server over HTTP; [`check`]: `veltrix check`'s report (the checks are `vx_storage::check`).
//! - [`cluster`]: cluster mode's side of the HTTP API (writes to Kafka, reads forwarded
//!   to the shard's owner); the Kafka side is `vx_cluster`'s.
//! - [`config`]: the key tree, its defaults and the file < env < flag layers.
//! - [`logging`]: the tracing subscriber (pretty or JSON); [`telemetry`]: OTLP trace export.
//! - [`server`]: bind, bootstrap (store recovery), serve, drain, stop.
//! - [`listen`]: the sockets, and the bound on open connections of every listener;
//!   [`http_conn`]: the HTTP accept loop and connections, with their header and idle timeouts.
//! - [`frames`]: the binary-frames listeners and connections (docs/PROTOCOL.md).
//! - [`resp`]: the Redis-protocol listener of the feature store (docs/RESP.md).
//! - [`signals`]: SIGTERM/SIGINT handling.
//! - [`state`]: what every request shares (phase, router, limits, auth, metrics).
//! - [`http`]: the axum app: routes, error shape, middleware.
//! - [`metrics`]: the Prometheus registry.
//! - [`status`]: the status snapshot (`GET /v1/status`) the status page at `/` polls.
//! - [`live`]: live followers, their fan-out, and paced replay.
//! - [`otlp`]: OTLP traces and logs → events, re-exported from `vx_otlp`; the HTTP side and
//!   OTLP's error answers are in [`http::otlp`].

pub mod auth;
pub mod check;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod error;
pub mod failure;
pub mod frames;
pub mod http;
pub mod http_conn;
pub mod listen;
pub mod live;
pub mod logging;
pub mod metrics;
pub mod remote;
pub mod resp;
pub mod server;
pub mod signals;
pub mod state;
pub mod status;
pub mod telemetry;
pub mod write;

/// OTLP decoding and mapping live in `vx_otlp` (the fuzz crate uses them without linking the
/// server); the server and its integration tests name them `veltrix::otlp`, with the request
/// builders (`otlp::testing`) under this package's `testing` feature.
pub use vx_otlp as otlp;
