//! The commands of the Redis-protocol listener (docs/RESP.md): the table that names each with
//! its arity, its flags and the scope it needs; the dispatch of the commands that do not
//! write, with the hash reads; and the submission of the writes (the session they run in:
//! [`super::session`]; the connection and server commands: [`super::connect`]).
//!
//! Reads answer at once from the tables. Writes (`HSET`, `HDEL`, `DEL`, `HINCRBY`,
//! `HINCRBYFLOAT`) are checked by [`super::hash`] and turned here into a future that submits
//! the same feature record a `PUT`/`DELETE` would (an increment: a record of its own, summed
//! when applied) and yields its reply; the connection decides when to await it (see
//! [`super::conn`]). The stream commands (`XADD`, `XRANGE`, `XREAD`, …) are in the same
//! table, and run in [`super::streams`].

use super::Ctx;
use super::hash;
use super::session::{AUTH_REQUIRED, Flow, Needs, Prepared, READ, Session, Spec, WRITE, spec};
use super::streams;
use super::value::{self, text};
use crate::failure::Failure;
use crate::write::{Asked, Features};
use bytes::Bytes;
use std::sync::Arc;
use vx_proto::ErrorCode;
use vx_proto::resp::Reply;

/// Every command the listener knows but the stream commands ([`super::streams::TABLE`]);
/// any other is answered `-ERR unknown command` (or, for the stream commands Veltrix does
/// not offer, an error that says so).
const TABLE: &[Spec] = &[
    spec("ping", -1, &["fast"], 0, 0, Needs::Known),
    // Not in docs/API.md §6's list: `redis-cli --pipe` ends its input with an ECHO to know when
    // the last reply has come.
    spec("echo", 2, &["fast"], 0, 0, Needs::Known),
    spec(
        "auth",
        -2,
        &["noscript", "loading", "stale", "fast", "no_auth"],
        0,
        0,
        Needs::Nothing,
    ),
    spec(
        "hello",
        -1,
        &["noscript", "loading", "stale", "fast", "no_auth"],
        0,
        0,
        Needs::Nothing,
    ),
    spec(
        "quit",
        -1,
        &["noscript", "loading", "stale", "fast", "no_auth"],
        0,
        0,
        Needs::Nothing,
    ),
    spec(
        "client",
        -2,
        &["noscript", "loading", "stale"],
        0,
        0,
        Needs::Known,
    ),
    spec(
        "select",
        2,
        &["loading", "stale", "fast"],
        0,
        0,
        Needs::Known,
    ),
    spec("command", -1, &["loading", "stale"], 0, 0, Needs::Known),
    spec("info", -1, &["loading", "stale"], 0, 0, Needs::Known),
    spec("hget", 3, &["readonly", "fast"], 1, 1, READ),
    spec("hmget", -3, &["readonly", "fast"], 1, 1, READ),
    spec("hgetall", 2, &["readonly"], 1, 1, READ),
    spec("hexists", 3, &["readonly", "fast"], 1, 1, READ),
    spec("exists", -2, &["readonly", "fast"], 1, -1, READ),
    spec("hset", -4, &["write", "denyoom", "fast"], 1, 1, WRITE),
    spec("hdel", -3, &["write", "fast"], 1, 1, WRITE),
    spec("hincrby", 4, &["write", "denyoom", "fast"], 1, 1, WRITE),
    spec(
        "hincrbyfloat",
        4,
        &["write", "denyoom", "fast"],
        1,
        1,
        WRITE,
    ),
    spec("del", -2, &["write"], 1, -1, WRITE),
];

/// Every command: the table's, then the stream commands.
pub(super) fn all() -> impl Iterator<Item = &'static Spec> {
    TABLE.iter().chain(streams::TABLE)
}

pub(super) fn lookup(name: &[u8]) -> Option<&'static Spec> {
    all().find(|s| s.name.as_bytes().eq_ignore_ascii_case(name))
}

/// The command `name` if it reads entities (cluster mode reads those from their owners).
pub(crate) fn reads_entities(name: &[u8]) -> Option<&'static Spec> {
    TABLE
        .iter()
        .find(|s| s.name.as_bytes().eq_ignore_ascii_case(name))
        .filter(|s| s.needs == READ)
}

/// Whether the command `name` writes: the connection keeps those in flight.
pub(crate) fn is_write(name: &[u8]) -> bool {
    lookup(name).is_some_and(|s| s.needs == WRITE)
}

impl Session {
    /// Run a command that does not write, its reply appended to `out`.
    pub(crate) fn execute(&mut self, ctx: &Ctx, args: &[Bytes], out: &mut Vec<u8>) -> Flow {
        let Some(name) = args.first() else {
            return Flow::Continue;
        };
        let Some(spec) = lookup(name) else {
            // As Redis: a client that must authenticate learns that first, whatever it sent.
            if !ctx.state.tokens().is_empty() && self.token.is_none() {
                self.failure(out, Failure::new(ErrorCode::Unauthorized, AUTH_REQUIRED));
            } else if let Some(why) = streams::refused(name) {
                self.reply(out).error("ERR", why);
            } else {
                unknown(self.reply(out), args);
            }
            return Flow::Continue;
        };
        let Some(router) = self.admit(ctx, spec, args, out) else {
            return Flow::Continue;
        };
        let at = self.read_at();
        match (spec.name, router) {
            ("ping", _) => match args.get(1) {
                Some(m) if args.len() == 2 => self.reply(out).bulk(m),
                None => self.reply(out).simple("PONG"),
                Some(_) => self
                    .reply(out)
                    .error("ERR", "wrong number of arguments for 'ping' command"),
            },
            ("echo", _) => self.reply(out).bulk(&args[1]),
            ("auth", _) => self.auth(ctx, args, out),
            ("hello", _) => self.hello(ctx, args, out),
            ("quit", _) => {
                self.reply(out).simple("OK");
                return Flow::Close;
            }
            ("client", _) => self.client(args, out),
            ("select", _) => self.select(args, out),
            ("command", _) => self.command(args, out),
            ("info", _) => self.info(ctx, args, out),
            ("hget", Some(r)) => {
                let features = r.store().features();
                let mut r = self.reply(out);
                let mut found = false;
                if let (Some(e), Some(n)) = (text(&args[1]), text(&args[2])) {
                    features.read(e, Some(&[n]), at, &mut |_, v| {
                        found = true;
                        value::write(&mut r, v);
                    });
                }
                if !found {
                    r.null();
                }
                self.reads += 1;
            }
            ("hmget", Some(r)) => {
                let features = r.store().features();
                let names: Vec<&str> = args[2..].iter().map(|a| text(a).unwrap_or("")).collect();
                let mut rp = self.reply(out);
                rp.array(names.len());
                let mut next = 0;
                if let Some(e) = text(&args[1]) {
                    features.read(e, Some(&names), at, &mut |name, v| {
                        // Visits come in list order, skipping absent names: fill those.
                        while next < names.len() && names[next] != name {
                            rp.null();
                            next += 1;
                        }
                        value::write(&mut rp, v);
                        next += 1;
                    });
                }
                while next < names.len() {
                    rp.null();
                    next += 1;
                }
                self.reads += 1;
            }
            ("hgetall", Some(r)) => {
                let features = r.store().features();
                let mut body = Vec::new();
                let mut n = 0;
                let mut rb = self.reply(&mut body);
                if let Some(e) = text(&args[1]) {
                    features.read(e, None, at, &mut |name, v| {
                        rb.bulk(name.as_bytes());
                        value::write(&mut rb, v);
                        n += 1;
                    });
                }
                self.reply(out).map(n);
                out.extend_from_slice(&body);
                self.reads += 1;
            }
            ("hexists", Some(r)) => {
                let features = r.store().features();
                let mut found = false;
                if let (Some(e), Some(n)) = (text(&args[1]), text(&args[2])) {
                    features.read(e, Some(&[n]), at, &mut |_, _| found = true);
                }
                self.reply(out).int(i64::from(found));
                self.reads += 1;
            }
            ("exists", Some(r)) => {
                let features = r.store().features();
                let n = args[1..]
                    .iter()
                    .filter(|a| text(a).is_some_and(|e| features.exists(e, None)))
                    .count();
                self.reply(out).int(n as i64);
                self.reads += 1;
            }
            _ => {
                // Writes go through `prepare_write`; a read without its router was refused.
                self.failure(
                    out,
                    Failure::new(ErrorCode::Internal, "command dispatched to the wrong path"),
                );
            }
        }
        Flow::Continue
    }

    /// Check a write command and make the future that submits it through the one write
    /// path, as a `PUT`/`DELETE` would. The caller has let earlier writes to the same
    /// entities finish, so what exists now is what the write will find. In cluster mode the
    /// write waits for its owner's outcome, which the reply's count (or sum) comes from.
    pub(crate) fn prepare_write(&self, ctx: &Arc<Ctx>, args: &[Bytes]) -> Prepared {
        let mut out = Vec::new();
        let Some(spec) = args.first().and_then(|n| lookup(n)) else {
            unknown(self.reply(&mut out), args);
            return Prepared::Reply(out);
        };
        let Some(Some(router)) = self.admit(ctx, spec, args, &mut out) else {
            return Prepared::Reply(out);
        };
        let Some(writes) = ctx.state.writes().cloned() else {
            self.failure(&mut out, Failure::starting());
            return Prepared::Reply(out);
        };
        if spec.name == "xadd" {
            return self.prepare_xadd(ctx, args, writes);
        }
        if spec.name == "hset" && !args.len().is_multiple_of(2) {
            self.reply(&mut out)
                .error("ERR", "wrong number of arguments for 'hset' command");
            return Prepared::Reply(out);
        }
        let (entity, change, answer) = match hash::change(spec.name, args, &router) {
            Ok(c) => c,
            Err(bad) => {
                self.reply(&mut out).error(bad.prefix, &bad.message);
                return Prepared::Reply(out);
            }
        };
        let asked = Asked {
            local: None,
            applied: writes.cluster().is_some(),
        };
        let written = writes.features(Features {
            entity,
            change,
            asked,
            auth: self.authorization(),
        });
        let resp3 = self.resp3;
        let ctx = Arc::clone(ctx);
        let position = Arc::clone(&self.position);
        Prepared::Submit(Box::pin(async move {
            let mut out = Vec::new();
            // The first poll hands the record on (the caller polls once before taking the
            // next command, so that writes are written in the order sent).
            let written = written.await;
            let mut reply = Reply {
                out: &mut out,
                resp3,
            };
            match written {
                Ok(w) => {
                    if let Some(p) = &w.position {
                        let mut mine = position.lock();
                        for (topic, partition, offset) in p.iter() {
                            mine.add(topic, partition, offset);
                        }
                    }
                    ctx.state.metrics().feature_writes.inc();
                    answer.write(&w, &mut reply);
                }
                // Nothing to delete: Redis answers 0.
                Err(r) if r.failure.code == ErrorCode::NotFound => reply.int(0),
                Err(r) => {
                    let f = r.failure;
                    if f.code != ErrorCode::StorageFull && f.code != ErrorCode::Backpressure {
                        tracing::warn!(code = %f.code, message = %f.message, "RESP write failed");
                    }
                    let (prefix, message) = f.into_resp();
                    reply.error(prefix, &message);
                }
            }
            out
        }))
    }
}

/// Redis's answer to a command it does not know.
fn unknown(mut r: Reply<'_>, args: &[Bytes]) {
    let name = args
        .first()
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .unwrap_or_default();
    let mut m = format!("unknown command '{name}', with args beginning with: ");
    for a in args.iter().skip(1).take(8) {
        m.push_str(&format!("'{}' ", String::from_utf8_lossy(a)));
    }
    r.error("ERR", &m);
}
