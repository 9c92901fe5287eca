//! Two guards against web pages that try to use a Flare server through the visitor's browser,
//! and the rule they both stand on: one `Host`.
//!
//! - **One `Host`** ([`one_host`], on the whole app): a request with two `Host` headers gets 400,
//!   as HTTP/1.1 requires (RFC 9112, 3.2). Each rule below reads one name; with two, a check
//!   could pass on one while something behind Flare (a proxy, a log) acts on the other.
//! - **Loopback names without a key** ([`loopback_host`], on the whole app): with no
//!   `FLARE_API_KEY`, Flare listens only on loopback and trusts whoever reaches it. A page on
//!   `evil.example` can still reach it through **DNS rebinding** (its name re-resolves to
//!   127.0.0.1, so the browser treats Flare as the page's own origin and lets it read the answers),
//!   but the browser then sends `Host: evil.example`. So without a key only loopback names are
//!   served: `localhost`, `*.localhost`, `127.0.0.0/8` and `[::1]`, with or without a port. Any
//!   other `Host` (or none: every HTTP/1.1 client sends one) gets 421 Misdirected Request; the
//!   health routes ([`HEALTH_ROUTES`]) stay open. With a key any name is served: the key protects.
//! - **One site** ([`same_origin`], on the protected routes): a state-changing request (any method
//!   but GET, HEAD, OPTIONS, TRACE) that the browser says comes from another site gets 403. A form
//!   or a `text/plain` `fetch` from another site is a "simple" request that needs no CORS
//!   preflight, so without this rule a page could post an event to `/e/{key}` or `/trigger` of a
//!   Flare without a key. [`cross_site`] is the rule: `Sec-Fetch-Site: cross-site` or `same-site`,
//!   or an `Origin` (or, lacking one, a `Referer`) that does not name the request's host
//!   (`Origin: null` included). Requests with none of these headers (curl, SDKs, servers) pass,
//!   except the dashboard's actions, which also need `Authorization` then (a browser always says
//!   where a form comes from). The webhook routes are public routes, outside this rule: their
//!   senders are servers, and their signatures authenticate them.

use std::net::{Ipv4Addr, Ipv6Addr};

use axum::extract::{MatchedPath, Request, State};
use axum::http::header::{AUTHORIZATION, HOST, ORIGIN, REFERER};
use axum::http::{HeaderMap, HeaderName, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::dashboard::page::PageError;
use super::dashboard::paths;
use super::{ApiError, AppState};

/// Routes served under any name even without a key: they tell nothing but "up" and "ready".
pub const HEALTH_ROUTES: &[&str] = &["/healthz", "/readyz"];

/// The `Sec-Fetch-Site` request header (set by browsers; a page cannot change it).
pub const SEC_FETCH_SITE: HeaderName = HeaderName::from_static("sec-fetch-site");

/// Longest part of a refused `Host` quoted back in the error.
const MAX_QUOTED: usize = 100;

/// Middleware on the whole app (applied by [`super::app`], outside [`loopback_host`]): refuses a
/// request with more than one `Host` header with 400.
pub async fn one_host(req: Request, next: Next) -> Response {
    if req.headers().get_all(HOST).iter().nth(1).is_some() {
        return ApiError::BadRequest(
            "the request has more than one Host header; send exactly one".into(),
        )
        .into_response();
    }
    next.run(req).await
}

/// Middleware on the whole app (applied by [`super::app`]): without an API key, refuses a request
/// whose `Host` (or URI authority) is not a loopback name, see the module docs.
pub async fn loopback_host(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if state.config.api_key.is_some() || HEALTH_ROUTES.contains(&req.uri().path()) {
        return next.run(req).await;
    }
    match misdirected(&req) {
        None => next.run(req).await,
        Some(why) => ApiError::Misdirected(why).into_response(),
    }
}

/// Why `req` is not addressed to a loopback name, if it is not.
fn misdirected(req: &Request) -> Option<String> {
    let host = req
        .headers()
        .get(HOST)
        .map(|v| String::from_utf8_lossy(v.as_bytes()));
    let authority = req.uri().authority().map(|a| a.as_str().into());
    if host.is_none() && authority.is_none() {
        return Some(
            "the request has no Host header; without FLARE_API_KEY only loopback names \
             (localhost, 127.0.0.1, [::1]) are served"
                .into(),
        );
    }
    let refused = host
        .into_iter()
        .chain(authority)
        .find(|h| !is_loopback_host(h))?;
    let quoted: String = refused.chars().take(MAX_QUOTED).collect();
    Some(format!(
        "Host {quoted:?} is not a loopback name (localhost, *.localhost, 127.0.0.0/8, [::1]); \
         set FLARE_API_KEY to serve other names"
    ))
}

/// Whether `host` (a `Host` header value: a name or address with an optional port) names this
/// machine's loopback interface: `localhost`, `*.localhost`, `127.0.0.0/8` or `[::1]`.
pub fn is_loopback_host(host: &str) -> bool {
    let Some(name) = strip_port(host.trim()) else {
        return false;
    };
    if let Some(v6) = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        return v6.parse::<Ipv6Addr>().is_ok_and(|ip| {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        });
    }
    if let Ok(v4) = name.parse::<Ipv4Addr>() {
        return v4.is_loopback();
    }
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    if name == "localhost" {
        return true;
    }
    // Names under `.localhost` always mean loopback (RFC 6761); public DNS holds none.
    name.strip_suffix(".localhost").is_some_and(|sub| {
        sub.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
    })
}

/// `host` without its `:port` (which must be digits), or `None` when the port is malformed.
fn strip_port(host: &str) -> Option<&str> {
    let (name, port) = if host.starts_with('[') {
        let end = host.find(']')? + 1;
        (&host[..end], &host[end..])
    } else {
        match host.find(':') {
            Some(i) => (&host[..i], &host[i..]),
            None => (host, ""),
        }
    };
    let port_ok = port.is_empty()
        || port.strip_prefix(':').is_some_and(|p| {
            !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit())
        });
    (port_ok && !name.is_empty()).then_some(name)
}

/// Middleware on the protected routes (applied by [`super::app`], after the API key check):
/// refuses a state-changing request that [`cross_site`] says comes from another site, with 403
/// JSON (an HTML page on the dashboard's routes).
pub async fn same_origin(req: Request, next: Next) -> Response {
    if req.method().is_safe() {
        return next.run(req).await;
    }
    let on_dashboard = req
        .extensions()
        .get::<MatchedPath>()
        .is_some_and(|m| paths::is_route(m.as_str()));
    let host = req
        .headers()
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri().authority().map(|a| a.as_str()));
    let Some(why) = cross_site(req.headers(), host, on_dashboard) else {
        return next.run(req).await;
    };
    if on_dashboard {
        PageError::new(StatusCode::FORBIDDEN, why).into_response()
    } else {
        ApiError::Forbidden(why).into_response()
    }
}

/// Why a state-changing request with these headers, sent to `host`, counts as cross-site (see the
/// module docs), or `None` when it may proceed. `needs_evidence`: a request that carries none of
/// `Sec-Fetch-Site`, `Origin` or `Referer` is refused unless it has an `Authorization` header.
pub fn cross_site(headers: &HeaderMap, host: Option<&str>, needs_evidence: bool) -> Option<String> {
    if let Some(site) = headers.get(SEC_FETCH_SITE) {
        let site = String::from_utf8_lossy(site.as_bytes());
        let trusted = ["same-origin", "none"]
            .iter()
            .any(|ok| site.trim().eq_ignore_ascii_case(ok));
        if !trusted {
            return Some(format!(
                "cross-site request refused: the browser says it comes from another site \
                 (Sec-Fetch-Site: {site}); send it from this server's own pages, or without a browser"
            ));
        }
    }
    let claimed = [ORIGIN, REFERER]
        .into_iter()
        .find_map(|name| headers.get(&name).map(|value| (name, value)));
    if let Some((name, value)) = claimed {
        let matches = value
            .to_str()
            .ok()
            .and_then(origin_host)
            .zip(host)
            .is_some_and(|(claimed, host)| claimed.eq_ignore_ascii_case(host.trim()));
        if !matches {
            let value: String = String::from_utf8_lossy(value.as_bytes())
                .chars()
                .take(MAX_QUOTED)
                .collect();
            return Some(format!(
                "cross-origin request refused: {name} {value:?} is not this server ({}); \
                 send it from this server's own pages, or without a browser",
                host.unwrap_or("no Host")
            ));
        }
        return None;
    }
    let evidence = headers.contains_key(SEC_FETCH_SITE);
    (needs_evidence && !evidence && !headers.contains_key(AUTHORIZATION)).then(|| {
        "cross-origin request refused: dashboard actions must be sent from the dashboard itself \
         (the request has no Origin, Referer or Sec-Fetch-Site)"
            .to_string()
    })
}

/// `host[:port]` of an origin or URL such as `http://127.0.0.1:3000/events`.
fn origin_host(url: &str) -> Option<&str> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    Some(&rest[..end]).filter(|h| !h.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(HeaderName, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(k.clone(), HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn only_loopback_names_are_loopback() {
        for ok in [
            "localhost",
            "LOCALHOST:3000",
            "localhost.",
            "app.localhost",
            "a-b.c.localhost:8080",
            "127.0.0.1",
            "127.0.0.1:3000",
            "127.1.2.3:80",
            "[::1]",
            "[::1]:3000",
            "[::ffff:127.0.0.1]:3000",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in [
            "",
            "evil.example",
            "evil.example:3000",
            "localhost.evil.example",
            "evillocalhost",
            ".localhost",
            "a..localhost",
            "127.0.0.1.evil.example",
            "0.0.0.0:3000",
            "10.0.0.1",
            "[::]:3000",
            "[::2]",
            "::1",
            "localhost:",
            "localhost:abc",
            "localhost:3000:1",
            "127.0.0.1:123456",
            "[::1]x",
            "user@localhost",
        ] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
    }

    #[test]
    fn state_changes_must_come_from_this_origin() {
        let host = Some("127.0.0.1:3000");
        let pass = |h: &HeaderMap, dashboard| cross_site(h, host, dashboard).is_none();
        let same = headers(&[(ORIGIN, "http://127.0.0.1:3000")]);
        assert!(pass(&same, true));
        let referer = headers(&[(REFERER, "http://127.0.0.1:3000/events/x?y=1")]);
        assert!(pass(&referer, true));
        let fetch_same = headers(&[
            (SEC_FETCH_SITE, "same-origin"),
            (ORIGIN, "http://127.0.0.1:3000"),
        ]);
        assert!(pass(&fetch_same, true));
        for bad in [
            headers(&[(ORIGIN, "http://evil.example")]),
            headers(&[(ORIGIN, "null")]),
            headers(&[(ORIGIN, "http://127.0.0.1:3001")]),
            headers(&[(REFERER, "https://evil.example/page")]),
            headers(&[(SEC_FETCH_SITE, "cross-site")]),
            headers(&[(SEC_FETCH_SITE, "same-site")]),
            headers(&[
                (SEC_FETCH_SITE, "cross-site"),
                (ORIGIN, "http://127.0.0.1:3000"),
            ]),
            headers(&[(SEC_FETCH_SITE, "same-origin"), (ORIGIN, "null")]),
        ] {
            assert!(!pass(&bad, false), "{bad:?}");
            assert!(!pass(&bad, true), "{bad:?}");
        }
        assert!(cross_site(&same, None, false).is_some(), "no Host to match");
    }

    #[test]
    fn requests_without_browser_headers_pass_except_dashboard_forms() {
        let host = Some("127.0.0.1:3000");
        let none = HeaderMap::new();
        assert!(cross_site(&none, host, false).is_none(), "curl, SDKs");
        assert!(cross_site(&none, host, true).is_some(), "a dashboard form");
        let scripted = headers(&[(AUTHORIZATION, "Bearer k")]);
        assert!(cross_site(&scripted, host, true).is_none());
    }
}
