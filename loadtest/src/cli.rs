//! The command line: `vx-loadtest run WORKLOAD.toml [--set key=value]… [--json F] [--plot F]`
//! and `vx-loadtest merge A.json B.json… [--json F] [--plot F]`.

use crate::report::{Report, merge};
use crate::runner::{Progress, run};
use crate::workload::{Workload, keys_help};
use anyhow::Context as _;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "vx-loadtest",
    version,
    about = "Drive Veltrix (or Redis, for the kv scenario) with a reproducible workload: open or closed loop, HdrHistogram latencies, a JSON report and an SVG plot.",
    after_help = "Workloads live in loadtest/workloads/. `vx-loadtest run --help` lists every workload key."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a workload file and print the table (and write the report and plot if asked).
    Run {
        /// The TOML workload.
        workload: PathBuf,
        /// Override a key of the workload: key=value (value in TOML syntax; bare words are strings).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
        /// Write the full report, histograms included, as JSON.
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Draw throughput and latency over time as SVG.
        #[arg(long, value_name = "FILE")]
        plot: Option<PathBuf>,
        /// No progress lines (the table is still printed).
        #[arg(long, short)]
        quiet: bool,
    },
    /// Combine the JSON reports of load hosts that ran the same workload at the same time
    /// (histograms merged exactly, throughputs added).
    Merge {
        #[arg(required = true, value_name = "REPORT.json")]
        reports: Vec<PathBuf>,
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        #[arg(long, value_name = "FILE")]
        plot: Option<PathBuf>,
    },
}

/// Exit codes: 0 the run completed; 1 it could not run; 2 it ran but nothing succeeded in
/// the measured window; 3 it ran but its check failed (fanout: a follower missed, repeated or
/// reordered an event).
pub fn main_from<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cmd = Cli::command().mut_subcommand("run", |c| c.after_long_help(keys_help()));
    let matches = match cmd.try_get_matches_from(args) {
        Ok(m) => m,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(1);
        }
    };
    match execute(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("vx-loadtest: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn execute(cli: Cli) -> anyhow::Result<ExitCode> {
    let report = match cli.command {
        Command::Run {
            workload,
            sets,
            json,
            plot,
            quiet,
        } => {
            let w = Workload::load(&workload, &sets)?;
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("starting the runtime")?;
            let progress = if quiet {
                Progress::Quiet
            } else {
                Progress::Stderr
            };
            let report = runtime.block_on(run(w, progress))?;
            write_outputs(&report, json.as_deref(), plot.as_deref())?;
            report
        }
        Command::Merge {
            reports,
            json,
            plot,
        } => {
            let mut all = Vec::with_capacity(reports.len());
            for path in &reports {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                let origin = path.display().to_string();
                all.push((origin.clone(), Report::from_json(&text, &origin)?));
            }
            for warning in crate::report::merge_warnings(&all) {
                eprintln!("vx-loadtest: warning: {warning}");
            }
            let report = merge(&all)?;
            write_outputs(&report, json.as_deref(), plot.as_deref())?;
            report
        }
    };
    print!("{}", report.table());
    let succeeded = report.operations.values().any(|o| o.ok > 0);
    Ok(if !succeeded {
        ExitCode::from(2)
    } else if report.check_failed() {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

fn write_outputs(report: &Report, json: Option<&Path>, plot: Option<&Path>) -> anyhow::Result<()> {
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(report)?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = plot {
        crate::plot::plot(report, path)?;
    }
    Ok(())
}
