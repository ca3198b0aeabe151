//! Shutdown signals (docs/API.md §1.3): the first SIGTERM or SIGINT starts a graceful drain; a second
//! one exits at once. Exiting mid-drain is safe because the log is the truth: nothing
//! acknowledged is lost, whatever was not acknowledged may be retried.

use tokio::signal::unix::{Signal, SignalKind, signal};

/// Both handlers, installed up front so a signal during start-up is not lost to the default
/// disposition (which would kill the process without draining).
pub struct Signals {
    term: Signal,
    int: Signal,
}

impl Signals {
    /// Install the handlers. Must run inside a tokio runtime.
    pub fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }

    /// Resolves at the first signal; a second one then exits the process with status
    /// 128 + signal number (143 for SIGTERM, 130 for SIGINT).
    pub async fn shutdown(mut self) {
        let first = self.next().await;
        tracing::info!(
            signal = first,
            "signal received; send another to exit at once"
        );
        tokio::spawn(async move {
            let second = self.next().await;
            tracing::warn!(signal = second, "second signal: exiting without draining");
            std::process::exit(if second == "SIGINT" { 130 } else { 143 });
        });
    }
}
