//! `veltrix serve`: parse the command line, load the configuration, set up logging, and run
//! the server until SIGTERM/SIGINT. The client commands (`health`, `ingest`, `tail`, `replay`,
//! `features`) run on a single-threaded runtime; `check` verifies a data dir offline. Every
//! failure is one line on stderr and exit code 1.

use anyhow::Context;
use std::process::ExitCode;
use veltrix::cli::{self, Command};
use veltrix::config;
use veltrix::server::Server;
use veltrix::signals::Signals;
use veltrix::telemetry::Telemetry;

// Per-request allocations are small and cross threads (a tokio worker allocates a batch, the
// log writer frees it): measured in docs/BENCHMARKS.md against glibc malloc.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve(args),
        Command::Health(args) => health(&args),
        Command::Ingest(args) => client(veltrix::remote::ingest::run(&args)),
        Command::Tail(args) => client(veltrix::remote::tail::run(&args)),
        Command::Replay(args) => {
            client(async move { Ok(veltrix::remote::read::replay(&args).await?) })
        }
        Command::Features(args) => {
            client(async move { Ok(veltrix::remote::read::features(&args).await?) })
        }
        Command::Check(args) => veltrix::check::run(&args.data_dir),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line with the cause chain: start-up errors are read by operators, and a
            // backtrace (which anyhow's Debug adds under RUST_BACKTRACE) says nothing to them.
            // Once logging is up, keep the error in the log's format (JSON lines stay JSON).
            let message = causes(&e);
            if tracing::dispatcher::has_been_set() {
                tracing::error!("{message}");
            } else {
                eprintln!("error: {message}");
            }
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, skipping a cause whose text the message before it
/// already includes (our error types print their source; `anyhow` context does not).
fn causes(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
    }
    out
}

fn serve(args: cli::ServeArgs) -> anyhow::Result<()> {
    let env = config::load::process_env();
    let (config, warnings) = config::load(args.config.as_deref(), &env, &args.overrides())?;
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    // The exporter sends on this runtime, so it is built first and shut down after the
    // server stopped but before the runtime goes.
    let telemetry = config
        .telemetry
        .otlp_endpoint
        .as_deref()
        .map(|endpoint| Telemetry::start(endpoint, runtime.handle().clone()))
        .transpose()
        .map_err(anyhow::Error::msg)?;
    veltrix::logging::init(config.log.format, telemetry.as_ref()).map_err(anyhow::Error::msg)?;
    for w in warnings {
        tracing::warn!("{w}");
    }
    if let Some(endpoint) = &config.telemetry.otlp_endpoint {
        tracing::info!(endpoint = %endpoint.trim(), "exporting traces over OTLP/HTTP");
    }
    let result = runtime.block_on(async {
        let signals = Signals::install().context("cannot install signal handlers")?;
        let server = Server::bind(config).await?;
        server.run(signals.shutdown()).await?;
        Ok(())
    });
    if let Some(t) = telemetry {
        t.shutdown();
    }
    result
}

fn health(args: &veltrix::remote::ClientArgs) -> anyhow::Result<()> {
    let client = veltrix::remote::Client::new(args)?;
    self::client(async { Ok(client.health().await?) })?;
    println!("ready: {}", args.server);
    Ok(())
}

/// Run a client command on a single-threaded runtime (its blocking pool reads `ingest`'s input).
fn client(command: impl std::future::Future<Output = anyhow::Result<()>>) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = runtime.block_on(command);
    // Not waiting for blocking tasks: `ingest`'s reader may be blocked on a stdin that never
    // ends after the run stopped at a rejected request.
    runtime.shutdown_background();
    result
}
