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
//! **Wrong keys are throttled** on every protected route, with the dashboard sign-in's count
//! ([`super::login_attempts`], per client address as [`super::client_ip`] tells it): a request
//! that presents a key (an `Authorization` header, or the Inngest route's path) and is refused
//! counts as a failure, and a client locked out gets 429 with `Retry-After` for its wrong keys.
//! A request without any credential is not a guess and is not counted. A request with the right
//! key is always served, locked out or not, so a client sharing an address with a guesser (behind
//! one proxy) keeps working; what keeps the key from being guessed is its length, not the
//! throttle (ARCHITECTURE.md, "Access").
//!
//! The dashboard's pages also accept a **session cookie** ([`Sessions`]): `POST /login` with the
//! key opens a session and sets `flare_session` (HttpOnly, SameSite=Strict); `POST /logout` ends
//! it. The cookie holds a random session id and its HMAC under a per-process secret, never the
//! key; it is checked in constant time and must name a session still open (so logout and a restart
//! end it). A dashboard page asked for without a credential redirects to `/login`; the JSON API
//! keeps answering 401 JSON and does not accept the cookie.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Mutex, OnceLock};

use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::header::{AUTHORIZATION, COOKIE};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::dashboard::{page, paths};
use super::login_attempts::ClientId;
use super::{compat, ApiError, AppState};

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "flare_session";
/// How long a dashboard session lasts, ms (12 hours).
pub const SESSION_TTL_MS: i64 = 12 * 3_600_000;
/// Most sessions open at once; opening one more ends the oldest.
const MAX_SESSIONS: usize = 1_000;

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

/// Whether `req` presents a key of its own (so a refusal is a wrong key, not a missing one): an
/// `Authorization` header, or the key in the Inngest route's path.
fn presents_key(req: &Request) -> bool {
    req.headers().contains_key(AUTHORIZATION)
        || req
            .extensions()
            .get::<MatchedPath>()
            .is_some_and(|m| m.as_str() == compat::INNGEST_ROUTE)
}

/// The client `req` comes from, for the wrong-key count: its peer address, or behind a trusted
/// proxy the address that proxy forwarded ([`super::client_ip`]).
pub fn client_of(state: &AppState, req: &Request) -> ClientId {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip());
    ClientId::of(state.config.trusted_proxies.client_ip(peer, req.headers()))
}

/// Counts the wrong key `req` presented; `Some(429)` when its client is locked out (the key is
/// then not counted again).
fn wrong_key(state: &AppState, req: &Request) -> Option<Response> {
    let now = state.client.clock().now_ms();
    let client = client_of(state, req);
    let attempts = &state.logins;
    if let Err(secs) = attempts.check(client, now) {
        if let Some(suppressed) = attempts.log.admit("key:refused", now) {
            tracing::warn!(%client, suppressed, "request refused: too many wrong API keys");
        }
        return Some(
            ApiError::TooManyRequests {
                message: format!(
                    "too many wrong API keys from this address: try again in {secs} s (a request with the right key is served meanwhile)"
                ),
                retry_after_secs: secs,
            }
            .into_response(),
        );
    }
    let locked = attempts.failed(client, now);
    if let Some(suppressed) = attempts.log.admit("key:failed", now) {
        tracing::warn!(%client, locked, suppressed, "request with a wrong API key");
    }
    None
}

/// The route `FLARE_METRICS_TOKEN` reads.
pub const METRICS_ROUTE: &str = "/metrics";

/// Middleware guarding the protected routes (applied by [`super::app`]).
///
/// A right key always passes (see the module docs on the throttle); the metrics token
/// (`FLARE_METRICS_TOKEN`) passes on [`METRICS_ROUTE`] only. A dashboard route also passes
/// with a valid session cookie, and its public pages (login, static assets) always pass; a
/// dashboard page without a credential redirects to `/login?next=…`. A wrong key is counted and,
/// once its client is locked out, answered 429.
pub async fn require_api_key(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let Some(key) = state.config.api_key.as_deref() else {
        return next.run(req).await;
    };
    if is_allowed(&req, key) {
        return next.run(req).await;
    }
    let route = req.extensions().get::<MatchedPath>().map(|m| m.as_str());
    // The scrape token reads the metrics and nothing else.
    if route == Some(METRICS_ROUTE)
        && state
            .config
            .metrics_token
            .as_deref()
            .is_some_and(|token| authorized(req.headers(), token))
    {
        return next.run(req).await;
    }
    let dashboard_route = route.filter(|r| paths::is_route(r));
    if let Some(route) = dashboard_route {
        let now = state.client.clock().now_ms();
        if paths::is_public_route(route) || sessions().is_valid(req.headers(), now) {
            return next.run(req).await;
        }
    }
    if presents_key(&req) {
        if let Some(locked_out) = wrong_key(&state, &req) {
            return locked_out;
        }
    }
    if dashboard_route.is_some() {
        let wanted = req
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        return Redirect::to(&format!("/login?next={}", page::url_encode(&wanted))).into_response();
    }
    ApiError::Unauthorized(
        "missing or invalid API key: send `Authorization: Bearer <FLARE_API_KEY>`".into(),
    )
    .into_response()
}

/// Open dashboard sessions of this process, and the secret their cookies are signed with.
pub struct Sessions {
    secret: [u8; 32],
    /// Session id → expiry (ms).
    open: Mutex<HashMap<String, i64>>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("secret", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// The process's sessions (the secret is drawn at first use).
pub fn sessions() -> &'static Sessions {
    static SESSIONS: OnceLock<Sessions> = OnceLock::new();
    SESSIONS.get_or_init(|| Sessions::new(rand::random()))
}

impl Sessions {
    /// Sessions signed with `secret`.
    pub fn new(secret: [u8; 32]) -> Self {
        Self {
            secret,
            open: Mutex::new(HashMap::new()),
        }
    }

    fn mac(&self, id: &str) -> String {
        // HMAC accepts keys of any length, so this cannot fail.
        let mut mac = match Hmac::<Sha256>::new_from_slice(&self.secret) {
            Ok(m) => m,
            Err(_) => return String::new(),
        };
        mac.update(id.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// Opens a session at `now` (ms) and returns the cookie value `<id>.<hmac>`.
    pub fn open(&self, now: i64) -> String {
        let id = hex::encode(rand::random::<[u8; 16]>());
        if let Ok(mut open) = self.open.lock() {
            open.retain(|_, expiry| *expiry > now);
            if open.len() >= MAX_SESSIONS {
                if let Some(oldest) = open.iter().min_by_key(|(_, e)| **e).map(|(k, _)| k.clone()) {
                    open.remove(&oldest);
                }
            }
            open.insert(id.clone(), now + SESSION_TTL_MS);
        }
        format!("{id}.{}", self.mac(&id))
    }

    /// The session id of a cookie value whose signature holds (constant-time comparison).
    fn verified_id<'a>(&self, value: &'a str) -> Option<&'a str> {
        let (id, mac) = value.split_once('.')?;
        let expected = self.mac(id);
        bool::from(expected.as_bytes().ct_eq(mac.as_bytes())).then_some(id)
    }

    /// Whether the cookie value names an open session that has not expired at `now`.
    pub fn check(&self, value: &str, now: i64) -> bool {
        let Some(id) = self.verified_id(value) else {
            return false;
        };
        self.open
            .lock()
            .map(|open| open.get(id).is_some_and(|expiry| *expiry > now))
            .unwrap_or(false)
    }

    /// Whether `headers` carry a session cookie that [`Sessions::check`] accepts.
    pub fn is_valid(&self, headers: &HeaderMap, now: i64) -> bool {
        session_cookie(headers).is_some_and(|v| self.check(v, now))
    }

    /// Ends the session of a cookie value (no-op for an unknown or forged one).
    pub fn close(&self, value: &str) {
        if let Some(id) = self.verified_id(value) {
            if let Ok(mut open) = self.open.lock() {
                open.remove(id);
            }
        }
    }
}

/// The value of the `flare_session` cookie in `headers`, if any.
pub fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value)
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

    #[test]
    fn session_cookies_are_signed_expire_and_end_at_logout() {
        let sessions = Sessions::new([7; 32]);
        let cookie = sessions.open(1_000);
        assert!(sessions.check(&cookie, 1_001));
        assert!(!sessions.check(&cookie, 1_000 + SESSION_TTL_MS), "expired");
        let (id, _) = cookie.split_once('.').expect("id.mac");
        assert!(!sessions.check(id, 1_001), "no signature");
        assert!(
            !sessions.check(&format!("{id}.00"), 1_001),
            "forged signature"
        );
        let other = Sessions::new([8; 32]);
        assert!(!other.check(&cookie, 1_001), "another process's secret");
        sessions.close(&cookie);
        assert!(!sessions.check(&cookie, 1_001), "logged out");
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut h = HeaderMap::new();
        h.append(
            COOKIE,
            HeaderValue::from_static("a=1; flare_session=abc.def"),
        );
        assert_eq!(session_cookie(&h), Some("abc.def"));
        assert_eq!(session_cookie(&HeaderMap::new()), None);
    }
}
