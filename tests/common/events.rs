//! Events to send and their canonical form (docs/API.md §2): builders, NDJSON and JSON-array
//! bodies, a deterministic generator covering every field rule, and the comparison of a
//! replayed event with what was sent.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::client::Line;

/// How an event's `ts` is sent.
#[derive(Clone, Debug)]
pub enum Ts {
    /// Integer milliseconds.
    Ms(i64),
    /// An RFC 3339 string and the milliseconds it means.
    Rfc3339(String, i64),
    /// Not sent: the server's receive time, expected within this window (ms).
    Absent(i64, i64),
}

/// One event to send, with everything needed to predict its canonical form.
#[derive(Clone, Debug)]
pub struct Event {
    pub stream: String,
    pub entity: Option<String>,
    pub ty: String,
    pub ts: Ts,
    pub kind: Option<&'static str>,
    /// The literal text of `value`.
    pub value: Option<String>,
    pub id: Option<String>,
    /// `data` as sent (any whitespace) and its expected compact text.
    pub data: Option<(String, String)>,
}

impl Event {
    /// A plain event with an integer `ts` and an id.
    pub fn simple(stream: &str, ty: &str, ts: i64, id: Option<String>) -> Event {
        Event {
            stream: stream.to_string(),
            entity: None,
            ty: ty.to_string(),
            ts: Ts::Ms(ts),
            kind: None,
            value: None,
            id,
            data: None,
        }
    }

    /// The event as a JSON object (one line; `data` exactly as given).
    pub fn to_json(&self) -> String {
        let s = |v: &str| serde_json::to_string(v).unwrap();
        let mut out = format!(
            "{{\"stream\": {}, \"type\": {}",
            s(&self.stream),
            s(&self.ty)
        );
        if let Some(e) = &self.entity {
            out.push_str(&format!(", \"entity\": {}", s(e)));
        }
        match &self.ts {
            Ts::Ms(ms) => out.push_str(&format!(", \"ts\": {ms}")),
            Ts::Rfc3339(text, _) => out.push_str(&format!(", \"ts\": {}", s(text))),
            Ts::Absent(..) => {}
        }
        if let Some(k) = self.kind {
            out.push_str(&format!(", \"kind\": \"{k}\""));
        }
        if let Some(v) = &self.value {
            out.push_str(&format!(", \"value\": {v}"));
        }
        if let Some(id) = &self.id {
            out.push_str(&format!(", \"id\": {}", s(id)));
        }
        if let Some((sent, _)) = &self.data {
            out.push_str(&format!(", \"data\": {sent}"));
        }
        out.push('}');
        out
    }

    pub fn expected_ts(&self) -> Option<i64> {
        match self.ts {
            Ts::Ms(ms) | Ts::Rfc3339(_, ms) => Some(ms),
            Ts::Absent(..) => None,
        }
    }

    /// Compare a replayed event with the canonical form of this one with `seq`. `raw` is the
    /// event's text when it is known on its own (an NDJSON line), to check `data` byte for byte.
    pub fn check(&self, got: &Value, raw: Option<&str>, seq: u64) -> Result<(), String> {
        let obj = got
            .as_object()
            .ok_or_else(|| format!("replayed event is not an object: {got}"))?;
        let mut want = serde_json::Map::new();
        want.insert("stream".into(), Value::from(self.stream.clone()));
        if let Some(e) = self.entity.as_deref().filter(|e| !e.is_empty()) {
            want.insert("entity".into(), Value::from(e));
        }
        want.insert("type".into(), Value::from(self.ty.clone()));
        match &self.ts {
            Ts::Ms(ms) | Ts::Rfc3339(_, ms) => {
                want.insert("ts".into(), Value::from(*ms));
            }
            Ts::Absent(lo, hi) => {
                let ts = obj
                    .get("ts")
                    .and_then(Value::as_i64)
                    .ok_or_else(|| format!("no integer ts in {got}"))?;
                if ts < *lo || ts > *hi {
                    return Err(format!(
                        "server-assigned ts {ts} outside the receive window {lo}..={hi}"
                    ));
                }
                want.insert("ts".into(), Value::from(ts));
            }
        }
        want.insert("kind".into(), Value::from(self.kind.unwrap_or("event")));
        if let Some(v) = &self.value {
            want.insert("value".into(), serde_json::from_str(v).unwrap());
        }
        if let Some(id) = &self.id {
            want.insert("id".into(), Value::from(id.clone()));
        }
        if let Some((_, compact)) = &self.data {
            want.insert("data".into(), serde_json::from_str(compact).unwrap());
            if let Some(raw) = raw {
                let needle = format!("\"data\":{compact}");
                if !raw.contains(&needle) {
                    return Err(format!("data not replayed as sent: want {needle} in {raw}"));
                }
            }
        }
        want.insert("seq".into(), Value::from(seq));
        let want = Value::Object(want);
        if &want != got {
            return Err(format!("replayed {got}\n    expected {want}"));
        }
        // Only data could hold such text, and ours never does.
        if let Some(raw) = raw
            && (raw.contains(": ") || raw.contains(", ") || raw.contains('\n'))
        {
            return Err(format!("replayed line is not compact JSON: {raw}"));
        }
        Ok(())
    }
}

/// Events as NDJSON, with a blank line in the middle (which must be ignored).
pub fn ndjson(events: &[Event]) -> String {
    let mut out = String::new();
    for (i, e) in events.iter().enumerate() {
        out.push_str(&e.to_json());
        out.push('\n');
        if i == events.len() / 2 {
            out.push('\n');
        }
    }
    out
}

/// Events as one JSON array, pretty enough to span lines.
pub fn json_array(events: &[Event]) -> String {
    let items: Vec<String> = events.iter().map(Event::to_json).collect();
    format!("[\n  {}\n]\n", items.join(",\n  "))
}

/// Check that `lines` are exactly `events` with seq 1..=n, in order.
pub fn check_stream(stream: &str, lines: &[Line], events: &[&Event]) {
    assert_eq!(
        lines.len(),
        events.len(),
        "stream {stream:?}: replayed {} events, sent {}",
        lines.len(),
        events.len()
    );
    for (i, (line, ev)) in lines.iter().zip(events).enumerate() {
        if let Err(e) = ev.check(&line.value, Some(&line.raw), i as u64 + 1) {
            panic!("stream {stream:?}, event {i}: {e}");
        }
    }
}

/// Current time in ms since the epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A small deterministic generator (xorshift64*), so failures are reproducible.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// `data` payloads as sent and as they must be replayed (compact; key order, number literals
/// and escapes kept).
pub const DATA: &[(&str, &str)] = &[
    (r#"{"weapon": "bow"}"#, r#"{"weapon":"bow"}"#),
    (
        r#"{ "z" : 1 , "a" : [ 1.50 , 2e3 , -0 , 1E-2 ] }"#,
        r#"{"z":1,"a":[1.50,2e3,-0,1E-2]}"#,
    ),
    (
        r#"{"s": "caf\u00e9 \"q\" \\ \n", "u": "ünï"}"#,
        r#"{"s":"caf\u00e9 \"q\" \\ \n","u":"ünï"}"#,
    ),
    (r#"[ ]"#, r#"[]"#),
    (r#""just a string""#, r#""just a string""#),
    (r#"12345678901234567890123"#, r#"12345678901234567890123"#),
    (r#"null"#, r#"null"#),
    (
        r#"{"nested": {"b": [true, false, {"c": {}}]}}"#,
        r#"{"nested":{"b":[true,false,{"c":{}}]}}"#,
    ),
];

/// RFC 3339 text for `ms` at the given UTC offset in minutes, with `extra` sub-millisecond
/// digits (which the server must truncate).
pub fn rfc3339(ms: i64, offset_min: i64, extra: &str) -> String {
    let local = ms + offset_min * 60_000;
    let days = local.div_euclid(86_400_000);
    let rem = local.rem_euclid(86_400_000);
    let (y, m, d) = civil_from_days(days);
    let (hh, mm, ss, milli) = (
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000,
    );
    let off = if offset_min == 0 {
        "Z".to_string()
    } else {
        let sign = if offset_min < 0 { '-' } else { '+' };
        let a = offset_min.abs();
        format!("{sign}{:02}:{:02}", a / 60, a % 60)
    };
    format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}.{milli:03}{extra}{off}")
}

/// Howard Hinnant's days → civil date.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// A varied event for `stream`: every kind, entities present/absent/empty, integer and
/// RFC 3339 timestamps, ids, and `data` of every JSON type.
pub fn varied_event(rng: &mut Rng, stream: &str, n: u64) -> Event {
    let base = 1_732_000_000_000i64;
    let ts = match rng.below(10) {
        0 => {
            let ms = base + rng.below(10_000_000) as i64;
            let off = [0i64, 120, -330, 345][rng.below(4) as usize];
            Ts::Rfc3339(
                rfc3339(ms, off, ["", "456", "999999"][rng.below(3) as usize]),
                ms,
            )
        }
        1 => Ts::Ms(rng.below(1 << 53) as i64),
        // The caller sets the receive window once it knows it.
        2 => Ts::Absent(i64::MIN, i64::MAX),
        _ => Ts::Ms(base + rng.below(10_000_000) as i64),
    };
    let (kind, value) = match rng.below(4) {
        0 => (
            Some("counter"),
            Some(format!("{}", rng.below(2000) as i64 - 1000)),
        ),
        1 => (
            Some("gauge"),
            Some(["12.5", "-3", "0.001", "1e3", "7"][rng.below(5) as usize].to_string()),
        ),
        2 => (Some("event"), None),
        _ => (None, (rng.below(2) == 0).then(|| "42".to_string())),
    };
    let entity = match rng.below(4) {
        0 => None,
        1 => Some(String::new()),
        _ => Some(format!("player-{}", rng.below(50))),
    };
    let data = match rng.below(DATA.len() as u64 + 3) as usize {
        i if i < DATA.len() => {
            let (a, b) = DATA[i];
            Some((a.to_string(), b.to_string()))
        }
        i if i == DATA.len() => None,
        _ => {
            let k = rng.below(1_000_000);
            Some((
                format!("{{\"n\": {n}, \"k\": {k}}}"),
                format!("{{\"n\":{n},\"k\":{k}}}"),
            ))
        }
    };
    Event {
        stream: stream.to_string(),
        entity,
        ty: ["damage", "heal", "kill.assist", "pos:x", "A-b_c"][rng.below(5) as usize].to_string(),
        ts,
        kind,
        value,
        id: (rng.below(5) != 0).then(|| format!("{stream}#{n}")),
        data,
    }
}

/// Events of `stream` numbered `from..from + n`, each with id `{stream}-{i}` and a `data`
/// padded to about `pad` bytes (to fill log segments quickly).
pub fn padded_events(stream: &str, from: usize, n: usize, pad: usize) -> Vec<Event> {
    (from..from + n)
        .map(|i| {
            let mut e = Event::simple(stream, "t", i as i64, Some(format!("{stream}-{i}")));
            let p = "p".repeat(pad);
            e.data = Some((
                format!("{{\"i\": {i}, \"pad\": \"{p}\"}}"),
                format!("{{\"i\":{i},\"pad\":\"{p}\"}}"),
            ));
            e
        })
        .collect()
}
