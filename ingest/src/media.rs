//! Content negotiation for `POST /v1/events` (docs/API.md §3): which decoder a `Content-Type` selects.

use crate::Format;

/// The content types accepted today, for the 415 answer.
pub const SUPPORTED_TYPES: &[&str] = &[
    "application/json",
    "application/x-ndjson",
    "application/jsonl",
    "application/yaml",
    "application/x-yaml",
    "text/yaml",
    "application/vnd.veltrix.frames",
];

/// The request's `Content-Type` is missing or not one of [`SUPPORTED_TYPES`] (415).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}; supported content types: {}", describe(.content_type.as_deref()), SUPPORTED_TYPES.join(", "))]
pub struct UnsupportedMediaType {
    /// The header as sent, if any.
    pub content_type: Option<String>,
}

fn describe(ct: Option<&str>) -> String {
    match ct {
        None => "missing Content-Type".to_string(),
        Some(ct) => {
            let shown: String = ct.chars().take(100).collect();
            format!("unsupported Content-Type {shown:?}")
        }
    }
}

/// Map a `Content-Type` header to a [`Format`]. Parameters (`; charset=utf-8`) are ignored and
/// the media type is compared case-insensitively.
pub fn format_for(content_type: Option<&str>) -> Result<Format, UnsupportedMediaType> {
    let unsupported = || UnsupportedMediaType {
        content_type: content_type.map(str::to_string),
    };
    let ct = content_type.ok_or_else(unsupported)?;
    // The media type without its parameters.
    let essence = ct.split_once(';').map_or(ct, |(media, _)| media).trim();
    let is = |t: &str| essence.eq_ignore_ascii_case(t);
    if is("application/json") {
        Ok(Format::Json)
    } else if is("application/x-ndjson") || is("application/jsonl") {
        Ok(Format::Ndjson)
    } else if is("application/yaml") || is("application/x-yaml") || is("text/yaml") {
        Ok(Format::Yaml)
    } else if is("application/vnd.veltrix.frames") {
        Ok(Format::Frames)
    } else {
        Err(unsupported())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types() {
        assert_eq!(format_for(Some("application/json")), Ok(Format::Json));
        assert_eq!(
            format_for(Some("Application/JSON; charset=utf-8")),
            Ok(Format::Json)
        );
        assert_eq!(
            format_for(Some(" application/json ;charset=UTF-8")),
            Ok(Format::Json)
        );
        assert_eq!(format_for(Some("application/x-ndjson")), Ok(Format::Ndjson));
        assert_eq!(
            format_for(Some("application/vnd.veltrix.frames")),
            Ok(Format::Frames)
        );
        assert_eq!(
            format_for(Some("application/jsonl; x=y")),
            Ok(Format::Ndjson)
        );
        for ct in [
            "application/yaml",
            "Application/X-YAML",
            "text/yaml; charset=utf-8",
        ] {
            assert_eq!(format_for(Some(ct)), Ok(Format::Yaml), "{ct}");
        }
        for ct in ["application/yml", "text/plain", "application/jsonx", ""] {
            let e = format_for(Some(ct)).err();
            assert_eq!(
                e.map(|e| e.content_type),
                Some(Some(ct.to_string())),
                "{ct}"
            );
        }
        let e = format_for(None).err();
        assert_eq!(e.as_ref().map(|e| e.content_type.clone()), Some(None));
        let msg = e.map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.starts_with("missing Content-Type"), "{msg}");
        for t in SUPPORTED_TYPES {
            assert!(msg.contains(t), "{msg}");
        }
    }
}
