//! Webhook sources (`/webhook-sources/{id}`, and the list and the form on `/webhooks`): a
//! source's URL to paste into its provider, its settings (never a secret), its last deliveries
//! with the events they became, its refused deliveries with the reason, and the actions **Send a
//! test delivery**, **Replay** of a stored delivery, and delete. The actions go through the same
//! functions as the JSON API (`crate::http::webhook_sources`), so the two never disagree; their
//! outcome is shown above the page, rendered by the POST itself.

use std::collections::HashMap;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Form;
use maud::{html, Markup};
use serde_json::{json, Value};

use super::page::{self, layout_with_status, PageError, PageResult};
use crate::http::webhook_sources::{self as api, DELIVERIES_SHOWN};
use crate::http::AppState;
use crate::webhooks::source::{Preset, Source};

/// The address the provider should post to: this request's host, `/webhooks/{id}`.
fn public_url(headers: &HeaderMap, id: &str) -> String {
    let host = headers
        .get("host")
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1:3000");
    let scheme = headers
        .get("x-forwarded-proto")
        .and_then(|h| h.to_str().ok())
        .filter(|p| *p == "https")
        .unwrap_or("http");
    format!("{scheme}://{host}/webhooks/{id}")
}

/// The sources table and the form that adds one, for `/webhooks`.
pub async fn list_section(
    state: &AppState,
    notice: Markup,
    kept: &HashMap<String, String>,
) -> Result<Markup, PageError> {
    let sources = api::all(state).await?;
    let kept_id = kept.get("id").map_or("", String::as_str);
    let kept_preset = kept.get("preset").map_or("github", String::as_str);
    Ok(html! {
        section #sources {
            h2 { "Sources" }
            (notice)
            table.sources {
                thead { tr { th { "Source" } th { "Verification" } th { "URL" } th { "Secrets" } th { "Defined in" } } }
                tbody {
                    @for s in &sources {
                        tr {
                            td { a href={ "/webhook-sources/" (s.id) } { (s.id) } }
                            td { (describe(s)) }
                            td.mono { "/webhooks/" (s.id) }
                            td.num { (s.secrets.len()) }
                            td { (s.origin.as_str()) }
                        }
                    }
                }
            }
            form.add-source method="post" action="/webhook-sources" {
                h3 { "Add a source" }
                label { "Id " input name="id" required pattern="[a-z0-9][a-z0-9_-]{0,47}" placeholder="github" value=(kept_id); }
                label { "Provider "
                    select name="preset" {
                        @for p in Preset::ALL {
                            option value=(p.as_str()) selected[p.as_str() == kept_preset] { (p.as_str()) }
                        }
                    }
                }
                label { "Secret " input name="secret" type="password" required autocomplete="off"; }
                button type="submit" { "Add" }
                p.muted { "Generic HMAC, bearer, basic or unverified sources: POST /api/webhook-sources (docs/webhooks.md)." }
            }
        }
    })
}

fn describe(s: &Source) -> Markup {
    html! {
        @match s.settings.preset {
            Some(p) => { (p.as_str()) }
            None => { (s.settings.verification.as_str()) }
        }
        @if !s.settings.verified() { " " span.badge.failed { "unverified" } }
    }
}

/// `POST /webhook-sources` (form: id, preset, secret): creates the source and shows its page, or
/// the list again with what is wrong (the secret is not kept).
pub async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> PageResult {
    let body = json!({
        "id": form.get("id").map_or("", |v| v.trim()),
        "preset": form.get("preset").map_or("", |v| v.trim()),
        "secret": form.get("secret").map_or("", |v| v.trim()),
    });
    match api::create_source(&state, &body).await {
        Ok(source) => {
            let notice = html! { div.notice #added { b { "Added " (source.id) } ". Paste its URL into the provider." } };
            source_page(&state, &headers, &source, StatusCode::OK, notice).await
        }
        Err(e) => {
            let error = PageError::from(e);
            let notice = html! { div.error-message #add-error role="alert" { b { "Not added: " } (error.message()) br; "The secret was not kept: enter it again." } };
            let section = list_section(&state, notice, &form).await?;
            Ok(layout_with_status(
                &state,
                error.status(),
                "Webhooks",
                "/webhooks",
                section,
            ))
        }
    }
}

/// `GET /webhook-sources/{id}`.
pub async fn page(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> PageResult {
    let source = api::get_source(&state, &id).await?;
    source_page(&state, &headers, &source, StatusCode::OK, html! {}).await
}

/// `POST /webhook-sources/{id}/test`: sends the test delivery and shows what it was answered.
pub async fn test(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> PageResult {
    let source = api::get_source(&state, &id).await?;
    let (status, answer) = api::send_test(&state, &source).await?;
    let notice = html! {
        div.notice #test-result {
            b { "Test delivery answered " (status.as_u16()) } " "
            code { (answer.to_string()) }
        }
    };
    source_page(&state, &headers, &source, StatusCode::OK, notice).await
}

/// `POST /webhook-sources/{id}/deliveries/{delivery}/replay`.
pub async fn replay(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((id, delivery)): Path<(String, String)>,
) -> PageResult {
    let source = api::get_source(&state, &id).await?;
    let ids = api::replay(&state, &id, &delivery).await?;
    let notice = html! {
        div.notice #replayed { b { "Replayed " (delivery) } ": " @for e in &ids { (page::event_link(e)) " " } }
    };
    source_page(&state, &headers, &source, StatusCode::OK, notice).await
}

async fn source_page(
    state: &AppState,
    headers: &HeaderMap,
    source: &Source,
    status: StatusCode,
    notice: Markup,
) -> PageResult {
    let store = state.client.store();
    let deliveries = store
        .webhook_deliveries_list(Some(&source.id), DELIVERIES_SHOWN)
        .await?;
    let rejections = store
        .webhook_rejections_list(&source.id, crate::store::webhooks::REJECTIONS_STORED)
        .await?;
    let settings: Value = source.view();
    let body = html! {
        div.title-row { h1 { "Webhook source " (source.id) } }
        (notice)
        section #source {
            p { "URL to paste into the provider: " code #source-url { (public_url(headers, &source.id)) } }
            @if !source.settings.verified() {
                p.warning { "This source is unverified (scheme none): anyone who knows the URL can send events." }
            }
            details { summary { "Settings" } pre.json { (serde_json::to_string_pretty(&settings).unwrap_or_default()) } }
            form method="post" action={ "/webhook-sources/" (source.id) "/test" } {
                button type="submit" #send-test { "Send a test delivery" }
            }
        }
        section {
            h2 { "Last deliveries" }
            @if deliveries.is_empty() {
                p.muted.empty { "No delivery received yet." }
            } @else {
                table.deliveries {
                    thead { tr { th { "Received" } th { "Type" } th { "Delivery id" } th { "Events" } th { "Body" } th {} } }
                    tbody {
                        @for d in &deliveries {
                            tr {
                                td { (page::time(d.received_at)) }
                                td { code { (d.event_type) } }
                                td.mono { (d.delivery_id) }
                                td { @for id in &d.event_ids { (page::event_link(id)) br; } }
                                td { details { summary { (d.raw_body.len()) " bytes" } pre.json { (d.raw_body) } } }
                                td {
                                    form method="post" action={ "/webhook-sources/" (source.id) "/deliveries/" (page::url_encode(&d.delivery_id)) "/replay" } {
                                        button type="submit" { "Replay" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        section {
            h2 { "Refused deliveries (" (rejections.len()) ")" }
            @if rejections.is_empty() {
                p.muted { "None." }
            } @else {
                table.rejections {
                    thead { tr { th { "At" } th { "Status" } th { "Reason" } } }
                    tbody {
                        @for r in &rejections {
                            tr { td { (page::time(r.at)) } td.num { (r.status) } td.error { (r.reason) } }
                        }
                    }
                }
            }
        }
    };
    Ok(layout_with_status(
        state,
        status,
        &format!("Webhook source {}", source.id),
        "/webhooks",
        body,
    ))
}
