//! Webhooks (`/webhooks`): the sources with the form that adds one ([`super::sources`]), and
//! recent verified deliveries per provider (type, delivery id, the events
//! they became, the raw body) and the recent rejected ones with the reason (kept in memory, never
//! the body). `?provider=<source id>` narrows to one source (a source's own page is
//! `/webhook-sources/{id}`).

use std::collections::HashMap;

use axum::extract::{Query, State};
use maud::html;

use super::page::{self, layout, PageResult, Params};
use crate::http::webhooks::Provider;
use crate::http::AppState;

/// Deliveries listed.
const SHOWN: usize = 100;

/// `GET /webhooks`.
pub async fn page(
    State(state): State<AppState>,
    Query(raw): Query<HashMap<String, String>>,
) -> PageResult {
    let p = Params::new(raw);
    let provider = p.parse("provider", "a webhook source's id", |v| {
        crate::webhooks::source::check_id(v)
            .ok()
            .map(|()| v.to_string())
    })?;
    let deliveries = state
        .client
        .store()
        .webhook_deliveries_list(provider.as_deref(), SHOWN)
        .await?;
    let providers: Vec<String> = match &provider {
        Some(p) => vec![p.clone()],
        None => vec![
            Provider::Payments.as_str().into(),
            Provider::Auth.as_str().into(),
        ],
    };
    let provider = provider.as_deref();
    let body = html! {
        div.title-row {
            h1 { "Webhooks" }
            nav.tabs {
                a.active[provider.is_none()] href="/webhooks" { "All" }
                a.active[provider == Some("payments")] href="/webhooks?provider=payments" { "Payments (Stripe)" }
                a.active[provider == Some("auth")] href="/webhooks?provider=auth" { "Auth (Clerk)" }
                @if let Some(other) = provider.filter(|p| !["payments", "auth"].contains(p)) {
                    a.active href={ "/webhook-sources/" (other) } { (other) }
                }
            }
        }
        @for (route, variable, set) in [
            ("/webhooks/payments", "STRIPE_WEBHOOK_SECRET", !state.config.stripe_secrets.is_empty()),
            ("/webhooks/auth", "CLERK_WEBHOOK_SECRET", !state.config.clerk_secrets.is_empty()),
        ] {
            @if !set && (provider.is_none() || Some(&route["/webhooks/".len()..]) == provider) {
                div.warning.secret-unset role="status" {
                    code { (variable) } " is not set: " code { (route) }
                    " refuses every delivery (503) until it is, and Flare is restarted."
                }
            }
        }
        (super::sources::list_section(&state, html! {}, &HashMap::new()).await?)
        (page::live("webhooks-live", html! {
            section {
                h2 { "Accepted deliveries (signature verified)" }
                @if deliveries.is_empty() {
                    p.muted.empty { "No delivery received yet." }
                } @else {
                    table.deliveries {
                        thead { tr { th { "Received" } th { "Provider" } th { "Type" } th { "Delivery id" } th { "Verification" } th { "Events" } th { "Body" } } }
                        tbody {
                            @for d in &deliveries {
                                tr id={ "d-" (d.delivery_id) } {
                                    td { (page::time(d.received_at)) }
                                    td { (d.provider) }
                                    td { code { (d.event_type) } }
                                    td.mono { (d.delivery_id) }
                                    td { (page::badge(&d.outcome)) }
                                    td { @for id in &d.event_ids { (page::event_link(id)) br; } }
                                    td { details { summary { (d.raw_body.len()) " bytes" } pre.json { (d.raw_body) } } }
                                }
                            }
                        }
                    }
                }
            }
            @for p in &providers {
                @let rejected = state.webhooks.rejections(p);
                section {
                    h2 { "Rejected deliveries to /webhooks/" (p) " (" (rejected.len()) ")" }
                    @if rejected.is_empty() {
                        p.muted { "None since the server started." }
                    } @else {
                        table.rejections {
                            thead { tr { th { "At" } th { "Status" } th { "Reason" } } }
                            tbody {
                                @for r in &rejected {
                                    tr { td { (page::time(r.at)) } td.num { (r.status) } td.error { (r.reason) } }
                                }
                            }
                        }
                    }
                }
            }
        }))
    };
    Ok(layout(&state, "Webhooks", "/webhooks", body))
}
