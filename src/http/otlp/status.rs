//! Error answers of the OTLP routes. OTLP/HTTP wants a `google.rpc.Status` body in the
//! request's encoding; Veltrix has one error shape (`{"error": {"code", "message", …}}`) and
//! one list of codes ([`ErrorCode`]). Both hold, so:
//!
//! - protobuf requests get a `google.rpc.Status` whose `code` is the gRPC code of the error and
//!   whose `message` is `"<veltrix code>: <message>"` (so the one code is still there, first);
//! - JSON requests get Veltrix's error object unchanged, with the Status fields `code` (gRPC,
//!   a number) and `message` (the same text as in protobuf) beside `error`.
//!
//! The HTTP status, `Retry-After` and the other headers are those of `/v1/events`.

use vx_proto::ErrorCode;

/// `google.rpc.Status` (google/rpc/status.proto) without its `details` (field 3), which
/// Veltrix never sends; a reader that knows the field finds it empty.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct RpcStatus {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
}

/// The gRPC status code (google/rpc/code.proto) closest to a Veltrix error code; OTLP
/// exporters decide on the HTTP status, this only informs their logs.
pub fn grpc_code(code: ErrorCode) -> i32 {
    match code {
        // INVALID_ARGUMENT
        ErrorCode::Malformed
        | ErrorCode::BadRequest
        | ErrorCode::InvalidEvent
        | ErrorCode::TooLarge
        | ErrorCode::UnsupportedMediaType => 3,
        // DEADLINE_EXCEEDED
        ErrorCode::Timeout => 4,
        // NOT_FOUND
        ErrorCode::NotFound => 5,
        // PERMISSION_DENIED
        ErrorCode::Forbidden => 7,
        // RESOURCE_EXHAUSTED
        ErrorCode::Backpressure | ErrorCode::StorageFull => 8,
        // ABORTED
        ErrorCode::Conflict => 10,
        // UNIMPLEMENTED
        ErrorCode::MethodNotAllowed | ErrorCode::NotAcceptable => 12,
        // INTERNAL
        ErrorCode::Internal => 13,
        // UNAVAILABLE
        ErrorCode::NotReady => 14,
        // UNAUTHENTICATED
        ErrorCode::Unauthorized => 16,
    }
}

/// The Status message text: the Veltrix code first.
pub fn message(code: ErrorCode, message: &str) -> String {
    format!("{code}: {message}")
}

/// A Veltrix error body (`{"error": {...}}`) re-shaped for an OTLP client; `None` if `body`
/// is not a Veltrix error body (it is then passed on unchanged).
pub fn reshape(body: &[u8], protobuf: bool) -> Option<Vec<u8>> {
    let mut v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let err = v.get("error")?;
    let code = ErrorCode::parse(err.get("code")?.as_str()?)?;
    let text = message(
        code,
        err.get("message").and_then(|m| m.as_str()).unwrap_or(""),
    );
    let grpc = grpc_code(code);
    if protobuf {
        return Some(prost::Message::encode_to_vec(&RpcStatus {
            code: grpc,
            message: text,
        }));
    }
    let obj = v.as_object_mut()?;
    obj.insert("code".into(), grpc.into());
    obj.insert("message".into(), text.into());
    Some(v.to_string().into_bytes())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::Value;

    #[test]
    fn errors_in_the_request_encoding() {
        let err = br#"{"error":{"code":"backpressure","message":"full"}}"#;
        let st: RpcStatus = prost::Message::decode(&reshape(err, true).unwrap()[..]).unwrap();
        assert_eq!((st.code, st.message.as_str()), (8, "backpressure: full"));
        let v: Value = serde_json::from_slice(&reshape(err, false).unwrap()).unwrap();
        assert_eq!(v["error"]["code"], "backpressure");
        assert_eq!(v["code"], 8);
        assert_eq!(v["message"], "backpressure: full");
        assert!(reshape(b"not json", true).is_none());
    }
}
