//! The plain types of an entity's features, as a change takes them out of its record
//! ([`crate::rec`]): a feature's state (a plain value, a window's buckets, a `distinct`'s
//! values or sketch), a feature (name id, update time, state), the built-ins and watermarks
//! ([`Head`]), and an entity (its head and features). Behaviour lives with those who use them
//! (`window`, `hll`, `value`, `rec`); what they cost, in [`crate::cost`].

use crate::decl::{EVENTS, FeatureValue, LAST_TS};

pub(crate) type Buckets = smallvec::SmallVec<[Bucket; 1]>;

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Bucket {
    pub idx: i64,
    pub n: u32,
    /// Sum for sum/avg, minimum for min, maximum for max; unused for count.
    pub a: f64,
}

/// A feature's state. The default (a plain 0) is also the placeholder a record leaves where it
/// moved a state out ([`crate::rec::Rec::take`]).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum State {
    /// A plain value (built-ins, counters, gauges, PUTs, `last`), with the `ts` that orders it.
    Plain { v: FeatureValue, ts: i64 },
    /// Buckets of count/sum/min/max/avg, sorted by index, at most [`crate::decl::BUCKETS`];
    /// the first inline (a window over events close in time needs no allocation).
    Win(Buckets),
    /// `distinct`: the newest bucket index and the sketch (see [`crate::hll`]).
    Hll { head: i64, regs: Vec<u8> },
}

impl Default for State {
    fn default() -> Self {
        State::Plain {
            v: FeatureValue::Int(0),
            ts: 0,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Feat {
    pub name: u32,
    /// Append time of the record that last changed it (for `ttl`).
    pub updated_ms: i64,
    pub st: State,
}

/// An entity's built-ins and watermarks. Each built-in counts only while its bit of `present`
/// is set (absent: deleted, or set by nothing yet).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Head {
    events: i64,
    last_ts: i64,
    /// Greatest non-future event ts: where windows end (`i64::MIN`: none yet).
    pub wm: i64,
    /// Greatest event ts or direct-write append time applied (`as_of` of a read).
    pub as_of: i64,
    present: u8,
}

/// An entity taken out of its record to change ([`crate::rec::Rec::take`]): the head and the
/// features, each a name id and a state.
#[derive(Clone, Debug, PartialEq, Default)]
pub(crate) struct Entity {
    pub head: Head,
    pub feats: Feats,
}

impl std::ops::Deref for Entity {
    type Target = Head;
    fn deref(&self) -> &Head {
        &self.head
    }
}

impl std::ops::DerefMut for Entity {
    fn deref_mut(&mut self) -> &mut Head {
        &mut self.head
    }
}

const HAS_EVENTS: u8 = 1;
const HAS_LAST_TS: u8 = 2;

impl Default for Head {
    fn default() -> Self {
        Head::new()
    }
}

impl Entity {
    pub(crate) fn new() -> Entity {
        Entity {
            head: Head::new(),
            feats: Feats::new(),
        }
    }

    /// An entity as a snapshot holds it.
    #[cfg(test)]
    pub(crate) fn restored(
        events: Option<i64>,
        last_ts: Option<i64>,
        feats: Feats,
        wm: i64,
        as_of: i64,
    ) -> Entity {
        let mut head = Head {
            wm,
            as_of,
            ..Head::new()
        };
        head.set_events(events);
        head.set_last_ts(last_ts);
        Entity { head, feats }
    }
}

impl Head {
    pub(crate) fn new() -> Head {
        Head {
            events: 0,
            last_ts: 0,
            wm: i64::MIN,
            as_of: i64::MIN,
            present: 0,
        }
    }

    /// The bits of the built-ins that are set (as the record's flags encode them).
    pub(crate) fn present_flags(&self) -> u8 {
        self.present & (HAS_EVENTS | HAS_LAST_TS)
    }

    fn get(&self, bit: u8, v: i64) -> Option<i64> {
        (self.present & bit != 0).then_some(v)
    }

    fn flag(&mut self, bit: u8, on: bool) {
        if on {
            self.present |= bit;
        } else {
            self.present &= !bit;
        }
    }

    pub(crate) fn events(&self) -> Option<i64> {
        self.get(HAS_EVENTS, self.events)
    }

    pub(crate) fn last_ts(&self) -> Option<i64> {
        self.get(HAS_LAST_TS, self.last_ts)
    }

    pub(crate) fn set_events(&mut self, v: Option<i64>) {
        self.events = v.unwrap_or(0);
        self.flag(HAS_EVENTS, v.is_some());
    }

    pub(crate) fn set_last_ts(&mut self, v: Option<i64>) {
        self.last_ts = v.unwrap_or(0);
        self.flag(HAS_LAST_TS, v.is_some());
    }

    /// The built-in `name`'s value (`events`, `last_ts`); `None` if `name` is no built-in.
    pub(crate) fn builtin(&self, name: &str) -> Option<Option<i64>> {
        match name {
            EVENTS => Some(self.events()),
            LAST_TS => Some(self.last_ts()),
            _ => None,
        }
    }

    /// Set the built-in `name` (`None`: delete it); false if `name` is no built-in.
    pub(crate) fn set_builtin(&mut self, name: &str, v: Option<i64>) -> bool {
        match name {
            EVENTS => self.set_events(v),
            LAST_TS => self.set_last_ts(v),
            _ => return false,
        }
        true
    }
}

/// An entity's features once taken out of its record: a few on the stack.
pub(crate) type Feats = smallvec::SmallVec<[Feat; 4]>;
