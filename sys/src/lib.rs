//! `vx-sys`: the few process-wide things every layer shares and none owns: the server's
//! clock, the policy of the hot-path tracing spans, and the open-file limit.
//!
//! # Layout
//! - [`clock`]: `now_ms`, the one clock of append times, dedup windows and feature `ttl`s.
//! - [`spans`]: the target of the spans that go to the OTLP export only, and how counts are
//!   recorded on them.
//! - [`nofile`]: raising the soft `RLIMIT_NOFILE` at start-up.

pub mod clock;
pub mod nofile;
pub mod spans;

pub use clock::now_ms;
pub use nofile::raise_nofile_limit;
pub use spans::{EXPORT_SPANS, caller_span, span_int};
