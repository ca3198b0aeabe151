//! The tables applied on several threads (docs/API.md §6, `features.apply_threads`): each
//! thread owns a fixed, contiguous range of shards ([`Part`]) and applies, in log order, what
//! every group of records does to its shards; a group counts as applied once every thread
//! has applied it.
//!
//! Why: one thread applying every shard capped ingest with features at 2.7–3.0M events/s on
//! a 16-core machine while the log alone took 8M (docs/BENCHMARKS.md). Shards are
//! independent (counts, names and the LSN each applied are per shard), so threads that own
//! disjoint shards need no coordination beyond the group they share.
//!
//! What holds for any thread count, and why:
//! - **Log order per shard**: a shard has one owner, which applies the groups in the order
//!   they were handed over and, within a group, the records in order ([`Group::apply`]).
//! - **Read-your-writes**: a group's [`Group::finish`] (which answers its requests) runs once
//!   every part is applied, on the thread that applied the last part.
//! - **Groups finish in order**: a thread finishes a group before it starts the next, so the
//!   thread that finishes group `g` (the last to apply it) cannot have applied `g + 1` yet,
//!   and `g + 1` cannot finish before `g`'s [`Group::finish`] has returned.
//! - **The hand-off's cost does not grow with the threads**: [`ApplyThreads::submit`] puts
//!   the group in a ring slot that every thread reads, and wakes the sleeping threads with one
//!   call (none if none sleeps); nothing is sent per thread.
//! - **Bounded**: at most [`MAX_OUT`] groups are out (handed over, not finished);
//!   [`ApplyThreads::submit`] waits for the oldest first.
//! - **A failed apply** is the group's to report ([`Group::apply`] records it); a part that
//!   panics (a bug) is reported to the group ([`Group::panicked`]) and counted as applied, so
//!   the group still finishes and nobody waits forever.
//!
//! [`cut`] splits a record's events into the threads' slices, once per record, by whichever
//! thread claims the record first ([`Claims`]).

pub mod cut;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use cut::{Claims, Cut, Key};

use crate::Features;
use parking_lot::Mutex;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar};
use std::thread::JoinHandle;

/// Groups out at most: handed over and not finished. Two let the threads that finished a
/// group start the next while the last one finishes it, and bound what waits here (a group
/// holds its records and its requests) to two groups beside the one the writer builds.
pub const MAX_OUT: usize = 2;

/// Which of the apply threads: thread `index` of `of`. It owns a contiguous range of shards
/// ([`Part::shards`]), so a record's events in shard order give each part one slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    pub index: usize,
    pub of: usize,
}

impl Part {
    /// All the shards: one thread, or a caller that applies a whole group itself.
    pub const WHOLE: Part = Part { index: 0, of: 1 };

    /// The shards it owns among `shards`: `ceil(index * shards / of)` up to the next part's.
    pub fn shards(&self, shards: u32) -> Range<u32> {
        let at = |i: usize| {
            let v = (i as u64 * u64::from(shards)).div_ceil(self.of.max(1) as u64);
            u32::try_from(v).unwrap_or(shards)
        };
        at(self.index)..at(self.index + 1)
    }

    /// The part among `of` that owns `shard` of `shards` (a shard past the last is the last
    /// part's, so that exactly one part sees it and reports it).
    pub fn owner(shard: u32, shards: u32, of: usize) -> usize {
        let shard = shard.min(shards.saturating_sub(1));
        let p = u64::from(shard) * of as u64 / u64::from(shards.max(1));
        usize::try_from(p).unwrap_or(0).min(of.saturating_sub(1))
    }

    /// Whether it owns `shard` of `shards`.
    pub fn owns(&self, shard: u32, shards: u32) -> bool {
        Part::owner(shard, shards, self.of) == self.index
    }
}

/// A group of records for the apply threads.
pub trait Group: Send + Sync {
    /// Apply, in log order, what the group does to the shards `part` owns. Every part of a
    /// group is applied once, each on its own thread (or all of them at once with
    /// [`Part::WHOLE`]). A record the tables refuse is the group's to record and report.
    fn apply(&self, features: &Features, part: Part);
    /// Every part is applied: answer, publish, release. Called once, after every `apply`.
    fn finish(&self, features: &Features);
    /// A part's apply panicked (a bug, `why` its message): the tables may miss what the
    /// group holds. Called before `finish`, which still comes.
    fn panicked(&self, features: &Features, why: &str);
}

/// The threads and their hand-off. Owned by whoever hands groups over (the log writer, or
/// start-up's replay of the log before it).
pub struct ApplyThreads {
    shared: Arc<Shared>,
    handles: Vec<JoinHandle<()>>,
    /// Groups handed over so far.
    submitted: u64,
}

/// One ring slot: the group at that place and how many parts have yet to apply it.
struct Slot {
    group: Mutex<Option<Arc<dyn Group>>>,
    left: AtomicUsize,
}

struct Shared {
    features: Arc<Features>,
    parts: usize,
    slots: Box<[Slot]>,
    progress: std::sync::Mutex<Progress>,
    /// A group was handed over, or the threads are to stop.
    more: Condvar,
    /// A group finished.
    done: Condvar,
    /// Groups finished, for a wait that need not lock.
    finished: AtomicU64,
}

struct Progress {
    published: u64,
    finished: u64,
    stop: bool,
    /// Threads asleep waiting for a group: the hand-off wakes them only if there are any.
    idle: usize,
    /// Someone waits for a group to finish.
    waiting: bool,
}

impl ApplyThreads {
    /// Start `threads` apply threads over `features`' shards (at least 1, at most one per
    /// shard), named `vx-apply-<i>`.
    pub fn start(features: Arc<Features>, threads: usize) -> std::io::Result<ApplyThreads> {
        let parts = threads.clamp(1, features.shards() as usize);
        let shared = Arc::new(Shared {
            features,
            parts,
            slots: (0..MAX_OUT)
                .map(|_| Slot {
                    group: Mutex::new(None),
                    left: AtomicUsize::new(0),
                })
                .collect(),
            progress: std::sync::Mutex::new(Progress {
                published: 0,
                finished: 0,
                stop: false,
                idle: 0,
                waiting: false,
            }),
            more: Condvar::new(),
            done: Condvar::new(),
            finished: AtomicU64::new(0),
        });
        let mut pool = ApplyThreads {
            shared,
            handles: Vec::with_capacity(parts),
            submitted: 0,
        };
        for index in 0..parts {
            let shared = Arc::clone(&pool.shared);
            let part = Part { index, of: parts };
            let handle = std::thread::Builder::new()
                .name(format!("vx-apply-{index}"))
                .spawn(move || shared.run(part))?;
            pool.handles.push(handle);
        }
        Ok(pool)
    }

    /// How many threads apply (each one [`Part`]).
    pub fn parts(&self) -> usize {
        self.shared.parts
    }

    /// Hand a group over, once fewer than [`MAX_OUT`] are out.
    pub fn submit(&mut self, group: Arc<dyn Group>) {
        let n = self.submitted;
        if let Some(oldest) = (n + 1).checked_sub(MAX_OUT as u64) {
            self.shared.wait_finished(oldest);
        }
        let slot = &self.shared.slots[(n % MAX_OUT as u64) as usize];
        *slot.group.lock() = Some(group);
        slot.left.store(self.shared.parts, Ordering::Release);
        let mut st = self.shared.lock();
        st.published = n + 1;
        let wake = st.idle > 0;
        drop(st);
        if wake {
            self.shared.more.notify_all();
        }
        self.submitted = n + 1;
    }

    /// Wait until every group handed over is finished: the tables are as the log has them
    /// through the last one.
    pub fn settle(&self) {
        self.shared.wait_finished(self.submitted);
    }

    /// Apply `group` here, whole, after every group handed over (a group too small to be
    /// worth waking the threads for): the same calls the threads make, in the same order.
    pub fn apply_here(&self, group: &dyn Group) {
        self.settle();
        let features = &self.shared.features;
        if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            group.apply(features, Part::WHOLE)
        })) {
            group.panicked(features, &panic_text(&*p));
        }
        if let Err(p) =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| group.finish(features)))
        {
            group.panicked(features, &panic_text(&*p));
        }
    }

    /// Let every group out finish, and stop the threads.
    pub fn stop(&mut self) {
        if self.handles.is_empty() {
            return;
        }
        self.settle();
        self.shared.lock().stop = true;
        self.shared.more.notify_all();
        for h in self.handles.drain(..) {
            // A thread's panics are caught per group; one that escapes has been reported.
            let _ = h.join();
        }
    }
}

impl Drop for ApplyThreads {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Progress> {
        // Nothing panics while holding it; a poisoned lock's data is still consistent.
        self.progress.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait_finished(&self, target: u64) {
        if self.finished.load(Ordering::Acquire) >= target {
            return;
        }
        let mut st = self.lock();
        while st.finished < target {
            st.waiting = true;
            st = self.done.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Wait until group `g` is handed over; false once stopped with none left.
    fn wait_for(&self, g: u64) -> bool {
        let mut st = self.lock();
        while st.published <= g {
            if st.stop {
                return false;
            }
            st.idle += 1;
            st = self.more.wait(st).unwrap_or_else(|e| e.into_inner());
            st.idle -= 1;
        }
        true
    }

    /// One thread: every group in order, its part of each.
    fn run(&self, part: Part) {
        let mut g = 0u64;
        while self.wait_for(g) {
            let features = &*self.features;
            let slot = &self.slots[(g % MAX_OUT as u64) as usize];
            // Always there: the slot is emptied only once every part, this one's included, is
            // applied.
            let group = slot.group.lock().clone();
            if let Some(group) = &group
                && let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    group.apply(features, part)
                }))
            {
                group.panicked(features, &panic_text(&*p));
            }
            if slot.left.fetch_sub(1, Ordering::AcqRel) == 1 {
                slot.group.lock().take();
                if let Some(group) = &group
                    && let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        group.finish(features)
                    }))
                {
                    group.panicked(features, &panic_text(&*p));
                }
                drop(group);
                let mut st = self.lock();
                st.finished = g + 1;
                self.finished.store(g + 1, Ordering::Release);
                let wake = std::mem::take(&mut st.waiting);
                drop(st);
                if wake {
                    self.done.notify_all();
                }
            }
            g += 1;
        }
    }
}

/// A panic's message, as far as it is text.
fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

#[cfg(test)]
mod tests;
