//! The one bearer-token check (docs/API.md §8), for HTTP routes and the frames handshake alike: with
//! tokens configured, a request needs a known token with the scope its route or transport
//! needs (`admin` grants every scope); tokens are compared in constant time against every
//! configured token, so the time taken says nothing about which one matched.
//!
//! Over HTTP the token comes as `Authorization: Bearer TOKEN` or, for browsers, as HTTP Basic
//! credentials whose password is the token ([`http_token`]): a browser cannot attach a bearer
//! token to a navigation, but it prompts for Basic credentials on a `WWW-Authenticate: Basic`
//! challenge and then sends them on the page's own same-origin requests (fetch and
//! EventSource included). Both forms go through the same [`authorize`].

use crate::config::Scope;
use crate::failure::Failure;
use crate::state::Token;
use base64::Engine as _;
use std::borrow::Cow;
use vx_proto::ErrorCode;

/// The token an HTTP `Authorization` header value presents: `Bearer TOKEN`, or
/// `Basic base64(user:TOKEN)` with any user name (browsers need one; it is ignored). `None` for
/// other schemes and for Basic credentials that are not base64 of UTF-8 `user:password`: to the
/// caller, no credentials were presented.
pub fn http_token(authorization: &str) -> Option<Cow<'_, str>> {
    let (scheme, value) = authorization.trim().split_once(' ')?;
    let value = value.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        return Some(Cow::Borrowed(value));
    }
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(value)
        .ok()?;
    let pair = String::from_utf8(decoded).ok()?;
    // RFC 7617: the user id cannot contain a colon; the password may.
    let (_user, password) = pair.split_once(':')?;
    Some(Cow::Owned(password.to_string()))
}

/// `Ok` if `presented` may use `scope`; otherwise 401 `unauthorized` (no token, or an unknown
/// one) or 403 `forbidden` (a known token without the scope). No tokens configured: open.
pub fn authorize(tokens: &[Token], presented: Option<&str>, scope: Scope) -> Result<(), Failure> {
    if tokens.is_empty() {
        return Ok(());
    }
    let Some(presented) = presented else {
        return Err(Failure::new(
            ErrorCode::Unauthorized,
            "a bearer token is needed (Authorization: Bearer over HTTP, or Basic with the token \
             as the password; the HELLO token over frames)",
        ));
    };
    let mut found = None;
    for t in tokens {
        if ct_eq(&t.token, presented.as_bytes()) {
            found = Some(t);
        }
    }
    match found {
        None => Err(Failure::new(
            ErrorCode::Unauthorized,
            "unknown bearer token",
        )),
        Some(t) if t.scopes.contains(&scope) || t.scopes.contains(&Scope::Admin) => Ok(()),
        Some(_) => Err(Failure::new(
            ErrorCode::Forbidden,
            format!("the token lacks the {} scope", scope_name(scope)),
        )),
    }
}

pub fn scope_name(scope: Scope) -> &'static str {
    match scope {
        Scope::Ingest => "ingest",
        Scope::Read => "read",
        Scope::Admin => "admin",
    }
}

/// Equal-length byte strings compared without an early exit; a length mismatch returns at
/// once (it reveals only the length).
fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(t: &str, scopes: &[Scope]) -> Token {
        Token {
            token: t.as_bytes().to_vec(),
            scopes: scopes.to_vec(),
        }
    }

    #[test]
    fn scopes_and_codes() {
        let tokens = [
            token("i", &[Scope::Ingest]),
            token("r", &[Scope::Read]),
            token("a", &[Scope::Admin]),
        ];
        let code = |p: Option<&str>, s| authorize(&tokens, p, s).err().map(|f| f.code);
        assert_eq!(code(None, Scope::Read), Some(ErrorCode::Unauthorized));
        assert_eq!(code(Some("x"), Scope::Read), Some(ErrorCode::Unauthorized));
        assert_eq!(code(Some("i"), Scope::Read), Some(ErrorCode::Forbidden));
        assert_eq!(code(Some("i"), Scope::Ingest), None);
        assert_eq!(code(Some("r"), Scope::Admin), Some(ErrorCode::Forbidden));
        assert_eq!(code(Some("a"), Scope::Admin), None);
        assert_eq!(code(Some("a"), Scope::Ingest), None);
        assert_eq!(
            authorize(&[], None, Scope::Admin).err().map(|f| f.code),
            None
        );
    }

    #[test]
    fn bearer_and_basic_credentials() {
        let t = |h: &str| http_token(h).map(Cow::into_owned);
        assert_eq!(t("Bearer abc"), Some("abc".into()));
        assert_eq!(t("  bearer   abc "), Some("abc".into()));
        // base64("ops:s3cret") and base64(":s3cret"): any user name, the password is the token.
        assert_eq!(t("Basic b3BzOnMzY3JldA=="), Some("s3cret".into()));
        assert_eq!(t("basic OnMzY3JldA=="), Some("s3cret".into()));
        // base64("u:a:b"): the password may hold colons.
        assert_eq!(t("Basic dTphOmI="), Some("a:b".into()));
        // Not base64; no colon (base64("token")); not UTF-8 (base64 of 0xff 0x3a 0x61).
        assert_eq!(t("Basic !!!"), None);
        assert_eq!(t("Basic dG9rZW4="), None);
        assert_eq!(t("Basic /zph"), None);
        assert_eq!(t("Digest x"), None);
        assert_eq!(t("Bearer"), None);
    }
}
