//! The read path: replay [`cursor::Cursor`]s over the log, and what live followers wait on
//! ([`watch`]).

pub(crate) mod cursor;
pub mod watch;
