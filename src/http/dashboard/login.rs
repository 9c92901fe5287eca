//! Signing in to the dashboard: `GET /login` shows the form, `POST /login` exchanges the API key
//! for a session cookie (HttpOnly, SameSite=Strict; the cookie never holds the key), `POST /logout`
//! ends the session. Without a configured `FLARE_API_KEY` the dashboard is open and `/login` says
//! so.
//!
//! Wrong keys are counted per client ([`crate::http::login_attempts`], the same count as wrong
//! API keys on the other routes): after too many, a wrong key gets 429 with `Retry-After`. The
//! right key always signs in, so a lockout caused by someone else behind the same address (a
//! reverse proxy) does not lock the operator out. Their log lines go through a
//! [`crate::log_throttle::LogThrottle`], so a brute-force run writes a few summaries, not a
//! line per guess.

use std::collections::HashMap;
use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Query, State};
use axum::http::header::{RETRY_AFTER, SET_COOKIE};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use maud::{html, Markup, DOCTYPE};

use super::page::html_response;
use crate::http::auth::{keys_match, session_cookie, sessions, SESSION_COOKIE, SESSION_TTL_MS};
use crate::http::login_attempts::ClientId;
use crate::http::AppState;

/// Where to go after signing in: a path on this site, else `/`.
///
/// `next` arrives decoded. It must start with exactly one `/` (`//host` and `/\host` name another
/// site) and hold only visible ASCII: no backslash (browsers read it as `/`), no whitespace or
/// control character (browsers drop a tab or newline, so `/\t/evil.com` becomes `//evil.com`, and
/// a newline cannot go in a `Location` header at all). Anything else falls back to `/`.
fn safe_next(next: Option<&String>) -> String {
    match next {
        Some(n)
            if n.starts_with('/')
                && !n.starts_with("//")
                && n.chars().all(|c| c.is_ascii_graphic() && c != '\\') =>
        {
            n.clone()
        }
        _ => "/".to_string(),
    }
}

fn login_page(next: &str, error: Option<&str>, open: bool) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "Sign in · Flare" }
                link rel="stylesheet" href="/assets/dashboard.css";
            }
            body.login {
                main.login-box {
                    h1 { "Flare" }
                    @if open {
                        p { "No API key is configured, so the dashboard is open." }
                        p { a href="/" { "Go to the dashboard" } }
                    } @else {
                        p { "Sign in with the server's API key (FLARE_API_KEY)." }
                        @if let Some(e) = error { p.error-message #login-error { (e) } }
                        form method="post" action="/login" {
                            input type="hidden" name="next" value=(next);
                            label for="key" { "API key" }
                            input #key type="password" name="key" autocomplete="current-password" required autofocus;
                            button #sign-in type="submit" { "Sign in" }
                        }
                    }
                }
            }
        }
    }
}

/// `GET /login`.
pub async fn form(
    State(state): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let next = safe_next(q.get("next"));
    html_response(
        StatusCode::OK,
        login_page(&next, None, state.config.api_key.is_none()),
    )
}

/// `POST /login` (form fields `key`, `next`): a right key opens a session and redirects to `next`,
/// always; a wrong one shows the form again with a 401, or a 429 once the client has sent too
/// many.
pub async fn submit(
    State(state): State<AppState>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let next = safe_next(form.get("next"));
    let Some(key) = state.config.api_key.as_deref() else {
        return Redirect::to(&next).into_response();
    };
    let now = state.client.clock().now_ms();
    let presented = form.get("key").map(String::as_str).unwrap_or("");
    if keys_match(presented, key) {
        let value = sessions().open(now);
        let cookie = format!(
            "{SESSION_COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}",
            SESSION_TTL_MS / 1000
        );
        return ([(SET_COOKIE, cookie)], Redirect::to(&next)).into_response();
    }
    let peer = peer.map(|Extension(ConnectInfo(addr))| addr.ip());
    let client = ClientId::of(state.config.trusted_proxies.client_ip(peer, &headers));
    let attempts = &state.logins;
    if let Err(secs) = attempts.check(client, now) {
        if let Some(suppressed) = attempts.log.admit("login:refused", now) {
            tracing::warn!(%client, suppressed, "dashboard sign-in refused: too many wrong keys");
        }
        let message = format!("Too many wrong keys from this address. Try again in {secs} s.");
        return (
            [(RETRY_AFTER, secs.to_string())],
            html_response(
                StatusCode::TOO_MANY_REQUESTS,
                login_page(&next, Some(&message), false),
            ),
        )
            .into_response();
    }
    let locked = attempts.failed(client, now);
    if let Some(suppressed) = attempts.log.admit("login:failed", now) {
        tracing::warn!(%client, locked, suppressed, "dashboard sign-in with a wrong key");
    }
    html_response(
        StatusCode::UNAUTHORIZED,
        login_page(&next, Some("That is not the API key."), false),
    )
}

/// `POST /logout`: ends the session and clears the cookie.
pub async fn logout(headers: HeaderMap) -> Response {
    if let Some(value) = session_cookie(&headers) {
        sessions().close(value);
    }
    let cookie = format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    ([(SET_COOKIE, cookie)], Redirect::to("/login")).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_stays_on_this_site() {
        let s = |v: &str| safe_next(Some(&v.to_string()));
        assert_eq!(s("/events?name=a"), "/events?name=a");
        assert_eq!(s("//evil.example/x"), "/");
        assert_eq!(s("https://evil.example"), "/");
        assert_eq!(s("/\\evil.example"), "/");
        assert_eq!(s("/\t/evil.com"), "/", "browsers drop the tab");
        assert_eq!(s("/\n/evil.com"), "/");
        assert_eq!(s("/\r\n/evil.com"), "/");
        assert_eq!(s("/ /evil.com"), "/");
        assert_eq!(s("/\u{0b}/evil.com"), "/");
        assert_eq!(s("/events\\..\\x"), "/");
        assert_eq!(s("/é"), "/", "not a header value as is");
        assert_eq!(s("evil.com"), "/");
        assert_eq!(s(""), "/");
        assert_eq!(safe_next(None), "/");
    }
}
