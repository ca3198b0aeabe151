//! `XADD stream * field value …`: one event, written through the one write path
//! ([`crate::write::Writes::events`]) like a `POST /v1/events` of one event, and answered
//! with its entry id `<seq>-0` once it is stored as the store's durability says (a duplicate
//! `id` answers the stored event's entry id).
//!
//! The fields map to the event in [`vx_proto::xadd`] (fuzzed there): `type` (default
//! `xadd`), `entity`, `ts`, `id`, `kind` and `value` are the event's, checked by the rules
//! every decoder checks, with the words and error codes of HTTP ingest; every other field is
//! a string member of `data`, in the order sent. Only `*` is taken
//! as the id: Veltrix assigns seqs; `NOMKSTREAM`, `MAXLEN` and `MINID` are refused (streams
//! are trimmed by retention).

use super::super::session::{Prepared, Session};
use super::ids::entry_id;
use super::reply as conn_reply;
use crate::failure::Failure;
use crate::resp::Ctx;
use crate::write::{Asked, Events, Writes};
use bytes::Bytes;
use std::sync::Arc;
use vx_proto::decode::LIMIT_EVENT_BYTES;
use vx_proto::rules::TextRule;
use vx_proto::{Batch, ErrorCode, InputError, canonical};

/// The metrics label of events written by `XADD` (`vx_events_ingested_total{format}`).
const FORMAT: &str = "resp";

impl Session {
    /// `XADD`, admitted: checked into a one-event batch and the future that writes it.
    pub(crate) fn prepare_xadd(&self, ctx: &Arc<Ctx>, args: &[Bytes], writes: Writes) -> Prepared {
        if id_refusal(&args[2]).is_none() && !(args.len() - 3).is_multiple_of(2) {
            return Prepared::Reply(conn_reply(self.resp3, |r| {
                r.error("ERR", "wrong number of arguments for 'xadd' command");
            }));
        }
        let metrics = ctx.state.metrics();
        let batch = match xadd_batch(args, ctx.state.limits().max_event_bytes) {
            Ok(b) => b,
            Err(f) => {
                metrics.rejected(f.code, FORMAT, Some(1));
                return Prepared::Reply(conn_reply(self.resp3, |r| {
                    let (prefix, message) = f.into_resp();
                    r.error(prefix, &message);
                }));
            }
        };
        let stream = String::from_utf8_lossy(&args[1]).into_owned();
        let events = Events {
            batch,
            // Cluster mode: the entry id is the seq the owner assigns.
            asked: Asked {
                local: None,
                applied: writes.cluster().is_some(),
            },
            expected_last_seq: None,
            auth: self.authorization(),
        };
        let resp3 = self.resp3;
        let ctx = Arc::clone(ctx);
        let position = Arc::clone(&self.position);
        Prepared::Submit(Box::pin(async move {
            // The first poll hands the event to the writer (local), or produces it.
            let written = writes.events(events).await;
            let metrics = ctx.state.metrics();
            let answer = match written {
                Ok(w) => {
                    let handles = metrics.format(FORMAT);
                    handles.ingested.inc_by(w.accepted);
                    handles.duplicates.inc_by(w.duplicates.unwrap_or(0));
                    if let Some(p) = &w.position {
                        let mut mine = position.lock();
                        for (topic, partition, offset) in p.iter() {
                            mine.add(topic, partition, offset);
                        }
                    }
                    let seq = w
                        .last_seq
                        .as_deref()
                        .and_then(|l| l.iter().find(|(s, _)| *s == stream))
                        .map(|(_, seq)| *seq);
                    seq.ok_or_else(|| {
                        Failure::new(ErrorCode::Internal, "the write did not report its seq")
                    })
                }
                Err(r) => {
                    metrics.rejected(r.failure.code, FORMAT, Some(1));
                    Err(r.failure)
                }
            };
            conn_reply(resp3, |r| match answer {
                Ok(seq) => r.bulk(entry_id(seq).as_bytes()),
                Err(f) => {
                    if !matches!(
                        f.code,
                        ErrorCode::StorageFull | ErrorCode::Backpressure | ErrorCode::NotReady
                    ) {
                        tracing::warn!(code = %f.code, message = %f.message, "RESP XADD failed");
                    }
                    let (prefix, message) = f.into_resp();
                    r.error(prefix, &message);
                }
            })
        }))
    }
}

/// Why an `XADD`'s id argument (or an option in its place) is refused; only `*` is taken.
fn id_refusal(id: &[u8]) -> Option<Failure> {
    for opt in ["NOMKSTREAM", "MAXLEN", "MINID"] {
        if id.eq_ignore_ascii_case(opt.as_bytes()) {
            return Some(Failure::new(
                ErrorCode::BadRequest,
                format!(
                    "XADD {opt} is not offered by Veltrix: streams are created by their first \
                     event and trimmed by retention (retention.max_age, retention.max_bytes)"
                ),
            ));
        }
    }
    (id != b"*").then(|| {
        Failure::new(
            ErrorCode::BadRequest,
            "XADD takes only '*' as the entry id: Veltrix assigns each event its seq (entry id \
             <seq>-0)",
        )
    })
}

/// The one-event batch of an `XADD` (`args`: the command, the stream, the id, the pairs),
/// or why not.
fn xadd_batch(args: &[Bytes], max_event_bytes: usize) -> Result<Batch, Failure> {
    if let Some(f) = id_refusal(&args[2]) {
        return Err(f);
    }
    let pairs = &args[3..];
    let stream = std::str::from_utf8(&args[1])
        .map_err(|_| InputError::invalid("stream", "field \"stream\": must be UTF-8"))?;
    TextRule::Stream.check(stream).map_err(|e| e.on("stream"))?;
    let mut batch = Batch::new();
    let mut data = Vec::new();
    let ev = vx_proto::xadd::event_of(stream, pairs, &mut data, vx_sys::now_ms())?;
    let mut canonical = Vec::new();
    canonical::write_event(&mut canonical, &ev, 0);
    if canonical.len() > max_event_bytes {
        return Err(InputError::too_large(
            LIMIT_EVENT_BYTES,
            max_event_bytes as u64,
            format!(
                "the event is {} bytes, more than {max_event_bytes} (ingest.max_event_bytes)",
                canonical.len()
            ),
        )
        .into());
    }
    batch.push(&ev).map_err(InputError::from_pack)?;
    Ok(batch)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    use crate::resp::streams::test_args as args;

    fn one(list: &[&str]) -> Result<String, String> {
        let a = args(list);
        let batch = xadd_batch(&a, 1 << 20).map_err(|f| f.message)?;
        let ev = batch.iter().next().unwrap();
        let mut out = Vec::new();
        canonical::write_event(&mut out, &ev, 1);
        Ok(String::from_utf8(out).unwrap())
    }

    #[test]
    fn fields_map_to_the_event_and_the_rest_to_data() {
        let got = one(&[
            "XADD",
            "s",
            "*",
            "weapon",
            "bow",
            "type",
            "damage",
            "entity",
            "p1",
            "ts",
            "1732000000123",
            "kind",
            "counter",
            "value",
            "12",
            "id",
            "e-1",
            "note",
            "a\"b",
        ])
        .unwrap();
        assert_eq!(
            got,
            r#"{"stream":"s","entity":"p1","type":"damage","ts":1732000000123,"kind":"counter","value":12,"id":"e-1","data":{"weapon":"bow","note":"a\"b"},"seq":1}"#
        );
        let got = one(&["XADD", "s", "*", "a", "1"]).unwrap();
        assert!(got.contains(r#""type":"xadd""#), "{got}");
        assert!(got.contains(r#""data":{"a":"1"}"#), "{got}");
        let got = one(&[
            "XADD",
            "s",
            "*",
            "kind",
            "gauge",
            "value",
            "2.5",
            "ts",
            "1970-01-01T00:00:01Z",
        ])
        .unwrap();
        assert!(
            got.contains(r#""ts":1000,"kind":"gauge","value":2.5"#),
            "{got}"
        );
        assert!(!got.contains("data"), "{got}");
    }

    #[test]
    fn bad_fields_name_the_problem() {
        let err = |l: &[&str]| one(l).unwrap_err();
        assert!(err(&["XADD", "s", "*", "type", "bad type!"]).contains("field \"type\""));
        assert!(err(&["XADD", "s", "*", "kind", "nope"]).contains("field \"kind\""));
        assert!(err(&["XADD", "s", "*", "kind", "counter"]).contains("\"value\""));
        assert!(err(&["XADD", "s", "*", "value", "abc"]).contains("must be a number"));
        assert!(err(&["XADD", "s", "*", "value", "inf"]).contains("must be a number"));
        assert!(err(&["XADD", "s", "*", "kind", "counter", "value", "1.5"]).contains("integer"));
        assert!(err(&["XADD", "s", "*", "ts", "-5"]).contains("negative"));
        assert!(err(&["XADD", "s", "*", "ts", "1.5"]).contains("whole"));
        assert!(err(&["XADD", "s", "*", "ts", "yesterday"]).contains("RFC 3339"));
        assert!(err(&["XADD", "s", "*", "a", "1", "a", "2"]).contains("given twice"));
        assert!(
            err(&[
                "XADD", "s", "*", "kind", "counter", "type", "events", "value", "1"
            ])
            .contains("reserved")
        );
        assert!(err(&["XADD", "", "*", "a", "1"]).contains("field \"stream\""));
        assert!(err(&["XADD", "s", "1-0", "a", "1"]).contains("only '*'"));
        assert!(err(&["XADD", "s", "MAXLEN", "10", "*", "a", "1"]).contains("retention"));
        let a = args(&["XADD", "s", "*", "a", &"x".repeat(2000)]);
        let f = xadd_batch(&a, 1000).unwrap_err();
        assert!(
            f.message.contains("ingest.max_event_bytes"),
            "{}",
            f.message
        );
    }
}
