//! `veltrix replay STREAM` and `veltrix features ENTITY`: read commands that print and exit.
//!
//! Replay asks for NDJSON pages of at most [`PAGE`] events (docs/API.md §5: a response holds at most
//! 100,000) and writes each event as it arrives, so memory is one chunk and one line whatever
//! the range. Pages follow each other from the last printed seq + 1 (which is right with and
//! without filters) until `--to`, the stream's last seq when the page started, or a short page.

use super::{Client, ClientArgs, ClientError, Timeouts, query_value, segment};
use futures_util::StreamExt;
use std::io::Write;

/// Events asked for per request.
const PAGE: u64 = 10_000;
/// An event line longer than this is not from our server.
const MAX_LINE: usize = 64 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReplayFormat {
    /// One JSON object per line.
    Ndjson,
    /// One JSON array.
    Json,
    /// YAML documents, one per event.
    Yaml,
}

#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    pub stream: String,
    /// First seq (inclusive) [default: the first retained].
    #[arg(long, value_name = "SEQ")]
    pub from: Option<u64>,
    /// Last seq (inclusive) [default: the stream's last when the replay starts].
    #[arg(long, value_name = "SEQ")]
    pub to: Option<u64>,
    /// Only these types (comma-separated).
    #[arg(long, value_name = "TYPES")]
    pub types: Option<String>,
    /// Only this entity.
    #[arg(long, value_name = "ENTITY")]
    pub entity: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = ReplayFormat::Ndjson)]
    pub format: ReplayFormat,
}

#[derive(Debug, clap::Args)]
pub struct FeaturesArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    pub entity: String,
    /// Only these features (comma-separated).
    #[arg(long, value_name = "NAMES")]
    pub names: Option<String>,
}

/// Writes events in the chosen format.
struct Printer<W: Write> {
    out: W,
    format: ReplayFormat,
    count: u64,
}

impl<W: Write> Printer<W> {
    fn event(&mut self, line: &[u8]) -> std::io::Result<()> {
        match self.format {
            ReplayFormat::Ndjson => {
                self.out.write_all(line)?;
                self.out.write_all(b"\n")?;
            }
            ReplayFormat::Json => {
                self.out
                    .write_all(if self.count == 0 { b"[\n" } else { b",\n" })?;
                self.out.write_all(line)?;
            }
            ReplayFormat::Yaml => {
                let mut doc = b"---\n".to_vec();
                vx_proto::canonical_yaml::write_json_as_yaml(
                    &mut doc,
                    &String::from_utf8_lossy(line),
                );
                doc.push(b'\n');
                self.out.write_all(&doc)?;
            }
        }
        self.count += 1;
        Ok(())
    }

    fn finish(&mut self) -> std::io::Result<()> {
        if self.format == ReplayFormat::Json {
            self.out
                .write_all(if self.count == 0 { b"[]\n" } else { b"\n]\n" })?;
        }
        self.out.flush()
    }
}

fn output_err(e: std::io::Error) -> ClientError {
    ClientError::Output(format!("writing to stdout: {e}"))
}

pub async fn replay(args: &ReplayArgs) -> Result<(), ClientError> {
    let client = Client::with(&args.client, Timeouts::Idle)?;
    let stdout = std::io::stdout();
    let mut p = Printer {
        out: std::io::BufWriter::new(stdout.lock()),
        format: args.format,
        count: 0,
    };
    let mut next = args.from;
    loop {
        let mut path = format!("/v1/streams/{}/events?limit={PAGE}", segment(&args.stream));
        if let Some(from) = next {
            path.push_str(&format!("&from={from}"));
        }
        if let Some(to) = args.to {
            path.push_str(&format!("&to={to}"));
        }
        if let Some(t) = &args.types {
            path.push_str(&format!("&types={}", query_value(t)));
        }
        if let Some(e) = &args.entity {
            path.push_str(&format!("&entity={}", query_value(e)));
        }
        let req = client
            .request(reqwest::Method::GET, &path)
            .header(reqwest::header::ACCEPT, "application/x-ndjson");
        let resp = client.send_ok(req).await?;
        let stream_last = resp
            .headers()
            .get("x-vx-last-seq")
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
            .unwrap_or(0);
        let (n, last) = page(&client, resp, &mut p).await?;
        let Some(last) = last else { break };
        if n < PAGE || args.to.is_some_and(|to| last >= to) || last >= stream_last {
            break;
        }
        next = Some(last + 1);
    }
    p.finish().map_err(output_err)
}

/// Print one page's events; returns how many and the last seq.
async fn page<W: Write>(
    client: &Client,
    resp: reqwest::Response,
    p: &mut Printer<W>,
) -> Result<(u64, Option<u64>), ClientError> {
    #[derive(serde::Deserialize)]
    struct Seq {
        seq: u64,
    }
    let mut body = resp.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    let (mut n, mut last) = (0u64, None);
    let mut ended = false;
    while !ended {
        match body.next().await {
            Some(Ok(c)) => buf.extend_from_slice(&c),
            Some(Err(e)) => return Err(client.failed(&e)),
            None => ended = true,
        }
        let mut start = 0;
        while let Some(nl) = memchr::memchr(b'\n', &buf[start..]) {
            let line = &buf[start..start + nl];
            start += nl + 1;
            if line.trim_ascii().is_empty() {
                continue;
            }
            let seq = serde_json::from_slice::<Seq>(line)
                .map_err(|e| ClientError::Output(format!("an event line without a seq: {e}")))?
                .seq;
            p.event(line).map_err(output_err)?;
            n += 1;
            last = Some(seq);
        }
        buf.drain(..start);
        if buf.len() > MAX_LINE {
            return Err(ClientError::Output(
                "an event line longer than 64 MiB".into(),
            ));
        }
    }
    Ok((n, last))
}

pub async fn features(args: &FeaturesArgs) -> Result<(), ClientError> {
    let client = Client::with(&args.client, Timeouts::Total)?;
    let mut path = format!("/v1/features/{}", segment(&args.entity));
    if let Some(names) = &args.names {
        path.push_str(&format!("?names={}", query_value(names)));
    }
    let resp = client
        .send_ok(client.request(reqwest::Method::GET, &path))
        .await?;
    let v: serde_json::Value = resp.json().await.map_err(|e| client.failed(&e))?;
    let text = serde_json::to_string_pretty(&v).map_err(|e| ClientError::Output(e.to_string()))?;
    println!("{text}");
    Ok(())
}
