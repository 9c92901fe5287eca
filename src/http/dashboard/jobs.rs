//! Jobs (`/jobs`): every stored definition with its version, trigger and payload filter, retry and
//! timeout settings, its runs queued and running now, and its success rate over the last hour and
//! day.

use std::sync::OnceLock;

use axum::extract::State;
use maud::html;

use super::cache::Cache;
use super::charts;
use super::page::{self, layout, PageResult};
use crate::http::AppState;
use crate::model::ms_to_time;
use crate::store::query::JobSummary;

/// `GET /jobs`.
pub async fn page(State(state): State<AppState>) -> PageResult {
    let now = ms_to_time(state.client.clock().now_ms());
    let (jobs, as_of) = {
        static CACHE: OnceLock<Cache<Vec<JobSummary>>> = OnceLock::new();
        let reader = state.client.store().clone();
        CACHE
            .get_or_init(Cache::default)
            .get(
                state.config.database_url.clone(),
                now.timestamp_millis(),
                move || async move { reader.jobs_list(now).await },
            )
            .await?
    };
    let body = html! {
        div.title-row {
            h1 { "Jobs" }
            span.muted.as-of { "rates as of " (ms_to_time(as_of).format("%H:%M:%S")) " UTC" }
        }
        (page::live("jobs-live", html! {
            @if jobs.is_empty() {
                p.muted.empty { "No job is defined yet." }
            } @else {
                table.jobs {
                    thead { tr {
                        th { "Job" } th { "Version" } th { "Trigger" } th { "Filter" } th { "Attempts" } th { "Timeout" }
                        th { "Queued" } th { "Running" } th { "Last hour" } th { "Last 24 h" } th { "Updated" }
                    } }
                    tbody {
                        @for j in &jobs {
                            tr data-job=(j.job.id) {
                                td {
                                    a href={ "/runs?jobId=" (super::url_encode(&j.job.id)) } { b { (j.job.id) } }
                                    br; span.muted { (j.job.name) }
                                }
                                td { (j.job.version) }
                                td { a href={ "/events?name=" (super::url_encode(&j.job.event)) } { code { (j.job.event) } } }
                                td { @match &j.job.filter { Some(f) => { code { (page::json_short(f, 80)) } } None => { span.muted { "—" } } } }
                                td.num { (j.job.max_attempts) }
                                td.num { (j.job.timeout_ms / 1000) " s" }
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
                            }
                        }
                    }
                }
            }
        }))
    };
    Ok(layout(&state, "Jobs", "/jobs", body))
}
