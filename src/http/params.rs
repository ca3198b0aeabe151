//! Query-string parameters: parsed by hand (not with a serde struct) so every mistake —
//! an unknown or repeated parameter, a bad number — is a 400 `bad_request` in the one
//! error shape naming the parameter.

use super::AppError;
use axum::http::Uri;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

pub struct Params(Vec<(String, String)>);

impl Params {
    /// Parse the query of `uri`, accepting only the `known` parameter names, each at most once.
    pub fn parse(uri: &Uri, known: &[&str]) -> Result<Params, AppError> {
        // Decoding itself never fails: bytes that are not UTF-8 become U+FFFD, as in axum's
        // `Query`.
        let pairs: Vec<(String, String)> =
            form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
                .map(|(name, value)| (name.into_owned(), value.into_owned()))
                .collect();
        for (i, (name, _)) in pairs.iter().enumerate() {
            if !known.contains(&name.as_str()) {
                return Err(AppError::bad_request(format!(
                    "unknown query parameter {name:?}; known: {}",
                    known.join(", ")
                )));
            }
            if pairs.iter().take(i).any(|(n, _)| n == name) {
                return Err(AppError::bad_request(format!(
                    "query parameter {name:?} is given more than once"
                )));
            }
        }
        Ok(Params(pairs))
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn u64(&self, name: &str) -> Result<Option<u64>, AppError> {
        self.get(name)
            .map(|v| {
                v.parse::<u64>().map_err(|_| {
                    AppError::bad_request(format!(
                        "query parameter {name}={v:?} is not a non-negative integer"
                    ))
                })
            })
            .transpose()
    }

    /// `limit`: `default` when absent, 1..=`max` otherwise.
    pub fn limit(&self, default: u64, max: u64) -> Result<u64, AppError> {
        match self.u64("limit")? {
            None => Ok(default),
            Some(n) if (1..=max).contains(&n) => Ok(n),
            Some(n) => Err(AppError::bad_request(format!(
                "limit={n} is out of range: it must be between 1 and {max}"
            ))),
        }
    }

    /// A timestamp: integer milliseconds since the epoch, or RFC 3339 (truncated to ms).
    pub fn ts(&self, name: &str) -> Result<Option<i64>, AppError> {
        self.get(name)
            .map(|v| {
                parse_ts(v).ok_or_else(|| {
            AppError::bad_request(format!(
                "query parameter {name}={v:?} is neither integer milliseconds nor an RFC 3339 time"
            ))
        })
            })
            .transpose()
    }
}

/// Integer ms since the epoch or an RFC 3339 timestamp with any offset.
pub fn parse_ts(v: &str) -> Option<i64> {
    if let Ok(ms) = v.parse::<i64>() {
        return Some(ms);
    }
    let t = OffsetDateTime::parse(v, &Rfc3339).ok()?;
    i64::try_from(t.unix_timestamp_nanos().div_euclid(1_000_000)).ok()
}
