//! The overview (`/`): events and runs over time as charts, success and failure rates per job in
//! the window, the queue now, and the latest failed runs. `?window=24h` widens the window from the
//! last hour (minute buckets) to the last day (hour buckets).

use std::collections::HashMap;
use std::sync::OnceLock;

use axum::extract::{Query, State};
use maud::html;

use super::cache::Cache;
use super::charts::{self, Stack};
use super::page::{self, layout, PageResult, Params};
use crate::http::AppState;
use crate::model::{ms_to_time, RunStatus};
use crate::store::query::{RunQuery, Stats, StatsQuery, StatsWindow};

/// Failed runs listed under "Recent failures".
const RECENT_FAILURES: usize = 10;

/// `GET /`.
pub async fn page(
    State(state): State<AppState>,
    Query(raw): Query<HashMap<String, String>>,
) -> PageResult {
    let params = Params::new(raw);
    let window = params
        .parse("window", "1h or 24h", StatsWindow::parse)?
        .unwrap_or(StatsWindow::Hour);
    let store = state.client.store();
    let now = ms_to_time(state.client.clock().now_ms());
    let (stats, as_of) = {
        static CACHE: OnceLock<Cache<Stats>> = OnceLock::new();
        let key = format!("{}|{window:?}", state.config.database_url);
        let reader = store.clone();
        CACHE
            .get_or_init(Cache::default)
            .get(key, now.timestamp_millis(), move || async move {
                reader.stats(StatsQuery { window, now }).await
            })
            .await?
    };
    let failures = store
        .runs_list(RunQuery {
            status: Some(RunStatus::Failed),
            limit: RECENT_FAILURES,
            ..RunQuery::default()
        })
        .await?;
    let label_format = match window {
        StatsWindow::Hour => "%H:%M",
        StatsWindow::Day => "%m-%d %H:00",
    };
    let label = |t: chrono::DateTime<chrono::Utc>| t.format(label_format).to_string();
    let events: Vec<Stack> = stats
        .buckets
        .iter()
        .map(|b| Stack {
            label: format!("{} events", label(b.start)),
            parts: vec![(b.events, "c-events")],
        })
        .collect();
    let runs: Vec<Stack> = stats
        .buckets
        .iter()
        .map(|b| Stack {
            label: format!(
                "{}: {} succeeded, {} failed",
                label(b.start),
                b.runs.succeeded,
                b.runs.failed
            ),
            parts: vec![(b.runs.succeeded, "c-ok"), (b.runs.failed, "c-fail")],
        })
        .collect();
    let (first, last) = (label(stats.from), "now".to_string());
    let span = match window {
        StatsWindow::Hour => "last hour",
        StatsWindow::Day => "last 24 hours",
    };
    let q = stats.queue;
    let body = html! {
        div.title-row {
            h1 { "Overview" }
            nav.tabs {
                a.active[window == StatsWindow::Hour] href="/?window=1h" { "Last hour" }
                a.active[window == StatsWindow::Day] href="/?window=24h" { "Last 24 hours" }
            }
            (page::live("overview-as-of", html! {
                span.muted.as-of { "counts as of " (ms_to_time(as_of).format("%H:%M:%S")) " UTC" }
            }))
        }
        (page::live("overview-live", html! {
            section.tiles {
                div.tile { span.num { (stats.events) } span.lbl { "events, " (span) } }
                div.tile.ok { span.num { (stats.runs.succeeded) } span.lbl { "runs succeeded" } }
                div.tile.fail { span.num { (stats.runs.failed) } span.lbl { "runs failed" } }
                div.tile { span.num { (page::percent(stats.runs.failure_rate)) } span.lbl { "failure rate" } }
                div.tile { span.num { (q.ready) } span.lbl { "queued, ready" } }
                div.tile { span.num { (q.delayed) } span.lbl { "waiting to retry" } }
                div.tile { span.num { (q.running) } span.lbl { "running" } }
                div.tile { span.num { (q.scheduled_events) } span.lbl { "scheduled events" } }
            }
            section.charts {
                div.chart-box {
                    h2 { "Events received" }
                    (charts::stacked_bars("events received", &events, &first, &last))
                }
                div.chart-box {
                    h2 { "Runs finished " span.legend { span.key.c-ok {} "succeeded " span.key.c-fail {} "failed" } }
                    (charts::stacked_bars("runs finished", &runs, &first, &last))
                }
            }
            section {
                h2 { "Jobs, " (span) }
                @if stats.jobs.is_empty() {
                    p.muted { "No run finished in this window." }
                } @else {
                    table.jobs-rates {
                        thead { tr { th { "Job" } th { "Succeeded" } th { "Failed" } th { "Failure rate" } th {} } }
                        tbody {
                            @for j in &stats.jobs {
                                tr data-job=(j.job_id) {
                                    td { a href={ "/runs?jobId=" (super::url_encode(&j.job_id)) } { (j.job_id) } }
                                    td.num { (j.runs.succeeded) }
                                    td.num { (j.runs.failed) }
                                    td.num.rate { (page::percent(j.runs.failure_rate)) }
                                    td { (charts::rate_bar(j.runs.succeeded, j.runs.failed)) }
                                }
                            }
                        }
                    }
                }
            }
            section {
                h2 { "Recent failures" }
                @if failures.items.is_empty() {
                    p.muted { "No failed run." }
                } @else {
                    table.failures {
                        thead { tr { th { "Finished" } th { "Job" } th { "Event" } th { "Error" } th { "Run" } } }
                        tbody {
                            @for r in &failures.items {
                                tr {
                                    td { (page::time_opt(r.run.finished_at)) }
                                    td { (r.run.job_id) }
                                    td { a href=(page::event_href(&r.run.event_id)) { (r.event_name) } }
                                    td.error { (page::short(r.run.error.as_deref().unwrap_or(""), 120)) }
                                    td { (page::run_link(&r.run.id)) }
                                }
                            }
                        }
                    }
                    p { a href="/runs?status=failed" { "All failed runs »" } }
                }
            }
        }))
    };
    Ok(layout(&state, "Overview", "/", body))
}
