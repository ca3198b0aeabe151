//! An entity packed into its table slot: the built-ins, the watermarks and the plain features
//! as varints, times as differences from the entity's `as_of`, so that an entity with the
//! built-ins and a counter takes about 20 bytes, held in the slot without an allocation.
//!
//! A change takes the entity out ([`Rec::take`]: a plain [`Entity`] to change with ordinary
//! code), and stores it back ([`Rec::store`]); a read decodes a [`View`] that borrows what it
//! can. States that are not a few bytes (strings, window buckets, sketches) stay [`State`]s in
//! the record's side allocation ([`Held`], one allocation a pointer away from the slot), moved
//! in and out, never copied: a windowed entity pays no encoding for its buckets, and reaching
//! a state from the slot is one dependent load, as when the states were in the slot's own
//! feature list.
//!
//! Snapshots store the encoding as it is (with the held states beside it, see
//! [`crate::snapshot`]), so it is a durable format: a change to it changes the snapshot
//! schema (`golden_encoding` in the tests fails until it does), and old snapshots are then
//! skipped and the tables rebuilt from the log. `rec_round_trips` in the tests shows every
//! entity survives it. Layout:
//! ```text
//! flags u8            bit 0 events, bit 1 last_ts, bit 2 wm set, bit 3 as_of set
//! as_of zigzag        if bit 3; the base B of every time below (0 otherwise)
//! wm    zigzag(B-wm)  if bit 2
//! events zigzag       if bit 0
//! last_ts zigzag(B-t) if bit 1
//! n     varint        features, then each:
//!   name varint, updated zigzag(U-updated_ms), tag u8 (U: the previous feature's
//!     updated_ms, B for the first: features changed by one record share it)
//!     tag & 3: 0 int (zigzag), 1 float (8 bytes LE), 2 bool (1 byte), 3 the next held state
//!     tag & 4: the plain value's ts is i64::MIN; otherwise zigzag(B-ts) follows the value
//! ```

use crate::cost::{alloc_size, state_heap};
use crate::decl::FeatureValue;
use crate::prefetch::Lines;
use crate::state::{Entity, Feat, Feats, Head, State};
use smallvec::SmallVec;
use std::borrow::Cow;
use thin_vec::ThinVec;

/// Encoded bytes a slot holds; longer encodings go to a [`Held::Data`].
pub(crate) const INLINE: usize = 31;
/// `len` of a record whose encoding is in its last [`Held::Data`].
const SPILLED: u8 = u8::MAX;

/// Bytes of the side allocation's header (its length and capacity).
pub(crate) const THIN_HEADER: u64 = 16;
/// Bytes of an entry of the side allocation.
pub(crate) const HELD_COST: u64 = std::mem::size_of::<Held>() as u64;
/// The longest encoding of the head (flags and four times).
pub(crate) const HEAD_MAX: usize = 1 + 4 * 10;
/// The longest encoding of one feature (name, updated, tag, value, ts) and of the count.
pub(crate) const FEAT_MAX: usize = 5 + 10 + 1 + 10 + 10;
const COUNT_MAX: usize = 5;

const F_EVENTS: u8 = 1;
const F_LAST_TS: u8 = 2;
const F_WM: u8 = 4;
const F_AS_OF: u8 = 8;

const T_INT: u8 = 0;
const T_FLOAT: u8 = 1;
const T_BOOL: u8 = 2;
const T_STATE: u8 = 3;
const T_TS_MIN: u8 = 4;

/// An entity as its slot holds it: up to [`INLINE`] encoded bytes, and what is held outside
/// (empty without an allocation for most entities).
pub(crate) struct Rec {
    len: u8,
    buf: [u8; INLINE],
    more: ThinVec<Held>,
}

/// An entry of a record's side allocation: the states that are not a few bytes, in the order
/// of their features, then the encoding if it is longer than [`INLINE`] (it ends itself, so
/// its buffer is kept while later encodings fit in it).
enum Held {
    St(State),
    Data(Box<[u8]>),
}

/// An entity as a read sees it: the head and the features decoded, states borrowed.
pub(crate) struct View<'a> {
    pub head: Head,
    pub feats: SmallVec<[FeatView<'a>; 4]>,
    /// The record's side allocation, for the budget's bounds.
    pub shell: Shell,
}

pub(crate) struct FeatView<'a> {
    pub name: u32,
    pub updated_ms: i64,
    pub st: Cow<'a, State>,
}

impl std::ops::Deref for View<'_> {
    type Target = Head;
    fn deref(&self) -> &Head {
        &self.head
    }
}

/// The shape of a record's side allocation, for the budget's bounds.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Shell {
    /// Bytes of the side allocation and of a long encoding's buffer (not the states' own heap).
    pub bytes: u64,
    pub data_cap: usize,
    /// Entries the side allocation has room for.
    pub held_cap: usize,
}

impl Shell {
    /// The most the side allocation can come to once the entity has `feats` features, `states`
    /// of them held as states: the encoding at its longest.
    pub(crate) fn bound(self, feats: usize, states: usize) -> u64 {
        let data = HEAD_MAX + COUNT_MAX + feats * FEAT_MAX;
        let entries = self.held_cap.max(states + 1);
        let bytes = alloc_size(THIN_HEADER as usize + entries * HELD_COST as usize)
            + alloc_size(self.data_cap.max(data));
        bytes.max(self.bytes)
    }
}

/// Whether a feature's state is held in the side allocation rather than encoded.
pub(crate) fn held(st: &State) -> bool {
    !matches!(st, State::Plain { v, .. } if !matches!(v, FeatureValue::Str(_)))
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn put(out: &mut SmallVec<[u8; 128]>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_i(out: &mut SmallVec<[u8; 128]>, v: i64) {
    put(out, zigzag(v));
}

/// A cursor over an encoding. Records are only ever what [`Rec::store`] wrote, so a short
/// read is a bug: it yields zeros rather than a panic on a read path.
struct Rd<'a> {
    b: &'a [u8],
}

impl Rd<'_> {
    fn byte(&mut self) -> u8 {
        match self.b.split_first() {
            Some((&x, rest)) => {
                self.b = rest;
                x
            }
            None => 0,
        }
    }

    fn var(&mut self) -> u64 {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let x = self.byte();
            v |= u64::from(x & 0x7f).checked_shl(shift).unwrap_or(0);
            if x & 0x80 == 0 || shift >= 63 {
                return v;
            }
            shift += 7;
        }
    }

    fn int(&mut self) -> i64 {
        unzigzag(self.var())
    }

    fn f64(&mut self) -> f64 {
        let mut a = [0u8; 8];
        for x in a.iter_mut() {
            *x = self.byte();
        }
        f64::from_le_bytes(a)
    }
}

/// One decoded feature: its name, updated time and either a plain state or the index of its
/// state among the held ones.
enum Dec {
    Plain(State),
    Held(usize),
}

/// Decode `b` (an encoding), handing each feature to `feat`.
fn decode(b: &[u8], mut feat: impl FnMut(u32, i64, Dec)) -> Head {
    let mut r = Rd { b };
    let flags = r.byte();
    let mut h = Head::new();
    let base = if flags & F_AS_OF != 0 { r.int() } else { 0 };
    if flags & F_AS_OF != 0 {
        h.as_of = base;
    }
    if flags & F_WM != 0 {
        h.wm = base.wrapping_sub(r.int());
    }
    if flags & F_EVENTS != 0 {
        h.set_events(Some(r.int()));
    }
    if flags & F_LAST_TS != 0 {
        h.set_last_ts(Some(base.wrapping_sub(r.int())));
    }
    let n = r.var();
    let mut held = 0;
    let mut prev = base;
    for _ in 0..n {
        let name = u32::try_from(r.var()).unwrap_or(u32::MAX);
        let updated = prev.wrapping_sub(r.int());
        prev = updated;
        let tag = r.byte();
        let v = match tag & 3 {
            T_INT => FeatureValue::Int(r.int()),
            T_FLOAT => FeatureValue::Float(r.f64()),
            T_BOOL => FeatureValue::Bool(r.byte() != 0),
            _ => {
                feat(name, updated, Dec::Held(held));
                held += 1;
                continue;
            }
        };
        let ts = if tag & T_TS_MIN != 0 {
            i64::MIN
        } else {
            base.wrapping_sub(r.int())
        };
        feat(name, updated, Dec::Plain(State::Plain { v, ts }));
    }
    h
}

/// A cursor over bytes read from a snapshot (its record encodings and the lengths around
/// them): unlike [`Rd`], a short read or an overlong varint is an error, since the bytes are
/// input.
pub(crate) struct Strict<'a> {
    pub(crate) b: &'a [u8],
}

impl<'a> Strict<'a> {
    fn byte(&mut self) -> Option<u8> {
        let (&x, rest) = self.b.split_first()?;
        self.b = rest;
        Some(x)
    }

    pub(crate) fn var(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let x = self.byte()?;
            v |= u64::from(x & 0x7f) << shift;
            if x & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    /// The next `n` bytes.
    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (s, rest) = (self.b.get(..n)?, self.b.get(n..)?);
        self.b = rest;
        Some(s)
    }
}

/// Check an encoding from a snapshot as [`Rec::store`] writes it, handing each feature's
/// name and whether its state is held (the next of the entity's held states) to `feat`;
/// `None` if it is not such an encoding (unknown flags or tags, short, or bytes left over).
pub(crate) fn check_encoding(b: &[u8], mut feat: impl FnMut(u32, bool)) -> Option<()> {
    let mut r = Strict { b };
    let flags = r.byte()?;
    if flags & !(F_EVENTS | F_LAST_TS | F_WM | F_AS_OF) != 0 {
        return None;
    }
    for bit in [F_AS_OF, F_WM, F_EVENTS, F_LAST_TS] {
        if flags & bit != 0 {
            r.var()?;
        }
    }
    let n = r.var()?;
    for _ in 0..n {
        let name = u32::try_from(r.var()?).ok()?;
        r.var()?;
        let tag = r.byte()?;
        if tag & !(3 | T_TS_MIN) != 0 || tag == T_STATE | T_TS_MIN {
            return None;
        }
        match tag & 3 {
            T_INT => {
                r.var()?;
            }
            T_FLOAT => {
                r.take(8)?;
            }
            T_BOOL => {
                r.take(1)?;
            }
            _ => {
                feat(name, true);
                continue;
            }
        }
        if tag & T_TS_MIN == 0 {
            r.var()?;
        }
        feat(name, false);
    }
    r.b.is_empty().then_some(())
}

/// The entity of a checked encoding ([`check_encoding`]) and its held states in order, each
/// feature's name through `rename` (dropped where it gives `None`): a snapshot's entity whose
/// names are not the new shard's.
pub(crate) fn entity_of(
    b: &[u8],
    states: impl IntoIterator<Item = State>,
    mut rename: impl FnMut(u32) -> Option<u32>,
) -> Entity {
    let mut states = states.into_iter();
    let mut feats = Feats::new();
    let head = decode(b, |name, updated_ms, d| {
        let st = match d {
            Dec::Plain(st) => st,
            Dec::Held(_) => states.next().unwrap_or_default(),
        };
        if let Some(name) = rename(name) {
            feats.push(Feat {
                name,
                updated_ms,
                st,
            });
        }
    });
    Entity { head, feats }
}

impl Rec {
    pub(crate) fn new() -> Rec {
        let mut r = Rec {
            len: 0,
            buf: [0; INLINE],
            more: ThinVec::new(),
        };
        r.store(&mut Entity::new());
        r
    }

    /// A record of a checked encoding ([`check_encoding`]) whose names are the shard's, with
    /// its held states in order: the encoding is kept as it is.
    pub(crate) fn restored(b: &[u8], states: impl ExactSizeIterator<Item = State>) -> Rec {
        let inline = b.len() <= INLINE;
        let entries = states.len() + usize::from(!inline);
        let mut r = Rec {
            len: 0,
            buf: [0; INLINE],
            more: if entries == 0 {
                ThinVec::new()
            } else {
                ThinVec::with_capacity(entries)
            },
        };
        if entries > 0 {
            r.more.extend(states.map(Held::St));
        }
        if inline {
            r.buf[..b.len()].copy_from_slice(b);
            r.len = b.len() as u8;
        } else {
            r.more.push(Held::Data(b.into()));
            r.len = SPILLED;
        }
        r
    }

    /// The encoding and the held states in order, as a snapshot stores them.
    pub(crate) fn snapshot_parts(&self) -> (&[u8], impl Iterator<Item = &State>) {
        let (states, data) = self.parts();
        let states = states.iter().filter_map(|h| match h {
            Held::St(s) => Some(s),
            Held::Data(_) => None,
        });
        (data, states)
    }

    /// The held states, and the encoding.
    fn parts(&self) -> (&[Held], &[u8]) {
        if self.len == SPILLED {
            match self.more.split_last() {
                Some((Held::Data(d), states)) => (states, d),
                _ => (&self.more, &[]),
            }
        } else {
            (
                &self.more,
                self.buf.get(..usize::from(self.len)).unwrap_or(&[]),
            )
        }
    }

    /// Pack `e` into the record, moving its non-plain states into the side allocation (they
    /// are left as placeholders in `e`). By reference: an `Entity` is a few hundred bytes, and
    /// the apply stores one per event.
    pub(crate) fn store(&mut self, e: &mut Entity) {
        let Entity { head: h, feats } = e;
        let mut out: SmallVec<[u8; 128]> = SmallVec::new();
        let mut flags = h.present_flags();
        if h.wm != i64::MIN {
            flags |= F_WM;
        }
        if h.as_of != i64::MIN {
            flags |= F_AS_OF;
        }
        out.push(flags);
        let base = if flags & F_AS_OF != 0 { h.as_of } else { 0 };
        if flags & F_AS_OF != 0 {
            put_i(&mut out, base);
        }
        if flags & F_WM != 0 {
            put_i(&mut out, base.wrapping_sub(h.wm));
        }
        if let Some(v) = h.events() {
            put_i(&mut out, v);
        }
        if let Some(t) = h.last_ts() {
            put_i(&mut out, base.wrapping_sub(t));
        }
        put(&mut out, feats.len() as u64);
        let mut kept: SmallVec<[State; 4]> = SmallVec::new();
        let mut prev = base;
        for f in feats.iter_mut() {
            put(&mut out, u64::from(f.name));
            put_i(&mut out, prev.wrapping_sub(f.updated_ms));
            prev = f.updated_ms;
            let (v, ts) = match &f.st {
                State::Plain { v, ts } if !matches!(v, FeatureValue::Str(_)) => (v.clone(), *ts),
                _ => {
                    out.push(T_STATE);
                    kept.push(std::mem::take(&mut f.st));
                    continue;
                }
            };
            let min = if ts == i64::MIN { T_TS_MIN } else { 0 };
            match v {
                FeatureValue::Int(i) => {
                    out.push(T_INT | min);
                    put_i(&mut out, i);
                }
                FeatureValue::Float(x) => {
                    out.push(T_FLOAT | min);
                    out.extend_from_slice(&x.to_le_bytes());
                }
                FeatureValue::Bool(b) => {
                    out.push(T_BOOL | min);
                    out.push(u8::from(b));
                }
                FeatureValue::Str(_) => {}
            }
            if ts != i64::MIN {
                put_i(&mut out, base.wrapping_sub(ts));
            }
        }
        let inline = out.len() <= INLINE;
        let entries = kept.len() + usize::from(!inline);
        if entries == 0 {
            self.more = ThinVec::new();
        } else if self.more.len() == entries {
            // The same shape as before (most changes): assigned in place, the long encoding's
            // buffer kept if it is exactly as long. Only then: the buffer's length is the
            // encoding's, and a longer one would keep the old encoding's last bytes after the
            // new one, which reads ignore but a snapshot's strict check refuses (the record
            // would make every snapshot holding it unusable).
            for (h, k) in self.more.iter_mut().zip(kept) {
                *h = Held::St(k);
            }
            if !inline && let Some(last) = self.more.last_mut() {
                match last {
                    Held::Data(d) if d.len() == out.len() => d.copy_from_slice(&out),
                    _ => *last = Held::Data(out.as_slice().into()),
                }
            }
        } else {
            let mut more = ThinVec::with_capacity(entries);
            more.extend(kept.into_iter().map(Held::St));
            if !inline {
                more.push(Held::Data(out.as_slice().into()));
            }
            self.more = more;
        }
        if inline {
            self.buf[..out.len()].copy_from_slice(&out);
            self.len = out.len() as u8;
        } else {
            self.len = SPILLED;
        }
    }

    /// The entity, to change; [`Rec::store`] puts it back (its states are moved out, and
    /// holes left in their place until then).
    pub(crate) fn take(&mut self) -> Entity {
        let mut e = Entity::default();
        self.take_into(&mut e);
        e
    }

    /// [`Rec::take`] into `e`, whatever it held before: the apply takes every entity into one
    /// scratch entity, which is a few hundred bytes that moving by value copied several times
    /// an event.
    pub(crate) fn take_into(&mut self, e: &mut Entity) {
        let feats = &mut e.feats;
        feats.clear();
        let spilled = self.len == SPILLED;
        let (states, data): (&mut [Held], &[u8]) = if spilled {
            match self.more.split_last_mut() {
                Some((Held::Data(d), states)) => (states, d),
                _ => (&mut self.more[..], &[]),
            }
        } else {
            (
                &mut self.more[..],
                self.buf.get(..usize::from(self.len)).unwrap_or(&[]),
            )
        };
        let head = decode(data, |name, updated_ms, d| {
            let st = match d {
                Dec::Plain(st) => st,
                Dec::Held(i) => match states.get_mut(i) {
                    Some(Held::St(s)) => std::mem::take(s),
                    _ => State::default(),
                },
            };
            feats.push(Feat {
                name,
                updated_ms,
                st,
            });
        });
        e.head = head;
    }

    /// The entity as a read sees it.
    pub(crate) fn view(&self) -> View<'_> {
        let mut feats = SmallVec::new();
        let (states, data) = self.parts();
        let head = decode(data, |name, updated_ms, d| {
            let st = match d {
                Dec::Plain(st) => Cow::Owned(st),
                Dec::Held(i) => match states.get(i) {
                    Some(Held::St(s)) => Cow::Borrowed(s),
                    _ => Cow::Owned(State::default()),
                },
            };
            feats.push(FeatView {
                name,
                updated_ms,
                st,
            });
        });
        View {
            head,
            feats,
            shell: self.shell(),
        }
    }

    /// The side allocation's shape.
    pub(crate) fn shell(&self) -> Shell {
        if self.more.capacity() == 0 {
            return Shell::default();
        }
        let data = self.data_len();
        Shell {
            bytes: alloc_size(THIN_HEADER as usize + self.more.capacity() * HELD_COST as usize)
                + alloc_size(data),
            data_cap: data,
            held_cap: self.more.capacity(),
        }
    }

    /// Start loading the side allocation (the first stage of [`crate::RecordEvents::prefetch`])
    /// as far as its first `states` entries and one more (a long encoding's buffer, or a
    /// state of an earlier declaration). Its length and capacity are in the allocation itself,
    /// so reading them here would wait for the very line being asked for: the span is a guess
    /// from the declarations of the event's type instead. An entity without a side allocation
    /// points at thin-vec's shared empty header, a harmless line to load.
    pub(crate) fn prefetch_side(&self, states: usize, out: &mut Lines) {
        let p = self
            .more
            .as_ptr()
            .cast::<u8>()
            .wrapping_sub(THIN_HEADER as usize);
        out.add(p, THIN_HEADER as usize + (states + 1) * HELD_COST as usize);
    }

    /// Start loading what the held states keep of their own: a window's first and newest
    /// buckets (an event folds into the newest, or drops the oldest), a sketch's first lines,
    /// a string's first lines (the second stage: the side allocation is loaded by now).
    pub(crate) fn prefetch_states(&self, out: &mut Lines) {
        for h in self.more.iter() {
            match h {
                Held::St(State::Win(b)) if b.spilled() => {
                    out.add(b.as_ptr(), 1);
                    if let Some(last) = b.last() {
                        out.add(last, 1);
                    }
                }
                Held::St(State::Hll { regs, .. }) => {
                    out.add(regs.as_ptr(), regs.len().min(1024));
                }
                Held::St(State::Plain {
                    v: FeatureValue::Str(s),
                    ..
                }) => out.add(s.as_ptr(), s.len().min(256)),
                _ => {}
            }
        }
    }

    /// Bytes of the encoding held outside the slot (its buffer's length; 0 when inline).
    fn data_len(&self) -> usize {
        match self.more.last() {
            Some(Held::Data(d)) if self.len == SPILLED => d.len(),
            _ => 0,
        }
    }

    /// Bytes the record keeps outside its slot (the side allocation and its states' own), and
    /// of the side allocation alone: what re-encoding can grow and the rounding of a longer
    /// list of states are bounded by a multiple of the latter (the budget's cheap bound).
    pub(crate) fn sizes(&self) -> (u64, u64) {
        let states: u64 = self
            .more
            .iter()
            .map(|h| match h {
                Held::St(s) => state_heap(s),
                Held::Data(_) => 0,
            })
            .sum();
        let side = self.shell().bytes;
        (side + states, side)
    }

    /// Bytes the record keeps outside its slot.
    pub(crate) fn heap(&self) -> u64 {
        self.sizes().0
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::state::{Bucket, Buckets};
    use proptest::prelude::*;

    fn any_time() -> impl Strategy<Value = i64> {
        prop_oneof![
            Just(i64::MIN),
            Just(i64::MAX),
            -1000i64..1000,
            1_700_000_000_000i64..1_800_000_000_000,
            any::<i64>(),
        ]
    }

    fn any_state() -> impl Strategy<Value = State> {
        prop_oneof![
            (any::<i64>(), any_time()).prop_map(|(i, ts)| State::Plain {
                v: FeatureValue::Int(i),
                ts
            }),
            (any::<f64>(), any_time()).prop_map(|(x, ts)| State::Plain {
                v: FeatureValue::Float(x),
                ts
            }),
            (any::<bool>(), any_time()).prop_map(|(b, ts)| State::Plain {
                v: FeatureValue::Bool(b),
                ts
            }),
            (".{0,40}", any_time()).prop_map(|(s, ts)| State::Plain {
                v: FeatureValue::Str(s.into()),
                ts
            }),
            prop::collection::vec((any::<i64>(), any::<u32>(), any::<f64>()), 0..5).prop_map(|b| {
                State::Win(
                    b.into_iter()
                        .map(|(idx, n, a)| Bucket { idx, n, a })
                        .collect::<Buckets>(),
                )
            }),
            (any_time(), prop::collection::vec(any::<u8>(), 0..64))
                .prop_map(|(head, regs)| State::Hll { head, regs }),
        ]
    }

    fn any_entity() -> impl Strategy<Value = Entity> {
        (
            prop::option::of(any::<i64>()),
            prop::option::of(any_time()),
            any_time(),
            any_time(),
            prop::collection::vec((any::<u32>(), any_time(), any_state()), 0..8),
        )
            .prop_map(|(events, last_ts, wm, as_of, feats)| {
                let feats = feats
                    .into_iter()
                    .map(|(name, updated_ms, st)| Feat {
                        name,
                        updated_ms,
                        st,
                    })
                    .collect();
                Entity::restored(events, last_ts, feats, wm, as_of)
            })
    }

    /// Floats compare by bits (NaN included).
    fn same(a: &Entity, b: &Entity) -> bool {
        format!("{a:?}") == format!("{b:?}")
    }

    proptest! {
        /// Every entity comes back as it went in: taken out, read, and stored again over a
        /// record that held another entity before.
        #[test]
        fn rec_round_trips(e in any_entity(), mut before in any_entity()) {
            let mut r = Rec::new();
            r.store(&mut before);
            r.store(&mut e.clone());
            // What a snapshot copies is exactly the encoding a fresh record holds: no bytes
            // of what the record held before (a snapshot checks encodings strictly).
            let mut fresh = Rec::new();
            fresh.store(&mut e.clone());
            prop_assert_eq!(r.snapshot_parts().0, fresh.snapshot_parts().0);
            let strict = check_encoding(r.snapshot_parts().0, |_, _| ()).is_some();
            prop_assert!(strict, "the encoding does not check");
            let v = r.view();
            prop_assert_eq!(v.head, e.head);
            prop_assert_eq!(v.feats.len(), e.feats.len());
            for (a, b) in v.feats.iter().zip(&e.feats) {
                prop_assert_eq!((a.name, a.updated_ms), (b.name, b.updated_ms));
                prop_assert_eq!(format!("{:?}", &*a.st), format!("{:?}", b.st));
            }
            drop(v);
            let mut back = r.take();
            prop_assert!(same(&back, &e), "{back:?} != {e:?}");
            r.store(&mut back);
            prop_assert!(same(&r.take(), &e));
        }

        /// A record goes through a snapshot's form (its encoding and held states) and comes
        /// back the same, kept as it is or decoded with its names.
        #[test]
        fn snapshot_parts_restore(e in any_entity()) {
            let mut r = Rec::new();
            r.store(&mut e.clone());
            let (b, states) = r.snapshot_parts();
            let states: Vec<State> = states.cloned().collect();
            let mut held = 0;
            prop_assert!(check_encoding(b, |_, h| held += usize::from(h)).is_some());
            prop_assert_eq!(held, states.len());
            let mut back = Rec::restored(b, states.clone().into_iter());
            prop_assert!(same(&back.take(), &e));
            prop_assert!(same(&entity_of(b, states, Some), &e));
        }

        /// Any bytes are checked without a panic, and what passes decodes.
        #[test]
        fn check_encoding_takes_any_bytes(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut held = 0;
            if check_encoding(&b, |_, h| held += usize::from(h)).is_some() {
                let e = entity_of(&b, (0..held).map(|_| State::default()), Some);
                prop_assert!(e.feats.len() >= held);
            }
        }
    }

    /// The encoding is a durable format (snapshots store it): these bytes may only change
    /// with the snapshot schema (`SCHEMA` in crate::snapshot).
    #[test]
    fn golden_encoding() {
        let now = 1_790_000_000_000;
        let mut e = Entity::restored(
            Some(12),
            Some(now - 5),
            [
                Feat {
                    name: 2,
                    updated_ms: now + 3,
                    st: State::Plain {
                        v: FeatureValue::Int(-7),
                        ts: now - 5,
                    },
                },
                Feat {
                    name: 3,
                    updated_ms: now + 3,
                    st: State::Plain {
                        v: FeatureValue::Float(0.5),
                        ts: i64::MIN,
                    },
                },
                Feat {
                    name: 4,
                    updated_ms: now,
                    st: State::Hll {
                        head: 1,
                        regs: vec![1, 2, 3],
                    },
                },
            ]
            .into_iter()
            .collect(),
            now - 9,
            now,
        );
        let mut r = Rec::new();
        r.store(&mut e);
        let (b, states) = r.snapshot_parts();
        assert_eq!(states.count(), 1);
        // flags (all four times), as_of, then as differences from it: wm 9, events 12,
        // last_ts 5; 3 features: name 2 updated 3 after as_of, int -7 at ts 5 before; name 3,
        // same updated, float 0.5 without ts; name 4 updated 3 before the previous, held.
        assert_eq!(
            b,
            [
                0x0f, 0x80, 0xb0, 0x83, 0xc5, 0x98, 0x68, 0x12, 0x18, 0x0a, 0x03, 0x02, 0x05, 0x00,
                0x0d, 0x0a, 0x03, 0x00, 0x05, 0, 0, 0, 0, 0, 0, 0xe0, 0x3f, 0x04, 0x06, 0x03,
            ],
            "the record encoding changed: bump the snapshot SCHEMA"
        );
    }

    /// An entity with the built-ins and a counter, its times near each other, is held in its
    /// slot: no side allocation.
    #[test]
    fn a_counter_entity_needs_no_allocation() {
        let now = 1_790_000_000_000;
        let mut e = Entity::restored(
            Some(123_456),
            Some(now),
            [Feat {
                name: 7,
                updated_ms: now + 3,
                st: State::Plain {
                    v: FeatureValue::Int(99_999),
                    ts: now,
                },
            }]
            .into_iter()
            .collect(),
            now,
            now,
        );
        let mut r = Rec::new();
        r.store(&mut e);
        assert_eq!(r.heap(), 0);
        assert!(usize::from(r.len) <= 20, "{}", r.len);
    }
}
