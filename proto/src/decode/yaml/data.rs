//! `data` from YAML: a node (and everything under it) written as compact JSON as its events
//! arrive, so no YAML tree is built (docs/API.md §2: "From YAML it is converted to JSON the same
//! way"). Scalars follow the core schema: strings are escaped as serde_json escapes them,
//! number literals that are valid JSON are kept as written (as the JSON decoders keep them),
//! others are rewritten in JSON form; mapping keys are strings (a plain key is its text).
//! Duplicate keys, merge keys, non-core tags and non-finite numbers are refused, and the depth
//! is bounded as for JSON.

use std::hash::BuildHasher;

use granit_parser::Tag;
use hashbrown::HashTable;

use super::scalar::{Int, Scalar, collection_tag, core_tag, int_value, is_json_number, resolve};
use super::{Node, Problem};
use crate::canonical::write_json_str;
use crate::rules::MAX_DATA_DEPTH;

/// An open collection of `data`.
#[derive(Clone, Copy, Debug)]
enum OpenCollection {
    Seq {
        first: bool,
    },
    /// `key_next`: the next scalar is a key (else a value).
    Map {
        first: bool,
        key_next: bool,
    },
}

/// Writes one `data` value; reused from event to event.
#[derive(Debug, Default)]
pub(super) struct DataWriter {
    out: Vec<u8>,
    stack: Vec<OpenCollection>,
    /// The keys of the mapping open at each depth, as ranges of `out` (their JSON text, which
    /// is unique per key), so that a duplicate is found without a copy of each key.
    keys: Vec<HashTable<(u32, u32)>>,
    hasher: foldhash::fast::FixedState,
}

impl DataWriter {
    pub(super) fn start(&mut self) {
        self.out.clear();
        self.stack.clear();
    }

    /// The JSON text written, once [`DataWriter::node`] said it is complete.
    pub(super) fn text(&self) -> Result<&str, Problem> {
        std::str::from_utf8(&self.out)
            .map_err(|_| Problem::Malformed("data converted from YAML is not UTF-8".into()))
    }

    /// Take the next node of `data`; true once the value is complete.
    pub(super) fn node(&mut self, node: &Node<'_>) -> Result<bool, Problem> {
        match *node {
            Node::Scalar { value, style, tag } => {
                if let Some(OpenCollection::Map {
                    first,
                    key_next: true,
                }) = self.stack.last().copied()
                {
                    self.key(
                        value,
                        style == granit_parser::ScalarStyle::Plain,
                        tag,
                        first,
                    )?;
                    return Ok(false);
                }
                self.before_value();
                let scalar = resolve(value, style, tag).map_err(Problem::data)?;
                self.scalar(scalar)?;
                Ok(self.after_value())
            }
            Node::MapStart { tag } | Node::SeqStart { tag } => {
                let map = matches!(node, Node::MapStart { .. });
                if let Some(OpenCollection::Map { key_next: true, .. }) = self.stack.last() {
                    return Err(Problem::data(format!(
                        "mapping keys must be strings, found a {}",
                        if map { "mapping" } else { "sequence" }
                    )));
                }
                collection_tag(tag, map).map_err(Problem::data)?;
                if self.stack.len() >= MAX_DATA_DEPTH {
                    return Err(Problem::TooDeep);
                }
                self.before_value();
                if map {
                    self.out.push(b'{');
                    let depth = self.stack.len();
                    if self.keys.len() <= depth {
                        self.keys.resize_with(depth + 1, HashTable::new);
                    }
                    if let Some(k) = self.keys.get_mut(depth) {
                        k.clear();
                    }
                    self.stack.push(OpenCollection::Map {
                        first: true,
                        key_next: true,
                    });
                } else {
                    self.out.push(b'[');
                    self.stack.push(OpenCollection::Seq { first: true });
                }
                Ok(false)
            }
            Node::MapEnd | Node::SeqEnd => {
                let close = match self.stack.pop() {
                    Some(OpenCollection::Map { .. }) => b'}',
                    Some(OpenCollection::Seq { .. }) => b']',
                    None => return Err(Problem::Malformed("unbalanced YAML collection".into())),
                };
                self.out.push(close);
                Ok(self.after_value())
            }
        }
    }

    /// A comma before an element of a sequence.
    fn before_value(&mut self) {
        if let Some(OpenCollection::Seq { first }) = self.stack.last_mut() {
            if !*first {
                self.out.push(b',');
            }
            *first = false;
        }
    }

    /// A value ended: a mapping expects a key next. True when `data` itself ended.
    fn after_value(&mut self) -> bool {
        match self.stack.last_mut() {
            None => true,
            Some(OpenCollection::Map { key_next, .. }) => {
                *key_next = true;
                false
            }
            Some(OpenCollection::Seq { .. }) => false,
        }
    }

    fn key(
        &mut self,
        value: &str,
        plain: bool,
        tag: Option<&Tag>,
        first: bool,
    ) -> Result<(), Problem> {
        // A key is a string whatever its text (`1: x` has the key "1"), but a tag must still
        // be a core one, and `<<` is a merge key, which docs/API.md §3.2 refuses.
        core_tag(tag).map_err(Problem::data)?;
        if plain && tag.is_none() && value == "<<" {
            return Err(Problem::data(
                "merge keys (<<) are not supported: write the merged fields out",
            ));
        }
        if !first {
            self.out.push(b',');
        }
        let start = self.out.len();
        write_json_str(&mut self.out, value);
        let end = self.out.len();
        let depth = self.stack.len().saturating_sub(1);
        let key = &self.out[start..end];
        let hash = self.hasher.hash_one(key);
        let out = &self.out;
        let range = |&(s, e): &(u32, u32)| &out[s as usize..e as usize];
        if let Some(keys) = self.keys.get_mut(depth) {
            if keys.find(hash, |r| range(r) == key).is_some() {
                let shown: String = value.chars().take(64).collect();
                return Err(Problem::data(format!("duplicate key {shown:?}")));
            }
            let hasher = &self.hasher;
            keys.insert_unique(hash, (start as u32, end as u32), |r| {
                hasher.hash_one(range(r))
            });
        }
        self.out.push(b':');
        if let Some(OpenCollection::Map { first, key_next }) = self.stack.last_mut() {
            *first = false;
            *key_next = false;
        }
        Ok(())
    }

    fn scalar(&mut self, scalar: Scalar<'_>) -> Result<(), Problem> {
        match scalar {
            Scalar::Null => self.out.extend_from_slice(b"null"),
            Scalar::Bool(true) => self.out.extend_from_slice(b"true"),
            Scalar::Bool(false) => self.out.extend_from_slice(b"false"),
            Scalar::Str(s) => write_json_str(&mut self.out, s),
            Scalar::Int(Int::Dec(d)) if is_json_number(d) => {
                self.out.extend_from_slice(d.as_bytes())
            }
            Scalar::Int(Int::Dec(d)) => {
                // `+7`, `007`: the same integer in JSON form, whatever its size.
                let neg = d.starts_with('-');
                let digits = d.trim_start_matches(['-', '+']).trim_start_matches('0');
                if neg && !digits.is_empty() {
                    self.out.push(b'-');
                }
                let digits = if digits.is_empty() { "0" } else { digits };
                self.out.extend_from_slice(digits.as_bytes());
            }
            Scalar::Int(i) => match int_value(i) {
                Some(v) => self.out.extend_from_slice(v.to_string().as_bytes()),
                None => return Err(Problem::data("integer out of range")),
            },
            Scalar::Float(f) if is_json_number(f) => self.out.extend_from_slice(f.as_bytes()),
            Scalar::Float(f) => match f.parse::<f64>() {
                Ok(v) if v.is_finite() => {
                    // serde_json's shortest round-trip form, as the canonical output uses.
                    if serde_json::to_writer(&mut self.out, &v).is_err() {
                        return Err(Problem::data("unrepresentable float"));
                    }
                }
                _ => {
                    return Err(Problem::data(format!("{f:?} is not a finite number")));
                }
            },
            Scalar::NonFinite => {
                return Err(Problem::data(
                    "non-finite numbers (.inf, .nan) cannot be stored",
                ));
            }
        }
        Ok(())
    }
}
