//! The state shared by every request: the life-cycle phase (starting → ready → draining), the
//! router once the store is open, ingest limits and budgets, auth and metrics.

use crate::config::{Config, Scope};
use crate::metrics::Metrics;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

/// Where the service is in its life: requests other than health and metrics are answered only
/// while `Ready`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// Listening, but the store is still being opened (recovery).
    Starting = 0,
    Ready = 1,
    /// A shutdown signal arrived: new requests get 503 with `Connection: close`.
    Draining = 2,
}

/// One configured bearer token.
#[derive(Clone)]
pub struct Token {
    pub token: Vec<u8>,
    pub scopes: Vec<Scope>,
}

/// Cheap to clone: everything is behind one `Arc`.
#[derive(Clone)]
pub struct AppState(Arc<StateFields>);

/// What every clone of an [`AppState`] shares.
struct StateFields {
    phase: AtomicU8,
    router: Arc<OnceLock<vx_router::Router>>,
    /// The one write path, once the store is open (and in cluster mode, the node joined).
    writes: OnceLock<crate::write::Writes>,
    metrics: Arc<Metrics>,
    limits: vx_ingest::Limits,
    budget: vx_ingest::InflightBudget,
    tokens: Vec<Token>,
    /// `otlp.stream_attribute`.
    otlp_stream_attribute: String,
    hub: Arc<crate::live::Hub>,
    /// The status page's top streams, computed at most once a second for all viewers.
    top: crate::status::top::TopCache,
    /// Cluster mode: this node's handle, once it has joined.
    cluster: Arc<OnceLock<Arc<crate::cluster::Cluster>>>,
}

impl AppState {
    /// State for a service that is starting: no router yet.
    pub fn new(config: &Config) -> AppState {
        let router = Arc::new(OnceLock::new());
        let budget = vx_ingest::InflightBudget::new(config.ingest.max_inflight_bytes);
        let hub = Arc::new(crate::live::Hub::new(config.server.max_followers));
        let cluster = Arc::new(OnceLock::new());
        let metrics = Arc::new(Metrics::new(
            Arc::clone(&router),
            budget.clone(),
            Arc::clone(&hub),
            Arc::clone(&cluster),
        ));
        let limits = vx_ingest::Limits {
            max_body_bytes: config.ingest.max_body_bytes,
            max_event_bytes: usize::try_from(config.ingest.max_event_bytes).unwrap_or(usize::MAX),
            body_timeout: config.ingest.body_timeout,
        };
        AppState(Arc::new(StateFields {
            phase: AtomicU8::new(Phase::Starting as u8),
            router,
            writes: OnceLock::new(),
            metrics,
            limits,
            budget,
            tokens: config
                .auth
                .tokens
                .iter()
                .map(|t| Token {
                    token: t.token.as_bytes().to_vec(),
                    scopes: t.scopes.clone(),
                })
                .collect(),
            otlp_stream_attribute: config.otlp.stream_attribute.clone(),
            hub,
            top: crate::status::top::TopCache::default(),
            cluster,
        }))
    }

    pub fn phase(&self) -> Phase {
        match self.0.phase.load(Ordering::Acquire) {
            0 => Phase::Starting,
            1 => Phase::Ready,
            _ => Phase::Draining,
        }
    }

    /// The store is open: start answering. Ignored once draining (a signal during bootstrap).
    pub fn set_ready(&self, router: vx_router::Router) {
        // A second call cannot happen (the server opens the store once); keep the first.
        let writes = match self.cluster() {
            Some(c) => crate::write::Writes::kafka(router.clone(), Arc::clone(c)),
            None => crate::write::Writes::local(router.clone()),
        };
        let _ = self.0.writes.set(writes);
        let _ = self.0.router.set(router);
        if self
            .0
            .phase
            .compare_exchange(
                Phase::Starting as u8,
                Phase::Ready as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
        {
            self.0.metrics.set_ready(true);
        }
    }

    /// A shutdown signal arrived.
    pub fn begin_drain(&self) {
        self.0.phase.store(Phase::Draining as u8, Ordering::Release);
        self.0.metrics.set_ready(false);
        // Followers end now: a live body would otherwise hold its connection to the deadline.
        self.0.hub.close();
    }

    /// Live followers and their fan-out.
    pub fn hub(&self) -> &Arc<crate::live::Hub> {
        &self.0.hub
    }

    /// For tests of request handling that never touches storage.
    #[cfg(test)]
    pub fn force_ready_without_router(&self) {
        self.0.phase.store(Phase::Ready as u8, Ordering::Release);
    }

    /// Cluster mode: this node joined its cluster (before [`AppState::set_ready`]).
    pub fn set_cluster(&self, cluster: Arc<crate::cluster::Cluster>) {
        let _ = self.0.cluster.set(cluster);
    }

    /// Cluster mode's handle; `None` in single-node mode (and before the node joined).
    pub fn cluster(&self) -> Option<&Arc<crate::cluster::Cluster>> {
        self.0.cluster.get()
    }

    /// The router, once the store is open.
    pub fn router(&self) -> Option<&vx_router::Router> {
        self.0.router.get()
    }

    /// The one write path, once the store is open: the local log, or Kafka in cluster mode.
    pub fn writes(&self) -> Option<&crate::write::Writes> {
        self.0.writes.get()
    }

    /// Ready to serve: bootstrapped, not draining, and the store accepts writes.
    pub fn is_ready(&self) -> bool {
        self.phase() == Phase::Ready
            && self.router().is_some_and(|r| !r.store().is_poisoned())
            && self.cluster().is_none_or(|c| c.node.ready())
    }

    pub fn metrics(&self) -> &Metrics {
        &self.0.metrics
    }

    pub fn limits(&self) -> &vx_ingest::Limits {
        &self.0.limits
    }

    pub fn budget(&self) -> &vx_ingest::InflightBudget {
        &self.0.budget
    }

    pub fn top_cache(&self) -> &crate::status::top::TopCache {
        &self.0.top
    }

    /// The resource attribute that names an OTLP item's stream (`otlp.stream_attribute`).
    pub fn otlp_stream_attribute(&self) -> &str {
        &self.0.otlp_stream_attribute
    }

    /// Configured tokens; empty means auth is off.
    pub fn tokens(&self) -> &[Token] {
        &self.0.tokens
    }
}
