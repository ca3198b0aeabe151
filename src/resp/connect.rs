//! The commands about the connection and the server, which clients send when they connect
//! (docs/RESP.md, "Connecting"), answered as Redis answers them: `AUTH`, `HELLO`, `CLIENT`
//! (`ID`, `SETNAME`, `GETNAME`, `SETINFO`), `SELECT`, `COMMAND` and `INFO`. The table
//! that names them is [`super::command`]'s.

use super::Ctx;
use super::command::{all, lookup};
use super::session::{Session, Spec};
use super::value::text;
use crate::config::Scope;
use crate::state::Phase;
use bytes::Bytes;
use vx_proto::ErrorCode;
use vx_storage::features::int_of;

/// What Redis says of a client name (or library name) with a character outside `!`..=`~`.
const BAD_NAME: &str = "Client names cannot contain spaces, newlines or special characters.";

/// Redis's rule for client names and library names and versions: printable ASCII, no space.
fn valid_name(b: &[u8]) -> bool {
    b.iter().all(|c| (b'!'..=b'~').contains(c))
}

/// A name as the session keeps it: `None` for the empty name (which clears it).
fn name_of(b: &[u8]) -> Option<String> {
    (!b.is_empty()).then(|| String::from_utf8_lossy(b).into_owned())
}

/// A token one of `auth.tokens` holds, whatever its scopes.
fn known(ctx: &Ctx, token: &str) -> bool {
    match crate::auth::authorize(ctx.state.tokens(), Some(token), Scope::Admin) {
        Ok(()) => true,
        Err(f) => f.code == ErrorCode::Forbidden,
    }
}

/// What `AUTH` without `auth.tokens` is told, as Redis tells it without a password.
const NO_TOKENS: &str = "AUTH <password> called without any password configured for the \
                         default user (this server has no auth.tokens)";
const WRONGPASS: &str = "invalid username-password pair or user is disabled.";

/// `HELLO`'s options, parsed.
#[derive(Default)]
struct Hello<'a> {
    resp3: Option<bool>,
    token: Option<&'a str>,
    name: Option<&'a [u8]>,
}

/// `HELLO [protover [AUTH user token] [SETNAME name]]`, parsed; or Redis's error.
fn parse_hello(args: &[Bytes]) -> Result<Hello<'_>, (&'static str, String)> {
    let mut h = Hello::default();
    if let Some(v) = args.get(1) {
        h.resp3 = match text(v).and_then(|s| s.parse::<i64>().ok()) {
            Some(2) => Some(false),
            Some(3) => Some(true),
            Some(_) => return Err(("NOPROTO", "unsupported protocol version".into())),
            None => {
                return Err((
                    "ERR",
                    "Protocol version is not an integer or out of range".into(),
                ));
            }
        };
    }
    let mut i = 2;
    while i < args.len() {
        let opt = &args[i];
        if opt.eq_ignore_ascii_case(b"AUTH") && i + 2 < args.len() {
            h.token = Some(text(&args[i + 2]).unwrap_or(""));
            i += 3;
        } else if opt.eq_ignore_ascii_case(b"SETNAME") && i + 1 < args.len() {
            if !valid_name(&args[i + 1]) {
                return Err(("ERR", BAD_NAME.into()));
            }
            h.name = Some(&args[i + 1]);
            i += 2;
        } else {
            return Err((
                "ERR",
                format!(
                    "Syntax error in HELLO option '{}'",
                    String::from_utf8_lossy(opt)
                ),
            ));
        }
    }
    Ok(h)
}

impl Session {
    /// `AUTH [user] token`: the user name is ignored (the token is the credential).
    pub(super) fn auth(&mut self, ctx: &Ctx, args: &[Bytes], out: &mut Vec<u8>) {
        if args.len() > 3 {
            self.reply(out)
                .error("ERR", "wrong number of arguments for 'auth' command");
            return;
        }
        if ctx.state.tokens().is_empty() {
            self.reply(out).error("ERR", NO_TOKENS);
            return;
        }
        match args.last().and_then(|t| text(t)) {
            Some(t) if known(ctx, t) => {
                self.token = Some(t.to_string());
                self.reply(out).simple("OK");
            }
            _ => self.reply(out).error("WRONGPASS", WRONGPASS),
        }
    }

    /// `HELLO [protover [AUTH user token] [SETNAME name]]`: nothing changes unless all of it
    /// is accepted.
    pub(super) fn hello(&mut self, ctx: &Ctx, args: &[Bytes], out: &mut Vec<u8>) {
        let h = match parse_hello(args) {
            Ok(h) => h,
            Err((prefix, message)) => return self.reply(out).error(prefix, &message),
        };
        let tokens = ctx.state.tokens();
        match h.token {
            Some(_) if tokens.is_empty() => return self.reply(out).error("ERR", NO_TOKENS),
            Some(t) if known(ctx, t) => self.token = Some(t.to_string()),
            Some(_) => return self.reply(out).error("WRONGPASS", WRONGPASS),
            None if !tokens.is_empty() && self.token.is_none() => {
                return self.reply(out).error(
                    "NOAUTH",
                    "HELLO must be called with the client already authenticated, otherwise the \
                     HELLO <proto> AUTH <user> <pass> option can be used to authenticate the \
                     client and select the RESP protocol version at the same time",
                );
            }
            None => {}
        }
        if let Some(resp3) = h.resp3 {
            self.resp3 = resp3;
        }
        if let Some(n) = h.name {
            self.name = name_of(n);
        }
        let mut r = self.reply(out);
        r.map(7);
        r.bulk(b"server");
        r.bulk(b"veltrix");
        r.bulk(b"version");
        r.bulk(env!("CARGO_PKG_VERSION").as_bytes());
        r.bulk(b"proto");
        r.int(if self.resp3 { 3 } else { 2 });
        r.bulk(b"id");
        r.int(i64::try_from(self.id).unwrap_or(i64::MAX));
        r.bulk(b"mode");
        r.bulk(b"standalone");
        r.bulk(b"role");
        r.bulk(b"master");
        r.bulk(b"modules");
        r.array(0);
    }

    /// `CLIENT ID | SETNAME name | GETNAME | SETINFO LIB-NAME|LIB-VER value`. The other
    /// subcommands (`LIST`, `INFO`, `KILL`, …) are not offered: an error says so, as Redis
    /// answers one it does not know.
    pub(super) fn client(&mut self, args: &[Bytes], out: &mut Vec<u8>) {
        let sub = args[1].to_ascii_lowercase();
        let arity = match sub.as_slice() {
            b"id" | b"getname" => 2,
            b"setname" => 3,
            b"setinfo" => 4,
            _ => {
                let message = format!(
                    "unknown subcommand '{}'. Try CLIENT HELP.",
                    String::from_utf8_lossy(&args[1])
                );
                return self.reply(out).error("ERR", &message);
            }
        };
        if args.len() != arity {
            let message = format!(
                "wrong number of arguments for 'client|{}' command",
                String::from_utf8_lossy(&sub)
            );
            return self.reply(out).error("ERR", &message);
        }
        match sub.as_slice() {
            b"id" => {
                let id = i64::try_from(self.id).unwrap_or(i64::MAX);
                self.reply(out).int(id);
            }
            b"getname" => match self.name.as_deref() {
                Some(n) => self.reply(out).bulk(n.as_bytes()),
                None => self.reply(out).null(),
            },
            b"setname" if !valid_name(&args[2]) => self.reply(out).error("ERR", BAD_NAME),
            b"setname" => {
                self.name = name_of(&args[2]);
                self.reply(out).simple("OK");
            }
            _ => self.set_info(&args[2], &args[3], out),
        }
    }

    /// `CLIENT SETINFO attribute value`: the client library's name or version, checked as
    /// Redis checks them. Redis shows them only in `CLIENT LIST` and `CLIENT INFO`, which
    /// are not offered, so nothing keeps them.
    fn set_info(&self, attr: &[u8], value: &[u8], out: &mut Vec<u8>) {
        if !attr.eq_ignore_ascii_case(b"lib-name") && !attr.eq_ignore_ascii_case(b"lib-ver") {
            let message = format!("Unrecognized option '{}'", String::from_utf8_lossy(attr));
            return self.reply(out).error("ERR", &message);
        }
        if !valid_name(value) {
            let message = format!(
                "{} cannot contain spaces, newlines or special characters.",
                String::from_utf8_lossy(attr).to_ascii_lowercase()
            );
            return self.reply(out).error("ERR", &message);
        }
        self.reply(out).simple("OK");
    }

    /// `SELECT db`: the features are database 0, the only one.
    pub(super) fn select(&self, args: &[Bytes], out: &mut Vec<u8>) {
        match text(&args[1]).and_then(int_of) {
            Some(0) => self.reply(out).simple("OK"),
            Some(_) => self.reply(out).error("ERR", "DB index is out of range"),
            None => self
                .reply(out)
                .error("ERR", "value is not an integer or out of range"),
        }
    }

    /// `COMMAND`, `COMMAND COUNT`, `COMMAND INFO name…`, `COMMAND DOCS [name…]`.
    pub(super) fn command(&self, args: &[Bytes], out: &mut Vec<u8>) {
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

    /// `INFO [section…]`: `server`, `clients`, `memory`, `persistence`, `replication`,
    /// `keyspace` (all by default, and for `all`, `everything`, `default`).
    pub(super) fn info(&self, ctx: &Ctx, args: &[Bytes], out: &mut Vec<u8>) {
        let wanted: Vec<String> = args[1..]
            .iter()
            .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
            .collect();
        let all = wanted.is_empty()
            || wanted
                .iter()
                .any(|w| matches!(w.as_str(), "all" | "everything" | "default"));
        let text: String = info_sections(ctx)
            .into_iter()
            .filter(|(name, _)| all || wanted.iter().any(|w| w == name))
            .map(|(_, body)| body)
            .collect::<Vec<_>>()
            .join("\r\n");
        self.reply(out).bulk(text.as_bytes());
    }
}

/// `INFO`'s sections, in Redis's order: each name and its text. `loading` is 1 while the
/// store is still being opened (the data commands answer `-LOADING` then), which clients
/// such as ioredis wait out before they report the connection ready.
fn info_sections(ctx: &Ctx) -> Vec<(&'static str, String)> {
    let stats = ctx.state.router().map(|r| r.store().features().stats());
    let (used, max) = stats.map_or((0, 0), |s| (s.bytes, s.max_bytes));
    let loading = u8::from(ctx.state.phase() == Phase::Starting);
    let keys = match stats {
        Some(s) if s.entities > 0 => format!("db0:keys={},expires=0,avg_ttl=0\r\n", s.entities),
        _ => String::new(),
    };
    vec![
        (
            "server",
            format!(
                "# Server\r\nredis_version:7.2.0\r\nveltrix_version:{}\r\nredis_mode:standalone\r\n\
                 os:{}\r\narch_bits:{}\r\nprocess_id:{}\r\n",
                env!("CARGO_PKG_VERSION"),
                std::env::consts::OS,
                usize::BITS,
                std::process::id()
            ),
        ),
        (
            "clients",
            format!(
                "# Clients\r\nconnected_clients:{}\r\n",
                ctx.state.metrics().connections().open.get()
            ),
        ),
        (
            "memory",
            format!(
                "# Memory\r\nused_memory:{used}\r\nmaxmemory:{max}\r\n\
                 maxmemory_policy:noeviction\r\n"
            ),
        ),
        (
            "persistence",
            format!("# Persistence\r\nloading:{loading}\r\n"),
        ),
        (
            "replication",
            "# Replication\r\nrole:master\r\nconnected_slaves:0\r\n".to_string(),
        ),
        ("keyspace", format!("# Keyspace\r\n{keys}")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_names_follow_redis_rules() {
        assert!(valid_name(b"worker-1"));
        assert!(valid_name(b""));
        assert!(valid_name(b"a!~"));
        for bad in [&b"a b"[..], b"a\nb", b"\x00", b"caf\xc3\xa9"] {
            assert!(!valid_name(bad), "{bad:?}");
        }
        assert_eq!(name_of(b""), None);
        assert_eq!(name_of(b"w").as_deref(), Some("w"));
    }
}
