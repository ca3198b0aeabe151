//! `veltrix tail STREAM`: follow a stream live over Server-Sent Events (docs/LIVE.md) and print
//! each event as one JSON line on stdout.
//!
//! The position is the last `seq` printed. When the connection drops (a server restart, the
//! network, a shutdown ending followers), the follow reconnects with `Last-Event-ID: <that
//! seq>`, so the server resumes right after it: no gap, no duplicate. Reconnects wait an
//! exponential backoff (100 ms doubling, at most 5 s; a 429/503's `Retry-After`) and go on
//! until they succeed. The command gives up only when the first connection fails (a wrong
//! `--server` or stream name should not hang) or a later answer is an error other than 429/503
//! (a 404: the stream was deleted while we were away). Notices, on stderr:
//! - `retained`: events the follow had not got were removed by retention meanwhile; it goes
//!   on at the first retained seq (the server announces a gap, never skips one silently).
//! - `deleted`: the stream was deleted; the command ends with exit 0.

use super::{Client, ClientArgs, ClientError, Timeouts, backoff, error_of, query_value, segment};
use futures_util::StreamExt;
use std::io::Write;
use std::time::Duration;
use vx_proto::sse::{Event, Id, KeepData, SseParser};

#[derive(Debug, clap::Args)]
pub struct TailArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    pub stream: String,
    /// First seq to print [default: only events after the stream's current end].
    #[arg(long, value_name = "SEQ")]
    pub from: Option<u64>,
    /// Only these types (comma-separated).
    #[arg(long, value_name = "TYPES")]
    pub types: Option<String>,
    /// Only this entity.
    #[arg(long, value_name = "ENTITY")]
    pub entity: Option<String>,
}

/// An SSE event's data longer than this is not from our server.
const MAX_DATA: usize = 64 << 20;
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How one connection ended.
enum End {
    /// The stream was deleted: stop.
    Deleted,
    /// The body ended or broke: reconnect.
    Dropped(String),
}

pub async fn run(args: &TailArgs) -> anyhow::Result<()> {
    let client = Client::with(&args.client, Timeouts::Live)?;
    // Without --from: start after the stream's end now (as `tail -f` shows what comes next).
    let from = match args.from {
        Some(from) => from,
        None => current_last(&client, &args.stream).await? + 1,
    };
    // The last seq printed: the position a reconnect resumes after.
    let mut last: Option<u64> = None;
    let mut connected = false;
    let mut attempt = 0u32;
    let out = std::io::stdout();
    loop {
        let (why, wait) = match connect(&client, args, from, last).await {
            Ok(resp) => {
                connected = true;
                attempt = 0;
                match follow(&client, resp, &mut last, &mut out.lock()).await? {
                    End::Deleted => return Ok(()),
                    End::Dropped(why) => (why, None),
                }
            }
            Err((e, _)) if !connected => return Err(e.into()),
            Err((e, wait)) if e.is_transient() => (e.to_string(), wait),
            Err((e, _)) => return Err(e.into()),
        };
        let wait = wait
            .unwrap_or_else(|| backoff(attempt, MAX_BACKOFF))
            .min(MAX_BACKOFF * 12);
        if attempt == 0 {
            eprintln!(
                "tail: connection lost ({why}); reconnecting after seq {}",
                last.unwrap_or(from.saturating_sub(1))
            );
        }
        attempt = attempt.saturating_add(1);
        tokio::time::sleep(wait).await;
    }
}

/// The stream's last seq now (`GET /v1/streams/{stream}`).
async fn current_last(client: &Client, stream: &str) -> Result<u64, ClientError> {
    let path = format!("/v1/streams/{}", segment(stream));
    let resp = client
        .send_ok(client.request(reqwest::Method::GET, &path))
        .await?;
    let v: serde_json::Value = resp.json().await.map_err(|e| client.failed(&e))?;
    Ok(v.get("last_seq")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0))
}

async fn connect(
    client: &Client,
    args: &TailArgs,
    from: u64,
    last: Option<u64>,
) -> Result<reqwest::Response, (ClientError, Option<Duration>)> {
    let mut path = format!("/v1/streams/{}/events?follow=true", segment(&args.stream));
    if last.is_none() {
        path.push_str(&format!("&from={from}"));
    }
    if let Some(t) = &args.types {
        path.push_str(&format!("&types={}", query_value(t)));
    }
    if let Some(e) = &args.entity {
        path.push_str(&format!("&entity={}", query_value(e)));
    }
    let mut req = client
        .request(reqwest::Method::GET, &path)
        .header(reqwest::header::ACCEPT, "text/event-stream");
    if let Some(last) = last {
        req = req.header("last-event-id", last.to_string());
    }
    let resp = client.send(req).await.map_err(|e| (e, None))?;
    if resp.status().is_success() {
        Ok(resp)
    } else {
        Err(error_of(resp).await)
    }
}

/// Read one connection's events, printing them; returns how it ended.
async fn follow(
    client: &Client,
    resp: reqwest::Response,
    last: &mut Option<u64>,
    out: &mut impl Write,
) -> anyhow::Result<End> {
    let mut body = resp.bytes_stream();
    let mut sse = SseParser::new(KeepData::All, MAX_DATA);
    loop {
        let chunk = match body.next().await {
            Some(Ok(c)) => c,
            Some(Err(e)) => return Ok(End::Dropped(client.failed(&e).to_string())),
            None => return Ok(End::Dropped("the server ended the follow".into())),
        };
        // The first end (or failure to print) stops the parse; the rest of the chunk is moot.
        let mut end: anyhow::Result<Option<End>> = Ok(None);
        let parsed = sse.feed(&chunk, &mut |event| {
            if matches!(end, Ok(None)) {
                end = dispatch(&event, last, out);
            }
        });
        if let Some(end) = end? {
            return Ok(end);
        }
        if let Err(e) = parsed {
            return Ok(End::Dropped(e.to_string()));
        }
    }
}

/// Act on a complete event: print it, report a notice.
fn dispatch(
    event: &Event<'_>,
    last: &mut Option<u64>,
    out: &mut impl Write,
) -> anyhow::Result<Option<End>> {
    match event.name {
        _ if event.is_message() => {
            let Some(Id::Seq(seq)) = event.id else {
                return Ok(None);
            };
            // The server resumes after Last-Event-ID; this keeps the no-duplicate promise
            // should anything send an event twice.
            if last.is_some_and(|l| seq <= l) {
                return Ok(None);
            }
            out.write_all(event.data)
                .and_then(|()| out.write_all(b"\n"))
                .and_then(|()| out.flush())
                .map_err(|e| ClientError::Output(format!("writing to stdout: {e}")))?;
            *last = Some(seq);
            Ok(None)
        }
        Some("retained") => {
            match (field(event, "from"), field(event, "first_seq")) {
                (Some(from), Some(first)) => eprintln!(
                    "tail: events {from}..{} were removed by retention before they could be read; going on at {first}",
                    first.saturating_sub(1)
                ),
                // Not the notice docs/API.md §5 describes: say what came rather than make up numbers.
                _ => eprintln!(
                    "tail: events were removed by retention before they could be read ({})",
                    String::from_utf8_lossy(event.data)
                ),
            }
            Ok(None)
        }
        Some("deleted") => {
            match field(event, "last_seq") {
                Some(last_seq) => {
                    eprintln!("tail: the stream was deleted (its last seq was {last_seq})")
                }
                None => eprintln!("tail: the stream was deleted"),
            }
            Ok(Some(End::Deleted))
        }
        _ => Ok(None),
    }
}

/// A number of a notice's JSON data.
fn field(event: &Event<'_>, key: &str) -> Option<u64> {
    serde_json::from_slice::<serde_json::Value>(event.data)
        .ok()?
        .get(key)?
        .as_u64()
}
