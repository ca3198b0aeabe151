//! Cluster mode's HTTP side (docs/CLUSTER.md, "Reads"): reads of a shard another node owns
//! are forwarded to it ([`forward`], a WebSocket joined through [`ws`]); `GET /v1/streams`
//! and `POST /v1/features/query` merge every owner's part ([`listing`], [`query`]); the owners
//! answer each other's "what did applying this record do?" on an internal route
//! ([`internal`]). Writes are not here: they take the one write path, `crate::write`.

pub mod forward;
pub mod internal;
pub mod listing;
pub mod query;
pub mod ws;
