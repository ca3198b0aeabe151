//! The `otlp` target: OTLP/HTTP bodies (`vx_otlp`) never panic
//! and map to events that keep every rule of `/v1/events`.
//!
//! Input layout: `[mode][limit][body…]`.
//! - `mode` bit 0: traces (0) or logs (1); bit 1: protobuf (0) or JSON (1).
//! - `limit`: `ingest.max_event_bytes` = 64 × (`limit` + 1) bytes (64 B–16 KiB), so that the
//!   per-item size rejection is reached with short inputs; the request's events may add up to
//!   64 × that.
//!
//! Checks: the decoded-size bound and the decoder answer without panicking; a decoded body maps
//! to at most one event per item, `items - rejected` of them, each with a valid stream and type,
//! `data` that is a JSON object, and a canonical form within `max_event_bytes`; the batch stays
//! within its limit; and a protobuf message that decodes maps to the same events once encoded
//! again (decoding is a function of the message, not of its wire form).

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message as _;
use vx_otlp::{Mapping, Signal, Wire, decode, decode_and_map, decoded_cost};
use vx_proto::canonical::write_event;

/// An input in the layout above: what to decode, how, and the body.
struct Input<'a> {
    signal: Signal,
    wire: Wire,
    mapping: Mapping<'static>,
    body: &'a [u8],
}

fn input(data: &[u8]) -> Option<Input<'_>> {
    let [mode, limit, body @ ..] = data else {
        return None;
    };
    let signal = if mode & 1 == 0 {
        Signal::Traces
    } else {
        Signal::Logs
    };
    let wire = if mode & 2 == 0 {
        Wire::Protobuf
    } else {
        Wire::Json
    };
    let max_event_bytes = 64 * (usize::from(*limit) + 1);
    let mapping = Mapping {
        stream_attribute: "service.name",
        max_event_bytes,
        max_batch_bytes: 64 * max_event_bytes as u64,
        now_ms: crate::NOW,
    };
    Some(Input {
        signal,
        wire,
        mapping,
        body,
    })
}

pub fn otlp_maps_consistently(data: &[u8]) {
    let Some(Input {
        signal,
        wire,
        mapping,
        body,
    }) = input(data)
    else {
        return;
    };
    let max_event_bytes = mapping.max_event_bytes;
    if decoded_cost(signal, wire, body).is_err() {
        return;
    }
    let Ok(mapped) = decode_and_map(signal, wire, body, &mapping) else {
        return;
    };
    assert_eq!(mapped.items - mapped.rejected, mapped.batch.len() as u64);
    assert!(mapped.batch.mem_bytes() as u64 <= mapping.max_batch_bytes);
    let mut events = Vec::new();
    for ev in mapped.batch.iter() {
        assert!(vx_proto::rules::valid_stream(ev.stream));
        assert!(vx_proto::rules::valid_type(ev.ty));
        let data: serde_json::Value =
            serde_json::from_str(ev.data.unwrap_or("null")).unwrap_or_default();
        assert!(data.is_object(), "{:?}", ev.data);
        let mut out = Vec::new();
        write_event(&mut out, &ev, 0);
        assert!(out.len() <= max_event_bytes);
        events.push(out);
    }
    if wire == Wire::Protobuf {
        let again = match signal {
            Signal::Traces => {
                decode::<ExportTraceServiceRequest>(wire, body).map(|m| m.encode_to_vec())
            }
            Signal::Logs => {
                decode::<ExportLogsServiceRequest>(wire, body).map(|m| m.encode_to_vec())
            }
        };
        let Ok(again) = again else {
            panic!("decoded once, not twice");
        };
        let remapped = decode_and_map(signal, wire, &again, &mapping);
        let Ok(remapped) = remapped else {
            panic!("the re-encoded message does not map: {remapped:?}");
        };
        let events_again: Vec<Vec<u8>> = remapped
            .batch
            .iter()
            .map(|ev| {
                let mut out = Vec::new();
                write_event(&mut out, &ev, 0);
                out
            })
            .collect();
        assert_eq!(events, events_again);
        assert_eq!(mapped.rejected, remapped.rejected);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// Every seed decodes and passes the checks; with the 16 KiB limit nothing is rejected,
    /// with the 64-byte one every item is.
    #[test]
    fn seeds_map() {
        for seed in crate::seeds::otlp() {
            otlp_maps_consistently(&seed);
            let (Some(i), [mode, limit, ..]) = (input(&seed), &seed[..]) else {
                panic!("short seed");
            };
            let m = decode_and_map(i.signal, i.wire, i.body, &i.mapping).unwrap();
            assert!(m.items > 0);
            let want = if *limit == 255 { 0 } else { m.items };
            assert_eq!(m.rejected, want, "mode {mode} limit {limit}");
        }
    }
}
