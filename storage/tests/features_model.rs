//! Recovery equals history, for the feature tables (docs/API.md §6): random events (counters,
//! gauges, plain events, with and without entities), direct PUTs (numbers, strings — some that
//! read as numbers —, booleans, null deletes), increments (the Redis protocol's `HINCRBY` and
//! `HINCRBYFLOAT`) and deletes of one feature or a whole entity go through the real writer on
//! the simulated disk, with snapshots taken at random points, clean restarts, power cuts (the
//! disk keeps what was synced plus an arbitrary prefix of the rest) and restarts with changed
//! declarations. After every restart the tables must equal:
//!
//! - a simple model: the fold of every acknowledged operation, in order, under the current
//!   declarations (so a changed declaration is recomputed over the whole log);
//! - and, across a restart that kept the declarations, the tables just before it (windows
//!   and sketches included, which the model does not predict bit for bit).
//!
//! Each process of a case applies the tables on 1, 2 or 4 threads (drawn again at every
//! restart, so a restart may change the count), with small groups applied by the writer or
//! handed to the threads: recovery and the running process must agree whatever the count.
//!
//! `VX_FEATURE_CASES` sets the number of cases (default 150), `VX_FEATURE_SEED` replays one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;
use support::*;
use vx_proto::{Batch, EventView, Kind, Num};
use vx_storage::features::{
    Agg, DistinctOf, FeatureDecl, FeatureValue, Increment, ReadAt, Reading, float_of, int_of,
};
use vx_storage::sim::SimFs;
use vx_storage::*;

const ENTITIES: [&str; 5] = ["e0", "e1", "e2", "e3", "e4"];
const PUT_NAMES: [&str; 4] = ["dmg", "hp", "tag", "events"];

fn decl(name: &str, from: &str, agg: Agg, window_days: Option<u64>) -> FeatureDecl {
    FeatureDecl {
        name: name.into(),
        from: from.into(),
        agg,
        window: window_days.map(|d| Duration::from_secs(d * 86_400)),
        ttl: None,
        of: DistinctOf::Value,
    }
}

/// Two declaration sets a restart switches between. Every event is within the 30-day windows
/// (ts within the last hour), so the model can compute them exactly.
fn decls(set: u8) -> Vec<FeatureDecl> {
    let mut d = vec![
        decl("tot", "dmg", Agg::Sum, None),
        decl("cnt", "dmg", Agg::Count, Some(30)),
        decl("avg", "dmg", Agg::Avg, Some(30)),
        decl("lst", "hp", Agg::Last, Some(30)),
        decl("uniq", "dmg", Agg::Distinct, Some(30)),
    ];
    if set == 0 {
        d.push(decl("mx", "dmg", Agg::Max, None));
    } else {
        d.push(decl("mn", "dmg", Agg::Min, Some(1)));
        d[0] = decl("tot", "hp", Agg::Sum, None);
    }
    d
}

#[derive(Clone, Debug)]
struct Ev {
    stream: &'static str,
    entity: Option<&'static str>,
    ty: &'static str,
    kind: Kind,
    value: Option<i64>,
    ts: i64,
}

#[derive(Clone, Debug)]
enum Op {
    Events(Vec<Ev>),
    Put(&'static str, Vec<(&'static str, Option<FeatureValue>)>),
    /// Feature DELETE targets, one record: an entity and one of its features, or `None` for
    /// all of it (one target over HTTP; several for the Redis protocol's `HDEL` and `DEL`).
    Delete(Vec<(&'static str, Option<&'static str>)>),
    /// An increment of one feature (`HINCRBY`, `HINCRBYFLOAT`).
    Incr(&'static str, &'static str, Increment),
}

/// A plain value of the model read as an integer, by vx-features' rules (`incr.rs`): an
/// integer, a float without a fraction, a string in Redis's integer form.
fn int_in(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) if n.is_i64() => n.as_i64(),
        Value::Number(n) => n
            .as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0)
            .map(|f| f as i64),
        Value::String(s) => int_of(s),
        _ => None,
    }
}

/// A plain value of the model read as a float: a number, a string that is a decimal number.
fn float_in(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => float_of(s),
        _ => None,
    }
}

/// The model's value after an increment of `cur` (`None`: missing); `None` if refused.
fn incremented(name: &str, cur: Option<&Value>, by: Increment) -> Option<Value> {
    match by {
        Increment::Int(d) => {
            let base = match cur {
                None => 0,
                Some(v) => int_in(v)?,
            };
            Some(json!(base.checked_add(d)?))
        }
        // The built-ins hold integers.
        Increment::Float(_) if name == "events" => None,
        Increment::Float(d) => {
            let base = match cur {
                None => 0.0,
                Some(v) => float_in(v)?,
            };
            let sum = base + d;
            sum.is_finite()
                .then(|| json_of(Reading::Value(&FeatureValue::Float(sum))))
        }
    }
}

/// The model: per entity, per name, a value and the ts that orders it.
#[derive(Default, Clone)]
struct MEntity {
    plain: BTreeMap<String, (Value, i64)>,
    /// Per declaration name: the (ts, value) events it took, in log order.
    agg: BTreeMap<String, Vec<(i64, Option<i64>)>>,
}

fn fold(history: &[Op], decls: &[FeatureDecl]) -> BTreeMap<String, Value> {
    let mut m: BTreeMap<&str, MEntity> = BTreeMap::new();
    let declared = |n: &str| decls.iter().any(|d| d.name == n);
    for op in history {
        match op {
            Op::Events(evs) => {
                // Log order: a request's events grouped by stream, streams in order of first
                // appearance (one run per stream in the record).
                let mut streams: Vec<&str> = Vec::new();
                for e in evs {
                    if !streams.contains(&e.stream) {
                        streams.push(e.stream);
                    }
                }
                let in_log_order = streams
                    .iter()
                    .flat_map(|s| evs.iter().filter(move |e| e.stream == *s));
                for e in in_log_order {
                    let Some(ent) = e.entity else { continue };
                    let me = m.entry(ent).or_default();
                    let c = me
                        .plain
                        .entry("events".into())
                        .or_insert((json!(0), i64::MIN));
                    c.0 = json!(c.0.as_i64().unwrap_or(0) + 1);
                    let l = me
                        .plain
                        .entry("last_ts".into())
                        .or_insert((json!(0), i64::MIN));
                    l.0 = json!(l.0.as_i64().unwrap_or(0).max(e.ts));
                    if !declared(e.ty) {
                        match (e.kind, e.value) {
                            (Kind::Counter, Some(v)) => {
                                let f = me.plain.entry(e.ty.into()).or_insert((json!(0), i64::MIN));
                                f.0 = match &f.0 {
                                    Value::Number(n) if n.is_i64() => {
                                        json!(n.as_i64().unwrap() + v)
                                    }
                                    Value::Number(n) => json!(n.as_f64().unwrap() + v as f64),
                                    // A string that reads as a number counts on.
                                    other => match (int_in(other), float_in(other)) {
                                        (Some(i), _) => json!(i + v),
                                        (None, Some(x)) => json!(x + v as f64),
                                        (None, None) => json!(v),
                                    },
                                };
                                f.1 = f.1.max(e.ts);
                            }
                            (Kind::Gauge, Some(v)) => {
                                let f = me.plain.entry(e.ty.into()).or_insert((json!(0), i64::MIN));
                                if e.ts >= f.1 {
                                    *f = (json!(v), e.ts);
                                }
                            }
                            _ => {}
                        }
                    }
                    for d in decls.iter().filter(|d| d.from == e.ty) {
                        me.agg
                            .entry(d.name.clone())
                            .or_default()
                            .push((e.ts, e.value));
                    }
                }
            }
            Op::Put(ent, set) => {
                if set.iter().all(|(_, v)| v.is_none()) && !m.contains_key(ent) {
                    continue;
                }
                let me = m.entry(ent).or_default();
                for (name, v) in set {
                    match v {
                        None => {
                            me.plain.remove(*name);
                        }
                        Some(v) => {
                            let j = json_of(Reading::Value(v));
                            let ts = me.plain.get(*name).map_or(i64::MIN, |x| x.1);
                            me.plain.insert(name.to_string(), (j, ts));
                        }
                    }
                }
            }
            Op::Incr(ent, name, by) => {
                let cur = m.get(ent).and_then(|me| me.plain.get(*name));
                if let Some(j) = incremented(name, cur.map(|x| &x.0), *by) {
                    let ts = cur.map_or(i64::MIN, |x| x.1);
                    let me = m.entry(ent).or_default();
                    me.plain.insert(name.to_string(), (j, ts));
                }
            }
            Op::Delete(targets) => {
                for (ent, name) in targets {
                    match name {
                        None => {
                            m.remove(ent);
                        }
                        Some(name) => {
                            if let Some(me) = m.get_mut(ent) {
                                me.plain.remove(*name);
                                me.agg.remove(*name);
                            }
                        }
                    }
                }
            }
        }
    }
    m.into_iter()
        .map(|(ent, me)| {
            let mut out = serde_json::Map::new();
            for (n, (v, _)) in me.plain {
                out.insert(n, v);
            }
            for d in decls {
                let Some(evs) = me.agg.get(&d.name) else {
                    continue;
                };
                let vals: Vec<i64> = evs.iter().filter_map(|(_, v)| *v).collect();
                let v = match d.agg {
                    Agg::Count => Some(json!(evs.len())),
                    Agg::Sum => Some(json!(vals.iter().sum::<i64>())),
                    Agg::Avg if !vals.is_empty() => {
                        let a = vals.iter().sum::<i64>() as f64 / vals.len() as f64;
                        Some(if a.fract() == 0.0 {
                            json!(a as i64)
                        } else {
                            json!(a)
                        })
                    }
                    Agg::Max => vals.iter().max().map(|v| json!(v)),
                    Agg::Min => vals.iter().min().map(|v| json!(v)),
                    Agg::Last => {
                        let mut best: Option<(i64, i64)> = None;
                        for (ts, v) in evs {
                            if let Some(v) = v
                                && best.is_none_or(|(t, _)| *ts >= t)
                            {
                                best = Some((*ts, *v));
                            }
                        }
                        best.map(|(_, v)| json!(v))
                    }
                    // Exact while at most 16 values (every event here is within the 30-day
                    // windows); past that a sketch, checked against the tables before the
                    // restart instead.
                    Agg::Distinct => {
                        let mut d = vals.clone();
                        d.sort_unstable();
                        d.dedup();
                        Some(if d.len() <= 16 {
                            json!(d.len())
                        } else {
                            Value::Null
                        })
                    }
                    _ => None,
                };
                if let Some(v) = v {
                    out.insert(d.name.clone(), v);
                }
            }
            (ent.to_string(), Value::Object(out))
        })
        .collect()
}

/// A read value as the HTTP layer's JSON gives it: aggregates that are integral as integers.
fn json_of(v: Reading<'_>) -> Value {
    match v {
        Reading::Int(i) | Reading::Value(&FeatureValue::Int(i)) => json!(i),
        Reading::Num(f) if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 => {
            json!(f as i64)
        }
        Reading::Num(f) | Reading::Value(&FeatureValue::Float(f)) => json!(f),
        Reading::Value(FeatureValue::Bool(b)) => json!(b),
        Reading::Value(FeatureValue::Str(s)) => json!(s.as_ref()),
    }
}

/// The store's tables for every entity of the universe.
fn dump(store: &Store) -> BTreeMap<String, Value> {
    let f = store.features();
    let mut out = BTreeMap::new();
    for e in ENTITIES {
        let mut feats = serde_json::Map::new();
        let found = f.read(e, None, ReadAt { now_ms: 0 }, &mut |name, v| {
            feats.insert(name.to_string(), json_of(v));
        });
        if found.is_some() {
            out.insert(e.to_string(), Value::Object(feats));
        }
    }
    out
}

/// The model's view of a dump: a distinct count is predicted while it is exact (at most 16
/// values), not past that (`want` holds null there).
fn comparable(
    mut d: BTreeMap<String, Value>,
    want: &BTreeMap<String, Value>,
    decls: &[FeatureDecl],
) -> BTreeMap<String, Value> {
    for (e, v) in d.iter_mut() {
        if let Value::Object(o) = v {
            for dl in decls.iter().filter(|d| d.agg == Agg::Distinct) {
                let predicted = want.get(e).and_then(|w| w.get(&dl.name));
                if o.contains_key(&dl.name) && predicted.is_none_or(Value::is_null) {
                    o.insert(dl.name.clone(), Value::Null);
                }
            }
        }
    }
    d
}

fn random_op(rng: &mut Rng, now: i64) -> Op {
    match rng.below(12) {
        0..=5 => {
            let n = 1 + rng.below(6) as usize;
            Op::Events(
                (0..n)
                    .map(|_| {
                        let kind = [Kind::Counter, Kind::Gauge, Kind::Event][rng.below(3) as usize];
                        let ty = ["dmg", "hp", "move"][rng.below(3) as usize];
                        let value = match kind {
                            Kind::Event if rng.chance(50) => None,
                            _ => Some(rng.below(200) as i64 - 50),
                        };
                        Ev {
                            stream: ["s0", "s1", "s2"][rng.below(3) as usize],
                            entity: (!rng.chance(10)).then(|| ENTITIES[rng.below(5) as usize]),
                            ty,
                            kind,
                            value,
                            // Within the last hour, sometimes equal, never in the future.
                            ts: now - 1000 * rng.below(3600) as i64,
                        }
                    })
                    .collect(),
            )
        }
        6 | 7 => {
            let n = 1 + rng.below(3) as usize;
            let set = (0..n)
                .map(|_| {
                    let name = PUT_NAMES[rng.below(PUT_NAMES.len() as u64) as usize];
                    let v = match rng.below(5) {
                        0 => None,
                        1 => Some(FeatureValue::Int(rng.below(1000) as i64)),
                        2 => Some(FeatureValue::Float(rng.below(1000) as f64 / 4.0 + 0.25)),
                        3 => Some(FeatureValue::Bool(rng.chance(50))),
                        // Some read as numbers (counters and increments count on from them).
                        _ => Some(FeatureValue::Str(
                            ["s1", "s2", "5", "-3", "07", "2.5", "1e3"][rng.below(7) as usize]
                                .into(),
                        )),
                    };
                    // The built-ins hold integers (the HTTP layer refuses anything else).
                    let v = match (name, v) {
                        ("events", Some(v)) if !matches!(v, FeatureValue::Int(_)) => None,
                        (_, v) => v,
                    };
                    (name, v)
                })
                .collect::<Vec<_>>();
            // One value per name per PUT, as a JSON object would carry.
            let mut seen = std::collections::HashSet::new();
            let set = set.into_iter().filter(|(n, _)| seen.insert(*n)).collect();
            Op::Put(ENTITIES[rng.below(5) as usize], set)
        }
        // One to three targets: names of one entity (`HDEL`), or whole entities (`DEL`).
        8 => {
            let names = ["dmg", "hp", "tag", "tot", "cnt", "lst", "events"];
            let ent = ENTITIES[rng.below(5) as usize];
            Op::Delete(
                (0..1 + rng.below(3))
                    .map(|_| (ent, Some(names[rng.below(names.len() as u64) as usize])))
                    .collect(),
            )
        }
        9 => Op::Delete(
            (0..1 + rng.below(3))
                .map(|_| (ENTITIES[rng.below(5) as usize], None))
                .collect(),
        ),
        _ => {
            let by = if rng.chance(60) {
                Increment::Int(rng.below(20) as i64 - 5)
            } else {
                Increment::Float(rng.below(8) as f64 / 4.0 - 0.5)
            };
            let name = PUT_NAMES[rng.below(PUT_NAMES.len() as u64) as usize];
            Op::Incr(ENTITIES[rng.below(5) as usize], name, by)
        }
    }
}

/// Apply `op` to the store; true if it was acknowledged (a delete of something unknown is a
/// no-op the HTTP layer would answer 404 without writing: it is left out here).
fn apply(store: &Store, op: &Op) -> bool {
    match op {
        Op::Events(evs) => {
            let mut b = Batch::new();
            for e in evs {
                b.push(&EventView {
                    stream: e.stream,
                    entity: e.entity,
                    ty: e.ty,
                    ts: e.ts,
                    kind: e.kind,
                    value: e.value.map(Num::Int),
                    id: None,
                    data: None,
                })
                .unwrap();
            }
            block(store.write(WriteRequest {
                batch: b,
                durability: None,
                expected_last_seq: None,
                guard: None,
                origin: None,
                append_ms: None,
            }))
            .unwrap();
            true
        }
        Op::Put(ent, set) => {
            let set = set
                .iter()
                .map(|(n, v)| (n.to_string(), v.clone()))
                .collect();
            block(store.write_features(FeatureWrite {
                entity: ent.to_string(),
                op: FeatureOp::Put(set),
                durability: None,
                guard: None,
                origin: None,
                append_ms: None,
            }))
            .unwrap();
            true
        }
        Op::Incr(ent, name, by) => {
            block(store.write_features(FeatureWrite {
                entity: ent.to_string(),
                op: FeatureOp::Incr {
                    name: name.to_string(),
                    by: *by,
                },
                durability: None,
                guard: None,
                origin: None,
                append_ms: None,
            }))
            .unwrap();
            true
        }
        Op::Delete(targets) => {
            if !targets
                .iter()
                .any(|(ent, name)| store.features().exists(ent, *name))
            {
                return false;
            }
            let op = FeatureOp::Delete(
                targets
                    .iter()
                    .map(|(e, n)| (e.to_string(), n.map(str::to_string)))
                    .collect(),
            );
            block(store.write_features(FeatureWrite {
                entity: targets[0].0.to_string(),
                op,
                durability: None,
                guard: None,
                origin: None,
                append_ms: None,
            }))
            .unwrap();
            true
        }
    }
}

#[derive(Default, Debug)]
struct Seen {
    restarts: u64,
    from_snapshot: u64,
    recomputed: u64,
    power_cuts: u64,
    /// Restarts by the apply threads of the process before and after (1, 2 or 4 each).
    threads: BTreeMap<(usize, usize), u64>,
}

/// The apply threads of a process of the case: 1, 2 or 4 (the store has 4 shards, so 4 is one
/// shard a thread), and whether small groups reach the threads too (else the writer applies
/// them itself), so that both ways are checked.
fn threads(rng: &mut Rng, cfg: &mut StorageConfig) {
    cfg.apply_threads = [1, 2, 4][rng.below(3) as usize];
    cfg.apply_in_place_bytes = if rng.chance(50) {
        0
    } else {
        StorageConfig::new("/").apply_in_place_bytes
    };
}

fn run_case(seed: u64, seen: &mut Seen) -> Result<(), String> {
    let mut rng = Rng(seed);
    let fs = SimFs::new();
    let mut set = 0u8;
    let mut cfg = sim_cfg(&fs);
    cfg.segment_bytes = 2048 + 512 * rng.below(8);
    cfg.fsync = FsyncMode::Always;
    cfg.features = decls(set);
    threads(&mut rng, &mut cfg);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let (mut store, _) = Store::open(cfg.clone()).map_err(|e| format!("open: {e}"))?;
    let mut history: Vec<Op> = Vec::new();
    let steps = 20 + rng.below(80);
    for step in 0..steps {
        let op = random_op(&mut rng, now);
        if apply(&store, &op) {
            history.push(op);
        }
        if std::env::var("VX_FEATURE_DEBUG").is_ok() {
            let want = fold(&history, &cfg.features);
            let got = comparable(dump(&store), &want, &cfg.features);
            if got != want {
                return Err(format!(
                    "live divergence at step {step} after {:?}:\n model {want:#?}\n store {got:#?}",
                    history.last()
                ));
            }
        }
        if rng.chance(8) {
            store.snapshot_now().map_err(|e| format!("snapshot: {e}"))?;
        }
        if rng.chance(7) || step + 1 == steps {
            let before = dump(&store);
            let how = rng.below(3);
            let change = rng.chance(30);
            match how {
                0 => store.shutdown(),
                _ => {
                    // Power cut: everything acknowledged was fsynced (`always`).
                    fs.freeze();
                    store.shutdown();
                    fs.power_cut(&mut |n| rng.below(n));
                }
            }
            drop(store);
            if change {
                set ^= 1;
                cfg.features = decls(set);
            }
            let before_threads = cfg.apply_threads;
            threads(&mut rng, &mut cfg);
            *seen
                .threads
                .entry((before_threads, cfg.apply_threads))
                .or_default() += 1;
            let (s, report) = Store::open(cfg.clone()).map_err(|e| format!("reopen: {e}"))?;
            store = s;
            seen.restarts += 1;
            seen.power_cuts += u64::from(how != 0);
            seen.from_snapshot += u64::from(report.features.snapshot.is_some());
            seen.recomputed += u64::from(!report.features.recomputed.is_empty());
            let after = dump(&store);
            let want = fold(&history, &cfg.features);
            let got = comparable(after.clone(), &want, &cfg.features);
            if got != want {
                if std::env::var("VX_FEATURE_DEBUG").is_ok() {
                    for op in &history {
                        eprintln!("{op:?}");
                    }
                }
                return Err(format!(
                    "step {step}, restart kind {how}, decl set {set} (changed {change}), boot {:?}:\n model {want:#?}\n store {got:#?}",
                    report.features
                ));
            }
            if !change && after != before {
                return Err(format!(
                    "step {step}: state before the restart differs from after it:\n before {before:#?}\n after {after:#?}"
                ));
            }
        }
    }
    store.shutdown();
    Ok(())
}

#[test]
fn recovery_equals_history_across_snapshots_power_cuts_and_changed_declarations() {
    let cases: u64 = std::env::var("VX_FEATURE_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150);
    let seeds: Vec<u64> = match std::env::var("VX_FEATURE_SEED") {
        Ok(s) => vec![s.parse().unwrap()],
        Err(_) => (0..cases).map(|i| 0xFEA7 + i * 7919).collect(),
    };
    let mut seen = Seen::default();
    let one = seeds.len() == 1;
    for seed in seeds {
        if let Err(e) = run_case(seed, &mut seen) {
            panic!("seed {seed} (VX_FEATURE_SEED={seed}): {e}");
        }
    }
    // The cases must have gone through every path they are meant to check.
    if !one {
        assert!(
            seen.from_snapshot > 0 && seen.recomputed > 0 && seen.power_cuts > 0,
            "{seen:?}"
        );
        // Every thread count before and after a restart, each to each.
        assert_eq!(seen.threads.len(), 9, "{seen:?}");
    }
    eprintln!("{seen:?}");
}
