//! The schemas of the bodies that are parsed or written by hand rather than by a serde type:
//! the one error shape (docs/API.md §10.1, its codes from [`ErrorCode::ALL`]), an event as
//! sent and as replayed (docs/API.md §2, its limits from `vx_proto::rules`), feature values
//! and the feature routes' bodies. The body types that are serde structs derive `ToSchema`
//! where they are defined.

use std::borrow::Cow;
use utoipa::openapi::schema::{
    AdditionalProperties, ArrayBuilder, ArrayItems, KnownFormat, ObjectBuilder, OneOfBuilder,
    Schema, SchemaFormat, Type,
};
use utoipa::openapi::{RefOr, schema::SchemaType};
use utoipa::{PartialSchema, ToSchema};
use vx_proto::ErrorCode;
use vx_proto::rules::{
    MAX_DATA_DEPTH, MAX_ENTITY_LEN, MAX_ID_LEN, MAX_STREAM_LEN, MAX_TS, MAX_TYPE_LEN,
};

/// Text without control characters (`char::is_control`: C0, DEL and C1), as every name rule
/// of docs/API.md §2 wants.
pub const NO_CONTROL: &str = "^[^\\u0000-\\u001F\\u007F-\\u009F]*$";
/// An event `type` or a feature name: `[A-Za-z0-9_.:-]`.
pub const NAME_CHARS: &str = "^[A-Za-z0-9_.:-]+$";

fn object() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::Object)
}

fn closed() -> AdditionalProperties<Schema> {
    AdditionalProperties::FreeForm(false)
}

pub fn string() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::String)
}

/// A string of `min..=max` bytes (JSON Schema counts characters: the description says bytes).
pub fn text(min: usize, max: usize, pattern: &str, what: &str) -> ObjectBuilder {
    string()
        .min_length(Some(min))
        .max_length(Some(max))
        .pattern(Some(pattern))
        .description(Some(format!("{what}: {min}–{max} bytes of UTF-8")))
}

/// A non-negative integer (`u64` on the wire).
pub fn count() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
        .minimum(Some(0))
}

fn any() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(SchemaType::AnyValue)
}

fn array_of(item: impl Into<ArrayItems>) -> ArrayBuilder {
    ArrayBuilder::new().items(item)
}

fn to_ref(o: impl Into<Schema>) -> RefOr<Schema> {
    RefOr::T(o.into())
}

/// A named schema built by a function: `name` in `#/components/schemas`.
macro_rules! named_schema {
    ($(#[$doc:meta])* $ty:ident, $name:literal, $build:expr) => {
        $(#[$doc])*
        pub struct $ty;
        impl PartialSchema for $ty {
            fn schema() -> RefOr<Schema> {
                to_ref($build)
            }
        }
        impl ToSchema for $ty {
            fn name() -> Cow<'static, str> {
                Cow::Borrowed($name)
            }
        }
    };
}

fn error_object() -> ObjectBuilder {
    let codes = ErrorCode::ALL.iter().map(|c| c.as_str());
    object()
        .property(
            "code",
            string()
                .enum_values(Some(codes))
                .description(Some("the error code (docs/API.md §10.2)")),
        )
        .required("code")
        .property("message", string())
        .required("message")
        .property(
            "index",
            count().description(Some("0-based position of the event in the request")),
        )
        .property(
            "line",
            count().description(Some("1-based line in the body")),
        )
        .property(
            "column",
            count().description(Some("1-based column in the body")),
        )
        .property(
            "document",
            count().description(Some("0-based YAML document")),
        )
        .property(
            "field",
            string().description(Some("the event field or feature name at fault")),
        )
        .property(
            "limit",
            string().description(Some("the limit exceeded (docs/API.md §4.4)")),
        )
        .property("max", count().description(Some("the limit's value")))
        .property(
            "last_seq",
            count().description(Some("with `conflict`: the stream's actual last seq")),
        )
        .property(
            "supported",
            array_of(string()).description(Some("with 406 and 415: what is accepted")),
        )
        .additional_properties(Some(closed()))
}

named_schema!(
    /// The one error shape (docs/API.md §10.1).
    ErrorBody,
    "Error",
    object()
        .property("error", error_object())
        .required("error")
        .additional_properties(Some(closed()))
        .description(Some(
            "The one error shape: details are members of `error`, present when they apply"
        ))
);

named_schema!(
    /// An OTLP route's JSON error (docs/API.md §10.4): the error shape plus the members of
    /// `google.rpc.Status`.
    OtlpErrorBody,
    "OtlpError",
    object()
        .property("error", error_object())
        .required("error")
        .property(
            "code",
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .description(Some("the gRPC status code")),
        )
        .required("code")
        .property(
            "message",
            string().description(Some("`<veltrix code>: <message>`")),
        )
        .required("message")
        .additional_properties(Some(closed()))
);

fn ts_integer() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
        .minimum(Some(0))
        .exclusive_maximum(Some(MAX_TS as usize))
}

fn kind() -> ObjectBuilder {
    string().enum_values(Some(["event", "counter", "gauge"]))
}

/// The fields every event has, in (`with_seq`: canonical output) or out.
fn event(with_seq: bool) -> ObjectBuilder {
    let ts: RefOr<Schema> = if with_seq {
        to_ref(ts_integer().description(Some("integer milliseconds since the Unix epoch")))
    } else {
        to_ref(
            OneOfBuilder::new()
                .item(ts_integer())
                .item(string().format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime))))
                .item(ObjectBuilder::new().schema_type(Type::Null))
                .description(Some(
                    "integer milliseconds since the Unix epoch (0 ≤ ts < 2^53), or an RFC 3339 \
                     time with any offset (within the same range); absent or null: the \
                     receive time",
                )),
        )
    };
    let data = any().description(Some(format!(
        "any JSON value, at most {MAX_DATA_DEPTH} levels deep; replayed as sent"
    )));
    // On input an optional field may also be `null`, which is the same as leaving it out.
    let optional = |o: ObjectBuilder, t: Type| {
        if with_seq {
            o
        } else {
            o.schema_type(SchemaType::from_iter([t, Type::Null]))
        }
    };
    let kind: RefOr<Schema> = if with_seq {
        to_ref(kind())
    } else {
        to_ref(
            OneOfBuilder::new()
                .item(kind())
                .item(ObjectBuilder::new().schema_type(Type::Null)),
        )
    };
    let mut o = object()
        .property(
            "stream",
            text(
                1,
                MAX_STREAM_LEN,
                NO_CONTROL,
                "the unit of order and replay",
            ),
        )
        .required("stream")
        .property(
            "entity",
            optional(
                text(0, MAX_ENTITY_LEN, NO_CONTROL, "the key of features"),
                Type::String,
            ),
        )
        .property("type", text(1, MAX_TYPE_LEN, NAME_CHARS, "the event type"))
        .required("type")
        .property("ts", ts)
        .property("kind", kind)
        .property(
            "value",
            optional(
                ObjectBuilder::new()
                    .schema_type(Type::Number)
                    .description(Some(
                        "counter: an i64 delta (required); gauge: a finite number (required); \
                     event: optional",
                    )),
                Type::Number,
            ),
        )
        .property(
            "id",
            optional(
                text(1, MAX_ID_LEN, NO_CONTROL, "the idempotency key"),
                Type::String,
            ),
        )
        .property("data", data)
        .additional_properties(Some(closed()));
    if with_seq {
        o = o
            .required("ts")
            .required("kind")
            .property("seq", count().minimum(Some(1)))
            .required("seq");
    }
    o
}

named_schema!(
    /// An event as sent (docs/API.md §2.1).
    Event,
    "Event",
    event(false).description(Some(
        "An event (docs/API.md §2.1). Unknown fields are refused (422)."
    ))
);

named_schema!(
    /// An event as replayed: the canonical form with its `seq` (docs/API.md §2.2).
    StoredEvent,
    "StoredEvent",
    event(true).description(Some("The canonical form of a stored event, with its seq"))
);

named_schema!(
    /// A `POST /v1/events` JSON body: one event or an array of them.
    EventsJson,
    "EventsJson",
    OneOfBuilder::new()
        .item(RefOr::Ref(utoipa::openapi::Ref::from_schema_name("Event")))
        .item(array_of(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
            "Event"
        ))))
);

/// A feature value: a number, a string or a boolean.
fn feature_value() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(SchemaType::from_iter([
        Type::Number,
        Type::String,
        Type::Boolean,
    ]))
}

fn features_map() -> ObjectBuilder {
    object()
        .additional_properties(Some(feature_value()))
        .description(Some("feature name → value"))
}

named_schema!(
    /// `GET /v1/features/{entity}`'s answer (docs/API.md §6.2).
    EntityFeatures,
    "EntityFeatures",
    object()
        .property("entity", string())
        .required("entity")
        .property("features", features_map())
        .required("features")
        .property(
            "as_of",
            ObjectBuilder::new().schema_type(Type::Integer).description(Some(
                "the newest event ts or PUT append time applied to the entity"
            )),
        )
        .required("as_of")
        .additional_properties(Some(closed()))
);

named_schema!(
    /// `POST /v1/features/query`'s body (docs/API.md §6.3).
    FeatureQuery,
    "FeatureQuery",
    object()
        .property("entities", array_of(string()))
        .required("entities")
        .property(
            "names",
            OneOfBuilder::new()
                .item(array_of(string()))
                .item(ObjectBuilder::new().schema_type(Type::Null)),
        )
        .additional_properties(Some(closed()))
);

named_schema!(
    /// `POST /v1/features/query`'s answer: one entry per entity asked, `null` when unknown.
    FeatureResults,
    "FeatureResults",
    object()
        .property(
            "results",
            array_of(
                OneOfBuilder::new()
                    .item(
                        object()
                            .property("entity", string())
                            .required("entity")
                            .property("features", features_map())
                            .required("features")
                            .additional_properties(Some(closed())),
                    )
                    .item(ObjectBuilder::new().schema_type(Type::Null)),
            ),
        )
        .required("results")
        .additional_properties(Some(closed()))
);

named_schema!(
    /// `PUT /v1/features/{entity}`'s body (docs/API.md §6.4): `null` deletes a feature.
    FeatureValues,
    "FeatureValues",
    object()
        .property_names(Some(text(1, 128, NAME_CHARS, "a feature name").build()))
        .additional_properties(Some(
            ObjectBuilder::new().schema_type(SchemaType::from_iter([
                Type::Number,
                Type::String,
                Type::Boolean,
                Type::Null,
            ]))
        ))
        .description(Some(
            "feature name → number, string, boolean, or null to delete it"
        ))
);

fn durability() -> ObjectBuilder {
    string().enum_values(Some(["none", "write", "fsync", "replicated", "applied"]))
}

named_schema!(
    /// The answer to a feature write (docs/API.md §6.4, §6.5).
    FeatureWritten,
    "FeatureWritten",
    object()
        .property("entity", string())
        .required("entity")
        .property("set", count())
        .required("set")
        .property("deleted", count())
        .required("deleted")
        .property("durability", durability())
        .required("durability")
        .property(
            "position",
            string().description(Some("cluster mode: the write's position")),
        )
        .additional_properties(Some(closed()))
);

named_schema!(
    /// A durability level reached (docs/API.md §3.5, §12.1).
    Durability,
    "Durability",
    durability()
);

named_schema!(
    /// `/healthz` and `/readyz`.
    Health,
    "Health",
    object()
        .property("status", string().enum_values(Some(["ok", "ready"])))
        .required("status")
        .additional_properties(Some(closed()))
);

named_schema!(
    /// What applying a Kafka record did (docs/API.md §12.4).
    Outcome,
    "Outcome",
    object()
        .property(
            "outcome",
            string().enum_values(Some([
                "stored",
                "conflict",
                "deleted",
                "not_found",
                "features",
                "feature",
                "failed",
            ])),
        )
        .required("outcome")
        .description(Some("the other members depend on `outcome` (docs/API.md §12.4)"))
);

named_schema!(
    /// A JSON document of any shape (this document itself).
    AnyObject,
    "OpenApiDocument",
    object().description(Some("an OpenAPI 3.1 document"))
);

named_schema!(
    /// One of the status page's largest streams (`vx_storage::TopStream`, serialized in this
    /// shape by `GET /v1/status`).
    TopStream,
    "TopStream",
    object()
        .property("stream", string())
        .required("stream")
        .property("events", count())
        .required("events")
        .property("bytes", count())
        .required("bytes")
        .property("last_seq", count())
        .required("last_seq")
        .property("shard", count())
        .required("shard")
        .additional_properties(Some(closed()))
);

named_schema!(
    /// A time in a query (`since`, `until`): integer milliseconds since the Unix epoch or an
    /// RFC 3339 time with any offset (truncated to the millisecond).
    Timestamp,
    "Timestamp",
    utoipa::openapi::schema::AnyOfBuilder::new()
        .item(
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
        )
        .item(string().format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime))))
        .description(Some(
            "integer milliseconds since the Unix epoch, or an RFC 3339 time"
        ))
);

/// `word` matched in any case (JSON Schema patterns have no flags).
fn any_case(word: &str) -> String {
    word.chars()
        .map(|c| {
            if c.is_ascii_alphabetic() {
                format!("[{}{}]", c.to_ascii_uppercase(), c.to_ascii_lowercase())
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// One of `words`, in any case.
fn one_of_words(words: &[&str]) -> String {
    let words: Vec<String> = words.iter().map(|w| any_case(w)).collect();
    format!("(?:{})", words.join("|"))
}

/// What `vx_ingest::encoding_for` takes: a comma list of codings in any case, `identity`
/// any number of times and at most one real coding (`gzip`, `x-gzip`, `zstd`).
fn content_encoding_pattern() -> String {
    let end = "(?:[ \\t]*,[ \\t,]*|[ \\t]*$)";
    let identity = format!("{}{end}", any_case("identity"));
    let real = format!("{}{end}", one_of_words(&["gzip", "x-gzip", "zstd"]));
    format!("^[ \\t,]*(?:{identity})*(?:{real}(?:{identity})*)?$")
}

named_schema!(
    /// A request's `Content-Encoding` (docs/API.md §3.1).
    ContentEncoding,
    "ContentEncoding",
    string().pattern(Some(content_encoding_pattern())).description(Some(
        "`gzip` (also `x-gzip`), `zstd` or `identity`, in any case; a list may name \
         `identity` besides at most one other coding. The body must be coded so."
    ))
);

named_schema!(
    /// `X-Vx-Durability` as a request sends it (docs/API.md §3.5): any case.
    DurabilityAsked,
    "DurabilityAsked",
    string()
        .pattern(Some(format!(
            "^{}$",
            one_of_words(&["none", "write", "fsync", "replicated", "applied"])
        )))
        .description(Some(
            "`none`, `write` or `fsync`, in any case; in cluster mode also `replicated` and \
             `applied` (a single node answers those with 400)"
        ))
);

named_schema!(
    /// Raw bytes: a protobuf message, binary frames.
    Binary,
    "Binary",
    string()
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Binary)))
        .description(Some("raw bytes"))
);
