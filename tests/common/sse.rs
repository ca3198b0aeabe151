//! A Server-Sent Events reader for the live replay tests (docs/API.md §5): opens a follow and parses
//! the body into frames with the clients' parser (`vx_proto::sse`), with bounded waits.

use super::Api;
use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use std::collections::VecDeque;
use std::time::Duration;
use vx_proto::sse::{Event, Id, SseParser};

/// One SSE block (the lines up to a blank line).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Frame {
    pub id: Option<u64>,
    pub event: Option<String>,
    pub data: String,
    /// The block held only comment lines (`: …`).
    pub comment: bool,
}

impl Frame {
    fn of(e: &Event<'_>) -> Frame {
        Frame {
            id: e.id.map(|id| match id {
                Id::Seq(seq) => seq,
                Id::Invalid => panic!("an SSE id that is not a seq in {e:?}"),
            }),
            event: e.name.map(str::to_string),
            data: String::from_utf8_lossy(e.data).into_owned(),
            comment: e.comment,
        }
    }

    /// The event's JSON (`data`), parsed.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("data {:?}: {e}", self.data))
    }
}

/// An open SSE (or NDJSON) response being read.
pub struct Follow {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    body: BoxStream<'static, reqwest::Result<Bytes>>,
    buf: Vec<u8>,
    sse: SseParser,
    /// Frames parsed, not yet taken.
    frames: VecDeque<Frame>,
    /// The body ended (cleanly or not).
    pub ended: bool,
    /// The body ended with an error (no final chunk).
    pub failed: bool,
}

/// A client without the harness's request timeout: follows last as long as a test needs.
pub fn live_client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("build the live client")
}

impl Follow {
    /// `GET path` with `headers` (add `Accept: text/event-stream` for SSE).
    pub async fn open(
        client: &reqwest::Client,
        api: &Api,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Follow {
        let mut rb = client.get(format!("{}{}", api.base, path));
        for (k, v) in headers {
            rb = rb.header(*k, *v);
        }
        let r = tokio::time::timeout(Duration::from_secs(20), rb.send())
            .await
            .unwrap_or_else(|_| panic!("GET {path}: no response head in 20 s"))
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        Follow {
            status: r.status().as_u16(),
            headers: r.headers().clone(),
            body: r.bytes_stream().boxed(),
            buf: Vec::new(),
            sse: SseParser::default(),
            frames: VecDeque::new(),
            ended: false,
            failed: false,
        }
    }

    /// An SSE follow of `stream` with the query `query` (without `?`).
    pub async fn sse(
        client: &reqwest::Client,
        api: &Api,
        stream: &str,
        query: &str,
        extra: &[(&str, &str)],
    ) -> Follow {
        let path = format!("/v1/streams/{}/events?{query}", super::enc(stream));
        let mut headers = vec![("accept", "text/event-stream")];
        headers.extend_from_slice(extra);
        Follow::open(client, api, &path, &headers).await
    }

    pub fn header_u64(&self, name: &str) -> u64 {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("header {name} missing or not a number"))
    }

    /// Read more of the body; false once it ended.
    async fn fill(&mut self, wait: Duration) -> bool {
        if self.ended {
            return false;
        }
        match tokio::time::timeout(wait, self.body.next()).await {
            Err(_) => panic!("nothing from the follow for {wait:?}"),
            Ok(None) => {
                self.ended = true;
                false
            }
            Ok(Some(Err(_))) => {
                self.ended = true;
                self.failed = true;
                false
            }
            Ok(Some(Ok(chunk))) => {
                self.buf.extend_from_slice(&chunk);
                true
            }
        }
    }

    /// The next SSE frame, `None` once the body ended. Panics after `wait` without one.
    pub async fn frame(&mut self, wait: Duration) -> Option<Frame> {
        loop {
            if let Some(f) = self.frames.pop_front() {
                return Some(f);
            }
            if !self.buf.is_empty() {
                let frames = &mut self.frames;
                self.sse
                    .feed(&self.buf, &mut |e| frames.push_back(Frame::of(&e)))
                    .unwrap_or_else(|e| panic!("the SSE body: {e}"));
                self.buf.clear();
                continue;
            }
            if !self.fill(wait).await {
                return None;
            }
        }
    }

    /// The next event frame (skipping comments); `None` once the body ended.
    pub async fn event(&mut self, wait: Duration) -> Option<Frame> {
        loop {
            let f = self.frame(wait).await?;
            if !f.comment {
                return Some(f);
            }
        }
    }

    /// Events until one with `id` ≥ `last` arrives, checking each is the next seq after
    /// `expect_from - 1`: the seqs received.
    pub async fn until_seq(&mut self, expect_from: u64, last: u64, wait: Duration) -> Vec<u64> {
        let mut seqs = Vec::new();
        let mut next = expect_from;
        while next <= last {
            let f = self
                .event(wait)
                .await
                .unwrap_or_else(|| panic!("the follow ended at seq {next}, before {last}"));
            let id = f.id.unwrap_or_else(|| panic!("a frame without id: {f:?}"));
            assert_eq!(id, next, "gap or duplicate: got seq {id}, expected {next}");
            assert_eq!(f.json()["seq"], id, "the data's seq is its id");
            seqs.push(id);
            next += 1;
        }
        seqs
    }

    /// The next NDJSON line; `None` once the body ended. Blank lines (heartbeats) are skipped.
    pub async fn line(&mut self, wait: Duration) -> Option<serde_json::Value> {
        loop {
            if let Some(end) = find(&self.buf, b"\n") {
                let line: Vec<u8> = self.buf.drain(..end + 1).collect();
                if line.len() == 1 {
                    continue;
                }
                return Some(serde_json::from_slice(&line[..end]).expect("an NDJSON line"));
            }
            if !self.fill(wait).await {
                return None;
            }
        }
    }

    /// Wait for the body to end, skipping anything else; panics after `wait`.
    pub async fn until_end(&mut self, wait: Duration) {
        while self.fill(wait).await {}
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
