//! A connection's session on the Redis-protocol listener and what every command is checked
//! against: the table entry type ([`Spec`]: arity, flags, keys, the scope it needs), the
//! session's protocol version and token, and [`Session::admit`] (arity, auth, readiness).
//! The commands themselves are in [`super::command`] (the table, and hashes),
//! [`super::connect`] (the connection and server commands) and [`super::streams`] (Redis's
//! stream commands); they depend on this module, and the streams never on the others'
//! internals.

use super::Ctx;
use crate::config::Scope;
use crate::failure::Failure;
use crate::state::Phase;
use bytes::Bytes;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use vx_cluster::position::Position;
use vx_proto::ErrorCode;
use vx_proto::resp::Reply;
use vx_router::Router;
use vx_storage::features::ReadAt;
use vx_sys::now_ms;

/// A write's reply, once the record is written and applied (or refused).
pub(crate) type WriteFuture = Pin<Box<dyn Future<Output = Vec<u8>> + Send>>;

/// What a command needs of the connection's token.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Needs {
    /// Nothing (`AUTH`, `HELLO`, `QUIT`).
    Nothing,
    /// Any known token (`PING`, `ECHO`, `CLIENT`, `SELECT`, `COMMAND`, `INFO`).
    Known,
    Scope(Scope),
}

/// One command of the table.
pub(crate) struct Spec {
    pub(crate) name: &'static str,
    /// Redis's convention: `n` exactly n arguments (the name included), `-n` at least n.
    pub(super) arity: i32,
    pub(super) flags: &'static [&'static str],
    pub(super) first_key: i32,
    pub(super) last_key: i32,
    pub(super) needs: Needs,
}

pub(super) const READ: Needs = Needs::Scope(Scope::Read);
pub(super) const WRITE: Needs = Needs::Scope(Scope::Ingest);

pub(super) const fn spec(
    name: &'static str,
    arity: i32,
    flags: &'static [&'static str],
    first_key: i32,
    last_key: i32,
    needs: Needs,
) -> Spec {
    Spec {
        name,
        arity,
        flags,
        first_key,
        last_key,
        needs,
    }
}

/// What an unauthenticated client is told when the server has tokens.
pub(super) const AUTH_REQUIRED: &str = "Authentication required (AUTH with a bearer token)";

/// One connection's state.
pub(crate) struct Session {
    pub(crate) resp3: bool,
    /// The token `AUTH` (or `HELLO … AUTH`) accepted.
    pub(super) token: Option<String>,
    /// `CLIENT ID`, and `HELLO`'s `id`: unique among the listener's connections.
    pub(super) id: u64,
    /// `CLIENT SETNAME` (or `HELLO … SETNAME`), for `CLIENT GETNAME`.
    pub(super) name: Option<String>,
    /// Entities read since the connection last added them to `vx_feature_reads_total`: it does
    /// once per batch of commands ([`Session::end_batch`]), since the counter is one cache
    /// line that every worker thread writes.
    pub(super) reads: u64,
    /// The instant the reads of this batch see: the clock is read once a batch, at its first
    /// read, and again after the connection waited (for a write, or a slow client).
    pub(super) at: Option<ReadAt>,
    /// Cluster mode: where this connection's writes are in Kafka, so that its reads wait
    /// for them on any owner (read-your-writes on one connection).
    pub(crate) position: Arc<parking_lot::Mutex<Position>>,
}

/// What the connection does after a command.
pub(crate) enum Flow {
    Continue,
    /// `QUIT`: answer, then close.
    Close,
}

/// A write command, checked.
pub(crate) enum Prepared {
    /// Answered already (an error, or nothing to write).
    Reply(Vec<u8>),
    /// The write to submit; its reply comes from the future.
    Submit(WriteFuture),
}

impl Session {
    pub(crate) fn new(ctx: &Ctx) -> Session {
        Session {
            resp3: false,
            token: None,
            id: ctx.next_id.fetch_add(1, Ordering::Relaxed),
            name: None,
            reads: 0,
            at: None,
            position: Arc::default(),
        }
    }

    pub(super) fn read_at(&mut self) -> ReadAt {
        *self.at.get_or_insert_with(|| ReadAt { now_ms: now_ms() })
    }

    /// The connection waited: later reads of the batch take the time again.
    pub(crate) fn waited(&mut self) {
        self.at = None;
    }

    /// The batch is answered: count its reads, and take the time again for the next one.
    pub(crate) fn end_batch(&mut self, ctx: &Ctx) {
        self.at = None;
        if self.reads > 0 {
            ctx.state.metrics().feature_reads.inc_by(self.reads);
            self.reads = 0;
        }
    }

    pub(super) fn reply<'a>(&self, out: &'a mut Vec<u8>) -> Reply<'a> {
        Reply {
            out,
            resp3: self.resp3,
        }
    }

    /// Arity, auth and readiness: the router if the command may run, else its error reply.
    pub(crate) fn admit(
        &self,
        ctx: &Ctx,
        spec: &Spec,
        args: &[Bytes],
        out: &mut Vec<u8>,
    ) -> Option<Option<Router>> {
        let n = i32::try_from(args.len()).unwrap_or(i32::MAX);
        let arity_ok = if spec.arity >= 0 {
            n == spec.arity
        } else {
            n >= -spec.arity
        };
        if !arity_ok {
            self.reply(out).error(
                "ERR",
                &format!("wrong number of arguments for '{}' command", spec.name),
            );
            return None;
        }
        let tokens = ctx.state.tokens();
        let allowed = match spec.needs {
            Needs::Nothing => Ok(()),
            Needs::Known if tokens.is_empty() || self.token.is_some() => Ok(()),
            Needs::Known => Err(Failure::new(ErrorCode::Unauthorized, AUTH_REQUIRED)),
            Needs::Scope(scope) => crate::auth::authorize(tokens, self.token.as_deref(), scope)
                .map_err(|f| {
                    if f.code == ErrorCode::Unauthorized {
                        Failure::new(ErrorCode::Unauthorized, AUTH_REQUIRED)
                    } else {
                        f
                    }
                }),
        };
        if let Err(f) = allowed {
            self.failure(out, f);
            return None;
        }
        if !matches!(spec.needs, Needs::Scope(_)) {
            return Some(None);
        }
        match (ctx.state.phase(), ctx.state.router()) {
            (Phase::Ready, Some(router)) => Some(Some(router.clone())),
            (Phase::Draining, _) => {
                self.failure(out, Failure::shutting_down("the service is shutting down"));
                None
            }
            _ => {
                self.failure(out, Failure::starting());
                None
            }
        }
    }

    pub(super) fn failure(&self, out: &mut Vec<u8>, f: Failure) {
        let (prefix, message) = f.into_resp();
        self.reply(out).error(prefix, &message);
    }

    /// The connection's token as an `Authorization` value, for the owners cluster mode asks.
    pub(crate) fn authorization(&self) -> Option<axum::http::HeaderValue> {
        self.token
            .as_deref()
            .and_then(|t| axum::http::HeaderValue::from_str(&format!("Bearer {t}")).ok())
    }
}
