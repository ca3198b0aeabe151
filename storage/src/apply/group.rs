//! A group of durable records as the apply threads apply it: the records' bytes, each
//! record's cut into the threads' slices (made once, by whichever thread claims it first),
//! what each record did (a direct write's counts, a refusal) and the finish to run once every
//! thread has applied it.

use super::Handed;
use crate::api::PoisonCause;
use crate::features::parallel::{Claims, Cut, Group, Part};
use crate::features::snapshot::ReplayFrom;
use crate::features::{DirectApplied, Features};
use crate::feed::{self, Apply, FeedError};
use crate::log::state::Published;
use crate::record;
use parking_lot::Mutex;
use std::sync::Arc;

/// What applying one record did: a direct write's counts summed over the threads, or the
/// first refusal (with the record's LSN).
#[derive(Default)]
pub(crate) struct Outcome {
    pub applied: DirectApplied,
    pub error: Option<(u64, Arc<FeedError>)>,
}

/// Runs once the group is applied, with each record's outcome in record order.
pub(crate) type Finish = Box<dyn FnOnce(Vec<Outcome>) + Send>;

pub(super) struct LogGroup {
    buf: Vec<u8>,
    recs: Vec<(usize, usize)>,
    from_events: bool,
    replay: Option<Arc<ReplayFrom>>,
    poison: Option<Arc<Published>>,
    cuts: Claims<Cut>,
    outcomes: Mutex<Vec<Outcome>>,
    finish: Mutex<Option<Finish>>,
    back: flume::Sender<Vec<u8>>,
}

impl LogGroup {
    pub(super) fn new(g: Handed, from_events: bool, back: flume::Sender<Vec<u8>>) -> LogGroup {
        let n = g.recs.len();
        LogGroup {
            buf: g.buf,
            recs: g.recs,
            from_events,
            replay: g.replay,
            poison: g.poison,
            cuts: Claims::new(n),
            outcomes: Mutex::new((0..n).map(|_| Outcome::default()).collect()),
            finish: Mutex::new(Some(g.finish)),
            back,
        }
    }

    fn rec(&self, i: usize) -> Option<&[u8]> {
        let &(start, end) = self.recs.get(i)?;
        self.buf.get(start..end)
    }

    /// Record `i` was refused: the first refusal is its outcome, and the writer's store is
    /// poisoned at once (the tables no longer follow the log).
    fn refused(&self, i: usize, lsn: u64, e: FeedError) {
        let e = Arc::new(e);
        if let Some(shared) = &self.poison {
            shared.poison.set(PoisonCause::Features {
                lsn,
                source: Arc::clone(&e),
            });
        }
        if let Some(o) = self.outcomes.lock().get_mut(i)
            && o.error.is_none()
        {
            o.error = Some((lsn, e));
        }
    }

    /// Record `i`'s cut into `parts` slices. A run or event that does not decode is the
    /// record's refusal; the events before it are cut all the same.
    fn cut(&self, features: &Features, i: usize, parts: usize) -> Cut {
        let Some(rec) = self.rec(i) else {
            return Cut::default();
        };
        let Ok(h) = record::parse_header(rec) else {
            // Reported by the part that applies it.
            return Cut::default();
        };
        if !feed::has_events(&h, self.from_events) {
            return Cut::default();
        }
        let (keys, bad) = feed::keys(rec, &h);
        if let Some(e) = bad {
            self.refused(i, h.lsn, e.into());
        }
        Cut::new(features, keys, parts)
    }
}

impl Group for LogGroup {
    fn apply(&self, features: &Features, part: Part) {
        if part.of > 1 {
            self.cuts.make(|i| self.cut(features, i, part.of));
        }
        let replay = self.replay.as_ref().map(|r| r.replay());
        for i in 0..self.recs.len() {
            let Some(rec) = self.rec(i) else { continue };
            let h = match record::parse_header(rec) {
                Ok(h) => h,
                Err(e) => {
                    if part.index == 0 {
                        self.refused(i, 0, e.into());
                    }
                    continue;
                }
            };
            let how = Apply {
                part,
                cut: if part.of > 1 { self.cuts.get(i) } else { None },
                replay: replay.as_ref(),
                from_events: self.from_events,
            };
            match feed::apply_part(features, rec, &h, how) {
                Ok(a) if a == DirectApplied::default() => {}
                Ok(a) => {
                    if let Some(o) = self.outcomes.lock().get_mut(i) {
                        o.applied += a;
                    }
                }
                Err(e) => self.refused(i, h.lsn, e),
            }
        }
    }

    fn finish(&self, _: &Features) {
        let outcomes = std::mem::take(&mut *self.outcomes.lock());
        if let Some(finish) = self.finish.lock().take() {
            finish(outcomes);
        }
    }

    fn panicked(&self, _: &Features, why: &str) {
        // Which record's changes reached the tables is unknown: every record of the group
        // is refused, as a bug in the apply would have it.
        for (i, &(start, end)) in self.recs.iter().enumerate() {
            let lsn = self
                .buf
                .get(start..end)
                .and_then(|r| record::parse_header(r).ok())
                .map_or(0, |h| h.lsn);
            self.refused(i, lsn, FeedError::Panicked(why.to_string()));
        }
    }
}

impl Drop for LogGroup {
    fn drop(&mut self) {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        // The writer keeps a few; past them, the buffer is freed.
        let _ = self.back.try_send(buf);
    }
}
