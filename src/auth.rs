//! The one bearer-token check (SPEC §8), for HTTP routes and the frames handshake alike: with
//! tokens configured, a request needs a known token with the scope its route or transport
//! needs (`admin` grants every scope); tokens are compared in constant time against every
//! configured token, so the time taken says nothing about which one matched.

use crate::config::Scope;
use crate::failure::Failure;
use crate::state::Token;
use vx_proto::ErrorCode;

/// `Ok` if `presented` may use `scope`; otherwise 401 `unauthorized` (no token, or an unknown
/// one) or 403 `forbidden` (a known token without the scope). No tokens configured: open.
pub fn authorize(tokens: &[Token], presented: Option<&str>, scope: Scope) -> Result<(), Failure> {
    if tokens.is_empty() {
        return Ok(());
    }
    let Some(presented) = presented else {
        return Err(Failure::new(
            ErrorCode::Unauthorized,
            "a bearer token is needed (Authorization: Bearer over HTTP, the HELLO token over frames)",
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
}
