//! `vx-otlp`, OTLP in (docs/API.md §7): OpenTelemetry's `ExportTraceServiceRequest` and
//! `ExportLogsServiceRequest`, as OTLP/HTTP sends them (protobuf or JSON), turned into Veltrix
//! events, and the success answer OTLP expects. Everything here is pure (bytes in, batch or
//! bytes out), so unit tests, property tests and the fuzz target drive it without a server; the
//! HTTP side (headers, body, admission, error answers) is the server's `http::otlp`.
//!
//! A crate of its own rather than a module of `vx-ingest`: vx-ingest is the asynchronous body
//! pipeline (tokio, decompression) the server's ingest routes share, while this is synchronous
//! decoding over prost and the generated OTLP messages. Apart, the fuzz crate links this and
//! vx-proto alone, and vx-ingest's users do not compile prost.
//!
//! # Layout
//! - [`cost`]: a bound on the memory a body takes once decoded, found before decoding it.
//! - [`json`]: OTLP/JSON as the protobuf JSON mapping allows it (nulls, omitted defaults,
//!   numbers as strings), made acceptable to the generated messages' serde derive.
//! - [`map`]: spans and log records → events (the mapping table is there).
//! - `testing` (the `testing` feature): the OTLP requests the tests and fuzz seeds build.
//! - this file: decoding a body of either encoding, and encoding the success answer.
//!
//! # Decoding
//! A protobuf message cannot be decoded before its end has arrived (a field may come last),
//! so the body is read whole (bounded by `ingest.max_body_bytes`), its decoded size bounded by
//! [`cost`], and then decoded in one call by prost (with its recursion limit of 100). JSON uses
//! opentelemetry-proto's serde mapping of OTLP/JSON: lowerCamelCase field names, trace and span
//! ids as hex, 64-bit integers as strings or numbers, enums as integers, unknown fields ignored;
//! [`json`] first mends where that mapping is stricter than protobuf's JSON mapping (tests/
//! otlp_in.rs and this crate's tests check each of these).

pub mod cost;
pub mod json;
pub mod map;
#[cfg(feature = "testing")]
pub mod testing;

#[cfg(test)]
mod tests;

use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message as _;
use vx_proto::InputError;

pub use map::{Mapped, Mapping};

/// Which OTLP export a request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// `POST /v1/traces`.
    Traces,
    /// `POST /v1/logs`.
    Logs,
}

impl Signal {
    /// The `format` label of the ingest metrics.
    pub fn label(self) -> &'static str {
        match self {
            Signal::Traces => "otlp_traces",
            Signal::Logs => "otlp_logs",
        }
    }
}

/// The encoding of a request, and so of its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    /// `application/x-protobuf`.
    Protobuf,
    /// `application/json`.
    Json,
}

/// The content types OTLP/HTTP uses, for the 415 answer.
pub const SUPPORTED_TYPES: &[&str] = &["application/x-protobuf", "application/json"];

impl Wire {
    /// The encoding a `Content-Type` names (parameters ignored, case-insensitive).
    pub fn for_content_type(content_type: Option<&str>) -> Option<Wire> {
        let ct = content_type?;
        // The media type without its parameters.
        let essence = ct.split_once(';').map_or(ct, |(media, _)| media).trim();
        if essence.eq_ignore_ascii_case("application/x-protobuf") {
            Some(Wire::Protobuf)
        } else if essence.eq_ignore_ascii_case("application/json") {
            Some(Wire::Json)
        } else {
            None
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Wire::Protobuf => "application/x-protobuf",
            Wire::Json => "application/json",
        }
    }
}

/// Bound on the memory decoding `body` takes beyond the body itself ([`cost`]); a protobuf
/// body that is not even well-formed on the wire is 400 `malformed` here already.
pub fn decoded_cost(signal: Signal, wire: Wire, body: &[u8]) -> Result<u64, InputError> {
    match wire {
        Wire::Protobuf => cost::protobuf(signal, body)
            .map_err(|e| InputError::malformed(format!("invalid OTLP protobuf: {e}"))),
        Wire::Json => Ok(cost::json(body)),
    }
}

/// Decode `body` and map its items to events.
pub fn decode_and_map(
    signal: Signal,
    wire: Wire,
    body: &[u8],
    mapping: &Mapping<'_>,
) -> Result<Mapped, InputError> {
    match signal {
        Signal::Traces => map::traces(&decode::<ExportTraceServiceRequest>(wire, body)?, mapping),
        Signal::Logs => map::logs(&decode::<ExportLogsServiceRequest>(wire, body)?, mapping),
    }
}

/// One request message from `body`; any failure is 400 `malformed`.
pub fn decode<M>(wire: Wire, body: &[u8]) -> Result<M, InputError>
where
    M: prost::Message + Default + serde::de::DeserializeOwned,
{
    match wire {
        Wire::Protobuf => M::decode(body)
            .map_err(|e| InputError::malformed(format!("invalid OTLP protobuf: {e}"))),
        Wire::Json => {
            // serde_json reports the position in its message; OTLP's `{}` of an empty export
            // is fine, an empty body is not JSON at all.
            json::from_slice(body).map_err(|e| {
                let mut err = InputError::malformed(format!("invalid OTLP JSON: {e}"));
                if e.line() > 0 {
                    err = err.at_line(e.line() as u64, e.column() as u64);
                }
                err
            })
        }
    }
}

/// The success answer: `Export{Trace,Logs}ServiceResponse`, with `partial_success` when items
/// were rejected, in the request's encoding. In JSON, `rejectedSpans`/`rejectedLogRecords` is a
/// number: protobuf JSON parsers take numbers and strings for int64, serde-based ones only
/// numbers.
pub fn success_body(signal: Signal, wire: Wire, mapped: &Mapped) -> Vec<u8> {
    let rejected = i64::try_from(mapped.rejected).unwrap_or(i64::MAX);
    let message = mapped.error_message();
    match wire {
        Wire::Protobuf => match signal {
            Signal::Traces => ExportTraceServiceResponse {
                partial_success: (rejected > 0).then_some(ExportTracePartialSuccess {
                    rejected_spans: rejected,
                    error_message: message,
                }),
            }
            .encode_to_vec(),
            Signal::Logs => ExportLogsServiceResponse {
                partial_success: (rejected > 0).then_some(ExportLogsPartialSuccess {
                    rejected_log_records: rejected,
                    error_message: message,
                }),
            }
            .encode_to_vec(),
        },
        Wire::Json => {
            let body = if rejected > 0 {
                let field = match signal {
                    Signal::Traces => "rejectedSpans",
                    Signal::Logs => "rejectedLogRecords",
                };
                let mut partial = serde_json::Map::new();
                partial.insert(field.into(), rejected.into());
                partial.insert("errorMessage".into(), message.into());
                serde_json::json!({ "partialSuccess": partial })
            } else {
                serde_json::json!({})
            };
            body.to_string().into_bytes()
        }
    }
}
