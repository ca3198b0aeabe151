//! `vx-loadtest`: a reproducible, coordinated-omission-free load generator for Veltrix (docs/LOADTEST.md) that also drives its peers (Redis over RESP for the `kv` scenario and its stream commands).
//!
//! A TOML workload ([`workload`]) says what to send, how fast and for how long. Open loop
//! ([`schedule`]) sends at the intended rate whatever the server does and measures latency
//! from the intended send time; closed loop sends as answers come back. Every operation's
//! outcome lands in HdrHistograms ([`recorder`]), which the JSON report carries in serialized
//! form so that reports of several load hosts [`report::merge`] exactly.
//!
//! # Layout
//! - [`cli`]: the command line (`run`, `merge`).
//! - [`workload`]: the keys, their defaults and help, `--set`, validation.
//! - [`endpoint`]: endpoint addresses and which scenario each carries.
//! - [`runner`]: preparing, running and sampling a run; [`error`]: why a run failed.
//! - [`lanes`]: the load lanes (HTTP one-at-a-time, frames and RESP pipelined).
//! - [`fanout`]: the fanout scenario's followers (SSE) and their ordering check.
//! - [`acks`]: the fanout scenario's ack table, written by the lanes, read by the followers.
//! - [`ops`]: what the lanes send (seeded per lane).
//! - [`dist`]: uniform and Zipfian key choice.
//! - [`schedule`]: intended send times and lateness.
//! - [`recorder`]: per-lane counts and histograms.
//! - [`report`]: the table, the JSON report and `merge`.
//! - [`plot`]: the SVG.
//! - [`http`], [`resp`]: the HTTP/1.1 connection and the RESP codec; [`resp_conn`]: a RESP
//!   connection for what surrounds the load (`AUTH`, which server it is, preparing streams).

pub mod acks;
pub mod cli;
pub mod dist;
pub mod endpoint;
pub mod error;
pub mod fanout;
pub mod http;
pub mod lanes;
pub mod ops;
pub mod plot;
pub mod recorder;
pub mod report;
pub mod resp;
pub mod resp_conn;
pub mod runner;
pub mod schedule;
pub mod workload;
