//! Bulk actions from the lists (`POST /runs/bulk`, `POST /events/bulk`): the list's filter
//! travels in hidden fields; the first post counts what the action would change (a dry run of
//! [`crate::http::bulk`]) and shows "Retry all N runs?" with a confirm button, whose post
//! (`confirm=1`) acts and says how many were changed. At most 10,000 per action (the page says so).

use std::collections::HashMap;

use axum::extract::State;
use axum::response::Response;
use axum::Form;
use maud::{html, Markup};

use super::page::{self, layout, PageError, Params};
use crate::http::bulk::{self, BulkOutcome, EventFilter, RunFilter, BULK_MAX};
use crate::http::AppState;
use crate::store::BulkRunAction;

/// The list-page buttons that start a bulk action on what `filters` select.
pub fn buttons(to: &str, actions: &[(&str, &str)], filters: &[(&str, Option<String>)]) -> Markup {
    html! {
        div.bulk {
            @for (action, label) in actions {
                form.inline method="post" action=(to) {
                    (hidden(filters))
                    input type="hidden" name="action" value=(action);
                    button.bulk type="submit" data-bulk=(action) { (label) }
                }
                " "
            }
        }
    }
}

fn hidden(filters: &[(&str, Option<String>)]) -> Markup {
    html! {
        @for (k, v) in filters {
            @if let Some(v) = v { input type="hidden" name=(k) value=(v); }
        }
    }
}

/// The confirmation (before) or the result (after) of a bulk action.
fn answer(
    state: &AppState,
    list: &str,
    noun: &str,
    verb: &str,
    done: &str,
    outcome: &BulkOutcome,
    filters: &[(&str, Option<String>)],
) -> Response {
    let back = format!("{list}{}", page::query_string(filters));
    let body = html! {
        h1 { (verb) " all matching " (noun) }
        @if outcome.dry_run {
            @if outcome.count == 0 {
                p #bulk-count data-count="0" { "No " (noun) " to " (verb.to_lowercase()) " match this filter." }
                a href=(back) { "Back" }
            } @else {
                p #bulk-count data-count=(outcome.count) {
                    (verb) " all " b { (outcome.count) } " " (noun) "?"
                    @if outcome.truncated { " (the newest " (BULK_MAX) "; more match: run it again for the rest)" }
                }
                form method="post" action={ (list) "/bulk" } {
                    (hidden(filters))
                    input type="hidden" name="action" value=(outcome.action);
                    input type="hidden" name="confirm" value="1";
                    button #bulk-confirm type="submit" { (verb) " all " (outcome.count) }
                    " " a href=(back) { "Cancel" }
                }
            }
        } @else {
            p #bulk-done data-acted=(outcome.acted) {
                (done) " " b { (outcome.acted) } " of " (outcome.count) " " (noun) "."
                @if outcome.acted < outcome.count { " The others changed state meanwhile." }
            }
            a href=(back) { "Back to the list" }
        }
    };
    layout(state, &format!("{verb} all"), list, body)
}

/// `POST /runs/bulk` (form: `action` retry|cancel, the list's `jobId`, `status`, `eventId`,
/// `confirm`).
pub async fn runs(
    State(state): State<AppState>,
    Form(form): Form<HashMap<String, String>>,
) -> Result<Response, PageError> {
    let p = Params::new(form);
    let action = bulk::run_action(&p.text("action").unwrap_or_default())?;
    let filters = [
        ("jobId", p.text("jobId")),
        ("status", p.text("status")),
        ("eventId", p.text("eventId")),
    ];
    let filter = RunFilter {
        job_id: p.text("jobId"),
        status: p.text("status"),
        event_id: p.text("eventId"),
    };
    let confirm = p.text("confirm").is_some();
    let outcome = bulk::runs(&state, action, filter, !confirm).await?;
    let (verb, done) = match action {
        BulkRunAction::Retry => ("Retry", "Queued again"),
        BulkRunAction::Cancel => ("Cancel", "Cancelled"),
    };
    Ok(answer(
        &state, "/runs", "runs", verb, done, &outcome, &filters,
    ))
}

/// `POST /events/bulk` (form: `action` replay, the list's `name`, `source`, `status`, `from`,
/// `to`, `q`, `confirm`).
pub async fn events(
    State(state): State<AppState>,
    Form(form): Form<HashMap<String, String>>,
) -> Result<Response, PageError> {
    let p = Params::new(form);
    if p.text("action").as_deref() != Some("replay") {
        return Err(PageError::new(
            axum::http::StatusCode::BAD_REQUEST,
            "events take the action \"replay\"",
        ));
    }
    let from = p.time("from")?;
    let to = p.time("to")?;
    let filters = [
        ("name", p.text("name")),
        ("source", p.text("source")),
        ("status", p.text("status")),
        ("from", from.map(page::input_time)),
        ("to", to.map(page::input_time)),
        ("q", p.text("q")),
    ];
    let filter = EventFilter {
        name: p.text("name"),
        source: p.text("source"),
        status: p.text("status"),
        from,
        to,
        q: p.text("q"),
    };
    let confirm = p.text("confirm").is_some();
    let outcome = bulk::events(&state, filter, !confirm).await?;
    Ok(answer(
        &state, "/events", "events", "Replay", "Replayed", &outcome, &filters,
    ))
}
