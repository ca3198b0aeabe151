//! The command line: `veltrix serve [flags]`, the client commands (`health`, `ingest`, `tail`,
//! `replay`, `features`; their flags live with their code in [`crate::client`]) and the offline
//! `veltrix check DATA_DIR`. Each `serve` flag is also a config key (see
//! [`crate::config::keys`]); the key table, with defaults and env vars, is the help's epilogue.

use crate::config::{FsyncSetting, LogFormat, Overrides, keys};
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
    Health(crate::client::ClientArgs),
    /// Send events from a file or stdin (NDJSON, JSON, YAML, frames) in batches, with retries.
    Ingest(crate::client::ingest::IngestArgs),
    /// Follow a stream live, one JSON line per event; resumes after a dropped connection.
    Tail(crate::client::tail::TailArgs),
    /// Print a stream's events (a range) and exit.
    Replay(crate::client::read::ReplayArgs),
    /// Print an entity's features.
    Features(crate::client::read::FeaturesArgs),
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
    /// HTTP address, host:port (server.listen).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// Also serve HTTP on this Unix socket (server.uds).
    #[arg(long, value_name = "PATH")]
    pub uds: Option<PathBuf>,
    /// Binary frames address, host:port (server.frames_listen).
    #[arg(long, value_name = "ADDR")]
    pub frames_listen: Option<String>,
    /// Binary frames Unix socket (server.frames_uds).
    #[arg(long, value_name = "PATH")]
    pub frames_uds: Option<PathBuf>,
    /// Data directory (storage.data_dir).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Shard count (storage.shards); must match the data dir's recorded count.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub shards: Option<u32>,
    /// When to fsync (storage.fsync).
    #[arg(long, value_enum)]
    pub fsync: Option<FsyncSetting>,
    /// Log format (log.format).
    #[arg(long, value_enum)]
    pub log_format: Option<LogFormat>,
    /// Truncate a corrupt record found at start-up instead of refusing to start (says
    /// what it loses first).
    #[arg(long)]
    pub repair: bool,
}

impl ServeArgs {
    pub fn overrides(&self) -> Overrides {
        Overrides {
            listen: self.listen.clone(),
            uds: self.uds.clone(),
            frames_listen: self.frames_listen.clone(),
            frames_uds: self.frames_uds.clone(),
            data_dir: self.data_dir.clone(),
            shards: self.shards,
            fsync: self.fsync,
            log_format: self.log_format,
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
