//! `veltrix ingest FILE|-`: send a file (or stdin) as `POST /v1/events` requests, in batches
//! cut by [`super::split`] on a blocking thread and sent one at a time, in input order.
//!
//! - **Retries**: a 429 or 503 waits what `X-Vx-Retry-After-Ms` (or `Retry-After`) says; a
//!   connection failure or a timeout waits an exponential backoff (100 ms doubling, at most
//!   10 s); either is retried up to `--retries` times per request. A retry after a lost answer
//!   may store a request twice unless its events carry `id`s (docs/API.md §2 idempotency), as with any
//!   at-least-once producer.
//! - **Rejections**: any other error answer stops the run; the error names the server's code
//!   and message, the input position of the event it names (`index`), and how many events the
//!   earlier requests stored (requests are atomic, so the rejected one stored nothing).
//! - **Progress** on stderr when it is a terminal: a bar over the file's bytes with the event
//!   rate and ETA, or a spinner for stdin. The summary is printed either way.

use super::split::{self, Batch, Format, Limits, SplitError};
use super::{Client, ClientArgs, ClientError, Timeouts, backoff, error_of};
use anyhow::Context;
use bytes::Bytes;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Debug, clap::Args)]
pub struct IngestArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// The file to send, or `-` for stdin.
    #[arg(value_name = "FILE|-")]
    pub input: PathBuf,
    /// Input format [default: from the extension (.json, .ndjson/.jsonl, .yaml/.yml,
    /// .vxf/.frames); ndjson for stdin].
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Events per request (YAML: documents; frames: BATCH frames).
    #[arg(long = "batch", default_value_t = 1000, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: u64,
    /// Bytes per request at most (under the server's ingest.max_body_bytes, 64 MiB by default).
    #[arg(long, default_value_t = 8 << 20, value_name = "BYTES",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_bytes: u64,
    /// Durability to ask for (X-Vx-Durability); default: the server's mode.
    #[arg(long, value_parser = ["none", "write", "fsync"])]
    pub durability: Option<String>,
    /// Attempts after the first for one request (429, 503, connection failures).
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub retries: u32,
}

/// What a run did.
#[derive(Debug, Default)]
struct Totals {
    events_sent: u64,
    accepted: u64,
    duplicates: u64,
    requests: u64,
    retries: u64,
}

/// Cut and send; prints the summary on stdout.
pub async fn run(args: &IngestArgs) -> anyhow::Result<()> {
    let client = Client::with(&args.client, Timeouts::Idle)?;
    let stdin = args.input.as_os_str() == "-";
    let format = match (args.format, stdin) {
        (Some(f), _) => f,
        (None, true) => Format::Ndjson,
        (None, false) => Format::of_path(&args.input).with_context(|| {
            format!(
                "cannot tell the format of {} from its extension: use --format ndjson|json|yaml|frames",
                args.input.display()
            )
        })?,
    };
    let (input, size): (Box<dyn std::io::Read + Send>, Option<u64>) = if stdin {
        (Box::new(std::io::stdin()), None)
    } else {
        let f = std::fs::File::open(&args.input)
            .with_context(|| format!("cannot open {}", args.input.display()))?;
        let size = f.metadata().ok().map(|m| m.len());
        (Box::new(f), size)
    };
    let limits = Limits {
        events: args.batch,
        bytes: usize::try_from(args.max_bytes).unwrap_or(usize::MAX),
    };
    // Two batches queued ahead of the sender: reading overlaps sending, memory stays bounded.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Batch>(2);
    let splitter = tokio::task::spawn_blocking(move || -> Result<(), SplitError> {
        split::split(input, format, limits, &mut |b| tx.blocking_send(b).is_ok())
    });
    let bar = progress(size);
    let started = Instant::now();
    let mut totals = Totals::default();
    let mut failure: Option<anyhow::Error> = None;
    // Ctrl-C ends the run with the summary of what was stored, rather than silently.
    let interrupt = tokio::signal::ctrl_c();
    tokio::pin!(interrupt);
    loop {
        let step = async {
            let mut batch = rx.recv().await?;
            let body = Bytes::from(std::mem::take(&mut batch.body));
            let result = send(&client, args, format, body, &mut totals).await;
            Some((batch, result))
        };
        let stepped = tokio::select! {
            s = step => s,
            _ = &mut interrupt => {
                failure = Some(anyhow::anyhow!(
                    "interrupted; {} stored before it (a request in flight may be stored too)",
                    were_accepted(totals.accepted + totals.duplicates)
                ));
                break;
            }
        };
        let Some((batch, result)) = stepped else {
            break;
        };
        match result {
            Ok(()) => {
                bar.set_position(batch.read_to);
                let secs = started.elapsed().as_secs_f64().max(1e-3);
                bar.set_message(format!(
                    "{}, {:.0} events/s",
                    plural(totals.events_sent, "event", "events"),
                    totals.events_sent as f64 / secs
                ));
            }
            Err(e) => {
                failure = Some(rejected(e, &batch, format, &totals));
                break;
            }
        }
    }
    // Dropping the receiver ends the splitter at its next batch.
    drop(rx);
    bar.finish_and_clear();
    let elapsed = started.elapsed();
    println!("{}", summary(&totals, elapsed));
    if let Some(e) = failure {
        // Not waiting for the splitter: it may be blocked reading a stdin that never ends.
        return Err(e);
    }
    let split_result = splitter.await.context("the input reader panicked")?;
    split_result.map_err(|e| {
        anyhow::anyhow!(
            "{e}; {} before it",
            were_accepted(totals.accepted + totals.duplicates)
        )
    })
}

/// `1 event`, `2 events`.
fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn were_accepted(n: u64) -> String {
    if n == 1 {
        "1 event was accepted".to_string()
    } else {
        format!("{n} events were accepted")
    }
}

fn progress(size: Option<u64>) -> ProgressBar {
    let bar = match size {
        Some(len) => ProgressBar::new(len).with_style(
            ProgressStyle::with_template("{bar:30} {bytes}/{total_bytes} {msg} (ETA {eta})")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        ),
        None => ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template("{spinner} {bytes} read, {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        ),
    };
    if std::io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::stderr());
        bar.enable_steady_tick(Duration::from_millis(200));
    } else {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar
}

fn summary(t: &Totals, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64();
    format!(
        "sent {} in {}: {} accepted, {}, {}, {:.2} s, {:.0} events/s",
        plural(t.events_sent, "event", "events"),
        plural(t.requests, "request", "requests"),
        t.accepted,
        plural(t.duplicates, "duplicate", "duplicates"),
        plural(t.retries, "retry", "retries"),
        secs,
        t.events_sent as f64 / secs.max(1e-3)
    )
}

/// The error that stops a run, with where in the input it happened.
fn rejected(e: ClientError, batch: &Batch, format: Format, t: &Totals) -> anyhow::Error {
    let stored = t.accepted + t.duplicates;
    let unit = match format {
        Format::Yaml => "document",
        Format::Frames => "frame",
        Format::Ndjson | Format::Json => "event",
    };
    let mut at = format!(
        "request {} ({unit}s {}–{} of the input)",
        t.requests + 1,
        batch.first + 1,
        batch.first + batch.events
    );
    if let ClientError::Server { detail, .. } = &e
        && matches!(format, Format::Ndjson | Format::Json)
        && let Some(index) = detail
            .split(", ")
            .find_map(|kv| kv.strip_prefix("index=")?.parse::<u64>().ok())
    {
        at = format!("event {} of the input", batch.first + index + 1);
    }
    anyhow::anyhow!("{e}; at {at}; {} before it", were_accepted(stored))
}

/// Send one batch, retrying what is transient.
async fn send(
    client: &Client,
    args: &IngestArgs,
    format: Format,
    body: Bytes,
    t: &mut Totals,
) -> Result<(), ClientError> {
    let mut attempt = 0u32;
    loop {
        let mut req = client
            .request(reqwest::Method::POST, "/v1/events")
            .header(reqwest::header::CONTENT_TYPE, format.content_type())
            .body(body.clone());
        if let Some(d) = &args.durability {
            req = req.header("x-vx-durability", d);
        }
        let (err, wait) = match client.send(req).await {
            Ok(resp) if resp.status().is_success() => {
                let v: serde_json::Value = resp.json().await.map_err(|e| client.failed(&e))?;
                let n = |k: &str| v.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
                t.requests += 1;
                t.accepted += n("accepted");
                t.duplicates += n("duplicates");
                t.events_sent += n("accepted") + n("duplicates");
                return Ok(());
            }
            Ok(resp) => error_of(resp).await,
            Err(e) => (e, None),
        };
        if !err.is_transient() || attempt >= args.retries {
            return Err(err);
        }
        let wait = wait
            .unwrap_or_else(|| backoff(attempt, Duration::from_secs(10)))
            .min(Duration::from_secs(60));
        attempt += 1;
        t.retries += 1;
        tokio::time::sleep(wait).await;
    }
}
