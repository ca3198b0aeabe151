//! Start-up and shutdown (docs/API.md §1.3): bind the listeners, serve at once (answering 503
//! `not_ready` while the store recovers), open the store on the blocking pool, then serve
//! until the shutdown future resolves; then drain in layers: `/readyz` turns 503 and the
//! listeners close at once; requests arriving on open connections get 503 `not_ready` with
//! `Connection: close` for up to `DRAIN_GRACE` (1 s; less once every connection has closed);
//! then idle connections are closed and requests in flight finish within
//! `server.shutdown_timeout`; finally the store drains its queue and fsyncs, and `run` returns.
//! In cluster mode the node joins its cluster once the store is open, and leaves it after the
//! drain, before the store closes.
//!
//! The listeners come from one table, `KINDS`, a row per protocol: HTTP (`server.listen`,
//! `server.uds`), binary frames (`server.frames_listen`, `server.frames_uds`) and the Redis
//! protocol (`server.resp_listen`, `server.resp_uds`), each with its `listener` label, what a
//! connection refused past `server.max_connections` is told, its warning for a non-loopback
//! address without `auth.tokens`, and its log line. They are bound together, share one bound on
//! connections, and close on the same signal; frames and RESP connections answer what is in
//! flight and close (see [`crate::frames`], [`crate::resp`]), within the same
//! `server.shutdown_timeout`. Every exit from [`Server::run`] (the store failing to open, the
//! cluster refusing the node, a normal stop) closes them the same way and removes the Unix
//! socket files.
//!
//! Tests start the real server in-process with [`Server::bind`] on `127.0.0.1:0`, read
//! [`Server::local_addr`], and run it with any future as the shutdown signal.

use crate::config::{ClusterMode, Config, ServerConfig};
use crate::frames;
use crate::http;
use crate::http_conn;
use crate::listen::{self, Acceptor, Connections, Socket, UnixSocket};
use crate::resp;
use crate::state::AppState;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
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

/// The protocol a listener serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Protocol {
    Http,
    Frames,
    Resp,
}

/// One protocol's listeners: a row of [`KINDS`].
struct Kind {
    protocol: Protocol,
    /// Its TCP address key, `host:port` (resolved when bound); `None` when unset.
    tcp: fn(&ServerConfig) -> Option<&str>,
    /// Its Unix socket key, bound with `server.uds_mode`; `None` when unset.
    uds: fn(&ServerConfig) -> Option<&Path>,
    /// The `listener` label of its connections (refusals are counted under it).
    label: &'static str,
    /// What a connection refused past `server.max_connections` (the argument) is told.
    refusal: fn(u64) -> Arc<[u8]>,
    /// The warning for a non-loopback TCP address without `auth.tokens`, in two parts:
    /// "{0} on a non-loopback address without auth.tokens: anyone who can reach {addr} can {1}".
    exposed: (&'static str, &'static str),
    /// The log line of each of its listeners, before `{addr}` or `unix:{path}`: tests and tools
    /// parse these.
    accepting: &'static str,
}

/// Every listener, in the order they are bound, logged and served: a protocol's TCP address,
/// then its Unix socket.
static KINDS: [Kind; 3] = [
    Kind {
        protocol: Protocol::Http,
        // Required: HTTP's TCP listener is always bound.
        tcp: |s| Some(s.listen.as_str()),
        uds: |s| s.uds.as_deref(),
        label: listen::HTTP,
        refusal,
        exposed: ("listening", "write and read events"),
        accepting: "listening on",
    },
    Kind {
        protocol: Protocol::Frames,
        tcp: |s| s.frames_listen.as_deref(),
        uds: |s| s.frames_uds.as_deref(),
        label: listen::FRAMES,
        // A frames client would read a refusal as the answer to its HELLO.
        refusal: closed_only,
        exposed: ("binary frames", "write events"),
        // Not "listening on": that phrase names the HTTP address, which tools parse.
        accepting: "frames: accepting on",
    },
    Kind {
        protocol: Protocol::Resp,
        tcp: |s| s.resp_listen.as_deref(),
        uds: |s| s.resp_uds.as_deref(),
        label: listen::RESP,
        refusal: closed_only,
        exposed: ("the Redis-protocol listener", "read and write features"),
        accepting: "resp: accepting on",
    },
];

/// Where a listener is bound, as its log line writes it.
enum Address {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Tcp(addr) => write!(f, "{addr}"),
            Address::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// A bound listener, not yet serving.
struct Bound {
    kind: &'static Kind,
    socket: Socket,
    address: Address,
}

/// A bound server, not yet serving.
pub struct Server {
    config: Config,
    started: Instant,
    /// HTTP's TCP address (`server.listen`, the real port when it asked for port 0).
    addr: SocketAddr,
    /// In the order of [`KINDS`]; HTTP's TCP listener is always among them.
    listeners: Vec<Bound>,
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

impl Server {
    /// Bind every listener the table `KINDS` names: HTTP's TCP one always (`server.listen` is
    /// required), the others if their keys are set. Nothing is served yet.
    pub async fn bind(config: Config) -> Result<Server, StartError> {
        let started = Instant::now();
        let server = &config.server;
        let mut listeners = Vec::new();
        for kind in &KINDS {
            if let Some(listen) = (kind.tcp)(server) {
                let (l, addr) = bind_tcp(listen).await?;
                let (socket, address) = (Socket::Tcp(l), Address::Tcp(addr));
                listeners.push(Bound {
                    kind,
                    socket,
                    address,
                });
            }
            if let Some(path) = (kind.uds)(server) {
                let uds = UnixSocket::bind(path, server.uds_mode)?;
                let address = Address::Unix(uds.path().to_path_buf());
                let socket = uds.into_socket();
                listeners.push(Bound {
                    kind,
                    socket,
                    address,
                });
            }
        }
        // `server.listen` is required, so the table always binds it.
        let addr = listeners
            .iter()
            .find_map(|b| match b.address {
                Address::Tcp(a) if b.kind.protocol == Protocol::Http => Some(a),
                _ => None,
            })
            .ok_or_else(|| StartError::Task("server.listen bound no TCP listener".into()))?;
        Ok(Server {
            config,
            started,
            addr,
            listeners,
        })
    }

    /// The bound TCP address (the real port when `server.listen` asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The bound binary-frames TCP address, if `server.frames_listen` is set.
    pub fn frames_addr(&self) -> Option<SocketAddr> {
        self.tcp_addr(Protocol::Frames)
    }

    /// The bound Redis-protocol TCP address, if `server.resp_listen` is set.
    pub fn resp_addr(&self) -> Option<SocketAddr> {
        self.tcp_addr(Protocol::Resp)
    }

    /// `protocol`'s bound TCP address, if it has a TCP listener.
    fn tcp_addr(&self, protocol: Protocol) -> Option<SocketAddr> {
        self.listeners.iter().find_map(|l| match l.address {
            Address::Tcp(addr) if l.kind.protocol == protocol => Some(addr),
            _ => None,
        })
    }

    /// Serve until `shutdown` resolves, then drain and stop. Returns an error if the store
    /// cannot be opened or, in cluster mode, the node cannot join its cluster (the listeners
    /// are closed first).
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), StartError> {
        let Server {
            config,
            started,
            listeners,
            ..
        } = self;
        let state = AppState::new(&config);
        let mut serving = Serving::start(&config, &state, listeners);
        watch_shutdown(shutdown, state.clone(), serving.stop.clone());
        let store = match open_store(storage_config(&config, &state)).await {
            Ok(store) => store,
            Err(e) => {
                serving.abort(None).await;
                return Err(e);
            }
        };
        if clustered(&config) {
            match join_cluster(&config, store.clone()).await {
                Ok(cluster) => state.set_cluster(cluster),
                Err(e) => {
                    serving.abort(Some(&store)).await;
                    return Err(e);
                }
            }
        }
        become_ready(&config, &state, &store, started, &serving.stop);
        serving.stop.cancelled().await;
        state.begin_drain();
        serving.drain(config.server.shutdown_timeout).await;
        leave_cluster(&state).await;
        close_store(&store).await?;
        serving.remove_sockets();
        tracing::info!("stopped");
        Ok(())
    }
}

/// What each protocol's listeners serve their connections with.
struct Services {
    app: axum::Router,
    timeouts: http_conn::Timeouts,
    frames: Arc<frames::Ctx>,
    resp: Arc<resp::Ctx>,
}

impl Services {
    fn new(config: &Config, state: &AppState) -> Services {
        let s = &config.server;
        Services {
            app: http::app(state.clone()),
            timeouts: http_conn::Timeouts {
                header: s.header_timeout,
                keepalive: s.keepalive_timeout,
            },
            frames: frames::Ctx::new(state.clone(), s.frames_idle_timeout, s.header_timeout),
            resp: resp::Ctx::new(state.clone(), s.resp_idle_timeout, s.header_timeout),
        }
    }
}

/// The listeners being served, and what stops them: every exit from [`Server::run`] ends
/// through [`Serving::abort`] or [`Serving::drain`], then [`Serving::remove_sockets`].
struct Serving {
    /// The shutdown signal; listeners close on it.
    stop: CancellationToken,
    /// The connections' graceful shutdown, which ends idle ones, fired once the drain grace is
    /// over.
    close: CancellationToken,
    /// The serving tasks; dropping the set aborts whatever still runs at the deadline.
    listeners: JoinSet<()>,
    /// The Unix socket files, removed at the end.
    sockets: Vec<PathBuf>,
    /// One bound for the connections of every listener.
    connections: Connections,
}

impl Serving {
    /// Serve every bound listener, each with its protocol's serve function.
    fn start(config: &Config, state: &AppState, bound: Vec<Bound>) -> Serving {
        let max = config.server.max_connections;
        let mut serving = Serving {
            stop: CancellationToken::new(),
            close: CancellationToken::new(),
            listeners: JoinSet::new(),
            sockets: Vec::new(),
            connections: Connections::new(max, state.metrics().connections().clone()),
        };
        let services = Services::new(config, state);
        for listener in bound {
            announce(&listener, config.auth.tokens.is_empty());
            serving.serve(&services, listener, max);
        }
        serving
    }

    /// Accept on `listener` within the shared bound of `max` connections, on a task of its own.
    fn serve(&mut self, services: &Services, listener: Bound, max: u64) {
        let Bound {
            kind,
            socket,
            address,
        } = listener;
        if let Address::Unix(path) = address {
            self.sockets.push(path);
        }
        let refusal = (kind.refusal)(max);
        let acceptor = Acceptor::new(socket, kind.label, self.connections.clone(), refusal);
        let stop = self.stop.clone();
        match kind.protocol {
            Protocol::Http => {
                let (app, close) = (services.app.clone(), self.close.clone());
                self.listeners.spawn(http_conn::serve(
                    acceptor,
                    app,
                    services.timeouts,
                    stop,
                    close,
                ))
            }
            Protocol::Frames => {
                let ctx = Arc::clone(&services.frames);
                self.listeners.spawn(frames::serve(acceptor, ctx, stop))
            }
            Protocol::Resp => {
                let ctx = Arc::clone(&services.resp);
                self.listeners.spawn(resp::serve(acceptor, ctx, stop))
            }
        };
    }

    /// Start-up failed: close the listeners and every connection at once and wait for them,
    /// shut `store` down if it was opened, then remove the Unix socket files.
    async fn abort(mut self, store: Option<&vx_storage::Store>) {
        self.stop.cancel();
        self.close.cancel();
        while self.listeners.join_next().await.is_some() {}
        if let Some(store) = store {
            let closing = store.clone();
            let _ = tokio::task::spawn_blocking(move || closing.shutdown()).await;
        }
        self.remove_sockets();
    }

    /// Once `stop` fired (the listeners are closed now): requests still arriving on open
    /// connections get 503 `not_ready` with `Connection: close` for a short grace, after which
    /// idle connections are closed; requests in flight run on until `deadline`
    /// (`server.shutdown_timeout`), when what is still open is aborted.
    async fn drain(&mut self, deadline: Duration) {
        let drain_started = Instant::now();
        let grace = DRAIN_GRACE.min(deadline);
        while self.connections.open() > 0 && drain_started.elapsed() < grace {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.close.cancel();
        let left = deadline.saturating_sub(drain_started.elapsed());
        let listeners = &mut self.listeners;
        let drained = async { while listeners.join_next().await.is_some() {} };
        if tokio::time::timeout(left, drained).await.is_err() {
            tracing::warn!(
                timeout = %crate::config::units::format_duration(deadline),
                connections = self.connections.open(),
                "requests still open at server.shutdown_timeout; closing their connections"
            );
            self.listeners.abort_all();
        }
    }

    /// Remove the Unix socket files: the last step of every exit.
    fn remove_sockets(self) {
        for path in &self.sockets {
            remove_socket(path);
        }
    }
}

/// Log where `listener` accepts; first a warning if it is a non-loopback TCP address and
/// `no_tokens` (`auth.tokens` is empty): anyone who can reach it can use it.
fn announce(listener: &Bound, no_tokens: bool) {
    let kind = listener.kind;
    if let Address::Tcp(addr) = &listener.address
        && no_tokens
        && !addr.ip().is_loopback()
    {
        let (what, can) = kind.exposed;
        tracing::warn!(
            "{what} on a non-loopback address without auth.tokens: anyone who can reach {addr} \
             can {can}"
        );
    }
    tracing::info!("{} {}", kind.accepting, listener.address);
}

/// On `shutdown`, begin the drain (`/readyz` turns 503) and fire `stop`; a `stop` fired first
/// (start-up failed) ends the watch.
fn watch_shutdown(
    shutdown: impl Future<Output = ()> + Send + 'static,
    state: AppState,
    stop: CancellationToken,
) {
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

fn clustered(config: &Config) -> bool {
    config.cluster.mode == ClusterMode::Kafka
}

/// The store's settings: `config`'s, with the cache of open log files fitted to the
/// descriptors this process may hold, the metrics observer, and cluster mode's changes.
fn storage_config(config: &Config, state: &AppState) -> vx_storage::StorageConfig {
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
    let mut storage = config.storage_config();
    // A quarter of the descriptors at most for cached log files: the rest is for
    // connections. Under a low limit the cache only reopens files more often.
    let quarter = usize::try_from(nofile / 4).unwrap_or(usize::MAX);
    storage.open_files = storage.open_files.min(quarter).max(16);
    storage.observer = Some(state.metrics().observer());
    if clustered(config) {
        // Features come from T.entities, and a record Kafka acknowledged is always
        // applied (docs/CLUSTER.md).
        storage.features_from_events = false;
        storage.refuse_at_limits = false;
    }
    storage
}

/// Open the store and log what recovery found. Recovery reads the active segment and the
/// index files: it runs on the blocking pool, off the async workers.
async fn open_store(storage: vx_storage::StorageConfig) -> Result<vx_storage::Store, StartError> {
    let opened = tokio::task::spawn_blocking(move || vx_storage::Store::open(storage)).await;
    let (store, report) = match opened {
        Ok(Ok(opened)) => opened,
        Ok(Err(e)) => return Err(StartError::Open(e)),
        Err(e) => return Err(StartError::Task(format!("opening the store failed: {e}"))),
    };
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
    Ok(store)
}

/// Route requests to `store` (`/readyz` answers 200 until the drain), record the bootstrap
/// time, and log "ready" unless the stop came first.
fn become_ready(
    config: &Config,
    state: &AppState,
    store: &vx_storage::Store,
    started: Instant,
    stop: &CancellationToken,
) {
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
}

/// A cluster node leaves first: what it applied is committed, its partitions move.
async fn leave_cluster(state: &AppState) {
    if let Some(cluster) = state.cluster() {
        let node = Arc::clone(&cluster.node);
        let _ = tokio::task::spawn_blocking(move || node.shutdown()).await;
    }
}

/// Whatever is still queued for the writer is written and fsynced before this returns.
async fn close_store(store: &vx_storage::Store) -> Result<(), StartError> {
    let closing = store.clone();
    tokio::task::spawn_blocking(move || closing.shutdown())
        .await
        .map_err(|e| StartError::Task(format!("stopping the store failed: {e}")))
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

fn remove_socket(path: &Path) {
    if let Err(e) = std::fs::remove_file(path)
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

/// The "refusal" of the frames and Redis-protocol listeners: none, the connection is closed
/// only.
fn closed_only(_max: u64) -> Arc<[u8]> {
    Arc::from(&b""[..])
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
