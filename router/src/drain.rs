//! The writer's measured drain rate (events per second), an exponentially weighted moving
//! average over ~100 ms samples. `Retry-After` is derived from it.

use parking_lot::Mutex;
use std::time::Instant;

/// Samples shorter than this are accumulated, so a burst of tiny releases does not read as
/// an absurd rate.
const SAMPLE_MS: f64 = 100.0;
/// Weight of a new sample.
const ALPHA: f64 = 0.3;
/// A gap longer than this between releases is idleness, not slowness.
const IDLE_MS: f64 = 1000.0;

pub(crate) struct DrainRate {
    inner: Mutex<DrainSamples>,
}

/// The sample being accumulated and the rate so far.
struct DrainSamples {
    since: Instant,
    pending: u64,
    rate: f64,
}

impl DrainRate {
    pub(crate) fn new() -> Self {
        DrainRate {
            inner: Mutex::new(DrainSamples {
                since: Instant::now(),
                pending: 0,
                rate: 0.0,
            }),
        }
    }

    pub(crate) fn record(&self, events: u64) {
        let mut g = self.inner.lock();
        g.pending += events;
        let elapsed_ms = g.since.elapsed().as_secs_f64() * 1000.0;
        if elapsed_ms > IDLE_MS {
            // The writer was idle: a sample spanning the pause would understate its speed.
            g.pending = events;
            g.since = Instant::now();
        } else if elapsed_ms >= SAMPLE_MS {
            let sample = g.pending as f64 / (elapsed_ms / 1000.0);
            g.rate = if g.rate == 0.0 {
                sample
            } else {
                ALPHA * sample + (1.0 - ALPHA) * g.rate
            };
            g.pending = 0;
            g.since = Instant::now();
        }
    }

    pub(crate) fn rate(&self) -> f64 {
        self.inner.lock().rate
    }
}
