//! Jobs (`/jobs`): every stored definition with its version, trigger and payload filter, retry and
//! timeout settings (a scheduled job's schedule and next run time), where it runs (its HTTP endpoint, or the live nodes defining it in code), its
//! runs queued and running now, and its success rate over the last hour and day. A job that no live
//! node or endpoint runs is flagged "not served", and a banner above the table names those with
//! queued runs: such runs wait until something serves the job again.

use std::sync::OnceLock;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{html, Markup};

use super::cache::Cache;
use super::charts;
use super::page::{self, layout, PageError, PageResult};
use crate::http::{api, AppState};
use crate::model::ms_to_time;
use crate::store::held::JobKeys;
use crate::store::query::{JobSchedule, JobSummary};
use crate::store::JobPlacement;

/// What the "not served" flag says on hover.
const NOT_SERVED: &str = "no live node or endpoint runs this job: its runs stay queued";

/// The jobs page's rates, cached (see [`Cache`]); an action forgets them.
fn cache() -> &'static Cache<Vec<JobSummary>> {
    static CACHE: OnceLock<Cache<Vec<JobSummary>>> = OnceLock::new();
    CACHE.get_or_init(Cache::default)
}

/// `POST /jobs/{id}/pause`: pauses the job, then shows the jobs page.
pub async fn pause(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    set_paused(&state, &id, true).await
}

/// `POST /jobs/{id}/resume`: resumes the job, then shows the jobs page.
pub async fn resume(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    set_paused(&state, &id, false).await
}

async fn set_paused(state: &AppState, id: &str, paused: bool) -> Result<Response, PageError> {
    api::job_pause(state, id, paused).await?;
    cache().forget(&state.config.database_url);
    Ok(Redirect::to(&format!("/jobs#job-{}", super::page::url_encode(id))).into_response())
}

/// `GET /jobs`.
pub async fn page(State(state): State<AppState>) -> PageResult {
    let now = ms_to_time(state.client.clock().now_ms());
    let (jobs, as_of) = {
        let reader = state.client.store().clone();
        cache()
            .get(
                state.config.database_url.clone(),
                now.timestamp_millis(),
                move || async move { reader.jobs_list(now).await },
            )
            .await?
    };
    let stuck: Vec<&JobSummary> = jobs
        .iter()
        .filter(|j| !j.placement.served && j.queued > 0)
        .collect();
    let body = html! {
        div.title-row {
            h1 { "Jobs" }
            span.muted.as-of { "rates as of " (ms_to_time(as_of).format("%H:%M:%S")) " UTC" }
        }
        (page::live("jobs-live", html! {
            @if !stuck.is_empty() {
                div.warning #unserved role="alert" {
                    b { "Queued runs that nothing runs: " }
                    @for (i, j) in stuck.iter().enumerate() {
                        @if i > 0 { ", " }
                        a href={ "/runs?status=queued&jobId=" (super::page::url_encode(&j.job.id)) } { (j.job.id) }
                        " (" (j.queued) ")"
                    }
                    ". No live node or endpoint serves "
                    (if stuck.len() == 1 { "this job" } else { "these jobs" })
                    ": start a process that defines it, or register (or re-index) the endpoint that serves it."
                }
            }
            @if jobs.is_empty() {
                p.muted.empty { "No job is defined yet." }
            } @else {
                table.jobs {
                    thead { tr {
                        th { "Job" } th { "Version" } th { "Trigger" } th { "Filter" } th { "Runs on" } th { "Attempts" } th { "Timeout" } th { "Limits" }
                        th { "Queued" } th { "Running" } th { "Last hour" } th { "Last 24 h" } th { "Updated" } th { "State" }
                    } }
                    tbody {
                        @for j in &jobs {
                            tr data-job=(j.job.id) id={ "job-" (j.job.id) } {
                                td {
                                    a href={ "/runs?jobId=" (super::page::url_encode(&j.job.id)) } { b { (j.job.id) } }
                                    br; span.muted { (j.job.name) }
                                }
                                td { (j.job.version) }
                                td.trigger {
                                    @if let Some(s) = &j.schedule {
                                        span.schedule { code { (s.description) } }
                                        @if let Some(next) = s.next_runs.first() {
                                            br; span.muted.next-run title=(next_runs_title(s)) { "next " (page::time(*next)) }
                                        }
                                        br; a.muted href={ "/events?name=" (super::page::url_encode(&j.job.event)) } { "ticks" }
                                    } @else {
                                        a href={ "/events?name=" (super::page::url_encode(&j.job.event)) } { code { (breakable(&j.job.event, &['.'])) } }
                                    }
                                }
                                td { @match &j.job.filter { Some(f) => { code { (page::json_short(f, 80)) } } None => { span.muted { "—" } } } }
                                td.placement { (placement(&j.placement)) }
                                td.num { (j.job.max_attempts) }
                                td.num { (j.job.timeout_ms / 1000) " s" }
                                td.limits {
                                    @if j.job.concurrency_limits.is_empty() && j.job.rate_limit.is_none() && j.job.throttle.is_none() && j.job.start_timeout_ms.is_none() && j.job.debounce.is_none() && j.job.priority.is_none() {
                                        span.muted { "—" }
                                    }
                                    @if let Some(d) = &j.job.debounce {
                                        span.limit title="one run per burst of events, started this long after the last of them" {
                                            "debounced " (d["periodMs"].as_u64().unwrap_or(0) / 1000) " s"
                                            @if let Some(key) = d["key"].as_str() { " per " code { (key) } }
                                            @if let Some(t) = d["timeoutMs"].as_u64() { " (at most " (t / 1000) " s)" }
                                        }
                                        br;
                                    }
                                    @if let Some(run) = j.job.priority.as_ref().and_then(|p| p["run"].as_str()) {
                                        span.limit title="seconds earlier than due its runs are taken (−600 to 600), among due runs" {
                                            "priority " code { (run) }
                                        }
                                        br;
                                    }
                                    @if let Some(ms) = j.job.start_timeout_ms {
                                        span.limit title="a run not started this long after it became due is cancelled" {
                                            "expires unstarted after " (ms / 1000) " s"
                                        }
                                        br;
                                    }
                                    @if let Some(t) = &j.job.throttle {
                                        span.limit title="run starts per period; the others wait queued, in order" {
                                            "throttled to " (t["limit"]) " starts per " (t["periodMs"].as_u64().unwrap_or(0) / 1000) " s"
                                            @if t["burst"].as_u64().unwrap_or(1) > 1 { " (burst " (t["burst"]) ")" }
                                            @if let Some(key) = t["key"].as_str() { " per " code { (key) } }
                                        }
                                        br;
                                    }
                                    @if let Some(r) = &j.job.rate_limit {
                                        span.limit title="runs created per period; events beyond it start no run of this job" {
                                            "at most " (r["limit"]) " started per " (r["periodMs"].as_u64().unwrap_or(0) / 1000) " s"
                                            @if let Some(key) = r["key"].as_str() { " per " code { (key) } }
                                        }
                                        @if !j.job.concurrency_limits.is_empty() { br; }
                                    }
                                    @for (i, l) in j.job.concurrency_limits.iter().enumerate() {
                                        @if i > 0 { br; }
                                        (limit_text(l))
                                    }
                                    (keys_text(&j.keys))
                                }
                                td.num { (j.queued) }
                                td.num { (j.running) }
                                td.rate {
                                    (charts::rate_bar(j.last_hour.succeeded, j.last_hour.failed))
                                    " " span.success { (page::percent(j.last_hour.success_rate)) }
                                    br; span.muted { (j.last_hour.succeeded) " ok, " (j.last_hour.failed) " failed" }
                                }
                                td.rate {
                                    (charts::rate_bar(j.last_day.succeeded, j.last_day.failed))
                                    " " (page::percent(j.last_day.success_rate))
                                }
                                td { (page::time(j.job.updated_at)) }
                                td.state {
                                    @let action = if j.job.paused { "resume" } else { "pause" };
                                    @if j.job.paused {
                                        span.badge.st-paused title="its runs are created but not claimed until it is resumed" { "paused" } " "
                                    }
                                    form.inline method="post" action={ "/jobs/" (super::page::url_encode(&j.job.id)) "/" (action) } {
                                        button.pause type="submit" data-action=(action) { @if j.job.paused { "Resume" } @else { "Pause" } }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }))
    };
    Ok(layout(&state, "Jobs", "/jobs", body))
}

/// The upcoming run times of a scheduled job, for the hover text of its next run.
fn next_runs_title(s: &JobSchedule) -> String {
    let times: Vec<String> = s
        .next_runs
        .iter()
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .collect();
    format!("next runs: {}", times.join(", "))
}

/// Live node ids listed on a job's row; more are counted (all of them on hover).
const NODES_SHOWN: usize = 3;

/// Where a job runs: its endpoint and how many live nodes call it, or the live nodes defining it;
/// flagged when nothing serves it; the note of its last change of owner (one job id, one owner).
fn placement(p: &JobPlacement) -> Markup {
    let live_nodes = if p.nodes.len() == 1 {
        "live node"
    } else {
        "live nodes"
    };
    html! {
        @if let Some(e) = &p.endpoint {
            @let shown = e.url.split_once("://").map_or(e.url.as_str(), |(_, rest)| rest);
            a.endpoint href={ "/endpoints#" (super::page::url_encode(&e.id)) } title=(e.url) { code { (breakable(&page::short(shown, 48), &['.', ':', '/'])) } }
            br; span.muted.callers { "called by " (p.nodes.len()) " " (live_nodes) } br;
        } @else {
            @for node in p.nodes.iter().take(NODES_SHOWN) {
                span.mono.node { (node) } br;
            }
            @if p.nodes.len() > NODES_SHOWN {
                span.muted title=(p.nodes.join(", ")) { "+" (p.nodes.len() - NODES_SHOWN) " more" } br;
            }
        }
        @if !p.served {
            span.badge.st-not_served title=(NOT_SERVED) { "not served" }
        }
        @if let Some(note) = &p.owner_note {
            br; span.owner-note title=(note.message) { "owner changed " (page::time(note.at)) ": " (note.message) }
        }
    }
}

/// `text` allowed to wrap only after the characters `after` (`payment.` / `succeeded`), never
/// mid-word.
fn breakable(text: &str, after: &[char]) -> Markup {
    html! {
        @for part in text.split_inclusive(after) {
            (part) wbr;
        }
    }
}

/// A concurrency limit as the jobs page shows it: `1 at once per event.payload.customerId`,
/// `10 at once in group openai`, `5 at once`.
fn limit_text(limit: &serde_json::Value) -> Markup {
    let n = limit["limit"].as_u64().unwrap_or(0);
    html! {
        span.limit title="runs executing at once, across every process" {
            (n) " at once"
            @if let Some(key) = limit["key"].as_str() {
                " per " code { (key) }
            } @else if let Some(group) = limit["group"].as_str() {
                " in group " code { (group) }
            }
        }
    }
}

/// A job's keys under flow control now: how many are at their limit, and its busiest keys with
/// their running and queued runs (`cus_1: 1 of 1 running, 12 queued`).
fn keys_text(keys: &JobKeys) -> Markup {
    html! {
        @if keys.at_limit > 0 || !keys.top.is_empty() {
            div.keys {
                @if keys.at_limit > 0 {
                    span.at-limit title="keys (or the whole job) with as many runs executing as their limit allows: their queued runs wait" {
                        (keys.at_limit) @if keys.at_limit == 1 { " key at its limit" } @else { " keys at their limit" }
                    }
                }
                @for k in &keys.top {
                    br;
                    span.key.at[k.at_limit()] title="runs executing and queued in this key now (the keys with the most queued runs)" {
                        @match &k.key {
                            Some(key) => code { (page::short(key, 24)) },
                            None => "whole job",
                        }
                        ": " (k.running)
                        @if let Some(limit) = k.limit { " of " (limit) }
                        " running, " (k.queued) " queued"
                    }
                }
            }
        }
    }
}
