//! The commands of the Redis-protocol listener (docs/RESP.md): the table that names each with
//! its arity, its flags and the scope it needs, and the execution of each command but the
//! stream commands (the session they run in: [`super::session`]).
//!
//! Reads answer at once from the tables. Writes (`HSET`, `HDEL`, `DEL`) are checked here and
//! turned into a future that submits the same feature record a `PUT`/`DELETE` would and
//! yields its reply; the connection decides when to await it (see [`super::conn`]). The
//! stream commands (`XADD`, `XRANGE`, `XREAD`, …) are in the same table, and run in
//! [`super::streams`].

use super::Ctx;
use super::session::{AUTH_REQUIRED, Flow, Needs, Prepared, READ, Session, Spec, WRITE, spec};
use super::streams;
use super::value;
use crate::config::Scope;
use crate::failure::Failure;
use crate::http::features::{check_name, check_value};
use crate::write::{Asked, Change, Features};
use bytes::Bytes;
use std::sync::Arc;
use vx_proto::ErrorCode;
use vx_proto::resp::Reply;
use vx_router::Router;
use vx_storage::features::FeatureValue;

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
    spec("command", -1, &["loading", "stale"], 0, 0, Needs::Known),
    spec("info", -1, &["loading", "stale"], 0, 0, Needs::Known),
    spec("hget", 3, &["readonly", "fast"], 1, 1, READ),
    spec("hmget", -3, &["readonly", "fast"], 1, 1, READ),
    spec("hgetall", 2, &["readonly"], 1, 1, READ),
    spec("hexists", 3, &["readonly", "fast"], 1, 1, READ),
    spec("exists", -2, &["readonly", "fast"], 1, -1, READ),
    spec("hset", -4, &["write", "denyoom", "fast"], 1, 1, WRITE),
    spec("hdel", -3, &["write", "fast"], 1, 1, WRITE),
    spec("del", -2, &["write"], 1, -1, WRITE),
];

/// Every command: the table's, then the stream commands.
fn all() -> impl Iterator<Item = &'static Spec> {
    TABLE.iter().chain(streams::TABLE)
}

fn lookup(name: &[u8]) -> Option<&'static Spec> {
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

    /// `AUTH [user] token`: the user name is ignored (the token is the credential).
    fn auth(&mut self, ctx: &Ctx, args: &[Bytes], out: &mut Vec<u8>) {
        if args.len() > 3 {
            self.reply(out)
                .error("ERR", "wrong number of arguments for 'auth' command");
            return;
        }
        if ctx.state.tokens().is_empty() {
            self.reply(out).error(
                "ERR",
                "AUTH <password> called without any password configured for the default user \
                 (this server has no auth.tokens)",
            );
            return;
        }
        match args.last().and_then(|t| text(t)) {
            Some(t) if known(ctx, t) => {
                self.token = Some(t.to_string());
                self.reply(out).simple("OK");
            }
            _ => self.reply(out).error(
                "WRONGPASS",
                "invalid username-password pair or user is disabled.",
            ),
        }
    }

    /// `HELLO [protover [AUTH user token] [SETNAME name]]`.
    fn hello(&mut self, ctx: &Ctx, args: &[Bytes], out: &mut Vec<u8>) {
        let mut resp3 = self.resp3;
        if let Some(v) = args.get(1) {
            match text(v).and_then(|s| s.parse::<i64>().ok()) {
                Some(2) => resp3 = false,
                Some(3) => resp3 = true,
                Some(_) => {
                    self.reply(out)
                        .error("NOPROTO", "unsupported protocol version");
                    return;
                }
                None => {
                    self.reply(out)
                        .error("ERR", "Protocol version is not an integer or out of range");
                    return;
                }
            }
        }
        let mut token = None;
        let mut i = 2;
        while i < args.len() {
            let opt = &args[i];
            if opt.eq_ignore_ascii_case(b"AUTH") && i + 2 < args.len() {
                token = Some(text(&args[i + 2]).unwrap_or(""));
                i += 3;
            } else if opt.eq_ignore_ascii_case(b"SETNAME") && i + 1 < args.len() {
                i += 2;
            } else {
                self.reply(out).error(
                    "ERR",
                    &format!(
                        "Syntax error in HELLO option '{}'",
                        String::from_utf8_lossy(opt)
                    ),
                );
                return;
            }
        }
        let tokens = ctx.state.tokens();
        match token {
            Some(t) if tokens.is_empty() => {
                let _ = t;
                self.reply(out).error(
                    "ERR",
                    "AUTH <password> called without any password configured for the default \
                     user (this server has no auth.tokens)",
                );
                return;
            }
            Some(t) if known(ctx, t) => self.token = Some(t.to_string()),
            Some(_) => {
                self.reply(out).error(
                    "WRONGPASS",
                    "invalid username-password pair or user is disabled.",
                );
                return;
            }
            None if !tokens.is_empty() && self.token.is_none() => {
                self.reply(out).error(
                    "NOAUTH",
                    "HELLO must be called with the client already authenticated, otherwise the \
                     HELLO <proto> AUTH <user> <pass> option can be used to authenticate the \
                     client and select the RESP protocol version at the same time",
                );
                return;
            }
            None => {}
        }
        self.resp3 = resp3;
        let mut r = self.reply(out);
        r.map(7);
        r.bulk(b"server");
        r.bulk(b"veltrix");
        r.bulk(b"version");
        r.bulk(env!("CARGO_PKG_VERSION").as_bytes());
        r.bulk(b"proto");
        r.int(if resp3 { 3 } else { 2 });
        r.bulk(b"id");
        r.int(i64::try_from(self.id).unwrap_or(i64::MAX));
        r.bulk(b"mode");
        r.bulk(b"standalone");
        r.bulk(b"role");
        r.bulk(b"master");
        r.bulk(b"modules");
        r.array(0);
    }

    /// `COMMAND`, `COMMAND COUNT`, `COMMAND INFO name…`, `COMMAND DOCS [name…]`.
    fn command(&self, args: &[Bytes], out: &mut Vec<u8>) {
        let sub = args.get(1).map(|s| s.to_ascii_uppercase());
        match sub.as_deref() {
            None => {
                self.reply(out).array(all().count());
                for s in all() {
                    self.command_info(s, out);
                }
            }
            Some(b"COUNT") => self.reply(out).int(all().count() as i64),
            Some(b"INFO") => {
                self.reply(out).array(args.len() - 2);
                for a in &args[2..] {
                    match lookup(a) {
                        Some(s) => self.command_info(s, out),
                        None => self.reply(out).null(),
                    }
                }
            }
            // No documentation to give: clients that ask (redis-cli's hints) go without.
            Some(b"DOCS") => self.reply(out).map(0),
            Some(_) => self.reply(out).error(
                "ERR",
                &format!(
                    "unknown subcommand '{}'. Try COMMAND HELP.",
                    String::from_utf8_lossy(&args[1])
                ),
            ),
        }
    }

    /// Redis 7's command reply: name, arity, flags, first key, last key, step, ACL categories,
    /// tips, key specs, subcommands.
    fn command_info(&self, s: &Spec, out: &mut Vec<u8>) {
        let mut r = self.reply(out);
        r.array(10);
        r.bulk(s.name.as_bytes());
        r.int(i64::from(s.arity));
        r.array(s.flags.len());
        for f in s.flags {
            r.simple(f);
        }
        r.int(i64::from(s.first_key));
        r.int(i64::from(s.last_key));
        r.int(i64::from(s.first_key != 0));
        for _ in 0..4 {
            r.array(0);
        }
    }

    /// `INFO [section…]`: `server`, `clients`, `memory`, `keyspace` (all by default).
    fn info(&self, ctx: &Ctx, args: &[Bytes], out: &mut Vec<u8>) {
        let wanted: Vec<String> = args[1..]
            .iter()
            .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
            .collect();
        let all = wanted.is_empty()
            || wanted
                .iter()
                .any(|w| matches!(w.as_str(), "all" | "everything" | "default"));
        let want = |s: &str| all || wanted.iter().any(|w| w == s);
        let stats = ctx.state.router().map(|r| r.store().features().stats());
        let mut text = String::new();
        if want("server") {
            text.push_str(&format!(
                "# Server\r\nredis_version:7.2.0\r\nveltrix_version:{}\r\nredis_mode:standalone\r\n\
                 os:{}\r\nprocess_id:{}\r\n\r\n",
                env!("CARGO_PKG_VERSION"),
                std::env::consts::OS,
                std::process::id()
            ));
        }
        if want("clients") {
            text.push_str(&format!(
                "# Clients\r\nconnected_clients:{}\r\n\r\n",
                ctx.state.metrics().connections().open.get()
            ));
        }
        if want("memory") {
            let (used, max) = stats.map_or((0, 0), |s| (s.bytes, s.max_bytes));
            text.push_str(&format!(
                "# Memory\r\nused_memory:{used}\r\nmaxmemory:{max}\r\nmaxmemory_policy:noeviction\r\n\r\n"
            ));
        }
        if want("keyspace") {
            text.push_str("# Keyspace\r\n");
            if let Some(s) = stats
                && s.entities > 0
            {
                text.push_str(&format!("db0:keys={},expires=0,avg_ttl=0\r\n", s.entities));
            }
        }
        self.reply(out).bulk(text.as_bytes());
    }

    /// Check a write command and make the future that submits it through the one write
    /// path, as a `PUT`/`DELETE` would. The caller has let earlier writes to the same
    /// entities finish, so what exists now is what the write will find. In cluster mode the
    /// write waits for its owner's outcome, which the reply's count comes from.
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
        let change = match write_change(spec.name, args, &router) {
            Ok(c) => c,
            Err(f) => {
                self.failure(&mut out, f);
                return Prepared::Reply(out);
            }
        };
        let (entity, change, count) = change;
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
                    reply.int(count.of(&w));
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

/// What a write command's reply counts (Redis's answers).
#[derive(Clone, Copy)]
enum Count {
    /// `HSET`: fields that are new.
    Added,
    /// `HDEL`: fields removed.
    Deleted,
    /// `DEL`: keys that existed.
    Found,
}

impl Count {
    fn of(self, w: &crate::write::FeaturesWritten) -> i64 {
        let n = match self {
            Count::Added => w.added,
            Count::Deleted => w.deleted,
            Count::Found => w.found,
        };
        i64::try_from(n).unwrap_or(i64::MAX)
    }
}

/// A write command's change: the entity that admits it, the change, and what its reply
/// counts. `HSET`'s names and values are checked as a `PUT`'s are.
fn write_change(
    name: &str,
    args: &[Bytes],
    router: &Router,
) -> Result<(String, Change, Count), Failure> {
    let features = router.store().features();
    match name {
        "hset" => {
            let e = entity(&args[1])?;
            let mut set: Vec<(String, Option<FeatureValue>)> = Vec::new();
            for pair in args[2..].chunks_exact(2) {
                let n = text(&pair[0]).ok_or_else(|| {
                    Failure::new(ErrorCode::InvalidEvent, "a feature name must be UTF-8")
                })?;
                check_name(features, n)?;
                let v = value::parse(&pair[1]).ok_or_else(|| {
                    Failure::new(
                        ErrorCode::InvalidEvent,
                        format!("feature {n:?}: a value must be UTF-8"),
                    )
                })?;
                check_value(n, Some(&v))?;
                set.push((n.to_string(), Some(v)));
            }
            Ok((e, Change::Put(set), Count::Added))
        }
        "hdel" => {
            let e = entity(&args[1])?;
            // SPEC §6: feature DELETEs, every name in one record (stored whole or not at
            // all, as Redis's command is atomic); a name named twice counts once.
            let mut targets: Vec<(String, Option<String>)> = Vec::new();
            for n in args[2..].iter().filter_map(|a| text(a)) {
                if !targets.iter().any(|(_, t)| t.as_deref() == Some(n)) {
                    targets.push((e.clone(), Some(n.to_string())));
                }
            }
            Ok((e, Change::Delete(targets), Count::Deleted))
        }
        _ => {
            // `DEL`: a key named twice counts once, as in Redis.
            let mut targets: Vec<(String, Option<String>)> = Vec::new();
            for a in &args[1..] {
                let e = entity(a)?;
                if !targets.iter().any(|(t, _)| *t == e) {
                    targets.push((e, None));
                }
            }
            let first = targets.first().map(|(e, _)| e.clone()).unwrap_or_default();
            Ok((first, Change::Delete(targets), Count::Found))
        }
    }
}

/// A token one of `auth.tokens` holds, whatever its scopes.
fn known(ctx: &Ctx, token: &str) -> bool {
    match crate::auth::authorize(ctx.state.tokens(), Some(token), Scope::Admin) {
        Ok(()) => true,
        Err(f) => f.code == ErrorCode::Forbidden,
    }
}

fn text(b: &[u8]) -> Option<&str> {
    std::str::from_utf8(b).ok()
}

/// A key that names an entity (docs/API.md §2's entity rule), for a write.
fn entity(b: &Bytes) -> Result<String, Failure> {
    match text(b) {
        Some(e) if !e.is_empty() && vx_proto::rules::valid_entity(e) => Ok(e.to_string()),
        _ => Err(Failure::new(
            ErrorCode::BadRequest,
            format!(
                "key {:?} is not an entity: 1-256 bytes of UTF-8 without control characters",
                String::from_utf8_lossy(b)
            ),
        )),
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
