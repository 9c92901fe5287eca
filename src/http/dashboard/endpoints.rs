//! Endpoints (`/endpoints`): the applications that serve jobs at a URL ([`crate::endpoints`]),
//! each with its jobs, when it was last indexed, its health and its recent errors, and the
//! actions on them: add one (Flare indexes it first and stores nothing when that fails; the form
//! suggests a fresh secret for an application that has none yet), re-index one, and remove one
//! after a confirmation page that says which queued runs are cancelled.
//!
//! The actions go through [`crate::endpoints::Registry`], as the JSON API's `/api/endpoints` does,
//! so the two never disagree. Their outcomes are pages rendered by the POST itself (not a
//! redirect), because what they report (the jobs that left an index, the runs cancelled) is shown
//! once and never stored.

use std::collections::HashMap;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Form;
use maud::{html, Markup};

use super::page::{self, layout_with_status, PageError, PageResult};
use super::url_encode;
use crate::endpoints::Error;
use crate::http::AppState;
use crate::model::RunStatus;
use crate::store::endpoints::{EndpointHealth, EndpointSummary, IndexApplied};
use crate::store::query::{RunQuery, MAX_LIMIT};

/// `GET /endpoints`.
pub async fn list(State(state): State<AppState>) -> PageResult {
    let endpoints = state.endpoints.list().await?;
    Ok(list_page(&state, StatusCode::OK, &endpoints, html! {}, ""))
}

/// `POST /endpoints` (form fields `url` and `secret`, the one the application checks): indexes and
/// registers the endpoint, then shows the list with what happened above it. A failure answers
/// its status (400 bad URL or secret, 409 registered already, 422 the index failed) with the
/// error and the typed URL kept in the form; nothing is stored then.
pub async fn add(
    State(state): State<AppState>,
    Form(form): Form<HashMap<String, String>>,
) -> PageResult {
    let url = form.get("url").map_or("", |u| u.trim());
    let secret = form
        .get("secret")
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    let secret_given = secret.is_some();
    let (status, notice, kept_url) = match state.endpoints.add(url, secret).await {
        Ok(endpoint) => (StatusCode::OK, added(&endpoint), ""),
        Err(e) => {
            let error = PageError::from(e);
            let notice = html! {
                div.error-message #add-error role="alert" {
                    b { "Not added: " } (error.message())
                    @if secret_given { br; "The secret was not kept: enter it again." }
                }
            };
            (error.status(), notice, url)
        }
    };
    let endpoints = state.endpoints.list().await?;
    Ok(list_page(&state, status, &endpoints, notice, kept_url))
}

/// `POST /endpoints/{id}/index`: asks the endpoint for its jobs again and shows what changed, or
/// why the index failed (a 422; the endpoint keeps its previous index and records the error).
pub async fn reindex(State(state): State<AppState>, Path(id): Path<String>) -> PageResult {
    match state.endpoints.reindex(&id).await {
        Ok((endpoint, applied)) => {
            let body = html! {
                div.notice #reindexed {
                    b { "Re-indexed " (endpoint.url) } ": it serves " (jobs_count(endpoint.jobs.len())) ". "
                    (applied_text(&applied, "left its index"))
                }
                (endpoint_table(std::slice::from_ref(&endpoint), false))
            };
            Ok(result_page(
                &state,
                StatusCode::OK,
                "Endpoint re-indexed",
                body,
            ))
        }
        Err(e @ Error::Index { .. }) => {
            let error = PageError::from(e);
            let endpoint = state.endpoints.get(&id).await?;
            let body = html! {
                div.error-message #reindex-error role="alert" {
                    b { "Re-indexing failed: " } (error.message())
                    br; "The endpoint keeps its previous index; the error is recorded with its recent errors."
                }
                (endpoint_table(std::slice::from_ref(&endpoint), false))
            };
            Ok(result_page(
                &state,
                error.status(),
                "Re-indexing failed",
                body,
            ))
        }
        Err(e) => Err(e.into()),
    }
}

/// `GET /endpoints/{id}/remove`: what removing the endpoint does, with the button that does it.
pub async fn confirm_remove(State(state): State<AppState>, Path(id): Path<String>) -> PageResult {
    let endpoint = state.endpoints.get(&id).await?;
    let mut queued = Vec::with_capacity(endpoint.jobs.len());
    for job in &endpoint.jobs {
        let page = state
            .client
            .store()
            .runs_list(RunQuery {
                job_id: Some(job.clone()),
                status: Some(RunStatus::Queued),
                limit: MAX_LIMIT,
                ..RunQuery::default()
            })
            .await?;
        queued.push((job, page.items.len(), page.next_cursor.is_some()));
    }
    let total: usize = queued.iter().map(|(_, n, _)| n).sum();
    let more = queued.iter().any(|(_, _, more)| *more);
    let body = html! {
        div.warning #remove-warning role="alert" {
            p {
                b { "Remove " (endpoint.url) "?" }
                " Its jobs stop being triggered on every node, and their queued runs are cancelled "
                "(they can be retried from their run's page if the endpoint comes back). Runs executing now finish."
            }
            @if endpoint.jobs.is_empty() {
                p { "It serves no job." }
            } @else {
                p #queued-runs {
                    b { (total) @if more { "+" } " queued " (if total == 1 && !more { "run" } else { "runs" }) }
                    " will be cancelled: "
                    @for (i, (job, n, more)) in queued.iter().enumerate() {
                        @if i > 0 { ", " }
                        a href=(runs_href(job, Some(RunStatus::Queued))) { (job) } " (" (n) @if *more { "+" } ")"
                    }
                }
            }
        }
        form.actions method="post" action=(action_href(&endpoint.id, "remove")) {
            button.danger #remove type="submit" { "Remove the endpoint and cancel its queued runs" }
            " " a href="/endpoints" { "Keep it" }
        }
        (endpoint_table(std::slice::from_ref(&endpoint), false))
    };
    Ok(result_page(
        &state,
        StatusCode::OK,
        "Remove an endpoint",
        body,
    ))
}

/// `POST /endpoints/{id}/remove`: removes the endpoint, its jobs and their queued runs, and says
/// what went.
pub async fn remove(State(state): State<AppState>, Path(id): Path<String>) -> PageResult {
    let endpoint = state.endpoints.get(&id).await?;
    let applied = state.endpoints.remove(&id).await?;
    let body = html! {
        div.notice #removed {
            b { "Removed " (endpoint.url) "." } " "
            (applied_text(&applied, "were removed"))
        }
    };
    Ok(result_page(
        &state,
        StatusCode::OK,
        "Endpoint removed",
        body,
    ))
}

/// The list page: the add form, `notice` (what the last action did), the endpoints (live).
fn list_page(
    state: &AppState,
    status: StatusCode,
    endpoints: &[EndpointSummary],
    notice: Markup,
    url: &str,
) -> axum::response::Response {
    let body = html! {
        h1 { "Endpoints" }
        p.muted.intro {
            "Applications that serve jobs at a URL. Flare asks each for its jobs (" i { "index" } ") "
            "and runs them with signed POST requests from every node."
        }
        form.filters.add-endpoint method="post" action="/endpoints" {
            label.grow { "URL "
                input #endpoint-url type="url" name="url" value=(url) required
                    placeholder="https://app.example.com/flare" autocomplete="off" spellcheck="false";
            }
            label { "Secret "
                // A suggestion for an application without a secret yet; replace it with the one
                // the application already checks, if it has one.
                input #endpoint-secret type="text" name="secret" value=(crate::endpoints::generate_secret())
                    required autocomplete="off" spellcheck="false";
            }
            button #add type="submit" { "Add" }
        }
        p.muted.hint {
            "Flare signs every request to the application with the secret, the first one (the index) included: "
            "give the application the secret above as " code { "FLARE_ENDPOINT_SECRET" } " (or enter the one it already checks), "
            "start it, then add it. Flare indexes the URL first and stores nothing if that fails; the secret is never shown again."
        }
        (notice)
        (page::live("endpoints-live", html! {
            @if endpoints.is_empty() {
                p.muted.empty { "No endpoint is registered yet." }
            } @else {
                (endpoint_table(endpoints, true))
            }
        }))
    };
    layout_with_status(state, status, "Endpoints", "/endpoints", body)
}

/// A page showing an action's outcome, with a way back to the list.
fn result_page(
    state: &AppState,
    status: StatusCode,
    title: &str,
    body: Markup,
) -> axum::response::Response {
    let body = html! {
        h1 { (title) }
        (body)
        p { a #back href="/endpoints" { "All endpoints" } }
    };
    layout_with_status(state, status, title, "/endpoints", body)
}

/// What a successful add says.
fn added(endpoint: &EndpointSummary) -> Markup {
    html! {
        div.notice #added {
            b { "Added " (endpoint.url) } ": it serves " (jobs_count(endpoint.jobs.len()))
            @if !endpoint.jobs.is_empty() {
                " (" @for (i, job) in endpoint.jobs.iter().enumerate() {
                    @if i > 0 { ", " } a href=(runs_href(job, None)) { (job) }
                } ")"
            }
            ". Flare runs them from now on."
        }
    }
}

/// The endpoints as a table; `actions` adds the re-index and remove buttons.
fn endpoint_table(endpoints: &[EndpointSummary], actions: bool) -> Markup {
    let columns = if actions { 7 } else { 6 };
    html! {
        table.endpoints {
            thead { tr {
                th { "URL" } th { "Jobs" } th { "Health" } th { "Indexed" } th { "Last ok" } th { "Last error" }
                @if actions { th { "Actions" } }
            } }
            tbody {
                @for e in endpoints {
                    tr id=(e.id) data-endpoint=(e.id) {
                        td {
                            code.url title={ "registered " (e.created_at.to_rfc3339()) } { (e.url) }
                            br; span.id.mono.muted { (e.id) }
                            @if e.protocol == crate::store::endpoints::Protocol::TriggerDevV2 {
                                br; span.badge.protocol title={ "Trigger.dev v2 client " (e.client_id.as_deref().unwrap_or("")) } { "Trigger.dev v2" }
                            }
                        }
                        td.jobs {
                            @if e.jobs.is_empty() { span.muted { "none" } }
                            @for job in &e.jobs {
                                a.job href=(runs_href(job, None)) { (job) } br;
                            }
                        }
                        td { (health(e.health)) }
                        td { (page::time_opt(e.indexed_at)) }
                        td { (page::time_opt(e.last_ok_at)) }
                        td { (page::time_opt(e.last_error_at)) }
                        @if actions {
                            td.actions {
                                form method="post" action=(action_href(&e.id, "index")) {
                                    button.reindex type="submit" title="Ask the endpoint for its jobs again" { "Re-index" }
                                }
                                a.button.danger.remove href=(action_href(&e.id, "remove")) title="Remove it (asks first)" { "Remove…" }
                            }
                        }
                    }
                    @if let Some(skipped) = e.skipped_jobs.as_array().filter(|s| !s.is_empty()) {
                        tr.endpoint-skipped data-endpoint-skipped=(e.id) {
                            td colspan=(columns) {
                                span.muted { "Not run by Flare:" }
                                ul.skipped {
                                    @for job in skipped {
                                        li {
                                            code { (job["id"].as_str().unwrap_or("?")) } ": "
                                            (job["reason"].as_str().unwrap_or(""))
                                        }
                                    }
                                }
                            }
                        }
                    }
                    @if !e.recent_errors.is_empty() {
                        tr.endpoint-errors data-endpoint-errors=(e.id) {
                            td colspan=(columns) {
                                span.muted { "Recent errors, newest first:" }
                                ol.errors {
                                    @for err in &e.recent_errors {
                                        li { (page::time(err.at)) " " span.error { (err.message) } }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// An endpoint's health as a badge, with what it means on hover.
fn health(h: EndpointHealth) -> Markup {
    let meaning = match h {
        EndpointHealth::Ok => "its last call (index or run) succeeded",
        EndpointHealth::Failing => "its last call (index or run) failed: see its recent errors",
        EndpointHealth::Unindexed => "never indexed: Flare does not know its jobs yet",
    };
    html! { span class={ "badge health st-" (h.as_str()) } title=(meaning) { (h.as_str()) } }
}

/// "3 jobs", "1 job", "no job".
fn jobs_count(n: usize) -> String {
    match n {
        0 => "no job".to_string(),
        1 => "1 job".to_string(),
        n => format!("{n} jobs"),
    }
}

/// The jobs an action removed (`verb`: what happened to them) and the runs it cancelled.
fn applied_text(applied: &IndexApplied, verb: &str) -> Markup {
    let runs = if applied.cancelled_runs == 1 {
        "run"
    } else {
        "runs"
    };
    html! {
        @if applied.removed.is_empty() {
            span #removed-jobs { "No job " (verb) "." }
        } @else {
            span #removed-jobs {
                "Jobs that " (verb) ": "
                @for (i, job) in applied.removed.iter().enumerate() {
                    @if i > 0 { ", " } a href=(runs_href(job, None)) { (job) }
                }
                "."
            }
        }
        " " span #cancelled-runs { (applied.cancelled_runs) " queued " (runs) " cancelled." }
    }
}

/// `/endpoints/{id}/{action}`.
fn action_href(id: &str, action: &str) -> String {
    format!("/endpoints/{}/{action}", url_encode(id))
}

/// The runs of `job` (in `status`).
fn runs_href(job: &str, status: Option<RunStatus>) -> String {
    let status = status.map(|s| s.as_str().to_string());
    format!(
        "/runs{}",
        page::query_string(&[("jobId", Some(job.to_string())), ("status", status)])
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hrefs_encode_ids() {
        assert_eq!(action_href("ep_1/x", "index"), "/endpoints/ep_1%2Fx/index");
        assert_eq!(
            runs_href("send-welcome", Some(RunStatus::Queued)),
            "/runs?jobId=send-welcome&status=queued"
        );
        assert_eq!(jobs_count(1), "1 job");
    }
}
