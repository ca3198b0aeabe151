//! The in-flight byte budget (`ingest.max_inflight_bytes`, docs/API.md §4): bytes of request bodies
//! read and being decoded, up to the moment their batch is admitted or refused. When it is
//! spent, readers wait before decoding more — the rest of their body stays unread in the
//! socket, so TCP flow control slows the producers — instead of failing.
//!
//! # Counting
//! One semaphore permit is one byte. tokio's semaphore holds up to `usize::MAX >> 3` permits
//! (2^61 on 64-bit targets), far above any budget; it grants at most `u32::MAX` per call, so
//! larger amounts are taken in pieces. A request never holds more than the whole budget: what
//! it reads beyond that is not counted (otherwise a body larger than the budget would wait for
//! permits that can never exist).
//!
//! # Why the oldest request never waits
//! A request takes budget chunk by chunk and keeps it until its batch is done with, so it
//! waits for more while holding some. Two bodies that each hold half the budget and each need
//! more would wait for each other forever. To rule that out, requests are ordered by start
//! time and the oldest unfinished one is never made to wait: if the budget is spent, it takes
//! what is free and reads on beyond the budget. It then finishes (its body is bounded by
//! `ingest.max_body_bytes`), frees everything, and the next oldest gets the same right. The
//! budget can therefore be exceeded by at most one body, and only while it is otherwise spent.
//! A request's age counts from its first byte of budget, so a client that opens a request and
//! sends nothing does not hold up the others' turns.

use std::collections::BTreeSet;
use std::pin::pin;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// The global in-flight byte budget; cheap to clone (shared).
#[derive(Clone, Debug)]
pub struct InflightBudget {
    shared: Arc<BudgetState>,
}

/// What every clone of the budget and every permit share.
#[derive(Debug)]
struct BudgetState {
    sem: Arc<Semaphore>,
    /// Permits the semaphore was created with.
    total: u64,
    /// Tickets of the requests holding (or waiting for) budget, oldest first.
    active: Mutex<Active>,
    /// Woken whenever the oldest request finishes, so that the next one can check its turn.
    oldest_done: Notify,
}

#[derive(Debug, Default)]
struct Active {
    next: u64,
    tickets: BTreeSet<u64>,
}

impl BudgetState {
    fn active(&self) -> std::sync::MutexGuard<'_, Active> {
        // The critical sections cannot panic half-way, so a poisoned lock is still consistent.
        self.active.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl InflightBudget {
    /// A budget of `max_bytes` (at least one byte, at most what a semaphore can count).
    pub fn new(max_bytes: u64) -> InflightBudget {
        let total = max_bytes.clamp(1, Semaphore::MAX_PERMITS as u64);
        InflightBudget {
            shared: Arc::new(BudgetState {
                sem: Arc::new(Semaphore::new(total as usize)),
                total,
                active: Mutex::new(Active::default()),
                oldest_done: Notify::new(),
            }),
        }
    }

    /// Bytes of budget not held by any request right now.
    pub fn available(&self) -> u64 {
        self.shared.sem.available_permits() as u64
    }

    /// Bytes of the budget held by requests right now (`vx_inflight_bytes`). The oldest
    /// request's overdraft beyond a spent budget is not counted: it holds no permits.
    pub fn held(&self) -> u64 {
        self.total().saturating_sub(self.available())
    }

    /// The size of the budget.
    pub fn total(&self) -> u64 {
        self.shared.total
    }

    /// Start accounting for one request; it holds nothing yet.
    pub fn begin(&self) -> InflightPermit {
        InflightPermit {
            shared: Arc::clone(&self.shared),
            ticket: None,
            permit: None,
            held: 0,
            over: 0,
        }
    }
}

/// Budget held by one request, released when dropped: keep it alive as long as the decoded
/// batch is in memory, i.e. until the batch has been admitted (or refused).
#[derive(Debug)]
pub struct InflightPermit {
    shared: Arc<BudgetState>,
    /// Place in the age order, taken with the first byte of budget.
    ticket: Option<u64>,
    permit: Option<OwnedSemaphorePermit>,
    /// Bytes backed by semaphore permits.
    held: u64,
    /// Bytes taken beyond the budget while this was the oldest request.
    over: u64,
}

impl InflightPermit {
    /// Bytes this request is accounted for (within the budget plus any overdraft).
    pub fn bytes(&self) -> u64 {
        self.held + self.over
    }

    /// Account for `bytes` more, waiting while the budget is spent (unless this is the oldest
    /// request, see the module docs).
    pub async fn grow(&mut self, bytes: u64) {
        let mut want = bytes.min(self.shared.total - self.held);
        if want > 0 && self.ticket.is_none() {
            let mut active = self.shared.active();
            let ticket = active.next;
            active.next += 1;
            active.tickets.insert(ticket);
            self.ticket = Some(ticket);
        }
        while want > 0 {
            // tokio grants at most u32::MAX permits per call.
            let piece = want.min(u64::from(u32::MAX));
            let got = self.take(piece as u32).await;
            want -= piece;
            if got < piece {
                // Overdraft taken by the oldest request: the rest is overdraft too.
                self.over += want;
                return;
            }
        }
    }

    /// Take `n` permits; returns how many were backed by permits (`n` unless overdrawn).
    async fn take(&mut self, n: u32) -> u64 {
        let shared = Arc::clone(&self.shared);
        let sem = &shared.sem;
        if let Ok(p) = Arc::clone(sem).try_acquire_many_owned(n) {
            self.add(p, n);
            return u64::from(n);
        }
        loop {
            // Register for the wake-up before checking whose turn it is, so that a finish
            // between the check and the wait is not missed.
            let mut woken = pin!(shared.oldest_done.notified());
            woken.as_mut().enable();
            if self.is_oldest() {
                let free = u32::try_from(sem.available_permits())
                    .unwrap_or(u32::MAX)
                    .min(n);
                let mut got = 0;
                if free > 0
                    && let Ok(p) = Arc::clone(sem).try_acquire_many_owned(free)
                {
                    self.add(p, free);
                    got = free;
                }
                let short = u64::from(n - got);
                self.over += short;
                return u64::from(got);
            }
            tokio::select! {
                p = Arc::clone(sem).acquire_many_owned(n) => {
                    // The semaphore is never closed.
                    if let Ok(p) = p {
                        self.add(p, n);
                    }
                    return u64::from(n);
                }
                () = &mut woken => {}
            }
        }
    }

    fn add(&mut self, p: OwnedSemaphorePermit, n: u32) {
        self.held += u64::from(n);
        match &mut self.permit {
            Some(mine) => mine.merge(p),
            None => self.permit = Some(p),
        }
    }

    fn is_oldest(&self) -> bool {
        self.ticket.is_some() && self.shared.active().tickets.first() == self.ticket.as_ref()
    }
}

impl Drop for InflightPermit {
    fn drop(&mut self) {
        // Release the bytes before waking anyone, so the next oldest finds them free.
        drop(self.permit.take());
        let Some(ticket) = self.ticket else { return };
        let mut active = self.shared.active();
        let was_oldest = active.tickets.first() == Some(&ticket);
        active.tickets.remove(&ticket);
        drop(active);
        if was_oldest {
            self.shared.oldest_done.notify_waiters();
        }
    }
}
