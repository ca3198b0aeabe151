//! The listener's reads in cluster mode (docs/RESP.md, "Cluster mode"): each entity is read
//! from its owner through cluster mode's one read path ([`crate::cluster::read`]), after
//! the owner applied this connection's writes (read-your-writes on one connection), and
//! answered as single-node mode answers. Writes need nothing here: they take the one write
//! path in both modes ([`super::command`]).

use super::command::reads_entities;
use super::session::{Prepared, Session};
use super::{Ctx, value};
use crate::cluster::read::Entity;
use bytes::Bytes;
use std::sync::Arc;
use vx_proto::resp::Reply;

impl Session {
    /// In cluster mode, a read command as a future of its reply; `None` in single-node
    /// mode and for commands that read no entity (they run as they do there).
    pub(crate) fn cluster_read(&self, ctx: &Arc<Ctx>, args: &[Bytes]) -> Option<Prepared> {
        let cluster = Arc::clone(ctx.state.cluster()?);
        let name = args.first()?;
        let spec = reads_entities(name)?;
        let mut out = Vec::new();
        let router = match self.admit(ctx, spec, args, &mut out) {
            Some(Some(r)) => r,
            _ => return Some(Prepared::Reply(out)),
        };
        let read = Read::of(spec.name, args);
        let min = self.position.lock().clone();
        let auth = self.authorization();
        let resp3 = self.resp3;
        let ctx = Arc::clone(ctx);
        Some(Prepared::Submit(Box::pin(async move {
            let mut got: Vec<Option<Entity>> = Vec::with_capacity(read.entities.len());
            let mut failed = None;
            for e in &read.entities {
                match cluster
                    .entity(&router, e, read.names.as_deref(), &min, auth.as_ref())
                    .await
                {
                    Ok(x) => got.push(x),
                    Err(f) => {
                        failed = Some(f);
                        break;
                    }
                }
            }
            ctx.state.metrics().feature_reads.inc();
            let mut out = Vec::new();
            let mut reply = Reply {
                out: &mut out,
                resp3,
            };
            match failed {
                Some(f) => {
                    let (prefix, message) = f.into_resp();
                    reply.error(prefix, &message);
                }
                None => read.answer(&mut reply, &got),
            }
            out
        })))
    }
}

/// A read command: the entities it reads and the names it asks for.
struct Read {
    command: &'static str,
    entities: Vec<String>,
    /// `None`: every feature (`HGETALL`); empty: only whether the entity exists.
    names: Option<Vec<String>>,
}

impl Read {
    fn of(command: &'static str, args: &[Bytes]) -> Read {
        let text = |b: &Bytes| String::from_utf8_lossy(b).into_owned();
        let (entities, names) = match command {
            "exists" => (args[1..].iter().map(text).collect(), Some(Vec::new())),
            "hgetall" => (vec![text(&args[1])], None),
            _ => (
                vec![text(&args[1])],
                Some(args[2..].iter().map(text).collect()),
            ),
        };
        Read {
            command,
            entities,
            names,
        }
    }

    /// The reply, as single-node mode gives it from its own tables.
    fn answer(&self, r: &mut Reply<'_>, got: &[Option<Entity>]) {
        let first = got.first().and_then(Option::as_ref);
        let find = |name: &str| first.and_then(|e| e.iter().find(|(n, _)| n == name));
        let names = self.names.as_deref().unwrap_or_default();
        match self.command {
            "hget" => match names.first().and_then(|n| find(n)) {
                Some((_, v)) => value::write_val(r, v),
                None => r.null(),
            },
            "hmget" => {
                r.array(names.len());
                for n in names {
                    match find(n) {
                        Some((_, v)) => value::write_val(r, v),
                        None => r.null(),
                    }
                }
            }
            "hgetall" => {
                let all = first.map(Vec::as_slice).unwrap_or_default();
                r.map(all.len());
                for (n, v) in all {
                    r.bulk(n.as_bytes());
                    value::write_val(r, v);
                }
            }
            "hexists" => r.int(i64::from(names.first().and_then(|n| find(n)).is_some())),
            _ => r.int(got.iter().filter(|e| e.is_some()).count() as i64),
        }
    }
}
