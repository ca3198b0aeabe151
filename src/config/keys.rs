//! The declared keys ([`super::sections`]) by name: get and set, the `veltrix serve` flags
//! ([`KeyFlags`]), the key table of `veltrix serve --help` and the one of docs/CONFIG.md. All
//! are derived from the same declarations, so they can never disagree.

use super::Config;
pub use super::declare::{FileOnly, Flag, Key, env_name};
pub use super::sections::{FILE_ONLY, KEYS};
use super::units::BadValue;
use clap::{Arg, ArgMatches, Command};

/// The declared key called `name`.
pub fn find(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.name == name)
}

/// The current value of `name` as it would be written in an env var ("" for unset).
pub fn get(cfg: &Config, name: &str) -> Option<String> {
    find(name).map(|k| (k.get)(cfg))
}

/// Set `name` from its text form. Errors say what was expected; the caller adds where the
/// value came from.
pub fn set(cfg: &mut Config, name: &str, v: &str) -> Result<(), BadValue> {
    match find(name) {
        Some(k) => (k.set)(cfg, v),
        None => Err(BadValue(format!("unknown key {name}"))),
    }
}

/// The default of `k` as text, `unset` when it has none.
fn default_text(k: &Key, defaults: &Config) -> Option<String> {
    Some((k.get)(defaults)).filter(|v| !v.is_empty())
}

/// The key table as plain text, for `veltrix serve --help`.
pub fn help_table() -> String {
    let defaults = Config::default();
    let mut out = String::from(
        "Configuration keys (file < env VX_<SECTION>_<KEY> < flag; file via --config or VX_CONFIG):\n",
    );
    for k in KEYS {
        let default = default_text(k, &defaults).unwrap_or_else(|| "unset".to_string());
        let flag = k
            .flag
            .as_ref()
            .map(|f| format!(" [{}]", f.long))
            .unwrap_or_default();
        out.push_str(&format!(
            "  {:<27} default {:<15} {}{flag}\n      {}\n",
            k.name,
            default,
            k.env(),
            k.help
        ));
    }
    for f in FILE_ONLY {
        out.push_str(&format!(
            "  {:<27} default []  (file only)\n      {}\n",
            f.name, f.help
        ));
    }
    out.push_str("Log filter: env VX_LOG (or RUST_LOG), e.g. VX_LOG=info,veltrix=debug.\n");
    out
}

/// The key table of docs/CONFIG.md (Markdown), header included.
pub fn docs_table() -> String {
    let defaults = Config::default();
    let mut out =
        String::from("| key | default | env | flag | meaning |\n| --- | --- | --- | --- | --- |\n");
    for k in KEYS {
        let default = match (k.shown, default_text(k, &defaults)) {
            (Some(shown), _) => shown.to_string(),
            (None, Some(v)) => format!("`{v}`"),
            (None, None) => "unset".to_string(),
        };
        let flag = k
            .flag
            .as_ref()
            .map(|f| format!("`{} {}` ", f.long, flag_value(f)))
            .unwrap_or_default();
        out.push_str(&format!(
            "| `{}` | {default} | `{}` | {flag}| {} |\n",
            k.name,
            k.env(),
            k.doc
        ));
    }
    for f in FILE_ONLY {
        out.push_str(&format!(
            "| `{}` | {} | file only | | {} |\n",
            f.name, f.shown, f.doc
        ));
    }
    out
}

/// A flag's value in docs/CONFIG.md: its choices when it has a fixed set (`always\|never`),
/// else its value name.
fn flag_value(f: &Flag) -> String {
    match (f.parser)().possible_values() {
        Some(values) => values
            .map(|v| v.get_name().to_string())
            .collect::<Vec<_>>()
            .join("\\|"),
        None => f.value_name.to_string(),
    }
}

/// The `veltrix serve` flags of the keys that have one, as `(key, value)` in the order given.
/// Clap checks each value with the key's parser; the key's codec then sets it like an env
/// value (see [`super::load`]).
#[derive(Clone, Debug, Default)]
pub struct KeyFlags(pub Vec<(&'static str, String)>);

impl clap::FromArgMatches for KeyFlags {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut flags = KeyFlags::default();
        flags.update_from_arg_matches(m)?;
        Ok(flags)
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        for k in KEYS.iter().filter(|k| k.flag.is_some()) {
            if let Some(v) = m.get_raw(k.name).and_then(|mut v| v.next()) {
                self.0.retain(|(name, _)| *name != k.name);
                self.0.push((k.name, v.to_string_lossy().into_owned()));
            }
        }
        Ok(())
    }
}

impl clap::Args for KeyFlags {
    fn augment_args(cmd: Command) -> Command {
        KEYS.iter().fold(cmd, |cmd, k| match &k.flag {
            Some(f) => cmd.arg(
                Arg::new(k.name)
                    .long(f.long.trim_start_matches("--"))
                    .value_name(f.value_name)
                    .value_parser((f.parser)())
                    .help(format!("{} ({})", capitalized(k.help), k.name)),
            ),
            None => cmd,
        })
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|first| first.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}
