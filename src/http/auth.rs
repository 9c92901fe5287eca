//! Access control for the protected routes.
//!
//! When `FLARE_API_KEY` is configured, every route of [`super::protected_routes`] needs
//! `Authorization: Bearer <key>`; otherwise it answers 401 `{"error": …}` (with
//! `WWW-Authenticate: Bearer`). One exception follows Inngest, whose clients put the key in the
//! path: `POST /e/{key}` is accepted when `{key}` is the API key. Without a configured key every
//! request passes (the server then only listens on loopback, see [`crate::config`]).
//!
//! Keys are compared in constant time (SHA-256 of both sides, then `subtle`), so neither the
//! content nor the length of the key leaks through timing. The key never appears in a log line or
//! an error body.
//!
//! To add another credential (the dashboard's session cookie), extend [`is_allowed`].

use axum::extract::{MatchedPath, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::{compat, ApiError, AppState};

/// Whether `headers` carry `Authorization: Bearer <key>` (scheme case-insensitive).
pub fn authorized(headers: &HeaderMap, key: &str) -> bool {
    let Some(value) = headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let Some((scheme, token)) = value.trim().split_once(' ') else {
        return false;
    };
    scheme.eq_ignore_ascii_case("bearer") && keys_match(token.trim(), key)
}

/// Constant-time comparison of a presented key with the configured one.
pub fn keys_match(presented: &str, key: &str) -> bool {
    let a = Sha256::digest(presented.as_bytes());
    let b = Sha256::digest(key.as_bytes());
    bool::from(a.ct_eq(&b))
}

/// Whether `req` may reach a protected route when `key` is configured: a Bearer header, or the
/// key in the path of the Inngest route.
pub fn is_allowed(req: &Request, key: &str) -> bool {
    authorized(req.headers(), key) || inngest_path_key_matches(req, key)
}

fn inngest_path_key_matches(req: &Request, key: &str) -> bool {
    let on_route = req
        .extensions()
        .get::<MatchedPath>()
        .is_some_and(|m| m.as_str() == compat::INNGEST_ROUTE);
    on_route
        && req
            .uri()
            .path()
            .strip_prefix("/e/")
            .is_some_and(|presented| keys_match(presented, key))
}

/// Middleware guarding the protected routes (applied by [`super::app`]).
pub async fn require_api_key(State(state): State<AppState>, req: Request, next: Next) -> Response {
    match state.config.api_key.as_deref() {
        Some(key) if !is_allowed(&req, key) => ApiError::Unauthorized(
            "missing or invalid API key: send `Authorization: Bearer <FLARE_API_KEY>`".into(),
        )
        .into_response(),
        _ => next.run(req).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with_auth(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, HeaderValue::from_str(value).expect("header"));
        h
    }

    #[test]
    fn bearer_must_carry_the_exact_key() {
        let key = "k-0123456789abcdef";
        assert!(authorized(&with_auth("Bearer k-0123456789abcdef"), key));
        assert!(authorized(&with_auth("bearer k-0123456789abcdef"), key));
        assert!(!authorized(&with_auth("Bearer k-0123456789abcdeF"), key));
        assert!(!authorized(&with_auth("Bearer k-0123456789abcde"), key));
        assert!(!authorized(&with_auth("Basic k-0123456789abcdef"), key));
        assert!(!authorized(&with_auth("k-0123456789abcdef"), key));
        assert!(!authorized(&HeaderMap::new(), key));
    }
}
