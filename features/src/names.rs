//! A shard's feature names: every feature refers to its name by a small id, so an entity's
//! features cost an id each instead of a string each.

use crate::decl::{Decls, EVENTS, LAST_TS};
use foldhash::fast::FixedState;
use hashbrown::HashMap;

/// Ids 0 and 1 are the built-ins, 2.. the declarations (permanent), the rest are interned on
/// first use and freed when the last feature of that name goes.
pub(crate) struct Names {
    ids: HashMap<Box<str>, u32, FixedState>,
    /// Per id: the name and its reference count ([`PERMANENT`] for the fixed ones).
    list: Vec<(Box<str>, u32)>,
    free: Vec<u32>,
    /// What the interned names count, [`NAME_COST`] and twice the name's bytes each.
    bytes: u64,
}

const PERMANENT: u32 = u32::MAX;
/// Bytes a name table entry costs, beyond the name's bytes.
pub(crate) const NAME_COST: u64 = 48;

impl Names {
    pub fn new(decls: &Decls) -> Names {
        let mut n = Names {
            ids: HashMap::with_hasher(FixedState::default()),
            list: Vec::new(),
            free: Vec::new(),
            bytes: 0,
        };
        for name in [EVENTS, LAST_TS]
            .into_iter()
            .chain(decls.list.iter().map(|d| d.name.as_str()))
        {
            let id = n.list.len() as u32;
            n.ids.insert(name.into(), id);
            n.list.push((name.into(), PERMANENT));
        }
        n
    }

    pub fn id(&self, name: &str) -> Option<u32> {
        self.ids.get(name).copied()
    }

    /// The name of `id`; `None` for an id this table never handed out.
    pub fn name(&self, id: u32) -> Option<&str> {
        self.list.get(id as usize).map(|(n, _)| &**n)
    }

    /// Every id's name in id order, freed ids as empty names (what a snapshot stores).
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.list.iter().map(|(n, _)| &**n)
    }

    /// The id of `name`, interned if new, with one more reference; and the bytes it added.
    pub fn acquire(&mut self, name: &str) -> (u32, u64) {
        if let Some(&id) = self.ids.get(name) {
            if let Some(e) = self.list.get_mut(id as usize)
                && e.1 != PERMANENT
            {
                e.1 += 1;
            }
            return (id, 0);
        }
        let entry = (Box::<str>::from(name), 1);
        let id = match self.free.pop() {
            Some(id) => {
                if let Some(e) = self.list.get_mut(id as usize) {
                    *e = entry;
                }
                id
            }
            None => {
                self.list.push(entry);
                (self.list.len() - 1) as u32
            }
        };
        self.ids.insert(name.into(), id);
        let added = NAME_COST + 2 * name.len() as u64;
        self.bytes += added;
        (id, added)
    }

    /// The ids permanent in this table (the built-ins and the declarations): 0..this.
    pub fn permanent(&self) -> usize {
        self.list
            .iter()
            .take_while(|(_, refs)| *refs == PERMANENT)
            .count()
    }

    /// Intern `name` at `id` with no reference yet (a snapshot's names, put back at the ids
    /// its records use); false, and nothing changed, if `id` or `name` is taken. Ids skipped
    /// on the way are free. [`Names::add_ref`] for each use, then [`Names::drop_unused`].
    pub fn place(&mut self, id: u32, name: &str) -> bool {
        let at = id as usize;
        if name.is_empty()
            || self.ids.contains_key(name)
            || self
                .list
                .get(at)
                .is_some_and(|(n, r)| *r == PERMANENT || !n.is_empty())
        {
            return false;
        }
        while self.list.len() <= at {
            self.free.push(self.list.len() as u32);
            self.list.push((Box::from(""), 0));
        }
        self.free.retain(|&f| f != id);
        if let Some(e) = self.list.get_mut(at) {
            *e = (name.into(), 0);
        }
        self.ids.insert(name.into(), id);
        self.bytes += NAME_COST + 2 * name.len() as u64;
        true
    }

    /// The id of `name`, interned with no reference if new (see [`Names::place`]).
    pub fn intern(&mut self, name: &str) -> u32 {
        match self.ids.get(name) {
            Some(&id) => id,
            None => {
                let (id, _) = self.acquire(name);
                if let Some(e) = self.list.get_mut(id as usize) {
                    e.1 = 0;
                }
                id
            }
        }
    }

    /// One more reference to `id` (no-op for permanent ids).
    pub fn add_ref(&mut self, id: u32) {
        if let Some(e) = self.list.get_mut(id as usize)
            && e.1 != PERMANENT
        {
            e.1 += 1;
        }
    }

    /// Free every interned name without a reference (after a snapshot's shard is loaded).
    pub fn drop_unused(&mut self) {
        for id in 0..self.list.len() as u32 {
            if let Some(e) = self.list.get_mut(id as usize)
                && e.1 == 0
                && !e.0.is_empty()
            {
                e.1 = 1;
                self.release(id);
            }
        }
    }

    /// Drop one reference; returns the bytes freed.
    pub fn release(&mut self, id: u32) -> u64 {
        let Some(e) = self.list.get_mut(id as usize) else {
            return 0;
        };
        if e.1 == PERMANENT || e.1 == 0 {
            return 0;
        }
        e.1 -= 1;
        if e.1 > 0 {
            return 0;
        }
        let name = std::mem::take(&mut e.0);
        self.ids.remove(&name);
        self.free.push(id);
        let freed = NAME_COST + 2 * name.len() as u64;
        self.bytes = self.bytes.saturating_sub(freed);
        freed
    }

    /// Bytes the interned names count (the two copies of each name, the map and list entries).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}
