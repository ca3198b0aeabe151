//! When each operation is meant to be sent. Open loop divides the rate among the load lanes,
//! each lane sending its `i`-th operation at `start + offset + i × period` whatever the server
//! does (lanes are staggered by `offset` so they do not all fire at once). Latency is then
//! measured from that intended time, as wrk2 does, so a stalled server is charged for every
//! operation that should have been sent meanwhile (coordinated omission corrected). A send
//! that leaves later than [`LATE_AFTER`] after its intended time is counted as late: the tool
//! itself (or the pipeline limit) fell behind.
//!
//! Tokio's timer rounds every sleep up to its next millisecond tick, which would add up to a
//! millisecond of the tool's own jitter to every open-loop latency. So one pacer thread
//! ([`Pacer`]) releases the sends instead: it sleeps with the OS's high-resolution timer (tens of
//! microseconds late) and hands each lane a permit at each of its intended times.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// A send that leaves within this of its intended time is on time.
pub const LATE_AFTER: Duration = Duration::from_millis(1);

#[derive(Clone, Copy, Debug)]
pub struct Schedule {
    start: Instant,
    /// Operations per second of this lane.
    lane_rate: f64,
    offset: Duration,
}

impl Schedule {
    /// Lane `lane` of `lanes` sharing `rate` operations/s from `start`.
    pub fn open(start: Instant, rate: f64, lanes: u32, lane: u32) -> Schedule {
        let lanes = lanes.max(1);
        let lane_rate = rate / f64::from(lanes);
        let offset = Duration::from_secs_f64(f64::from(lane % lanes) / rate);
        Schedule {
            start,
            lane_rate,
            offset,
        }
    }

    /// The intended send time of operation `i` (0-based) of this lane.
    pub fn intended(&self, i: u64) -> Instant {
        // Computed from the start each time in floating point, not accumulated from a
        // rounded period, so a long run does not drift.
        let at = (i as f64 / self.lane_rate).min(1e12);
        self.start + self.offset + Duration::from_secs_f64(at)
    }

    pub fn period(&self) -> Duration {
        Duration::from_secs_f64(1.0 / self.lane_rate)
    }
}

/// Releases open-loop sends on time: permit `i` of lane `l` is added at
/// `schedules[l].intended(i)`, for every send meant before the end of the run (a lane stops
/// at its first send at or after the end). The permits of a lane that falls behind accumulate
/// (the lane then sends at once, late, and the lateness is recorded); they are bounded by the
/// run's length × rate.
pub struct Pacer {
    permits: Vec<Arc<Semaphore>>,
    stop: Arc<AtomicBool>,
}

impl Pacer {
    /// Start the pacer thread; it ends at `end`, or on drop (closing every lane's semaphore).
    pub fn start(schedules: Vec<Schedule>, end: Instant) -> std::io::Result<Pacer> {
        let permits: Vec<Arc<Semaphore>> = schedules
            .iter()
            .map(|_| Arc::new(Semaphore::new(0)))
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let (p, st) = (permits.clone(), stop.clone());
        std::thread::Builder::new()
            .name("vx-pacer".into())
            .spawn(move || pace(&schedules, &p, end, &st))?;
        Ok(Pacer { permits, stop })
    }

    /// The permits of lane `lane`: one per send it may make now.
    pub fn lane(&self, lane: usize) -> Option<Arc<Semaphore>> {
        self.permits.get(lane).cloned()
    }
}

impl Drop for Pacer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

fn pace(schedules: &[Schedule], permits: &[Arc<Semaphore>], end: Instant, stop: &AtomicBool) {
    let lanes = schedules.len() as u64;
    let mut released = vec![0u64; schedules.len()];
    let mut k = 0u64;
    if lanes == 0 {
        return;
    }
    'run: loop {
        if stop.load(Ordering::Acquire) {
            // The run is abandoned: end every lane's wait.
            for p in permits {
                p.close();
            }
            return;
        }
        // The k-th send of the whole run is lane k % lanes's (k / lanes)-th: the lanes are
        // staggered evenly, so this walks the merged schedule in time order.
        let due = schedules[(k % lanes) as usize].intended(k / lanes);
        if due >= end {
            break;
        }
        let now = Instant::now();
        if due > now {
            std::thread::sleep((due - now).min(Duration::from_millis(100)));
            continue;
        }
        // Release everything due by now: never early, and since a sleep lasts at least the
        // thread's timer slack (50 µs by default), the pacer wakes at most ~20,000 times a
        // second whatever the rate.
        let horizon = Instant::now();
        loop {
            let lane = (k % lanes) as usize;
            let t = schedules[lane].intended(k / lanes);
            if t >= end {
                break 'run;
            }
            if t > horizon {
                break;
            }
            permits[lane].add_permits(1);
            released[lane] += 1;
            k += 1;
        }
    }
    // Whatever float rounding left of a lane's sends before the end (a lane stops by itself at
    // its first send at or after the end, so it must get every one before it).
    for (lane, s) in schedules.iter().enumerate() {
        while s.intended(released[lane]) < end {
            let wait = s
                .intended(released[lane])
                .saturating_duration_since(Instant::now());
            std::thread::sleep(wait);
            permits[lane].add_permits(1);
            released[lane] += 1;
        }
    }
}

/// How late an actual send is against its intended time (zero when early or on time).
pub fn lateness(intended: Instant, sent: Instant) -> Duration {
    sent.saturating_duration_since(intended)
}

pub fn is_late(lateness: Duration) -> bool {
    lateness > LATE_AFTER
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intended_times_are_evenly_spaced_per_lane_and_staggered_across_lanes() {
        let t0 = Instant::now();
        // 1000 ops/s over 4 lanes: each lane every 4 ms, lanes 1 ms apart.
        let lanes: Vec<Schedule> = (0..4).map(|l| Schedule::open(t0, 1000.0, 4, l)).collect();
        for (l, s) in lanes.iter().enumerate() {
            assert_eq!(s.period(), Duration::from_millis(4));
            for i in 0..100u64 {
                let expect = Duration::from_millis(4 * i + l as u64);
                assert_eq!(s.intended(i) - t0, expect, "lane {l} op {i}");
            }
        }
        // Together the lanes send exactly `rate` operations per second.
        let mut all: Vec<Instant> = lanes
            .iter()
            .flat_map(|s| (0..250).map(|i| s.intended(i)))
            .filter(|t| *t < t0 + Duration::from_secs(1))
            .collect();
        all.sort();
        assert_eq!(all.len(), 1000);
        assert!(
            all.windows(2)
                .all(|w| w[1] - w[0] == Duration::from_millis(1))
        );
    }

    #[test]
    fn a_long_run_does_not_drift() {
        let t0 = Instant::now();
        let s = Schedule::open(t0, 3.0, 1, 0);
        // A third of a second is no whole number of nanoseconds; the three millionth op is
        // still within a microsecond of a million seconds.
        let at = s.intended(3_000_000) - t0;
        assert!(at.abs_diff(Duration::from_secs(1_000_000)) < Duration::from_micros(1));
    }

    #[test]
    fn the_pacer_releases_each_lane_its_sends_in_order_and_stops_at_the_end() {
        let t0 = Instant::now();
        let end = t0 + Duration::from_millis(300);
        // 100 ops/s over 2 lanes: 30 sends before the end, 15 per lane.
        let schedules: Vec<Schedule> = (0..2).map(|l| Schedule::open(t0, 100.0, 2, l)).collect();
        let pacer = match Pacer::start(schedules.clone(), end) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        };
        let rt = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => panic!("{e}"),
        };
        rt.block_on(async {
            for (lane, schedule) in schedules.iter().enumerate() {
                let Some(sem) = pacer.lane(lane) else {
                    panic!("no lane {lane}");
                };
                let mut got = 0u64;
                while schedule.intended(got) < end {
                    match sem.acquire().await {
                        Ok(p) => p.forget(),
                        Err(e) => panic!("{e}"),
                    }
                    // A permit never comes before its intended time.
                    assert!(Instant::now() >= schedule.intended(got));
                    got += 1;
                }
                assert_eq!(got, 15, "lane {lane}");
                // And no permit beyond the end.
                std::thread::sleep(Duration::from_millis(20));
                assert_eq!(sem.available_permits(), 0);
            }
        });
        assert!(pacer.lane(2).is_none());
        // Dropping the pacer of an abandoned run ends the lanes' waits.
        let far = Instant::now() + Duration::from_secs(3600);
        let pacer = match Pacer::start(vec![Schedule::open(far, 1.0, 1, 0)], far) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        };
        let sem = pacer.lane(0);
        drop(pacer);
        if let Some(sem) = sem {
            rt.block_on(async { assert!(sem.acquire().await.is_err()) });
        }
    }

    #[test]
    fn lateness_counts_only_past_the_timer_granularity() {
        let t0 = Instant::now();
        assert_eq!(lateness(t0 + Duration::from_millis(5), t0), Duration::ZERO);
        let l = lateness(t0, t0 + Duration::from_micros(900));
        assert!(!is_late(l));
        let l = lateness(t0, t0 + Duration::from_millis(3));
        assert_eq!(l, Duration::from_millis(3));
        assert!(is_late(l));
    }
}
