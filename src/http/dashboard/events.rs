//! Events: the history (`/events`, newest first, filtered by name, source, time, outcome and
//! payload text, each with its runs counted by state) and one event (`/events/{id}`: payload and
//! context, the runs it started, the run that sent it and the events its runs sent, the webhook
//! delivery it came from) with its actions: replay, optionally with an edited payload, and cancel
//! while it is scheduled.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use maud::{html, Markup};
use serde_json::Value;

use super::page::{self, layout, PageError, PageResult, Params};
use crate::http::api;
use crate::http::AppState;
use crate::model::RunStatus;
use crate::store::query::{EventQuery, EventStatus, RunCounts, DEFAULT_LIMIT, MAX_SEARCH_CHARS};
use crate::store::WebhookDelivery;

/// How far back a payload search looks when the URL gives no `from` and no `within`: the search
/// reads every payload in its window, so an unbounded one costs ~1 s at a million events (see
/// BENCHMARKS.md). `within=24h` or `within=all` widens it.
const SEARCH_WINDOW_MS: i64 = 3_600_000;

/// The time span a payload search covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Within {
    Hour,
    Day,
    All,
}

impl Within {
    fn parse(v: &str) -> Option<Self> {
        match v {
            "1h" => Some(Within::Hour),
            "24h" => Some(Within::Day),
            "all" => Some(Within::All),
            _ => None,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Within::Hour => "1h",
            Within::Day => "24h",
            Within::All => "all",
        }
    }

    fn ms(self) -> Option<i64> {
        match self {
            Within::Hour => Some(SEARCH_WINDOW_MS),
            Within::Day => Some(24 * SEARCH_WINDOW_MS),
            Within::All => None,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Within::Hour => "the last hour",
            Within::Day => "the last 24 hours",
            Within::All => "all time",
        }
    }
}

/// Sources offered in the filter (any other can be typed in the URL).
const SOURCES: &[&str] = &[
    "api",
    "http",
    "trigger.dev",
    "inngest",
    "webhook",
    "webhook:payments",
    "webhook:auth",
    "job",
    "replay",
];
/// Recent deliveries of the provider searched for the one an event came from.
const DELIVERY_LOOKBACK: usize = 100;
/// Runs whose log lines the event page shows inline (the rest: on each run's page).
const RUNS_WITH_LOGS: usize = 20;

/// `GET /events`.
pub async fn list(
    State(state): State<AppState>,
    Query(raw): Query<HashMap<String, String>>,
) -> PageResult {
    let p = Params::new(raw);
    let statuses = EventStatus::ALL.map(EventStatus::as_str).join(", ");
    let mut query = EventQuery {
        name: p.text("name"),
        source: p.text("source"),
        status: p.parse("status", &format!("one of {statuses}"), EventStatus::parse)?,
        from: p.time("from")?,
        to: p.time("to")?,
        q: p.text("q"),
        limit: DEFAULT_LIMIT,
        cursor: p.cursor()?,
    };
    let within_param = p.parse("within", "1h, 24h or all", Within::parse)?;
    // A payload search without an explicit start is bounded to a recent window (see
    // SEARCH_WINDOW_MS); the page says so and links to wider ones.
    let within = match (&query.q, query.from) {
        (Some(_), None) => Some(within_param.unwrap_or(Within::Hour)),
        _ => None,
    };
    let shown_from = query.from;
    if let Some(ms) = within.and_then(Within::ms) {
        let now = state.client.clock().now_ms();
        query.from = Some(crate::model::ms_to_time(now - ms));
    }
    let filters = [
        ("name", query.name.clone()),
        ("source", query.source.clone()),
        ("status", query.status.map(|s| s.as_str().to_string())),
        ("from", shown_from.map(page::input_time)),
        ("to", query.to.map(page::input_time)),
        ("q", query.q.clone()),
        ("within", within_param.map(|w| w.as_str().to_string())),
    ];
    // What a bulk replay selects: the list's rows, the search window included.
    let bulk_filters = [
        ("name", query.name.clone()),
        ("source", query.source.clone()),
        ("status", query.status.map(|s| s.as_str().to_string())),
        ("from", query.from.map(page::input_time)),
        ("to", query.to.map(page::input_time)),
        ("q", query.q.clone()),
    ];
    let widen = |w: Within| {
        let mut pairs: Vec<(&str, Option<String>)> = filters
            .iter()
            .filter(|(k, _)| *k != "within")
            .cloned()
            .collect();
        pairs.push(("within", Some(w.as_str().to_string())));
        format!("/events{}", page::query_string(&pairs))
    };
    let at_start = query.cursor.is_none();
    let shown = query.clone();
    let events = state.client.store().events_list(query).await?;
    let body = html! {
        div.title-row { h1 { "Events" } a #send-link href="/send" { "Send an event" } }
        form.filters method="get" action="/events" {
            label { "Name " input name="name" value=[shown.name.as_deref()] placeholder="user.created"; }
            label { "Source "
                input name="source" list="sources" value=[shown.source.as_deref()] placeholder="any";
                datalist #sources { @for s in SOURCES { option value=(s) {} } }
            }
            label { "Outcome "
                select name="status" {
                    option value="" { "any" }
                    @for s in EventStatus::ALL {
                        option value=(s.as_str()) selected[shown.status == Some(s)] { (s.as_str().replace('_', " ")) }
                    }
                }
            }
            label { "From (UTC) " (page::time_input("from", shown_from)) }
            label { "To (UTC) " (page::time_input("to", shown.to)) }
            label.grow { "Payload contains " input type="search" name="q" maxlength=(MAX_SEARCH_CHARS) value=[shown.q.as_deref()] placeholder="text in the payload JSON"; }
            button type="submit" { "Filter" }
            a.clear href="/events" { "Clear" }
        }
        (super::bulk::buttons("/events/bulk", &[("replay", "Replay all matching…")], &bulk_filters))
        @if let Some(w) = within {
            @let others: Vec<Within> = [Within::Hour, Within::Day, Within::All]
                .into_iter()
                .filter(|o| *o != w)
                .collect();
            p.search-window #search-window {
                "Payload search covers " b { (w.describe()) } ". Search "
                @for (i, other) in others.iter().enumerate() {
                    @if i > 0 { " or " }
                    a href=(widen(*other)) { (other.describe()) }
                }
                " instead, or set From."
            }
        }
        @let table = html! {
            @if events.items.is_empty() {
                p.muted.empty { "No event matches." }
            } @else {
                table.events {
                    thead { tr { th { "Received" } th { "Name" } th { "Outcome" } th { "Runs" } th { "Source" } th { "Payload" } } }
                    tbody {
                        @for e in &events.items {
                            tr data-event-id=(e.event.id) {
                                td { (page::time(e.event.timestamp)) }
                                td {
                                    a href=(page::event_href(&e.event.id)) { (e.event.name) }
                                    br; span.id.mono.muted title=(e.event.id) { (page::short(&e.event.id, 40)) }
                                }
                                td { (page::badge(e.status.as_str())) }
                                td { (run_counts(&e.run_counts)) }
                                td { (page::source(&e.event.source)) }
                                td.payload { (page::json_short(&e.event.payload, 80)) }
                            }
                        }
                    }
                }
            }
            (page::pager("/events", &filters, at_start, events.next_cursor))
        };
        @if at_start { (page::live("events-live", table)) } @else { (table) }
    };
    Ok(layout(&state, "Events", "/events", body))
}

/// An event's runs counted by state, as small coloured counts (zero counts left out).
pub fn run_counts(c: &RunCounts) -> Markup {
    let parts = [
        (c.queued, "queued"),
        (c.running, "running"),
        (c.succeeded, "succeeded"),
        (c.failed, "failed"),
        (c.cancelled, "cancelled"),
    ];
    html! {
        @if c.total() == 0 { span.muted { "none" } }
        @for (n, state) in parts {
            @if n > 0 { span class={ "count st-" (state) } title=(state) { (n) " " (state) } " " }
        }
    }
}

/// The delivery id of a webhook event's id `<provider>:<delivery id>:<n>`.
fn delivery_id_of<'a>(event_id: &'a str, provider: &str) -> Option<&'a str> {
    let rest = event_id.strip_prefix(provider)?.strip_prefix(':')?;
    rest.rsplit_once(':').map(|(id, _)| id)
}

/// `GET /events/{id}`.
pub async fn detail(State(state): State<AppState>, Path(id): Path<String>) -> PageResult {
    detail_page(&state, &id, None).await
}

/// A replay payload that was not sent, shown again in the form with why.
struct ReplayEdit {
    /// The text as the user left it.
    text: String,
    /// What is wrong with it.
    error: String,
}

/// The event page; with `edit`, the replay form shows that text and its error, answered 400.
async fn detail_page(state: &AppState, id: &str, edit: Option<ReplayEdit>) -> PageResult {
    let store = state.client.store();
    let detail = store
        .event_detail(id)
        .await?
        .ok_or_else(|| PageError::not_found(format!("event {id:?} not found")))?;
    let counts = RunCounts::of_runs(&detail.runs);
    let status = EventStatus::of(&detail.event, &counts);
    let event = &detail.event;
    let parent = match &event.parent_run_id {
        Some(run) => store.run_detail(run).await?,
        None => None,
    };
    let provider = event.source.strip_prefix("webhook:");
    let delivery: Option<WebhookDelivery> = match provider {
        Some(provider) => {
            let wanted = delivery_id_of(&event.id, provider);
            store
                .webhook_deliveries_list(Some(provider), DELIVERY_LOOKBACK)
                .await?
                .into_iter()
                .find(|d| Some(d.delivery_id.as_str()) == wanted || d.event_ids.contains(&event.id))
        }
        None => None,
    };
    // A source created with "scheme": "none" delivers unverified events: say so.
    let unverified = match provider {
        Some(p) => crate::http::webhooks::find(state, p)
            .await
            .ok()
            .flatten()
            .is_some_and(|s| !s.settings.verified()),
        None => false,
    };
    let mut logs = Vec::new();
    for run in detail.runs.iter().take(RUNS_WITH_LOGS) {
        if let Some(d) = store.run_detail(&run.id).await? {
            logs.extend(
                d.logs
                    .into_iter()
                    .map(|l| (run.job_id.clone(), run.id.clone(), l)),
            );
        }
    }
    logs.sort_by_key(|(_, _, l)| l.at);
    let scheduled = status == EventStatus::Scheduled;
    let payload_text = match &edit {
        Some(edit) => edit.text.clone(),
        None => serde_json::to_string_pretty(&event.payload)
            .unwrap_or_else(|_| event.payload.to_string()),
    };
    let body = html! {
        div.title-row {
            h1 { (event.name) }
            (page::live("event-status", page::badge(status.as_str())))
        }
        dl.facts {
            dt { "Id" } dd.mono { (event.id) }
            dt { "Source" } dd { (page::source(&event.source)) }
            dt { "Received" } dd { (page::time(event.timestamp)) }
            @if let Some(t) = event.deliver_at { dt { "Deliver at" } dd { (page::time(t)) } }
            dt { "Delivered" } dd { (page::time_opt(event.delivered_at)) }
            @if let Some(t) = event.cancelled_at { dt { "Cancelled" } dd { (page::time(t)) } }
        }
        section.chain {
            h2 { "Sent by" }
            @match (&event.parent_run_id, &parent) {
                (None, _) => { p.muted #parent { "Not sent by a job (" (event.source) ")." } }
                (Some(run), None) => { p #parent { "Run " (page::run_link(run)) " (no longer stored)" } }
                (Some(_), Some(p)) => {
                    p #parent {
                        "Run " (page::run_link(&p.run.id)) " of job " b { (p.run.job_id) }
                        " while handling event " (page::event_link(&p.run.event_id)) " "
                        (page::badge(p.run.status.as_str()))
                    }
                }
            }
            @if let Some(provider) = provider {
                h2 { "Webhook delivery" }
                @match &delivery {
                    Some(d) => {
                        p #delivery {
                            "Delivery " code { (d.delivery_id) } " (" (d.event_type) ") to "
                            a href={ "/webhooks?provider=" (super::page::url_encode(provider)) } { "/webhooks/" (provider) }
                            ", received " (page::time(d.received_at))
                            @if unverified { ", " span.badge.failed { "unverified" } " (the source checks no signature)" } @else { ", signature verified: " (page::badge(&d.outcome)) }
                        }
                    }
                    None => { p.muted #delivery { "Delivery " (delivery_id_of(&event.id, provider).unwrap_or("?")) " is no longer among the recent deliveries." } }
                }
            }
        }
        (page::live("event-runs", html! {
            section {
                h2 { "Runs it started (" (detail.runs.len()) ")" }
                @if detail.runs.is_empty() {
                    p.muted { @if scheduled { "None yet: the event is scheduled." } @else { "No job matched this event." } }
                } @else {
                    table.runs {
                        thead { tr { th { "Job" } th { "Version" } th { "State" } th { "Attempt" } th { "Finished" } th { "Output / error" } th { "Run" } } }
                        tbody {
                            @for r in &detail.runs {
                                tr data-run-id=(r.id) data-job=(r.job_id) {
                                    td { b { (r.job_id) } }
                                    td { (r.job_version) }
                                    td { (page::badge(r.status.as_str())) }
                                    td.num { (r.attempt) "/" (r.max_attempts) }
                                    td { (page::time_opt(r.finished_at)) }
                                    td {
                                        @if let Some(e) = &r.error { span.error { (page::short(e, 160)) } }
                                        @else if let Some(o) = &r.output { code { (page::json_short(o, 120)) } }
                                    }
                                    td { (page::run_link(&r.id)) }
                                }
                            }
                        }
                    }
                }
            }
            @if !logs.is_empty() {
                section {
                    h2 { "What its runs logged (" (logs.len()) ")" }
                    table.logs {
                        thead { tr { th { "Time" } th { "Job" } th { "Level" } th { "Message" } th { "Fields" } } }
                        tbody {
                            @for (job, run, l) in &logs {
                                tr class={ "lvl-" (l.level.as_str()) } {
                                    td { (page::time(l.at)) }
                                    td { a href=(page::run_href(run)) { (job) } " #" (l.attempt) }
                                    td { (l.level.as_str()) }
                                    td.msg { (l.message) }
                                    td { @if let Some(f) = &l.fields { code { (page::json_short(f, 160)) } } }
                                }
                            }
                        }
                    }
                }
            }
            (super::links::of_event(&detail))
            @if !detail.debounced.is_empty() {
                section.debounced {
                    h2 { "Folded into a later event's run (" (detail.debounced.len()) ")" }
                    ul {
                        @for d in &detail.debounced {
                            li data-debounced=(d.job_id) {
                                a href={ "/jobs#job-" (d.job_id) } { (d.job_id) } ": debounced into run "
                                a.mono href=(page::run_href(&d.run_id)) { (d.run_id) }
                            }
                        }
                    }
                }
            }
            @if !detail.skipped.is_empty() {
                section.skipped {
                    h2 { "Jobs it started no run of (" (detail.skipped.len()) ")" }
                    ul {
                        @for s in &detail.skipped {
                            li data-skipped=(s.job_id) {
                                a href={ "/jobs#job-" (s.job_id) } { (s.job_id) } ": " (s.reason)
                            }
                        }
                    }
                }
            }
            section {
                h2 { "Events its jobs sent (" (detail.children.len()) ")" }
                @if detail.children.is_empty() {
                    p.muted { "None." }
                } @else {
                    table.children {
                        thead { tr { th { "Received" } th { "Name" } th { "Sent by run" } th title=(super::page::CHAINED_ID) { "Event id" } } }
                        tbody {
                            @for c in &detail.children {
                                tr data-event-id=(c.id) {
                                    td { (page::time(c.timestamp)) }
                                    td { a href=(page::event_href(&c.id)) { (c.name) } }
                                    td { @if let Some(r) = &c.parent_run_id { (page::run_link(r)) } }
                                    td { (page::event_link(&c.id)) }
                                }
                            }
                        }
                    }
                }
            }
        }))
        section.two {
            div { h2 { "Payload" } (page::json_block(&event.payload)) }
            div {
                h2 { "Context" }
                @match &event.context { Some(c) => { (page::json_block(c)) } None => { p.muted { "None." } } }
            }
        }
        // Answering a failed replay (a POST), the live refresh reads the event's own URL.
        @let live_url = edit.as_ref().map(|_| page::event_href(&event.id));
        section.actions data-live-url=[live_url] {
            h2 { "Actions" }
            @if scheduled {
                form method="post" action={ (page::event_href(&event.id)) "/cancel" } {
                    button.danger #cancel type="submit" { "Cancel this scheduled event" }
                }
            }
            form.replay method="post" action={ (page::event_href(&event.id)) "/replay" } {
                label for="replay-payload" { "Replay with this payload (edit it to change what the jobs get):" }
                @if let Some(edit) = &edit {
                    p.error-text #replay-error role="alert" { (edit.error) }
                }
                textarea #replay-payload name="payload" rows="8" spellcheck="false" { (payload_text) }
                button #replay type="submit" { "Replay" }
            }
        }
    };
    let status = if edit.is_some() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    Ok(page::layout_with_status(
        state,
        status,
        &event.name,
        "/events",
        body,
    ))
}

/// `POST /events/{id}/replay` (form field `payload`: the edited JSON; absent or empty keeps the
/// original). Answers with a redirect to the new event; a payload that is not JSON answers the
/// event page again (400) with the edited text kept in the form and what is wrong with it.
pub async fn replay(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Form(form): Form<HashMap<String, String>>,
) -> Result<Response, PageError> {
    let payload = match form.get("payload").map(|p| p.trim()) {
        None | Some("") => None,
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(v) => Some(v),
            Err(e) => {
                let edit = ReplayEdit {
                    text: form.get("payload").cloned().unwrap_or_default(),
                    error: format!("The edited payload is not valid JSON: {e}; nothing was sent."),
                };
                return detail_page(&state, &id, Some(edit)).await;
            }
        },
    };
    let event = api::replay(&state, &id, payload).await?;
    Ok(Redirect::to(&page::event_href(&event.id)).into_response())
}

/// `POST /events/{id}/cancel`: cancels a scheduled event, then shows it again.
pub async fn cancel(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    state.client.cancel_event(&id).await?;
    Ok(Redirect::to(&page::event_href(&id)).into_response())
}

/// Whether a run in `status` can be retried from the dashboard.
pub fn retryable(status: RunStatus) -> bool {
    matches!(status, RunStatus::Failed | RunStatus::Cancelled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivery_ids_come_from_webhook_event_ids() {
        assert_eq!(
            delivery_id_of("payments:evt_1:0", "payments"),
            Some("evt_1")
        );
        assert_eq!(
            delivery_id_of("auth:msg:with:colons:2", "auth"),
            Some("msg:with:colons")
        );
        assert_eq!(delivery_id_of("evt_x", "payments"), None);
    }
}
