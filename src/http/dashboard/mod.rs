//! The dashboard: server-rendered HTML pages for operators, at `/` beside the JSON API.
//!
//! One module per screen, each with the reads it needs (all through [`crate::store::Store`]'s read
//! side or, for endpoints, [`crate::endpoints::Registry`]; never SQL): [`overview`] (`/`), [`events`] (`/events`, `/events/{id}` and its replay and
//! cancel actions), [`runs`] (`/runs`, `/runs/{id}`, retry, cancel), [`send`] (`/send`: send an
//! event), [`bulk`] (retry / cancel / replay all matching, with a count to confirm), [`jobs`] (`/jobs`: each job's
//! settings, load, success rates and where it runs), [`endpoints`] (`/endpoints`: the HTTP job
//! endpoints with their health and recent errors; add, re-index, remove), [`workers`]
//! (`/workers`: the live processes, what they run, their load, version and last beat), [`webhooks`]
//! (`/webhooks`) and [`login`] (`/login`, `/logout`). [`links`] shows what a run's and an event's pages link to (cancelled by, invoked runs, runs an event resumed or cancelled); [`charts`] draws inline SVG; [`page`] holds
//! the layout and the small formatting pieces every screen shares; [`cache`] keeps the aggregate
//! counts (overview, job rates) for a few seconds, refreshed in the background.
//!
//! Templates are [maud](https://maud.lambda.xyz) macros compiled into the binary, and the CSS and
//! JavaScript are embedded with `include_str!`, so the dashboard works offline with nothing to
//! build. Everything shown is escaped by maud; a Content-Security-Policy allows only this origin's
//! script and style.
//!
//! - **Live**: `dashboard.js` refetches the page every two seconds and swaps the regions marked
//!   `data-live`, so new events and state changes appear without a reload; the URL holds every
//!   filter, so a view can be shared.
//! - **Access**: these routes are in the protected group; [`super::auth`] also accepts the session
//!   cookie for them and redirects a browser without a credential to `/login`. Every POST must come
//!   from this origin ([`super::guard::same_origin`], the rule of every state-changing route): a
//!   cross-site `Origin`, `Referer` or `Sec-Fetch-Site` gets a 403 page, and so does a POST with
//!   none of them and no `Authorization` header.
//! - **Lists** are keyset-paginated by the store; a page links to the next with its cursor.

pub mod bulk;
pub mod cache;
pub mod charts;
pub mod endpoints;
pub mod events;
pub mod jobs;
pub mod links;
pub mod login;
pub mod overview;
pub mod page;
pub mod paths;
pub mod runs;
pub mod send;
pub mod sources;
pub mod webhooks;
pub mod workers;

use axum::extract::Path;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

pub use page::{url_encode, PageError};
pub use paths::{is_public_route, is_route, PUBLIC_ROUTES, ROUTES};

use super::AppState;

/// The dashboard's routes (merged into the protected group by [`super::protected_routes`]).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(overview::page))
        .route("/events", get(events::list))
        .route("/events/bulk", post(bulk::events))
        .route("/events/{id}", get(events::detail))
        .route("/events/{id}/replay", post(events::replay))
        .route("/events/{id}/cancel", post(events::cancel))
        .route("/send", get(send::page).post(send::send))
        .route("/runs", get(runs::list))
        .route("/runs/bulk", post(bulk::runs))
        .route("/runs/{id}", get(runs::detail))
        .route("/runs/{id}/retry", post(runs::retry))
        .route("/runs/{id}/cancel", post(runs::cancel))
        .route("/jobs", get(jobs::page))
        .route("/jobs/{id}/pause", post(jobs::pause))
        .route("/jobs/{id}/resume", post(jobs::resume))
        .route("/endpoints", get(endpoints::list).post(endpoints::add))
        .route("/endpoints/{id}/index", post(endpoints::reindex))
        .route(
            "/endpoints/{id}/remove",
            get(endpoints::confirm_remove).post(endpoints::remove),
        )
        .route("/webhooks", get(webhooks::page))
        .route("/workers", get(workers::page))
        .route("/webhook-sources", post(sources::create))
        .route("/webhook-sources/{id}", get(sources::page))
        .route("/webhook-sources/{id}/test", post(sources::test))
        .route(
            "/webhook-sources/{id}/deliveries/{delivery}/replay",
            post(sources::replay),
        )
        .route("/login", get(login::form).post(login::submit))
        .route("/logout", post(login::logout))
        .route("/assets/{file}", get(asset))
}

const CSS: &str = include_str!("assets/dashboard.css");
const JS: &str = include_str!("assets/dashboard.js");

async fn asset(Path(file): Path<String>) -> Response {
    let (body, content_type) = match file.as_str() {
        "dashboard.css" => (CSS, "text/css; charset=utf-8"),
        "dashboard.js" => (JS, "text/javascript; charset=utf-8"),
        _ => return PageError::not_found(format!("no asset {file:?}")).into_response(),
    };
    (
        [
            (CONTENT_TYPE, content_type),
            (CACHE_CONTROL, "public, max-age=300"),
        ],
        body,
    )
        .into_response()
}
