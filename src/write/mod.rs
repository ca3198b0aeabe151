//! The one write path (docs/ARCHITECTURE.md, "One write path"): every interface — HTTP ingest,
//! OTLP, the frames listener, the Redis-protocol listener, feature `PUT`/`DELETE`, stream
//! `DELETE` — hands its writes to [`Writes`], with one request type per kind of write and one
//! outcome type. The target is chosen once, at start-up: the local log (single-node mode,
//! [`local`]) or Kafka (cluster mode, [`kafka`]). Both admit through the router's one
//! admission path, so a slow disk and a slow broker push back alike, and both answer as
//! single-node mode does: the same statuses, counts and refusals.
//!
//! Ordering: [`Writes::write`] returns a future that hands its request to the log writer or
//! to the Kafka producer at its first poll, with nothing awaited before; a caller that polls
//! each write once before taking the next (frames, RESP) keeps its connection's order.

pub mod kafka;
mod local;

use crate::cluster::Cluster;
use crate::failure::Failure;
use axum::http::HeaderValue;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use vx_cluster::position::Position;
use vx_proto::{Batch, ErrorCode};
use vx_router::{Reservation, Router};
use vx_storage::Durability;
use vx_storage::features::{FeatureValue, Increment, Incremented};

/// A write's future, `'static` so that a connection can keep several in flight.
pub type Pending<T> = Pin<Box<dyn Future<Output = Result<T, Refusal>> + Send + 'static>>;

/// Where writes go: chosen at start-up, cheap to clone.
#[derive(Clone)]
pub struct Writes {
    router: Router,
    target: Target,
}

#[derive(Clone)]
enum Target {
    /// Single-node mode: the local log.
    Local,
    /// Cluster mode: Kafka, through this node's handle.
    Kafka(Arc<Cluster>),
}

/// What a write asks for (`X-Vx-Durability`, a frames batch's level).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Asked {
    /// A level of the local store (single-node mode).
    pub local: Option<Durability>,
    /// Cluster mode: answer once the owners applied the write.
    pub applied: bool,
}

/// The level a write reached, for its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reached {
    /// Single-node mode: a level of the local store.
    Local(Durability),
    /// Cluster mode: in Kafka, on every in-sync replica.
    Replicated,
    /// Cluster mode: applied by the owners.
    Applied,
}

impl Reached {
    /// Its name in answers (docs/API.md §3, §12).
    pub fn as_str(self) -> &'static str {
        match self {
            Reached::Local(d) => d.as_str(),
            Reached::Replicated => "replicated",
            Reached::Applied => "applied",
        }
    }
}

/// A batch of events to write.
pub struct Events {
    pub batch: Batch,
    pub asked: Asked,
    pub expected_last_seq: Option<u64>,
    /// The client's `Authorization`, passed on when another node must be asked (cluster mode).
    pub auth: Option<HeaderValue>,
}

/// A written batch: docs/API.md §3's 200 answer.
#[derive(Debug)]
pub struct Written {
    /// Newly stored events; in cluster mode without `applied`, the events Kafka took.
    pub accepted: u64,
    /// Known in single-node mode, and in cluster mode once the owners applied the write.
    pub duplicates: Option<u64>,
    pub last_seq: Option<Vec<(String, u64)>>,
    pub durability: Reached,
    pub queue_fill: f64,
    /// Cluster mode: where the write is in Kafka (also `X-Vx-Position`).
    pub position: Option<Position>,
    /// Where its time went in the local store (unset in cluster mode).
    pub stages: vx_storage::Stages,
}

/// A feature write (docs/API.md §6): set or delete features of one entity, or delete
/// entities.
pub struct Features {
    /// The entity whose shard admits the write (the first target's, for a delete).
    pub entity: String,
    pub change: Change,
    pub asked: Asked,
    pub auth: Option<HeaderValue>,
}

/// What a feature write changes.
pub enum Change {
    /// Set values; `None` deletes that feature.
    Put(Vec<(String, Option<FeatureValue>)>),
    /// Delete each target, in one record: an entity and one of its features, or (`None`)
    /// the whole entity. Nothing found is a 404.
    Delete(Vec<(String, Option<String>)>),
    /// Add to one feature of the entity (the Redis protocol's `HINCRBY`, `HINCRBYFLOAT`): a
    /// record of its own, the sum made when it is applied, in log order, so that concurrent
    /// increments all count. Answered once applied, with the new value.
    Incr { name: String, by: Increment },
}

/// A feature write done: what the single-node answer says.
#[derive(Debug)]
pub struct FeaturesWritten {
    pub set: u64,
    /// Of `set`, the features the entity did not have (Redis's `HSET` answer).
    pub added: u64,
    pub deleted: u64,
    /// The delete targets that existed (Redis's `DEL` answer).
    pub found: u64,
    /// An increment's outcome: the new value, or why the value was left as it was.
    pub incremented: Option<Incremented>,
    pub durability: Reached,
    pub position: Option<Position>,
}

/// A stream deleted (docs/API.md §5).
#[derive(Debug)]
pub struct StreamDeleted {
    pub last_seq: u64,
    pub durability: Reached,
    pub position: Option<Position>,
}

/// A write refused: the one failure shape, the queue fill to report, and whether the
/// refusal is the service shutting down (an HTTP connection is then closed).
#[derive(Debug)]
pub struct Refusal {
    pub failure: Failure,
    pub queue_fill: f64,
    pub draining: bool,
}

impl Refusal {
    pub fn new(failure: Failure) -> Refusal {
        Refusal {
            failure,
            queue_fill: 0.0,
            draining: false,
        }
    }

    fn filled(failure: Failure, queue_fill: f64) -> Refusal {
        Refusal {
            failure,
            queue_fill,
            draining: false,
        }
    }

    /// A refusal of the router or the local store, mapped once ([`Failure::refused`]).
    fn from_router(e: vx_router::SubmitError) -> Refusal {
        let draining = matches!(
            &e,
            vx_router::SubmitError::Write {
                error: vx_storage::WriteError::ShuttingDown,
                ..
            }
        );
        let (failure, queue_fill) = Failure::refused(e);
        Refusal {
            failure,
            queue_fill,
            draining,
        }
    }

    /// A refusal of the local store that the client may expect (a 404, a conflict): not
    /// logged.
    fn from_write(error: vx_storage::WriteError) -> Refusal {
        let draining = matches!(error, vx_storage::WriteError::ShuttingDown);
        Refusal {
            failure: Failure::from(error),
            queue_fill: 0.0,
            draining,
        }
    }

    /// Its HTTP form.
    pub fn into_app(self) -> crate::error::AppError {
        if self.draining {
            crate::error::AppError::draining()
        } else {
            self.failure.into()
        }
    }
}

impl Writes {
    /// Single-node mode: the local log.
    pub fn local(router: Router) -> Writes {
        Writes {
            router,
            target: Target::Local,
        }
    }

    /// Cluster mode: Kafka. The router admits writes as in single-node mode (its budgets
    /// hold a write's bytes until Kafka answers).
    pub fn kafka(router: Router, cluster: Arc<Cluster>) -> Writes {
        Writes {
            router,
            target: Target::Kafka(cluster),
        }
    }

    pub fn router(&self) -> &Router {
        &self.router
    }

    /// Cluster mode's handle, `None` in single-node mode.
    pub fn cluster(&self) -> Option<&Arc<Cluster>> {
        match &self.target {
            Target::Local => None,
            Target::Kafka(c) => Some(c),
        }
    }

    /// The durability a client named (`X-Vx-Durability`): a local level in single-node
    /// mode; in cluster mode `applied`, or any other level met by Kafka's acknowledgement.
    pub fn asked(&self, level: Option<&str>) -> Result<Asked, Failure> {
        asked(level, self.cluster().is_some())
    }

    /// Shards and dedup keys, computed once on the caller's task; the batch's shards.
    pub fn prepare(&self, batch: &mut Batch) -> Vec<(u32, u64)> {
        self.router.store().prepare(batch);
        self.router.shards_of(batch)
    }

    /// Admit a prepared batch at once, or refuse it (HTTP's 429 with `Retry-After`).
    pub fn try_admit(&self, shards: &[(u32, u64)], bytes: u64) -> Result<Reservation, Refusal> {
        self.router
            .try_admit(shards, bytes)
            .map_err(Refusal::from_router)
    }

    /// Write an admitted batch. The returned future hands it to the log writer or to the
    /// Kafka producer at its first poll.
    pub fn write(&self, events: Events, reservation: Reservation) -> Pending<Written> {
        match &self.target {
            Target::Local => local::write(self.router.clone(), events, reservation),
            Target::Kafka(c) => kafka::write(Arc::clone(c), &self.router, events, reservation),
        }
    }

    /// Refuse a batch at a limit before admission: in cluster mode from the owners'
    /// published usage (the local store checks its own as it writes). Awaited on the
    /// caller's task, so a connection's order is kept.
    pub async fn check_limits(
        &self,
        batch: &Batch,
        auth: Option<&HeaderValue>,
    ) -> Result<(), Refusal> {
        match &self.target {
            Target::Local => Ok(()),
            Target::Kafka(c) => kafka::limits(c, &self.router, batch, auth).await,
        }
    }

    /// Prepare, admit at once (or refuse) and write a batch.
    pub async fn events(&self, mut events: Events) -> Result<Written, Refusal> {
        if events.batch.is_empty() {
            return Ok(self.nothing_written(events.asked));
        }
        self.check_limits(&events.batch, events.auth.as_ref())
            .await?;
        let shards = self.prepare(&mut events.batch);
        let bytes = events.batch.mem_bytes() as u64;
        let reservation = self.try_admit(&shards, bytes)?;
        self.write(events, reservation).await
    }

    /// The answer to an empty batch: nothing to store, at the level asked.
    pub fn nothing_written(&self, asked: Asked) -> Written {
        let durability = match (&self.target, asked.applied) {
            (Target::Local, _) => Reached::Local(
                asked
                    .local
                    .unwrap_or_else(|| self.router.store().fsync_mode().durability()),
            ),
            (Target::Kafka(_), false) => Reached::Replicated,
            (Target::Kafka(_), true) => Reached::Applied,
        };
        Written {
            accepted: 0,
            duplicates: Some(0),
            last_seq: Some(Vec::new()),
            durability,
            queue_fill: 0.0,
            position: self.cluster().map(|_| Position::new()),
            stages: vx_storage::Stages::default(),
        }
    }

    /// A feature write. The returned future hands it on at its first poll.
    pub fn features(&self, f: Features) -> Pending<FeaturesWritten> {
        match &self.target {
            Target::Local => local::features(self.router.clone(), f),
            Target::Kafka(c) => kafka::features(Arc::clone(c), self.router.clone(), f),
        }
    }

    /// Delete a stream (a durable tombstone); 404 if it does not exist.
    pub async fn delete_stream(
        &self,
        stream: &str,
        asked: Asked,
        auth: Option<HeaderValue>,
    ) -> Result<StreamDeleted, Refusal> {
        match &self.target {
            Target::Local => local::delete_stream(&self.router, stream, asked).await,
            Target::Kafka(c) => kafka::delete_stream(c, &self.router, stream, auth).await,
        }
    }
}

/// [`Writes::asked`], before a [`Writes`] exists.
pub fn asked(level: Option<&str>, clustered: bool) -> Result<Asked, Failure> {
    let Some(v) = level else {
        return Ok(Asked::default());
    };
    let v = v.to_ascii_lowercase();
    if clustered {
        return match v.as_str() {
            "applied" => Ok(Asked {
                local: None,
                applied: true,
            }),
            "replicated" | "none" | "write" | "fsync" => Ok(Asked::default()),
            _ => Err(Failure::new(
                ErrorCode::BadRequest,
                format!(
                    "X-Vx-Durability {v:?} is not one of none, write, fsync, replicated, applied"
                ),
            )),
        };
    }
    match Durability::parse(&v) {
        Some(d) => Ok(Asked {
            local: Some(d),
            applied: false,
        }),
        None => Err(Failure::new(
            ErrorCode::BadRequest,
            format!(
                "X-Vx-Durability {v:?} is not one of none, write, fsync{}",
                if matches!(v.as_str(), "applied" | "replicated") {
                    " (replicated and applied are levels of cluster mode)"
                } else {
                    ""
                }
            ),
        )),
    }
}

/// 404 for a delete that found nothing.
fn not_found(what: String) -> Refusal {
    Refusal::new(Failure::new(ErrorCode::NotFound, what))
}

/// What a delete looked for, for its 404.
fn unknown_target(targets: &[(String, Option<String>)]) -> String {
    match targets {
        [(_, Some(name))] => format!("unknown feature {name:?}"),
        [(entity, None)] => format!("unknown entity {entity:?}"),
        _ => "none of the entities or features exists".to_string(),
    }
}
