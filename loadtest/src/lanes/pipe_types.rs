//! What the pipelined lane (pipe.rs) and its protocols' connections (pipe_io.rs) share: the
//! writer and reader traits, a pending operation, an answer, and the lane's error.

use super::*;

/// Why a pipelined connection cannot go on, or an operation could not be queued.
#[derive(Debug, thiserror::Error)]
pub enum PipeError {
    #[error("cannot connect to {endpoint}: {cause}")]
    Connect {
        endpoint: String,
        cause: Box<PipeError>,
    },
    #[error("{0} does not pipeline")]
    NotPipelined(String),
    /// The lane's generator is not one the protocol carries.
    #[error("{0}")]
    Scenario(&'static str),
    #[error("{0}")]
    Frames(#[from] vx_client::ClientError),
    #[error("{0}")]
    Resp(#[from] resp::RespError),
    #[error("{0}")]
    RespConn(#[from] crate::resp_conn::RespConnError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("the server closed the connection")]
    Closed,
    #[error("a RESP reply to no command sent")]
    Unasked,
}

/// An operation sent on a pipelined connection and not answered yet.
pub(super) struct Pending {
    pub(super) op: Op,
    pub(super) started: Instant,
    pub(super) events: u64,
    pub(super) bytes: u64,
}

/// The sending side of a pipelined protocol.
pub(super) trait PipeWriter: Send {
    /// The operation it sends (for errors before anything is queued).
    fn op(&self) -> Op;
    /// Encode the next operation, which counts from `started`, into the send buffer; returns
    /// its key and what to record.
    fn queue(&mut self, started: Instant) -> Result<(u64, Pending), PipeError>;
    fn flush(&mut self) -> impl Future<Output = Result<(), PipeError>> + Send;
    fn close(&mut self) -> impl Future<Output = ()> + Send;
}

/// The receiving side: the next answer, with the key of the operation it answers.
pub(super) trait PipeReader: Send + 'static {
    fn next(&mut self) -> impl Future<Output = Result<(u64, Answer), PipeError>> + Send;
    /// The next answer if what was already read holds it whole, without waiting (or a time
    /// limit, or a clock read: a pipeline's answers arrive many to a read).
    fn ready(&mut self) -> Result<Option<(u64, Answer)>, PipeError> {
        Ok(None)
    }
}

pub(super) enum Answer {
    /// A success; `events` and `bytes` when the answer says them (else the operation's own).
    Ok {
        events: Option<u64>,
        bytes: Option<u64>,
    },
    Refused(Option<Duration>),
    Error(String),
}
