//! `vx_ingest_stage_seconds{stage}`: where an acknowledged ingest request's time went, stage
//! by stage, so that the longest can be found and shortened (docs/BENCHMARKS.md "A
//! request's time, by stage"). The stages follow a request in order, and add up to its time
//! from its first body byte to its answer:
//!
//! | stage | from | to |
//! | --- | --- | --- |
//! | `receive` | the handler starts reading the body | the body is read, less `decode` |
//! | `decode` | | time spent decoding chunks into the batch |
//! | `admission` | the body is decoded | sent to the writer (shards, dedup keys, reservation) |
//! | `queue` | sent | its group begins |
//! | `write` | its group begins | the group's one `pwrite` is done (planning included) |
//! | `fsync` | written | the group's fdatasync returns (zero without one) |
//! | `apply` | synced | applied to the feature tables and answered (visibility, the hand-off to the apply threads, their apply, the wait for the group before) |
//! | `answer` | answered | the handler has its 200 body (a task's wake-up, the JSON) |
//!
//! Recorded for requests answered at the end of their group (the mode's level or `fsync`),
//! over HTTP (`POST /v1/events`) and frames (from `admission` on); the engine's stages come
//! with the outcome (`vx_storage::Stages`).

use super::Timed;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The stages, in a request's order.
pub const STAGES: [&str; 8] = [
    "receive",
    "decode",
    "admission",
    "queue",
    "write",
    "fsync",
    "apply",
    "answer",
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StageLabels {
    stage: &'static str,
}

/// The stage histograms, one handle per stage.
#[derive(Clone, Debug)]
pub struct StageTimes([Timed; 8]);

/// What the interface measured of a request, besides the engine's stages.
#[derive(Clone, Copy, Debug)]
pub struct Measured {
    /// Reading the body, less decoding (`None`: a frames batch, read before it is known).
    pub receive: Option<Duration>,
    pub decode: Option<Duration>,
    /// When the batch was ready for admission.
    pub decoded: Instant,
    /// When the handler had its answer ready.
    pub done: Instant,
}

impl StageTimes {
    /// Register `vx_ingest_stage_seconds` (buckets 10 µs × 2ⁿ, to 5 s).
    pub(super) fn register(registry: &mut Registry) -> StageTimes {
        let bounds: Arc<[f64]> = exponential_buckets(0.000_01, 2.0, 20).collect();
        let family = Family::<StageLabels, Timed, _>::new_with_constructor(move || {
            Timed::new(Arc::clone(&bounds))
        });
        registry.register(
            "vx_ingest_stage_seconds",
            "Where acknowledged ingest requests' time went, by stage (docs/OPERATIONS.md)",
            family.clone(),
        );
        StageTimes(STAGES.map(|stage| family.get_or_create_owned(&StageLabels { stage })))
    }

    /// Record one request: what the interface measured, and the engine's stages of its
    /// outcome (nothing if it was answered before its group's end).
    pub fn observe(&self, m: &Measured, engine: &vx_storage::Stages) {
        let (Some(sent), Some(answered)) = (engine.sent, engine.answered) else {
            return;
        };
        let [
            receive,
            decode,
            admission,
            queue,
            write,
            fsync,
            apply,
            answer,
        ] = &self.0;
        if let Some(d) = m.receive {
            receive.observe(d);
        }
        if let Some(d) = m.decode {
            decode.observe(d);
        }
        admission.observe(sent.saturating_duration_since(m.decoded));
        queue.observe(engine.queue);
        write.observe(engine.write);
        fsync.observe(engine.fsync);
        apply.observe(engine.apply);
        answer.observe(m.done.saturating_duration_since(answered));
    }
}
