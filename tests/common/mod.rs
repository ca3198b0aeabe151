//! Shared harness of the integration tests (each `tests/*.rs` file is one scenario and
//! includes this module): the real binary as a child process, an HTTP client, and events
//! with their canonical form.
//!
//! # Layout
//! - `server`: start, stop and kill `veltrix serve` on a temporary data dir.
//! - `client`: requests over TCP or the Unix socket and checks of the responses docs/API.md describes.
//! - `events`: events to send, generated bodies, and comparison with replayed events.
//! - `sse`: live follows (SSE and NDJSON) read frame by frame.
//! - `browser`: headless Chromium driven by playwright-core, for the status page.
//! - `python`: third-party Python clients in a pinned virtualenv.
//! - `programs`: third-party client programs in Go, Java and JavaScript, built from pinned
//!   versions.
//! - `cluster`: cluster-mode nodes beside Kafka brokers.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod browser;
mod client;
pub mod cluster;
mod events;
pub mod programs;
mod python;
mod server;
mod sse;

pub use client::*;
#[allow(unused_imports)]
pub use events::*;
#[allow(unused_imports)]
pub use python::*;
pub use server::*;
#[allow(unused_imports)]
pub use sse::*;

// ---------------------------------------------------------------------------------------------
// Binary frames (tests/frames_protocol.rs)
// ---------------------------------------------------------------------------------------------

/// The frames TCP address of a server started with `--frames-listen 127.0.0.1:0`, from its
/// `frames: accepting on <addr>` log line (bounded wait: the line may still be in the pipe).
pub fn frames_addr(server: &Server) -> std::net::SocketAddr {
    accepting_addr(server, "frames")
}

/// The Redis-protocol TCP address of a server started with `--resp-listen 127.0.0.1:0`.
#[allow(dead_code)]
pub fn resp_addr(server: &Server) -> std::net::SocketAddr {
    accepting_addr(server, "resp")
}

/// [`resp_addr`] of a process started without waiting for it to be ready
/// ([`ServerConfig::spawn`]): the listeners accept before the store is open.
pub fn resp_addr_of(proc: &Process) -> std::net::SocketAddr {
    accepting_addr_in(proc, "resp")
}

/// The address of `<listener>: accepting on <addr>` in the server's log.
fn accepting_addr(server: &Server, listener: &str) -> std::net::SocketAddr {
    accepting_addr_in(&server.proc, listener)
}

fn accepting_addr_in(proc: &Process, listener: &str) -> std::net::SocketAddr {
    let mark = format!("{listener}: accepting on ");
    let deadline = std::time::Instant::now() + START_TIMEOUT;
    loop {
        for line in proc.logs.lines() {
            let line = strip_ansi(&line);
            if let Some(i) = line.find(&mark) {
                let token: String = line[i + mark.len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_hexdigit() || matches!(c, '.' | ':' | '[' | ']'))
                    .collect();
                if let Ok(addr) = token.parse() {
                    return addr;
                }
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no `{mark}<addr>` line\n--- log ---\n{}",
            proc.logs.text()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A frames client connected to `server` (see [`frames_addr`]), handshake done.
pub async fn frames_client(server: &Server) -> vx_client::Client {
    vx_client::Client::connect_tcp(frames_addr(server), &vx_client::Options::default())
        .await
        .unwrap()
}

/// `n` minimal events of `stream`, `ts` 0, 1, 2 …
pub fn plain_events(stream: &str, n: i64) -> Vec<vx_client::WireEvent<'_>> {
    (0..n)
        .map(|i| vx_client::WireEvent {
            stream,
            entity: None,
            ty: "t",
            ts: Some(i),
            kind: vx_client::Kind::Event,
            value: None::<vx_client::Num>,
            id: None,
            data: None,
        })
        .collect()
}

/// One BATCH frame of `evs` with request id `id`.
pub fn batch_frame(id: u64, evs: &[vx_client::WireEvent<'_>]) -> Vec<u8> {
    let head = vx_proto::frames::BatchHead {
        request_id: id,
        ..Default::default()
    };
    let mut frame = Vec::new();
    vx_proto::frames::encode_batch(&mut frame, &head, evs).unwrap();
    frame
}

/// Read what the server answers until it closes the connection (at most 30 s).
pub async fn read_to_close(s: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(30), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// `body` gzip-compressed (a `Content-Encoding: gzip` body).
pub fn gzip(body: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(body).expect("gzip into memory");
    e.finish().expect("gzip into memory")
}

/// The value of an unlabelled sample (or the sum over its label sets) in a Prometheus text
/// exposition; 0 if absent.
pub fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            let base = key.split('{').next()?;
            (base == name).then(|| value.parse::<f64>().ok())?
        })
        .sum()
}

/// Debian's `redis-cli` with these arguments against `addr`; its stdout (it prints errors
/// there too). The test command installs it (redis-tools); missing, the test fails.
pub fn redis_cli(addr: std::net::SocketAddr, args: &[&str]) -> String {
    let out = std::process::Command::new("redis-cli")
        .args(["-h", &addr.ip().to_string(), "-p", &addr.port().to_string()])
        .args(args)
        .output()
        .expect("redis-cli is needed (Debian: apt-get install redis-tools; scripts/test does)");
    assert!(
        out.status.success(),
        "redis-cli {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}
