//! Live replay (docs/API.md §5): followers that catch up on a stream from storage and then go live,
//! the fan-out that feeds thousands of them from one encoding per event, and pacing.
//!
//! - [`hub`]: the followed streams ("topics"). Per topic one pump reads each newly visible
//!   event once from the log, encodes it once ([`Encoded`]) and keeps the newest in a bounded
//!   ring that every follower of the topic reads from.
//! - [`follow`]: one follower: its position, the switch between reading storage and reading
//!   the ring, filters, pacing, heartbeats, and how it ends.
//!
//! A follower's position is a `seq`, and every event it sends is the one at its position (or
//! the next one its filters keep), whichever source it came from: that is what makes the
//! switch from catch-up to live, and back after a lag, free of gaps and duplicates.

pub mod follow;
pub mod hub;

use bytes::Bytes;
use vx_proto::EventView;
use vx_storage::{Cursor, ReadError, ReadQuery};

pub use follow::{FollowEnd, Follower, Next, Notice, Pace};
pub use hub::{Hub, Membership, Slot, Transport};

/// One event encoded once for every live format: the SSE frame
/// `id: <seq>\ndata: <canonical JSON>\n\n`, whose JSON line (with one of the frame's trailing
/// newlines) is the NDJSON line and whose JSON is the WebSocket text message. The event's type
/// and entity follow the frame in the same buffer, for filters: one allocation per event.
#[derive(Clone, Debug)]
pub struct Encoded {
    pub seq: u64,
    pub ts: i64,
    buf: Bytes,
    json_start: u32,
    json_end: u32,
    frame_end: u32,
    ty_start: u32,
    ty_end: u32,
    has_entity: bool,
}

impl Encoded {
    pub fn new(seq: u64, ev: &EventView<'_>) -> Encoded {
        let mut buf = Vec::with_capacity(256);
        buf.extend_from_slice(b"id: ");
        buf.extend_from_slice(itoa::Buffer::new().format(seq).as_bytes());
        buf.extend_from_slice(b"\ndata: ");
        let mut json_start = buf.len();
        vx_proto::canonical::write_event(&mut buf, ev, seq);
        let mut json_end = buf.len();
        let frame_end;
        if memchr::memchr(b'\n', &buf[json_start..]).is_some() {
            // Canonical JSON is one line (strings escape control characters); should a
            // newline ever get in, SSE needs one `data:` line per line, and the JSON is kept
            // apart after the frame for the other formats.
            let json = buf.split_off(json_start);
            buf.truncate(json_start - b"data: ".len());
            for line in json.split(|&b| b == b'\n') {
                buf.extend_from_slice(b"data: ");
                buf.extend_from_slice(line);
                buf.push(b'\n');
            }
            buf.push(b'\n');
            frame_end = buf.len();
            json_start = buf.len();
            buf.extend_from_slice(&json);
            json_end = buf.len();
        } else {
            buf.extend_from_slice(b"\n\n");
            frame_end = buf.len();
        }
        let ty_start = buf.len();
        buf.extend_from_slice(ev.ty.as_bytes());
        let ty_end = buf.len();
        if let Some(e) = ev.entity {
            buf.extend_from_slice(e.as_bytes());
        }
        // An event is at most ingest.max_event_bytes (≤ 1 GiB) plus its framing.
        let u = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Encoded {
            seq,
            ts: ev.ts,
            buf: Bytes::from(buf),
            json_start: u(json_start),
            json_end: u(json_end),
            frame_end: u(frame_end),
            ty_start: u(ty_start),
            ty_end: u(ty_end),
            has_entity: ev.entity.is_some(),
        }
    }

    /// The SSE frame.
    pub fn sse(&self) -> Bytes {
        self.buf.slice(..self.frame_end as usize)
    }

    /// The canonical JSON (the WebSocket message).
    pub fn json(&self) -> Bytes {
        self.buf
            .slice(self.json_start as usize..self.json_end as usize)
    }

    /// The NDJSON line with its newline: a slice of the frame, but for the multi-line case.
    pub fn ndjson(&self) -> Bytes {
        let (s, e) = (self.json_start as usize, self.json_end as usize);
        if self.buf.get(e) == Some(&b'\n') {
            self.buf.slice(s..e + 1)
        } else {
            let mut v = Vec::with_capacity(e - s + 1);
            v.extend_from_slice(&self.buf[s..e]);
            v.push(b'\n');
            Bytes::from(v)
        }
    }

    pub fn ty(&self) -> &[u8] {
        &self.buf[self.ty_start as usize..self.ty_end as usize]
    }

    pub fn entity(&self) -> Option<&[u8]> {
        self.has_entity.then(|| &self.buf[self.ty_end as usize..])
    }

    /// Whether the exact filters of `q` (not its seq range) keep this event: the same
    /// predicate replay cursors apply ([`ReadQuery::keeps`]).
    pub fn kept_by(&self, q: &ReadQuery) -> bool {
        q.keeps(self.ts, self.ty(), self.entity())
    }

    /// Bytes this event holds in memory (what a ring counts).
    pub fn mem_bytes(&self) -> usize {
        self.buf.len() + std::mem::size_of::<Encoded>()
    }
}

/// Read and encode the cursor's next events, at most `max_events` and about `max_bytes`;
/// `Ok(true)` once its range is read. The events read before an error are returned with it.
/// Blocking: the pump's and the followers' one way of reading the log.
pub(crate) fn read_encoded(
    cursor: &mut Cursor,
    max_events: usize,
    max_bytes: usize,
) -> (Vec<Encoded>, Result<bool, ReadError>) {
    let mut out = Vec::new();
    let mut bytes = 0;
    while out.len() < max_events && bytes < max_bytes {
        match cursor.next_event() {
            Ok(Some((seq, ev))) => {
                let e = Encoded::new(seq, &ev);
                bytes += e.mem_bytes();
                out.push(e);
            }
            Ok(None) => return (out, Ok(true)),
            Err(e) => return (out, Err(e)),
        }
    }
    (out, Ok(false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use vx_proto::event::Kind;

    fn view<'a>(entity: Option<&'a str>, data: Option<&'a str>) -> EventView<'a> {
        EventView {
            stream: "s",
            entity,
            ty: "hit",
            ts: 42,
            kind: Kind::Event,
            value: None,
            id: None,
            data,
        }
    }

    #[test]
    fn one_buffer_serves_every_format() {
        let e = Encoded::new(7, &view(Some("p1"), Some(r#"{"a":1}"#)));
        let json = r#"{"stream":"s","entity":"p1","type":"hit","ts":42,"kind":"event","data":{"a":1},"seq":7}"#;
        assert_eq!(e.json(), json.as_bytes());
        assert_eq!(e.sse(), format!("id: 7\ndata: {json}\n\n").as_bytes());
        assert_eq!(e.ndjson(), format!("{json}\n").as_bytes());
        assert_eq!(e.ty(), b"hit");
        assert_eq!(e.entity(), Some(&b"p1"[..]));
        let none = Encoded::new(8, &view(None, None));
        assert_eq!(none.entity(), None);
    }

    #[test]
    fn a_newline_in_the_json_gets_one_data_line_per_line() {
        let e = Encoded::new(1, &view(None, Some("{\"a\":\n1}")));
        let sse = e.sse();
        let text = std::str::from_utf8(&sse).unwrap_or_default();
        assert!(text.starts_with("id: 1\ndata: {"), "{text}");
        assert!(text.contains("\ndata: 1}"), "{text}");
        assert!(text.ends_with("\n\n"), "{text}");
        assert_eq!(e.ty(), b"hit");
        assert!(e.json().ends_with(b"\"seq\":1}"));
    }

    #[test]
    fn filters_match_type_entity_and_time() {
        let e = Encoded::new(1, &view(Some("p1"), None));
        let mut f = ReadQuery::default();
        assert!(e.kept_by(&f));
        f.types = Some(vec!["miss".into(), "hit".into()]);
        assert!(e.kept_by(&f));
        f.entity = Some("p2".into());
        assert!(!e.kept_by(&f));
        f.entity = Some("p1".into());
        f.since = Some(43);
        assert!(!e.kept_by(&f));
        f.since = Some(42);
        f.until = Some(43);
        assert!(e.kept_by(&f));
    }
}
