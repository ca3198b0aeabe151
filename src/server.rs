//! Start-up and shutdown (docs/API.md §1.3): bind the listeners, serve at once (answering 503
//! `not_ready` while the store recovers), open the store on the blocking pool, then serve
//! until the shutdown future resolves; then drain in layers: `/readyz` turns 503 and the
//! listeners close at once; requests arriving on open connections get 503 `not_ready` with
//! `Connection: close` for up to `DRAIN_GRACE` (1 s; less once every connection has closed);
//! then idle connections are closed and requests in flight finish within
//! `server.shutdown_timeout`; finally the store drains its queue and fsyncs, and `run` returns.
//!
//! The binary-frames listeners (`server.frames_listen`, `server.frames_uds`) and the
//! Redis-protocol ones (`server.resp_listen`, `server.resp_uds`) are bound with the HTTP ones
//! and close on the same signal; their connections answer what is in flight and close (see
//! [`crate::frames`], [`crate::resp`]), within the same `server.shutdown_timeout`.
//!
//! Tests start the real server in-process with [`Server::bind`] on `127.0.0.1:0`, read
//! [`Server::local_addr`], and run it with any future as the shutdown signal.

use crate::config::Config;
use crate::frames;
use crate::http;
use crate::http_conn;
use crate::listen::{self, Acceptor, Connections, Socket, UnixSocket};
use crate::resp;
use crate::state::AppState;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Uds(#[from] listen::UdsError),
    #[error("cannot open the data dir: {0}")]
    Open(#[from] vx_storage::OpenError),
    #[error("{0}")]
    Task(String),
    #[error("cluster mode: {0}")]
    Cluster(String),
}

/// A bound server, not yet serving.
pub struct Server {
    config: Config,
    started: Instant,
    tcp: TcpListener,
    addr: SocketAddr,
    uds: Option<UnixSocket>,
    frames_tcp: Option<(TcpListener, SocketAddr)>,
    frames_uds: Option<UnixSocket>,
    resp_tcp: Option<(TcpListener, SocketAddr)>,
    resp_uds: Option<UnixSocket>,
}

/// Bind and run until `shutdown` resolves: what `veltrix serve` does.
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    Server::bind(config).await?.run(shutdown).await
}

/// A TCP listener on `listen` (`host:port`, resolved here) and the address it got.
async fn bind_tcp(listen: &str) -> Result<(TcpListener, SocketAddr), StartError> {
    let bind_err = |source| StartError::Bind {
        addr: listen.to_string(),
        source,
    };
    let l = TcpListener::bind(listen).await.map_err(bind_err)?;
    let a = l.local_addr().map_err(bind_err)?;
    Ok((l, a))
}

/// The Unix socket at `path`, if one is configured.
fn bind_uds(path: Option<&std::path::Path>, mode: u32) -> Result<Option<UnixSocket>, StartError> {
    Ok(path.map(|p| UnixSocket::bind(p, mode)).transpose()?)
}

impl Server {
    /// Bind the TCP listener (and the Unix socket, if configured). Nothing is served yet.
    pub async fn bind(config: Config) -> Result<Server, StartError> {
        let started = Instant::now();
        let (tcp, addr) = bind_tcp(&config.server.listen).await?;
        let mode = config.server.uds_mode;
        let uds = bind_uds(config.server.uds.as_deref(), mode)?;
        let frames_tcp = match &config.server.frames_listen {
            Some(listen) => Some(bind_tcp(listen).await?),
            None => None,
        };
        let frames_uds = bind_uds(config.server.frames_uds.as_deref(), mode)?;
        let resp_tcp = match &config.server.resp_listen {
            Some(listen) => Some(bind_tcp(listen).await?),
            None => None,
        };
        let resp_uds = bind_uds(config.server.resp_uds.as_deref(), mode)?;
        Ok(Server {
            config,
            started,
            tcp,
            addr,
            uds,
            frames_tcp,
            frames_uds,
            resp_tcp,
            resp_uds,
        })
    }

    /// The bound TCP address (the real port when `server.listen` asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The bound binary-frames TCP address, if `server.frames_listen` is set.
    pub fn frames_addr(&self) -> Option<SocketAddr> {
        self.frames_tcp.as_ref().map(|(_, a)| *a)
    }

    /// The bound Redis-protocol TCP address, if `server.resp_listen` is set.
    pub fn resp_addr(&self) -> Option<SocketAddr> {
        self.resp_tcp.as_ref().map(|(_, a)| *a)
    }

    /// Serve until `shutdown` resolves, then drain and stop. Returns an error if the store
    /// cannot be opened (the listeners are closed first).
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), StartError> {
        let Server {
            config,
            started,
            tcp,
            addr,
            uds,
            frames_tcp,
            frames_uds,
            resp_tcp,
            resp_uds,
        } = self;
        let state = AppState::new(&config);
        let app = http::app(state.clone());
        // `stop`: the shutdown signal; listeners close on it. `close`: the connections'
        // graceful shutdown, which ends idle ones, fired once the drain grace is over.
        let stop = CancellationToken::new();
        let close = CancellationToken::new();
        // One bound for the connections of every listener.
        let connections = Connections::new(
            config.server.max_connections,
            state.metrics().connections().clone(),
        );
        let http_refusal = refusal(config.server.max_connections);
        let acceptor = |socket, listener, refusal: &Arc<[u8]>| {
            Acceptor::new(socket, listener, connections.clone(), Arc::clone(refusal))
        };
        let timeouts = http_conn::Timeouts {
            header: config.server.header_timeout,
            keepalive: config.server.keepalive_timeout,
        };
        // The serving tasks; dropping the set aborts whatever still runs at the deadline.
        let mut listeners = JoinSet::new();

        if !addr.ip().is_loopback() && config.auth.tokens.is_empty() {
            tracing::warn!(
                "listening on a non-loopback address without auth.tokens: anyone who can reach \
                 {addr} can write and read events"
            );
        }
        let http = acceptor(Socket::Tcp(tcp), listen::HTTP, &http_refusal);
        let serve_http = |acceptor| {
            let (app, stop, close) = (app.clone(), stop.clone(), close.clone());
            http_conn::serve(acceptor, app, timeouts, stop, close)
        };
        listeners.spawn(serve_http(http));
        tracing::info!("listening on {addr}");
        let uds_path = uds.as_ref().map(|u| u.path().to_path_buf());
        if let Some(uds) = uds {
            tracing::info!("listening on unix:{}", uds.path().display());
            listeners.spawn(serve_http(acceptor(
                uds.into_socket(),
                listen::HTTP,
                &http_refusal,
            )));
        }
        // A frames client would read a refusal as the answer to its HELLO: it is closed only.
        let no_refusal: Arc<[u8]> = Arc::from(&b""[..]);
        let frames_ctx = frames::Ctx::new(
            state.clone(),
            config.server.frames_idle_timeout,
            config.server.header_timeout,
        );
        if let Some((l, frames_addr)) = frames_tcp {
            if !frames_addr.ip().is_loopback() && config.auth.tokens.is_empty() {
                tracing::warn!(
                    "binary frames on a non-loopback address without auth.tokens: anyone who \
                     can reach {frames_addr} can write events"
                );
            }
            // Not "listening on": that phrase names the HTTP address, which tools parse.
            tracing::info!("frames: accepting on {frames_addr}");
            let l = acceptor(Socket::Tcp(l), listen::FRAMES, &no_refusal);
            listeners.spawn(frames::serve(l, Arc::clone(&frames_ctx), stop.clone()));
        }
        let frames_path = frames_uds.as_ref().map(|u| u.path().to_path_buf());
        if let Some(u) = frames_uds {
            tracing::info!("frames: accepting on unix:{}", u.path().display());
            let l = acceptor(u.into_socket(), listen::FRAMES, &no_refusal);
            listeners.spawn(frames::serve(l, frames_ctx, stop.clone()));
        }
        let resp_ctx = resp::Ctx::new(
            state.clone(),
            config.server.resp_idle_timeout,
            config.server.header_timeout,
        );
        if let Some((l, resp_addr)) = resp_tcp {
            if !resp_addr.ip().is_loopback() && config.auth.tokens.is_empty() {
                tracing::warn!(
                    "the Redis-protocol listener on a non-loopback address without auth.tokens: \
                     anyone who can reach {resp_addr} can read and write features"
                );
            }
            tracing::info!("resp: accepting on {resp_addr}");
            let l = acceptor(Socket::Tcp(l), listen::RESP, &no_refusal);
            listeners.spawn(resp::serve(l, Arc::clone(&resp_ctx), stop.clone()));
        }
        let resp_path = resp_uds.as_ref().map(|u| u.path().to_path_buf());
        if let Some(u) = resp_uds {
            tracing::info!("resp: accepting on unix:{}", u.path().display());
            let l = acceptor(u.into_socket(), listen::RESP, &no_refusal);
            listeners.spawn(resp::serve(l, resp_ctx, stop.clone()));
        }

        {
            let (state, stop) = (state.clone(), stop.clone());
            tokio::spawn(async move {
                tokio::select! {
                    () = shutdown => {
                        tracing::info!("shutdown requested: draining");
                        state.begin_drain();
                        stop.cancel();
                    }
                    () = stop.cancelled() => {}
                }
            });
        }

        // Sealed segments are opened on demand through a bounded cache, but sockets and
        // followers need descriptors too: take the hard limit rather than the soft default.
        let nofile = match vx_sys::raise_nofile_limit() {
            Ok((soft, hard)) => {
                tracing::debug!(soft, hard, "RLIMIT_NOFILE");
                soft
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot raise the soft RLIMIT_NOFILE");
                1024
            }
        };
        // Recovery reads the active segment and the index files: keep it off the async workers.
        let mut storage = config.storage_config();
        // A quarter of the descriptors at most for cached log files: the rest is for
        // connections. Under a low limit the cache only reopens files more often.
        let quarter = usize::try_from(nofile / 4).unwrap_or(usize::MAX);
        storage.open_files = storage.open_files.min(quarter).max(16);
        storage.observer = Some(state.metrics().observer());
        let clustered = config.cluster.mode == crate::config::ClusterMode::Kafka;
        if clustered {
            // Features come from T.entities, and a record Kafka acknowledged is always
            // applied (docs/CLUSTER.md).
            storage.features_from_events = false;
            storage.refuse_at_limits = false;
        }
        let opened = tokio::task::spawn_blocking(move || vx_storage::Store::open(storage)).await;
        let opened = match opened {
            Ok(Ok(opened)) => Ok(opened),
            Ok(Err(e)) => Err(StartError::Open(e)),
            Err(e) => Err(StartError::Task(format!("opening the store failed: {e}"))),
        };
        let store = match opened {
            Ok((store, report)) => {
                tracing::info!(
                    segments = report.segments,
                    records = report.records,
                    events = report.events,
                    streams = report.streams,
                    truncated_bytes = report.truncated_bytes,
                    index_files = report.index_files,
                    scanned_segments = report.scanned_segments,
                    removed_strays = report.removed_strays,
                    recovery_ms = u64::try_from(report.took.as_millis()).unwrap_or(u64::MAX),
                    shards = store.shards(),
                    fsync = store.fsync_mode().as_str(),
                    "storage opened"
                );
                store
            }
            Err(e) => {
                stop.cancel();
                close.cancel();
                while listeners.join_next().await.is_some() {}
                remove_socket(uds_path.as_deref());
                remove_socket(frames_path.as_deref());
                remove_socket(resp_path.as_deref());
                return Err(e);
            }
        };
        if clustered {
            match join_cluster(&config, store.clone()).await {
                Ok(cluster) => state.set_cluster(cluster),
                Err(e) => {
                    stop.cancel();
                    close.cancel();
                    while listeners.join_next().await.is_some() {}
                    let closing = store.clone();
                    let _ = tokio::task::spawn_blocking(move || closing.shutdown()).await;
                    remove_socket(uds_path.as_deref());
                    remove_socket(frames_path.as_deref());
                    remove_socket(resp_path.as_deref());
                    return Err(e);
                }
            }
        }
        let router = vx_router::Router::new(config.admission_config(store.shards()), store.clone());
        state.set_ready(router);
        let took = started.elapsed();
        state.metrics().set_bootstrap(took);
        if !stop.is_cancelled() {
            tracing::info!(
                bootstrap_ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
                "ready"
            );
        }

        stop.cancelled().await;
        state.begin_drain();
        let drain_started = Instant::now();
        let deadline = config.server.shutdown_timeout;
        // Listeners are closed now. Requests still arriving on open connections get 503
        // `not_ready` with `Connection: close` for a short grace, after which idle
        // connections are closed; requests in flight run on until the deadline.
        let grace = DRAIN_GRACE.min(deadline);
        while connections.open() > 0 && drain_started.elapsed() < grace {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        close.cancel();
        let left = deadline.saturating_sub(drain_started.elapsed());
        let drained = async { while listeners.join_next().await.is_some() {} };
        if tokio::time::timeout(left, drained).await.is_err() {
            tracing::warn!(
                timeout = %crate::config::units::format_duration(deadline),
                connections = connections.open(),
                "requests still open at server.shutdown_timeout; closing their connections"
            );
            listeners.abort_all();
        }
        // A cluster node leaves first: what it applied is committed, its partitions move.
        if let Some(cluster) = state.cluster() {
            let node = std::sync::Arc::clone(&cluster.node);
            let _ = tokio::task::spawn_blocking(move || node.shutdown()).await;
        }
        // Whatever is still queued for the writer is written and fsynced before this returns.
        let closing = store.clone();
        tokio::task::spawn_blocking(move || closing.shutdown())
            .await
            .map_err(|e| StartError::Task(format!("stopping the store failed: {e}")))?;
        remove_socket(uds_path.as_deref());
        remove_socket(frames_path.as_deref());
        remove_socket(resp_path.as_deref());
        tracing::info!("stopped");
        Ok(())
    }
}

/// Cluster mode: create or check the topics, join the group, start producing and applying.
async fn join_cluster(
    config: &Config,
    store: vx_storage::Store,
) -> Result<Arc<crate::cluster::Cluster>, StartError> {
    let c = &config.cluster;
    let need = |v: &Option<String>| v.clone().unwrap_or_default();
    let settings = vx_cluster::NodeSettings {
        brokers: need(&c.kafka_brokers),
        topic: need(&c.topic),
        node: need(&c.node_id),
        advertise: need(&c.advertise).trim_end_matches('/').to_string(),
        max_catchup: c.max_catchup,
        session_timeout: c.session_timeout,
        txn_timeout: c.session_timeout.max(Duration::from_secs(5)),
        // A request is one record per partition: room for the largest body and its header.
        max_record_bytes: config.ingest.max_body_bytes + (1 << 20),
        agreed: agreed(config, store.shards()),
    };
    let node = vx_cluster::Node::start(settings, store, tokio::runtime::Handle::current())
        .await
        .map_err(|e| StartError::Cluster(e.to_string()))?;
    let cluster = crate::cluster::Cluster::new(node)
        .map_err(|e| StartError::Cluster(format!("the HTTP client between nodes: {e}")))?;
    Ok(Arc::new(cluster))
}

/// The settings every node of a cluster must share, as `T.members` publishes them: replicas
/// of a partition decide dedup and compute features alike only if these are equal. The
/// declarations are published as their count and a digest of their canonical form.
fn agreed(config: &Config, shards: u32) -> std::collections::BTreeMap<String, String> {
    let decls = &config.features.declare;
    let canonical = format!("{decls:?}");
    let digest = xxhash_rust::xxh3::xxh3_64(canonical.as_bytes());
    [
        ("storage.shards", shards.to_string()),
        (
            "ingest.dedup_window",
            crate::config::units::format_duration(config.ingest.dedup_window),
        ),
        (
            "ingest.dedup_memory",
            config.ingest.dedup_memory.to_string(),
        ),
        (
            "features.declare",
            format!("{} declarations (digest {digest:016x})", decls.len()),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// How long, at most, open connections may keep sending requests (answered 503 with
/// `Connection: close`) after the listeners closed and before idle ones are closed.
const DRAIN_GRACE: Duration = Duration::from_secs(1);

fn remove_socket(path: Option<&std::path::Path>) {
    if let Some(path) = path
        && let Err(e) = std::fs::remove_file(path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), error = %e, "cannot remove the unix socket");
    }
}

/// The answer to an HTTP connection refused past `server.max_connections`: 503 `not_ready`
/// in docs/API.md §3's error shape, then the connection is closed.
fn refusal(max: u64) -> Arc<[u8]> {
    let body = serde_json::json!({"error": {
        "code": "not_ready",
        "message": format!(
            "this server has {max} connections open, its server.max_connections; retry shortly"
        ),
        "limit": "server.max_connections",
        "max": max,
    }})
    .to_string();
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    Arc::from(answer.into_bytes())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::config::FsyncSetting;
    use std::time::Duration;

    fn config(dir: &std::path::Path) -> Config {
        let mut cfg = Config::default();
        cfg.server.listen = "127.0.0.1:0".into();
        cfg.server.uds = Some(dir.join("http.sock"));
        cfg.storage.data_dir = dir.join("data");
        cfg.storage.shards = Some(2);
        cfg.storage.fsync = FsyncSetting::Always;
        cfg
    }

    async fn wait_ready(client: &reqwest::Client, addr: SocketAddr) {
        for _ in 0..500 {
            let ready = client
                .get(format!("http://{addr}/readyz"))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200);
            if ready {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("not ready after 5 s");
    }

    #[tokio::test]
    async fn serves_tcp_and_uds_then_drains_and_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let server = Server::bind(config(dir.path())).await.unwrap();
        let addr = server.local_addr();
        assert_ne!(addr.port(), 0);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(server.run(async {
            let _ = rx.await;
        }));
        let client = reqwest::Client::new();
        wait_ready(&client, addr).await;

        let resp = client
            .post(format!("http://{addr}/v1/events"))
            .header("content-type", "application/json")
            .body(r#"{"stream":"s","type":"t","ts":1}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["x-vx-queue-fill"].to_str().unwrap().len(), 4);
        let v: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(v["durability"], "fsync");

        let uds = reqwest::Client::builder()
            .unix_socket(dir.path().join("http.sock"))
            .build()
            .unwrap();
        let resp = uds.get("http://veltrix/v1/streams/s").send().await.unwrap();
        assert_eq!(resp.status(), 200);

        tx.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(10), running)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(!dir.path().join("http.sock").exists(), "socket removed");

        // The lock is released and the event survived.
        let server = Server::bind(config(dir.path())).await.unwrap();
        let addr = server.local_addr();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(server.run(async {
            let _ = rx.await;
        }));
        wait_ready(&client, addr).await;
        let body = client
            .get(format!("http://{addr}/v1/streams/s/events"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert_eq!(
            body,
            "{\"stream\":\"s\",\"type\":\"t\",\"ts\":1,\"kind\":\"event\",\"seq\":1}\n"
        );

        let metrics = client
            .get(format!("http://{addr}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        // promtool checks the exposition in tests/metrics.rs, against the real binary.
        assert!(metrics.contains("vx_bootstrap_duration_seconds"));

        tx.send(()).unwrap();
        running.await.unwrap().unwrap();
    }

    async fn exchange(conn: &mut tokio::net::TcpStream, request: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        conn.write_all(request.as_bytes()).await.unwrap();
        let mut buf = vec![0u8; 8192];
        let n = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    #[tokio::test]
    async fn draining_answers_open_connections_with_503_and_close() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = config(dir.path());
        cfg.server.uds = None;
        let server = Server::bind(cfg).await.unwrap();
        let addr = server.local_addr();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(server.run(async {
            let _ = rx.await;
        }));
        wait_ready(&reqwest::Client::new(), addr).await;

        let mut idle = tokio::net::TcpStream::connect(addr).await.unwrap();
        let get = "GET /v1/streams HTTP/1.1\r\nHost: x\r\n\r\n";
        assert!(exchange(&mut idle, get).await.starts_with("HTTP/1.1 200"));

        // A request in flight when the drain begins: its body is still on the way.
        let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
        let body = r#"{"stream":"s","type":"t"}"#;
        let head = format!(
            "POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{}",
            body.len(),
            &body[..5]
        );
        {
            use tokio::io::AsyncWriteExt;
            slow.write_all(head.as_bytes()).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;

        tx.send(()).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let answer = exchange(&mut idle, get).await.to_ascii_lowercase();
        assert!(answer.starts_with("http/1.1 503"), "{answer}");
        assert!(answer.contains("connection: close") && answer.contains("not_ready"));
        assert!(
            tokio::net::TcpStream::connect(addr).await.is_err(),
            "listener closed"
        );

        let answer = exchange(&mut slow, &body[5..]).await;
        assert!(
            answer.starts_with("HTTP/1.1 200"),
            "in-flight request completes: {answer}"
        );
        tokio::time::timeout(Duration::from_secs(10), running)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn a_locked_data_dir_fails_start_up_and_closes_listeners() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = config(dir.path());
        first.server.uds = None;
        let server = Server::bind(first.clone()).await.unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let addr = server.local_addr();
        let running = tokio::spawn(server.run(async {
            let _ = rx.await;
        }));
        wait_ready(&reqwest::Client::new(), addr).await;

        let second = Server::bind(first).await.unwrap();
        let err = second.run(std::future::pending()).await.unwrap_err();
        assert!(matches!(err, StartError::Open(_)), "{err}");
        assert!(err.to_string().contains("locked"), "{err}");

        tx.send(()).unwrap();
        running.await.unwrap().unwrap();
    }
}
