//! What every screen shares: the page layout with its navigation, the HTML error page, query
//! parameters, and small formatting pieces (times, states, JSON, links).

use std::collections::HashMap;

use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, NaiveDateTime, Utc};
use maud::{html, Markup, PreEscaped, DOCTYPE};
use serde_json::Value;

use crate::http::error::{Access, StorageFailure};
use crate::http::{ApiError, AppState};
use crate::store::query::Cursor;

/// What a chained event's id is, on hover where one is listed: it starts with the id of the run
/// that sent it, and is not a run's.
pub const CHAINED_ID: &str = "a chained event's id: the id of the run that sent it and the \
     call's position (or its key), so a retried run sends it once; not a run id";

/// The navigation: path, label.
const NAV: &[(&str, &str)] = &[
    ("/", "Overview"),
    ("/events", "Events"),
    ("/runs", "Runs"),
    ("/send", "Send"),
    ("/jobs", "Jobs"),
    ("/endpoints", "Endpoints"),
    ("/workers", "Workers"),
    ("/webhooks", "Webhooks"),
];

/// Content-Security-Policy of every page: only this origin's script and style.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// A whole page around `body`; `active` is the navigation entry to highlight.
pub fn layout(state: &AppState, title: &str, active: &str, body: Markup) -> Response {
    layout_with_status(state, StatusCode::OK, title, active, body)
}

/// [`layout`] answered with `status`: a form shown again with what was wrong (a 4xx), or the
/// outcome of an action that failed.
pub fn layout_with_status(
    state: &AppState,
    status: StatusCode,
    title: &str,
    active: &str,
    body: Markup,
) -> Response {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Flare" }
                link rel="stylesheet" href="/assets/dashboard.css";
                script src="/assets/dashboard.js" defer {}
            }
            body {
                header.top {
                    a.brand href="/" { "Flare" }
                    nav {
                        @for (path, label) in NAV {
                            a.active[*path == active] href=(path) { (label) }
                        }
                    }
                    span.spacer {}
                    label.live title="Refresh this page's data every 2 s" {
                        input #live-toggle type="checkbox" checked;
                        " live"
                    }
                    span #live-status {}
                    @if state.config.api_key.is_some() {
                        form.logout method="post" action="/logout" {
                            button type="submit" { "Log out" }
                        }
                    }
                }
                main { (body) }
            }
        }
    };
    html_response(status, markup)
}

/// An HTML answer with the dashboard's security headers.
pub fn html_response(status: StatusCode, markup: Markup) -> Response {
    (
        status,
        [
            (CONTENT_TYPE, "text/html; charset=utf-8"),
            (CACHE_CONTROL, "no-store"),
            (axum::http::header::CONTENT_SECURITY_POLICY, CSP),
            (axum::http::header::X_FRAME_OPTIONS, "DENY"),
            (axum::http::header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        markup.into_string(),
    )
        .into_response()
}

/// An error shown as an HTML page with its status (the API's [`ApiError`] answers JSON instead).
#[derive(Debug)]
pub struct PageError {
    status: StatusCode,
    message: String,
    /// A storage failure answered "nothing was stored" (see [`crate::http::error::storage_reads`]).
    storage_write: bool,
}

impl PageError {
    /// An error page with `status` and `message` (shown as is, escaped).
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            storage_write: false,
        }
    }

    /// 404.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    /// 400.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// The status it answers with.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// What it says (never internals: those are logged when the error is made).
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<ApiError> for PageError {
    fn from(e: ApiError) -> Self {
        let status = e.status();
        let storage_write = matches!(e, ApiError::Storage(Access::Write));
        let message = match e {
            ApiError::Internal(cause) => {
                tracing::error!(%cause, "internal error");
                "internal error".to_string()
            }
            other => other.to_string(),
        };
        Self {
            status,
            message,
            storage_write,
        }
    }
}

impl From<crate::store::Error> for PageError {
    fn from(e: crate::store::Error) -> Self {
        ApiError::from(e).into()
    }
}

impl From<crate::client::Error> for PageError {
    fn from(e: crate::client::Error) -> Self {
        ApiError::from(e).into()
    }
}

impl From<crate::endpoints::Error> for PageError {
    fn from(e: crate::endpoints::Error) -> Self {
        ApiError::from(e).into()
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let reason = self.status.canonical_reason().unwrap_or("Error");
        let markup = html! {
            (DOCTYPE)
            html lang="en" {
                head {
                    meta charset="utf-8";
                    title { (self.status.as_u16()) " " (reason) " · Flare" }
                    link rel="stylesheet" href="/assets/dashboard.css";
                }
                body {
                    header.top { a.brand href="/" { "Flare" } }
                    main {
                        h1 { (self.status.as_u16()) " " (reason) }
                        p.error-message { (self.message) }
                        p { a href="/" { "Back to the overview" } }
                    }
                }
            }
        };
        let mut res = html_response(self.status, markup);
        if self.storage_write {
            res.extensions_mut().insert(StorageFailure {
                read_answer: || {
                    PageError::new(StatusCode::SERVICE_UNAVAILABLE, Access::Read.message())
                        .into_response()
                },
            });
        }
        res
    }
}

/// A page's result.
pub type PageResult = Result<Response, PageError>;

/// Query parameters of a page: unknown ones are ignored, empty ones count as absent.
pub struct Params(HashMap<String, String>);

impl Params {
    /// Wraps the parsed query string.
    pub fn new(mut raw: HashMap<String, String>) -> Self {
        raw.retain(|_, v| !v.trim().is_empty());
        Self(raw)
    }

    /// A text parameter, trimmed.
    pub fn text(&self, key: &str) -> Option<String> {
        self.0.get(key).map(|v| v.trim().to_string())
    }

    /// A parameter parsed by `f`; a value `f` refuses is a 400 naming it and what was expected.
    pub fn parse<T>(
        &self,
        key: &str,
        expected: &str,
        f: impl FnOnce(&str) -> Option<T>,
    ) -> Result<Option<T>, PageError> {
        match self.text(key) {
            None => Ok(None),
            Some(v) => f(&v).map(Some).ok_or_else(|| {
                PageError::bad_request(format!("invalid {key} {v:?}: expected {expected}"))
            }),
        }
    }

    /// A time: RFC 3339, or a time as the pages show it (`2024-05-01 12:00:00 UTC`) read as UTC.
    pub fn time(&self, key: &str) -> Result<Option<DateTime<Utc>>, PageError> {
        self.parse(
            key,
            "a UTC time such as 2024-05-01 12:00:00 or 2024-05-01T12:00:00Z",
            parse_time,
        )
    }

    /// The page cursor.
    pub fn cursor(&self) -> Result<Option<Cursor>, PageError> {
        self.parse(
            "cursor",
            "the cursor of an \"Older\" link, unchanged",
            |v| v.parse().ok(),
        )
    }
}

/// Reads RFC 3339, or a date and time (minutes or seconds, `T` or a space between them, an optional
/// trailing `UTC` as the pages print it) as UTC: a time copied from any table filters by it.
pub fn parse_time(v: &str) -> Option<DateTime<Utc>> {
    let v = v.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(v) {
        return Some(t.with_timezone(&Utc));
    }
    let v = v.strip_suffix("UTC").map_or(v, str::trim_end);
    [
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%dT%H:%M",
    ]
    .iter()
    .find_map(|f| NaiveDateTime::parse_from_str(v, f).ok())
    .map(|n| n.and_utc())
}

/// A time as a filter input's value: the format the pages print times in, without the zone the
/// input's label names.
pub fn input_time(t: DateTime<Utc>) -> String {
    t.format(TIME_FORMAT).to_string()
}

/// How the pages print a time (always UTC, which they say).
const TIME_FORMAT: &str = "%Y-%m-%d %H:%M:%S";

/// A filter input for a UTC time. A plain text field in the pages' own format rather than a
/// `datetime-local` control: the browser shows that one in its locale (a 12-hour clock, the
/// month first) with a picker whose "now" is the browser's zone, so it disagreed with its "UTC"
/// label and with every time on the page.
pub fn time_input(name: &str, value: Option<DateTime<Utc>>) -> Markup {
    html! {
        input.time type="text" name=(name) value=[value.map(input_time)]
            placeholder="2024-05-01 12:00:00" pattern=r"\s*\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2})?(\s*UTC|Z)?\s*"
            title="a UTC time as the tables show it, e.g. 2024-05-01 12:00:00";
    }
}

/// A query string (`?a=1&b=2`, values encoded) of the pairs whose value is present.
pub fn query_string(pairs: &[(&str, Option<String>)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={}", url_encode(v))))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

/// A time for a table cell: `2024-05-01 12:00:05`, UTC, with the full RFC 3339 form on hover.
pub fn time(t: DateTime<Utc>) -> Markup {
    html! {
        time datetime=(t.to_rfc3339()) title=(t.to_rfc3339()) { (t.format(TIME_FORMAT)) span.tz { " UTC" } }
    }
}

/// An optional time, or a dash.
pub fn time_opt(t: Option<DateTime<Utc>>) -> Markup {
    match t {
        Some(t) => time(t),
        None => html! { span.muted { "—" } },
    }
}

/// A state as a coloured badge (`succeeded`, `failed`, `running`, …).
pub fn badge(state: &str) -> Markup {
    html! { span class={ "badge st-" (state) } { (state.replace('_', " ")) } }
}

/// JSON pretty-printed in a `<pre>`.
pub fn json_block(value: &Value) -> Markup {
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    html! { pre.json { (text) } }
}

/// JSON on one line, cut to `max` characters.
pub fn json_short(value: &Value, max: usize) -> String {
    short(&value.to_string(), max)
}

/// `text` cut to `max` characters with an ellipsis.
pub fn short(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let mut s: String = text.chars().take(max).collect();
        s.push('…');
        s
    }
}

/// The path of event `id`'s page.
pub fn event_href(id: &str) -> String {
    format!("/events/{}", url_encode(id))
}

/// The path of run `id`'s page.
pub fn run_href(id: &str) -> String {
    format!("/runs/{}", url_encode(id))
}

/// A link to an event, showing its id.
pub fn event_link(id: &str) -> Markup {
    html! { a.mono href=(event_href(id)) title=(id) { (id) } }
}

/// A link to a run, showing its id.
pub fn run_link(id: &str) -> Markup {
    html! { a.mono href=(run_href(id)) title=(id) { (id) } }
}

/// A source, linked to what it names: the run that sent the event, the replayed event, or the
/// webhook deliveries of the provider.
pub fn source(source: &str) -> Markup {
    match source.split_once(':') {
        Some(("job", run)) => html! { "job " (run_link(run)) },
        Some(("replay", event)) => html! { "replay of " (event_link(event)) },
        Some(("webhook", provider)) => {
            html! { a href={ "/webhooks?provider=" (url_encode(provider)) } { (source) } }
        }
        _ => html! { (source) },
    }
}

/// A rate (0–1) as a percentage, or a dash when nothing finished.
pub fn percent(rate: Option<f64>) -> String {
    rate.map_or_else(|| "—".to_string(), |r| format!("{:.1} %", r * 100.0))
}

/// The "Newest / Older" links under a keyset-paginated list.
pub fn pager(
    base: &str,
    pairs: &[(&str, Option<String>)],
    at_start: bool,
    next: Option<Cursor>,
) -> Markup {
    let newest = format!("{base}{}", query_string(pairs));
    let older = next.map(|c| {
        let mut with = pairs.to_vec();
        with.push(("cursor", Some(c.to_string())));
        format!("{base}{}", query_string(&with))
    });
    html! {
        nav.pager {
            @if !at_start { a href=(newest) { "« Newest" } }
            @if let Some(href) = older { a.older href=(href) { "Older »" } }
        }
    }
}

/// Marks `inner` as a region the live refresh replaces (it needs a page-unique `id`).
pub fn live(id: &str, inner: Markup) -> Markup {
    html! { div id=(id) data-live="" { (inner) } }
}

/// Raw, already-safe markup (SVG drawn by [`super::charts`]).
pub fn raw(svg: String) -> PreEscaped<String> {
    PreEscaped(svg)
}

/// Percent-encodes `text` for a URL path segment or query value (RFC 3986 unreserved kept).
pub fn url_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_rfc3339_and_printed_times_as_utc() {
        let want = parse_time("2024-05-01T12:00:00Z");
        assert!(want.is_some());
        assert_eq!(parse_time("2024-05-01T12:00"), want);
        assert_eq!(parse_time("2024-05-01T14:00:00+02:00"), want);
        assert_eq!(
            parse_time("2024-05-01T12:00:00").map(input_time),
            Some("2024-05-01 12:00:00".into())
        );
        // As the tables print it, copied with its zone.
        assert_eq!(parse_time("2024-05-01 12:00:00 UTC"), want);
        assert_eq!(parse_time(" 2024-05-01 12:00 "), want);
        assert_eq!(parse_time("yesterday"), None);
        assert_eq!(parse_time("2024-05-01 12:00:00 CET"), None);
    }

    #[test]
    fn query_strings_encode_values_and_skip_absent_ones() {
        assert_eq!(
            query_string(&[
                ("name", Some("a.b".into())),
                ("q", None),
                ("source", Some("webhook:auth".into()))
            ]),
            "?name=a.b&source=webhook%3Aauth"
        );
        assert_eq!(query_string(&[("q", None)]), "");
    }

    #[test]
    fn user_text_is_escaped() {
        let m = json_block(&serde_json::json!({"x": "<script>alert(1)</script>"}));
        let s = m.into_string();
        assert!(!s.contains("<script>"), "{s}");
        assert!(s.contains("&lt;script&gt;"), "{s}");
    }

    #[test]
    fn url_encoding_keeps_only_unreserved_bytes() {
        assert_eq!(url_encode("payments:evt_1:0"), "payments%3Aevt_1%3A0");
        assert_eq!(url_encode("a b/é"), "a%20b%2F%C3%A9");
    }
}
