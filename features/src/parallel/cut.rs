//! A record's events cut into the apply threads' slices, once: [`Cut`] puts the events with
//! an entity in shard order (record order within a shard) with their entity's hash, so that
//! each thread finds its shards' events as one slice and hashes nothing; [`Claims`] shares
//! the cutting of a group's records among its threads.
//!
//! A cut holds no event, only where the caller finds it ([`Key::at`], [`Key::run`]): the
//! record's bytes belong to the caller (storage decodes them), and a thread decodes only the
//! events of its slice.

use super::Part;
use crate::Features;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// One event of a cut record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key {
    /// [`crate::entity_hash`] of its entity.
    pub hash: u64,
    /// Where the caller finds the event (storage: its offset in the group's buffer).
    pub at: u32,
    /// More of where (storage: its run, which names its stream).
    pub run: u32,
}

/// A record's events with an entity, in shard order, and where each part's slice starts.
#[derive(Debug, Default)]
pub struct Cut {
    keys: Vec<Key>,
    /// `parts + 1` offsets into `keys`: part `i`'s slice is `bounds[i]..bounds[i + 1]`.
    bounds: Vec<u32>,
}

impl Cut {
    /// Cut `keys` (in record order) for `parts` threads over `features`' shards: in shard
    /// order ([`crate::ordered::by_shard`]), split where each part's first shard starts.
    pub fn new(features: &Features, keys: Vec<Key>, parts: usize) -> Cut {
        let shards = features.shards();
        let (keys, starts) = crate::ordered::by_shard(keys, shards as usize, |k| {
            features.shard_of_hash(k.hash) as usize
        });
        // Part `parts` (one past the last) starts at `shards`: the end.
        let bounds = (0..=parts)
            .map(|index| {
                let first = Part { index, of: parts }.shards(shards).start;
                starts.get(first as usize).copied().unwrap_or(0)
            })
            .collect();
        Cut { keys, bounds }
    }

    /// The events of part `i`'s shards, in shard order.
    pub fn part(&self, i: usize) -> &[Key] {
        let at = |j: usize| self.bounds.get(j).map_or(0, |&b| b as usize);
        self.keys.get(at(i)..at(i + 1)).unwrap_or(&[])
    }
}

/// One value per item of a group (a cut per record), made once by whichever thread claims
/// the item first and read by all: the threads share the making instead of each doing it
/// all, and none waits for an item unless it is still being made.
pub struct Claims<T> {
    next: AtomicUsize,
    cells: Box<[OnceLock<T>]>,
}

impl<T> Claims<T> {
    pub fn new(items: usize) -> Claims<T> {
        Claims {
            next: AtomicUsize::new(0),
            cells: (0..items).map(|_| OnceLock::new()).collect(),
        }
    }

    /// Make the items no caller has claimed yet, one at a time, until none is left. An item
    /// whose `make` panics is left at its default, so that nobody waits for it forever (the
    /// panic goes on).
    pub fn make(&self, make: impl Fn(usize) -> T)
    where
        T: Default,
    {
        loop {
            let i = self.next.fetch_add(1, Ordering::AcqRel);
            let Some(cell) = self.cells.get(i) else {
                return;
            };
            let guard = Unfinished(cell);
            let _ = cell.set(make(i));
            std::mem::forget(guard);
        }
    }

    /// Item `i`, once made (waiting for whoever claimed it); `None` past the last.
    pub fn get(&self, i: usize) -> Option<&T> {
        self.cells.get(i).map(OnceLock::wait)
    }
}

/// Sets a claimed item to its default if its `make` unwinds.
struct Unfinished<'a, T: Default>(&'a OnceLock<T>);

impl<T: Default> Drop for Unfinished<'_, T> {
    fn drop(&mut self) {
        let _ = self.0.set(T::default());
    }
}
