//! The command line: `veltrix serve [flags]`, the client commands (`health`, `ingest`, `tail`,
//! `replay`, `features`; their flags live with their code in [`crate::remote`]) and the offline
//! `veltrix check DATA_DIR`. Each `serve` flag but `--config` and `--repair` is a config key,
//! declared with it ([`crate::config::sections`]); the key table, with defaults and env vars,
//! is the help's epilogue.

use crate::config::{Overrides, keys};
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "veltrix",
    version,
    about = "Event-stream ingestion, storage and replay"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the service.
    Serve(ServeArgs),
    /// Ask a running server whether it is ready (exit 0) or not (exit 1, one line saying why).
    Health(crate::remote::ClientArgs),
    /// Send events from a file or stdin (NDJSON, JSON, YAML, frames) in batches, with retries.
    Ingest(crate::remote::ingest::IngestArgs),
    /// Follow a stream live, one JSON line per event; resumes after a dropped connection.
    Tail(crate::remote::tail::TailArgs),
    /// Print a stream's events (a range) and exit.
    Replay(crate::remote::read::ReplayArgs),
    /// Print an entity's features.
    Features(crate::remote::read::FeaturesArgs),
    /// Verify a data dir offline (log segments, index files, snapshots); works while a server
    /// holds it. Exit 1 when anything is corrupt.
    Check(CheckArgs),
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The data dir (storage.data_dir).
    #[arg(value_name = "DATA_DIR")]
    pub data_dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// YAML config file.
    #[arg(long, env = "VX_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The flags of the config keys that have one, declared with the keys.
    #[command(flatten)]
    pub keys: keys::KeyFlags,
    /// Truncate a corrupt record found at start-up instead of refusing to start (says
    /// what it loses first).
    #[arg(long)]
    pub repair: bool,
}

impl ServeArgs {
    pub fn overrides(&self) -> Overrides {
        Overrides {
            flags: self.keys.clone(),
            repair: self.repair,
        }
    }
}

/// The clap command with the key table appended to `serve --help`.
pub fn command() -> clap::Command {
    Cli::command().mut_subcommand("serve", |c| c.after_help(keys::help_table()))
}

/// Parse `std::env::args`, exiting with clap's message on a usage error or `--help`.
pub fn parse() -> Cli {
    let matches = command().get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}
