//! The index: how a stream's events are found in the log without scanning it.
//!
//! - [`memory`]: what memory keeps per stream (counters, the head of its chain, its spans in
//!   the active segment), read by request handlers, written by the log writer.
//! - [`idxfile`]: the index file of a sealed segment (byte by byte there).
//! - [`samples`]: where a walk to one event inside a span can start (the sampling rule).
//! - [`chain`]: how a stream's nodes across index files link up.
//! - [`carry`]: the carry file of deleted and retained-away streams.

pub(crate) mod carry;
pub(crate) mod chain;
pub mod idxfile;
pub(crate) mod memory;
pub mod pages;
pub(crate) mod samples;
