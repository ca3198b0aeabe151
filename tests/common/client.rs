//! HTTP to the server: a client over TCP or the Unix socket, replay helpers, checks of the
//! response shapes of docs/API.md, and a raw-socket probe of keep-alive honesty.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::header::HeaderMap;
use serde_json::Value;

use super::events::{Event, json_array, ndjson};

/// Per-request bound, so that a hung request fails the test.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// A fully read response.
#[derive(Clone, Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: bytes::Bytes,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn header_u64(&self, name: &str) -> u64 {
        let v = self
            .header(name)
            .unwrap_or_else(|| panic!("missing header {name} in {self}"));
        v.parse()
            .unwrap_or_else(|_| panic!("header {name}: {v:?} is not an integer"))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {self}"))
    }
}

impl std::fmt::Display for Resp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut body = self.text();
        if body.len() > 2000 {
            body.truncate(2000);
            body.push('…');
        }
        write!(f, "HTTP {} {:?} {}", self.status, self.headers, body)
    }
}

/// A client bound to one server endpoint (TCP or Unix socket).
#[derive(Clone)]
pub struct Api {
    pub client: reqwest::Client,
    pub base: String,
}

impl Api {
    pub fn tcp(addr: SocketAddr) -> Api {
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .expect("build client");
        Api {
            client,
            base: format!("http://{addr}"),
        }
    }

    pub fn unix(path: &Path) -> Api {
        let client = reqwest::Client::builder()
            .unix_socket(path)
            .timeout(REQUEST_TIMEOUT)
            .build()
            .expect("build unix-socket client");
        Api {
            client,
            base: "http://localhost".to_string(),
        }
    }

    pub async fn try_send(
        &self,
        method: reqwest::Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<reqwest::Body>,
    ) -> reqwest::Result<Resp> {
        let mut rb = self
            .client
            .request(method, format!("{}{}", self.base, path));
        for (k, v) in headers {
            rb = rb.header(*k, *v);
        }
        if let Some(b) = body {
            rb = rb.body(b);
        }
        let r = rb.send().await?;
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let body = r.bytes().await?;
        Ok(Resp {
            status,
            headers,
            body,
        })
    }

    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<reqwest::Body>,
    ) -> Resp {
        match self.try_send(method.clone(), path, headers, body).await {
            Ok(r) => r,
            Err(e) => panic!("{method} {path} failed: {e:?}"),
        }
    }

    pub async fn get(&self, path: &str) -> Resp {
        self.send(reqwest::Method::GET, path, &[], None).await
    }

    pub async fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Resp {
        self.send(reqwest::Method::GET, path, headers, None).await
    }

    /// `POST /v1/events` with the given content type (`None`: no `Content-Type` header).
    pub async fn post_events(
        &self,
        content_type: Option<&str>,
        body: impl Into<reqwest::Body>,
        extra: &[(&str, &str)],
    ) -> Resp {
        let mut headers: Vec<(&str, &str)> = Vec::new();
        if let Some(ct) = content_type {
            headers.push(("content-type", ct));
        }
        headers.extend_from_slice(extra);
        let r = self
            .send(
                reqwest::Method::POST,
                "/v1/events",
                &headers,
                Some(body.into()),
            )
            .await;
        check_queue_fill(&r);
        r
    }

    pub async fn post_ndjson(&self, events: &[Event]) -> Resp {
        self.post_events(Some(NDJSON), ndjson(events), &[]).await
    }

    pub async fn post_json_array(&self, events: &[Event]) -> Resp {
        self.post_events(Some(JSON), json_array(events), &[]).await
    }

    /// `GET /v1/streams/{stream}/events?{query}` as NDJSON: the response and its lines.
    pub async fn replay(&self, stream: &str, query: &str) -> (Resp, Vec<Line>) {
        let r = self
            .get(&format!("/v1/streams/{}/events{}", enc(stream), q(query)))
            .await;
        let lines = if r.status == 200 {
            parse_ndjson(&r)
        } else {
            Vec::new()
        };
        (r, lines)
    }

    /// Every event of a stream, following `X-Vx-Next-Seq` page by page (bounded).
    pub async fn replay_all(&self, stream: &str) -> Vec<Line> {
        let mut all = Vec::new();
        let mut from = 0u64;
        for _ in 0..100_000 {
            let query = if from == 0 {
                "limit=100000".to_string()
            } else {
                format!("from={from}&limit=100000")
            };
            let (r, lines) = self.replay(stream, &query).await;
            assert_eq!(r.status, 200, "replay of {stream:?}: {r}");
            let last = r.header_u64("x-vx-last-seq");
            let next = r.header_u64("x-vx-next-seq");
            let empty = lines.is_empty();
            all.extend(lines);
            if empty || next > last {
                return all;
            }
            from = next;
        }
        panic!("replay of {stream:?} did not end");
    }

    /// `GET /v1/features/{entity}` (with `?names=` when given).
    pub async fn features(&self, entity: &str, names: Option<&str>) -> Resp {
        let q = names
            .map(|n| format!("?names={}", enc(n)))
            .unwrap_or_default();
        self.get(&format!("/v1/features/{}{q}", enc(entity))).await
    }

    /// `PUT /v1/features/{entity}` with a JSON body.
    pub async fn put_features(&self, entity: &str, body: &Value) -> Resp {
        self.send(
            reqwest::Method::PUT,
            &format!("/v1/features/{}", enc(entity)),
            &[("content-type", "application/json")],
            Some(body.to_string().into()),
        )
        .await
    }

    /// `DELETE /v1/features/{entity}[/{name}]`.
    pub async fn delete_features(&self, entity: &str, name: Option<&str>) -> Resp {
        let path = match name {
            Some(n) => format!("/v1/features/{}/{}", enc(entity), enc(n)),
            None => format!("/v1/features/{}", enc(entity)),
        };
        self.send(reqwest::Method::DELETE, &path, &[], None).await
    }

    /// `POST /v1/features/query`.
    pub async fn query_features(&self, body: &Value) -> Resp {
        self.send(
            reqwest::Method::POST,
            "/v1/features/query",
            &[("content-type", "application/json")],
            Some(body.to_string().into()),
        )
        .await
    }

    /// `POST /v1/events` with NDJSON lines as given; the error if the request itself failed
    /// (the server died: crash tests).
    pub async fn try_post_lines(&self, lines: &[String]) -> Result<Resp, reqwest::Error> {
        let mut body = lines.join("\n");
        body.push('\n');
        self.try_send(
            reqwest::Method::POST,
            "/v1/events",
            &[("content-type", "application/x-ndjson")],
            Some(body.into()),
        )
        .await
    }

    /// `POST /v1/features/query`; the error if the request itself failed.
    pub async fn try_query_features(&self, body: &Value) -> Result<Resp, reqwest::Error> {
        self.try_send(
            reqwest::Method::POST,
            "/v1/features/query",
            &[("content-type", "application/json")],
            Some(body.to_string().into()),
        )
        .await
    }

    /// `POST /v1/events` with NDJSON lines as given.
    pub async fn post_lines(&self, lines: &[String]) -> Resp {
        let mut body = lines.join("\n");
        body.push('\n');
        self.send(
            reqwest::Method::POST,
            "/v1/events",
            &[("content-type", "application/x-ndjson")],
            Some(body.into()),
        )
        .await
    }

    pub async fn stream_info(&self, stream: &str) -> Resp {
        self.get(&format!("/v1/streams/{}", enc(stream))).await
    }
}

/// `?query` or nothing.
fn q(query: &str) -> String {
    if query.is_empty() {
        String::new()
    } else {
        format!("?{query}")
    }
}

/// One path segment or query value, percent-encoded.
pub fn enc(s: &str) -> String {
    utf8_percent_encode(s, NON_ALPHANUMERIC).to_string()
}

/// One replayed NDJSON line: its raw text and its parsed value.
#[derive(Clone, Debug)]
pub struct Line {
    pub raw: String,
    pub value: Value,
}

impl Line {
    pub fn seq(&self) -> u64 {
        self.value["seq"]
            .as_u64()
            .unwrap_or_else(|| panic!("no integer seq in {}", self.raw))
    }

    pub fn id(&self) -> Option<&str> {
        self.value["id"].as_str()
    }
}

pub fn parse_ndjson(r: &Resp) -> Vec<Line> {
    let ct = r.header("content-type").unwrap_or("");
    assert!(
        ct.starts_with("application/x-ndjson"),
        "NDJSON replay must say so in Content-Type, got {ct:?}"
    );
    let text = std::str::from_utf8(&r.body).expect("replay body is UTF-8");
    text.split('\n')
        .filter(|l| !l.is_empty())
        .map(|l| Line {
            raw: l.to_string(),
            value: serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("replay line is not JSON ({e}): {l:?}")),
        })
        .collect()
}

pub const JSON: &str = "application/json";
pub const NDJSON: &str = "application/x-ndjson";

/// `X-Vx-Queue-Fill` is on every ingest response, formatted `d.dd`, within 0.00–1.00.
pub fn check_queue_fill(r: &Resp) -> f64 {
    let v = r
        .header("x-vx-queue-fill")
        .unwrap_or_else(|| panic!("ingest response without X-Vx-Queue-Fill: {r}"));
    let b = v.as_bytes();
    assert!(
        b.len() == 4
            && b[0].is_ascii_digit()
            && b[1] == b'.'
            && b[2].is_ascii_digit()
            && b[3].is_ascii_digit(),
        "X-Vx-Queue-Fill must look like 0.00, got {v:?}"
    );
    let f: f64 = v.parse().unwrap();
    assert!(
        (0.0..=1.0).contains(&f),
        "X-Vx-Queue-Fill out of range: {v}"
    );
    f
}

/// A 200 ingest answer; returns its body.
pub fn assert_ok(r: &Resp) -> Value {
    assert_eq!(r.status, 200, "expected 200, got {r}");
    let v = r.json();
    for k in ["accepted", "duplicates"] {
        assert!(v[k].is_u64(), "200 body without integer {k}: {r}");
    }
    assert!(v["last_seq"].is_object(), "200 body without last_seq: {r}");
    assert!(
        matches!(v["durability"].as_str(), Some("none" | "write" | "fsync")),
        "200 body without a durability level: {r}"
    );
    v
}

/// A 200 that stored all `n` events of the request as new.
pub fn assert_accepted(r: &Resp, n: u64) -> Value {
    let v = assert_ok(r);
    assert_eq!(v["accepted"], n, "accepted count: {r}");
    assert_eq!(v["duplicates"], 0, "duplicates count: {r}");
    v
}

/// An error response of the one error shape (docs/API.md §10) with this status and code; returns `error`.
pub fn assert_error(r: &Resp, status: u16, code: &str) -> serde_json::Map<String, Value> {
    assert_eq!(r.status, status, "expected {status} {code}, got {r}");
    let ct = r.header("content-type").unwrap_or("");
    assert!(
        ct.starts_with("application/json"),
        "error body must be application/json, got {ct:?}: {r}"
    );
    let v = r.json();
    let top = v
        .as_object()
        .unwrap_or_else(|| panic!("error body is not an object: {r}"));
    assert_eq!(
        top.keys().collect::<Vec<_>>(),
        vec!["error"],
        "error body must be exactly {{\"error\": {{…}}}}: {r}"
    );
    let err = top["error"]
        .as_object()
        .unwrap_or_else(|| panic!("`error` is not an object: {r}"))
        .clone();
    assert_eq!(err.get("code").and_then(Value::as_str), Some(code), "{r}");
    let msg = err.get("message").and_then(Value::as_str).unwrap_or("");
    assert!(!msg.is_empty(), "error without a message: {r}");
    err
}

/// The `last_seq` member of a 200 body as a map.
pub fn last_seq_map(body: &Value) -> BTreeMap<String, u64> {
    body["last_seq"]
        .as_object()
        .expect("last_seq object")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().expect("integer last_seq")))
        .collect()
}

/// One raw HTTP/1.1 response: status, lower-cased header names with values, body.
pub type RawResponse = (u16, Vec<(String, String)>, Vec<u8>);

/// Read one HTTP/1.1 response with a `Content-Length` body.
pub fn read_response(r: &mut impl BufRead) -> std::io::Result<RawResponse> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "connection closed before a response",
        ));
    }
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line {line:?}")))?;
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h)?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let len = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .ok_or_else(|| std::io::Error::other("response without Content-Length"))?;
    let mut body = vec![0; len];
    r.read_exact(&mut body)?;
    Ok((status, headers, body))
}

/// Send `request` (head and body, written from another thread so that a server which stops
/// reading cannot block us) on a fresh connection and read the answer. Unless the answer says
/// `Connection: close`, the connection must then serve another request: a server that stops
/// reading a body and closes without saying so breaks every keep-alive client. Returns the
/// first answer's status and body.
pub fn answer_keeps_connection_honest(addr: SocketAddr, request: Vec<u8>) -> (u16, String) {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || w.write_all(&request).is_ok());
    let mut r = BufReader::new(s.try_clone().unwrap());
    let (status, headers, body) = read_response(&mut r).expect("first response");
    let body = String::from_utf8_lossy(&body).into_owned();
    let close = headers
        .iter()
        .any(|(k, v)| k == "connection" && v.eq_ignore_ascii_case("close"));
    let sent_all = writer.join().unwrap_or(false);
    if close {
        return (status, body);
    }
    assert!(
        sent_all,
        "HTTP {status} without Connection: close, but the server stopped reading the body: {body}"
    );
    let mut s2 = s;
    let second = write!(s2, "GET /healthz HTTP/1.1\r\nHost: {addr}\r\n\r\n")
        .and_then(|()| read_response(&mut r));
    match second {
        Ok((200, _, _)) => {}
        Ok((st, _, b)) => panic!("second request on the connection got {st}: {b:?}"),
        Err(e) => panic!(
            "HTTP {status} kept the connection open (no Connection: close), but the next \
             request on it failed: {e}; first answer: {body}"
        ),
    }
    (status, body)
}
