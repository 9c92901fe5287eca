//! Runs: the list (`/runs`, filtered by job and state, newest first) and one run (`/runs/{id}`:
//! the payload it ran with, its attempts and durable steps on a timeline, the steps' outputs and
//! errors, its log lines, output and error, the events it sent) with the retry action for a
//! failed or cancelled run.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;

use super::charts::{self, Span};
use super::events::retryable;
use super::page::{self, layout, PageError, PageResult, Params};
use crate::http::{api, AppState};
use crate::model::{RunStatus, Step, StepStatus};
use crate::store::query::{RunQuery, DEFAULT_LIMIT};

/// `GET /runs`.
pub async fn list(
    State(state): State<AppState>,
    Query(raw): Query<HashMap<String, String>>,
) -> PageResult {
    let p = Params::new(raw);
    let statuses = RunStatus::ALL.map(RunStatus::as_str).join(", ");
    let query = RunQuery {
        job_id: p.text("jobId"),
        status: p.parse("status", &format!("one of {statuses}"), RunStatus::parse)?,
        event_id: p.text("eventId"),
        limit: DEFAULT_LIMIT,
        cursor: p.cursor()?,
    };
    let filters = [
        ("jobId", query.job_id.clone()),
        ("status", query.status.map(|s| s.as_str().to_string())),
        ("eventId", query.event_id.clone()),
    ];
    let at_start = query.cursor.is_none();
    let shown = query.clone();
    let store = state.client.store();
    // The job choices come from the definitions in memory: counting every job's outcomes (what
    // `jobs_list` does) would cost more than the page itself at a million runs.
    let jobs: Vec<String> = store.triggers().all().into_iter().map(|j| j.id).collect();
    let runs = store.runs_list(query).await?;
    let body = html! {
        h1 { "Runs" }
        form.filters method="get" action="/runs" {
            label { "Job "
                select name="jobId" {
                    option value="" { "any" }
                    @for j in &jobs {
                        option value=(j) selected[shown.job_id.as_deref() == Some(j.as_str())] { (j) }
                    }
                }
            }
            label { "State "
                select name="status" {
                    option value="" { "any" }
                    @for s in RunStatus::ALL {
                        option value=(s.as_str()) selected[shown.status == Some(s)] { (s.as_str()) }
                    }
                }
            }
            @if let Some(e) = &shown.event_id {
                label { "Event " input name="eventId" value=(e); }
            }
            button type="submit" { "Filter" }
            a.clear href="/runs" { "Clear" }
        }
        (super::bulk::buttons("/runs/bulk", &[("retry", "Retry all matching…"), ("cancel", "Cancel all matching…")], &filters))
        @let table = html! {
            @if runs.items.is_empty() {
                p.muted.empty { "No run matches." }
            } @else {
                table.runs {
                    thead { tr { th { "Created" } th { "Job" } th { "Version" } th { "State" } th { "Attempt" } th { "Node" } th { "Event" } th { "Finished" } th { "Error" } th { "Run" } } }
                    tbody {
                        @for r in &runs.items {
                            tr data-run-id=(r.run.id) {
                                td { (page::time(r.run.created_at)) }
                                td { b { (r.run.job_id) } }
                                td { (r.run.job_version) }
                                td { (page::badge(r.run.status.as_str())) }
                                td.num { (r.run.attempt) "/" (r.run.max_attempts) }
                                td.node { (r.run.node.as_deref().unwrap_or("")) }
                                td { a href=(page::event_href(&r.run.event_id)) { (r.event_name) } }
                                td { (page::time_opt(r.run.finished_at)) }
                                td.error { (page::short(r.run.error.as_deref().unwrap_or(""), 100)) }
                                td { (page::run_link(&r.run.id)) }
                            }
                        }
                    }
                }
            }
            (page::pager("/runs", &filters, at_start, runs.next_cursor))
        };
        @if at_start { (page::live("runs-live", table)) } @else { (table) }
    };
    Ok(layout(&state, "Runs", "/runs", body))
}

/// `GET /runs/{id}`.
pub async fn detail(State(state): State<AppState>, Path(id): Path<String>) -> PageResult {
    let store = state.client.store();
    let detail = store
        .run_detail(&id)
        .await?
        .ok_or_else(|| PageError::not_found(format!("run {id:?} not found")))?;
    let event = store.event_detail(&detail.run.event_id).await?;
    let run = &detail.run;
    let sent: Vec<_> = event
        .as_ref()
        .map(|e| {
            e.children
                .iter()
                .filter(|c| c.parent_run_id.as_deref() == Some(run.id.as_str()))
                .collect()
        })
        .unwrap_or_default();
    // An endpoint's job has no Rust API: the empty steps section says so in its terms.
    let endpoint_job = store
        .job_owners()
        .await?
        .get(&detail.run.job_id)
        .is_some_and(Option::is_some);
    let now = state.client.clock().now_ms();
    let numbers = execution_numbers(detail.attempts.iter().map(|a| a.attempt));
    let mut spans: Vec<Span> = detail
        .attempts
        .iter()
        .zip(&numbers)
        .map(|(a, number)| {
            let end = a.finished_at.timestamp_millis();
            Span {
                start: a.started_at.map_or(end, |t| t.timestamp_millis()),
                end,
                class: match a.outcome.as_str() {
                    "succeeded" => "c-ok",
                    "lost" | "released" | "waiting" => "c-warn",
                    _ => "c-fail",
                },
                row: format!("#{number}"),
                label: format!(
                    "attempt {number}: {}{}",
                    a.outcome,
                    a.error
                        .as_deref()
                        .map(|e| format!(" — {e}"))
                        .unwrap_or_default()
                ),
            }
        })
        .collect();
    if run.status == RunStatus::Running {
        if let Some(start) = run.started_at {
            spans.push(Span {
                start: start.timestamp_millis(),
                end: now,
                class: "c-run",
                row: format!("#{}", run.attempt),
                label: format!("attempt {}: running", run.attempt),
            });
        }
    }
    spans.extend(detail.steps.iter().map(|s| step_span(s, now)));
    // A queued run whose wait is pending is waiting: due when the wait is.
    let waiting = (run.status == RunStatus::Queued)
        .then(|| {
            detail
                .steps
                .iter()
                .find(|s| s.status == StepStatus::Waiting)
        })
        .flatten();
    let from = run.created_at.timestamp_millis();
    let to = spans
        .iter()
        .map(|s| s.end)
        .max()
        .unwrap_or(from)
        .max(from + 1);
    let body = html! {
        div.title-row {
            h1 { "Run of " (run.job_id) }
            (page::live("run-status", html! {
                (page::badge(run.status.as_str()))
                @if let Some(w) = waiting {
                    " " (page::badge("waiting")) span.muted { " on step " code { (w.key) } }
                }
            }))
        }
        dl.facts {
            dt { "Id" } dd.mono { (run.id) }
            dt { "Event" } dd {
                @match &event {
                    Some(e) => { a href=(page::event_href(&e.event.id)) { (e.event.name) } " " span.mono.muted { (e.event.id) } }
                    None => { span.mono { (run.event_id) } " (no longer stored)" }
                }
            }
            dt { "Job version" } dd { (run.job_version) }
            dt { "Created" } dd { (page::time(run.created_at)) }
            dt { "Run at" } dd { (page::time(run.run_at)) }
            @if let Some(w) = &detail.waiting_for {
                dt { "Waiting for" } dd #waiting-for { (w) }
            }
        }
        (page::live("run-live", html! {
            dl.facts {
                dt { "Attempt" } dd #attempt {
                    // A suspended attempt is given back (a wait is not an attempt): name the one
                    // that goes on when the wait ends, not the count used so far.
                    @if let Some(w) = waiting {
                        (w.attempt) " of " (run.max_attempts)
                        span.muted { ", suspended on step " code { (w.key) } ": a wait does not count as an attempt" }
                    } @else {
                        (run.attempt) " of " (run.max_attempts)
                    }
                }
                dt { "Started" } dd { (page::time_opt(run.started_at)) }
                dt { "Node" } dd #node { (run.node.as_deref().unwrap_or("not claimed yet")) }
                dt { "Finished" } dd { (page::time_opt(run.finished_at)) }
            }
            @if retryable(run.status) {
                form.actions method="post" action={ (page::run_href(&run.id)) "/retry" } {
                    button #retry type="submit" { "Retry" }
                    span.muted { " queues it again: attempt " (run.attempt + 1) " of " (run.max_attempts.max(run.attempt + 1)) }
                }
            }
            @if matches!(run.status, RunStatus::Queued | RunStatus::Running) {
                form.actions method="post" action={ (page::run_href(&run.id)) "/cancel" } {
                    button #cancel-run type="submit" { "Cancel" }
                    span.muted { " stops it: a running job is told, and its outcome is not recorded" }
                }
            }
            (super::links::of_run(&detail))
            @if let Some(w) = &detail.wait {
                section #run-waiting-for {
                    @match (w.event.as_str(), &w.match_value) {
                        ("flare/callback", Some(token)) => {
                            h2 { "Waiting for a callback" }
                            dl.facts {
                                dt { "URL" } dd #callback-url { code { "POST " (w.callback_url.clone().unwrap_or_else(|| format!("/callbacks/{token}"))) } " (step " code { (w.step_key) } ")" }
                            }
                        }
                        ("flare/job.invoked", Some(child)) => {
                            h2 { "Waiting for an invoked run" }
                            dl.facts { dt { "Run" } dd { (page::run_link(child)) " (step " code { (w.step_key) } ")" } }
                        }
                        _ => { h2 { "Waiting for an event" } }
                    }
                    dl.facts {
                        dt { "Event" } dd { code { (w.event) } " (step " code { (w.step_key) } ")" }
                        @if let (Some(path), Some(value)) = (&w.match_path, &w.match_value) {
                            dt { "Match" } dd { code { (path) } " = " code { (value) } }
                        }
                        @if let Some(c) = &w.condition {
                            dt { "Condition" } dd { code { (c) } }
                        }
                        dt { "Since" } dd { (page::time(w.since)) }
                        dt { "Deadline" } dd { (page::time(w.until)) " (then it goes on with nothing)" }
                    }
                }
            }
            @if let Some(e) = &run.error {
                section { h2 { "Error" } pre.error-text #run-error { (e) } }
            }
            @if let Some(o) = &run.output {
                section { h2 { "Output" } (page::json_block(o)) }
            }
            section #run-payload {
                h2 { "Payload" }
                @match &event {
                    Some(e) => {
                        p.muted { "The payload of event " (page::event_link(&e.event.id)) ", which every attempt ran with." }
                        (page::json_block(&e.event.payload))
                    }
                    None => { p.muted { "The event is no longer stored (pruned), and its payload with it." } }
                }
            }
            section {
                h2 { "Attempts and steps" }
                @if spans.is_empty() {
                    p.muted { "Not started yet." }
                } @else {
                    (charts::timeline(&spans, from, to))
                    table.attempts {
                        thead { tr { th { "#" } th { "Outcome" } th { "Started" } th { "Finished" } th { "Took" } th { "Error" } } }
                        tbody {
                            @for (a, number) in detail.attempts.iter().zip(&numbers) {
                                tr {
                                    @if number.contains('.') {
                                        td.num title="the same attempt, executed again after a wait" { (number) }
                                    } @else {
                                        td.num { (number) }
                                    }
                                    td { (page::badge(&a.outcome)) }
                                    td { (page::time_opt(a.started_at)) }
                                    td { (page::time(a.finished_at)) }
                                    td.num { @if let Some(s) = a.started_at { ((a.finished_at - s).num_milliseconds()) " ms" } }
                                    td.error { (a.error.as_deref().unwrap_or("")) }
                                }
                            }
                        }
                    }
                }
            }
            section {
                h2 { "Steps (" (detail.steps.len()) ")" }
                @if detail.steps.is_empty() && endpoint_job {
                    p.muted.no-steps { "None: this run's endpoint recorded no tasks, waits or chained events." }
                } @else if detail.steps.is_empty() {
                    p.muted.no-steps { "None: this run's job uses no io.run_task, io.wait or io.send_event." }
                } @else {
                    table.steps {
                        thead { tr { th { "Key" } th { "Kind" } th { "Status" } th { "Attempt" } th { "Started" } th { "Took" } th { "Output or error" } } }
                        tbody {
                            @for s in &detail.steps {
                                tr data-step-key=(s.key) {
                                    @if let Some(label) = &s.label {
                                        td title={ "key " (s.key) } { (label) }
                                    } @else {
                                        td.mono { (s.key) }
                                    }
                                    td { (s.kind.as_str()) }
                                    td { (page::badge(s.status.as_str())) }
                                    td.num { (s.attempt) }
                                    td { (page::time(s.started_at)) }
                                    td.num {
                                        @if let Some(ms) = s.duration_ms { (ms) " ms" }
                                        @else if let Some(due) = s.wait_until { "until " (page::time(due)) }
                                    }
                                    td {
                                        @if let Some(e) = &s.error { span.error { (page::short(e, 200)) } }
                                        @else if let Some(o) = &s.output { code { (page::json_short(o, 200)) } }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            section {
                h2 { "Logs (" (detail.logs.len()) ")" }
                @if detail.logs.is_empty() {
                    p.muted { "No log line." }
                } @else {
                    table.logs {
                        thead { tr { th { "Time" } th { "Attempt" } th { "Level" } th { "Message" } th { "Fields" } } }
                        tbody {
                            @for l in &detail.logs {
                                tr class={ "lvl-" (l.level.as_str()) } {
                                    td { (page::time(l.at)) }
                                    td.num { (l.attempt) }
                                    td { (l.level.as_str()) }
                                    td.msg { (l.message) }
                                    td { @if let Some(f) = &l.fields { code { (page::json_short(f, 200)) } } }
                                }
                            }
                        }
                    }
                }
            }
            section {
                h2 { "Events it sent (" (sent.len()) ")" }
                @if sent.is_empty() {
                    p.muted { "None." }
                } @else {
                    ul.sent {
                        @for c in &sent {
                            li { a href=(page::event_href(&c.id)) { (c.name) } " " span.muted.chained-id title=(page::CHAINED_ID) { "event id " span.mono { (c.id) } } }
                        }
                    }
                }
            }
        }))
    };
    Ok(layout(
        &state,
        &format!("Run of {}", run.job_id),
        "/runs",
        body,
    ))
}

/// A step on the timeline: from its start to its end (a pending wait: to its due time, or now
/// if that passed).
fn step_span(s: &Step, now: i64) -> Span {
    let start = s.started_at.timestamp_millis();
    let (end, class) = match s.status {
        StepStatus::Succeeded => (s.finished_at, "c-ok"),
        StepStatus::Failed => (s.finished_at, "c-fail"),
        StepStatus::Waiting => (s.wait_until, "c-warn"),
    };
    let end = end.map_or(now, |t| t.timestamp_millis()).max(start);
    let mut label = format!(
        "step {} ({}): {}",
        s.label.as_deref().unwrap_or(&s.key),
        s.kind.as_str(),
        s.status.as_str()
    );
    if let Some(due) = s.wait_until {
        label.push_str(&format!(" until {}", due.to_rfc3339()));
    }
    if let Some(e) = &s.error {
        label.push_str(&format!(" — {e}"));
    }
    Span {
        start,
        end,
        class,
        row: s.label.clone().unwrap_or_else(|| s.key.clone()),
        label,
    }
}

/// Each execution's number on the timeline: its attempt, and for an attempt executed again after
/// a wait (a wait does not count an attempt) `.2`, `.3`, … so the executions read apart.
fn execution_numbers(attempts: impl Iterator<Item = u32>) -> Vec<String> {
    let mut seen: std::collections::HashMap<u32, u32> = std::collections::HashMap::new();
    attempts
        .map(|a| {
            let n = seen.entry(a).or_insert(0);
            *n += 1;
            if *n == 1 {
                a.to_string()
            } else {
                format!("{a}.{n}")
            }
        })
        .collect()
}

/// `POST /runs/{id}/retry`: queues the run again, then shows it.
pub async fn retry(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    api::retry(&state, &id).await?;
    Ok(Redirect::to(&page::run_href(&id)).into_response())
}

/// `POST /runs/{id}/cancel`: cancels the queued or running run, then shows it.
pub async fn cancel(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    api::cancel(&state, &id).await?;
    Ok(Redirect::to(&page::run_href(&id)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ms_to_time, StepKind};

    fn step(status: StepStatus, finished: Option<i64>, due: Option<i64>) -> Step {
        Step {
            key: "nap".into(),
            kind: StepKind::Wait,
            status,
            attempt: 1,
            started_at: ms_to_time(1_000),
            finished_at: finished.map(ms_to_time),
            duration_ms: finished.map(|f| f - 1_000),
            wait_until: due.map(ms_to_time),
            output: None,
            error: None,
            label: None,
            outcome: None,
        }
    }

    #[test]
    fn executions_of_one_attempt_are_numbered_apart() {
        assert_eq!(
            execution_numbers([1, 1, 1, 2].into_iter()),
            ["1", "1.2", "1.3", "2"]
        );
    }

    #[test]
    fn a_pending_wait_spans_to_its_due_time_and_a_finished_step_to_its_end() {
        let pending = step_span(&step(StepStatus::Waiting, None, Some(9_000)), 5_000);
        assert_eq!(
            (pending.start, pending.end, pending.class),
            (1_000, 9_000, "c-warn")
        );
        assert_eq!(pending.row, "nap");
        assert!(pending.label.starts_with("step nap (wait): waiting until "));
        let done = step_span(
            &step(StepStatus::Succeeded, Some(9_500), Some(9_000)),
            20_000,
        );
        assert_eq!((done.end, done.class), (9_500, "c-ok"));
    }
}
