//! The OpenAPI paths of the dashboard (`src/http/dashboard/`): its HTML pages and form actions
//! (tag `dashboard`), for people rather than programs, listed so the document is the whole surface.

use serde_json::{json, Value};

use super::parts::{error, id_param, query, search, string};
use crate::store::events::MAX_SEARCH_CHARS;

/// The dashboard's access: the API key, or the session cookie `/login` sets.
fn signed_in() -> Value {
    json!([{ "bearer": [] }, { "session": [] }])
}

/// The dashboard (`src/http/dashboard/`): HTML pages and their form actions, under the same key
/// (or a session cookie from `/login`).
pub(super) fn dashboard_paths() -> Value {
    let html = |description: &str| json!({ "description": description, "content": { "text/html": { "schema": string() } } });
    // Without a credential the dashboard redirects to its sign-in form rather than answer 401.
    let page = |summary: &str, params: Value| {
        let mut responses = json!({ "200": html("An HTML page."),
            "303": { "description": "No credential: to /login." } });
        if params.as_array().is_some_and(|p| !p.is_empty()) {
            responses["404"] = html("No such record.");
        }
        json!({ "get": { "summary": summary, "tags": ["dashboard"], "parameters": params,
            "security": signed_in(), "responses": responses } })
    };
    let action = |summary: &str, params: Value| {
        json!({ "summary": summary, "tags": ["dashboard"], "parameters": params,
            "security": signed_in(),
            "requestBody": { "required": false, "content": { "application/x-www-form-urlencoded": { "schema": { "type": "object" } } } },
            "responses": { "303": { "description": "Done: to the page that shows the outcome; without a credential, to /login." },
                "200": html("The outcome page."),
                "400": html("A bad form, shown again with what is wrong."),
                "404": html("No such record."),
                "409": html("The record is not in a state the action applies to (an event delivered, a run finished, …)."),
                "415": error("A form sent as another content type than application/x-www-form-urlencoded.") } })
    };
    let post = |summary: &str, params: Value| json!({ "post": action(summary, params) });
    let id = |what: &str| json!([id_param(what)]);
    let none = json!([]);
    let mut endpoints = page(
        "The HTTP job endpoints, their jobs and health",
        none.clone(),
    );
    endpoints["post"] = action("Add an endpoint (form: url, secret)", none.clone());
    endpoints["post"]["responses"]["422"] =
        html("Indexing failed; nothing was stored. The form again with why.");
    let mut remove = page("Confirm removing an endpoint", id("endpoint"));
    remove["post"] = action("Remove an endpoint", id("endpoint"));
    let mut send_form = page(
        "The send-an-event form: name, JSON payload, optional delay",
        none.clone(),
    );
    send_form["post"] = action("Send an event (form: name, payload, delay)", none.clone());
    let mut reindex = post("Re-index an endpoint", id("endpoint"));
    reindex["post"]["responses"]["422"] =
        html("Indexing failed: the previous index stays, the error is recorded and shown.");
    let mut login = page("The sign-in form", none.clone());
    login["get"]["security"] = json!([]);
    login["post"] = action(
        "Sign in (form: key, next): sets the session cookie",
        none.clone(),
    );
    login["post"]["security"] = json!([]);
    login["post"]["responses"]["401"] = html("Not the API key: the form again.");
    login["post"]["responses"]["429"] = html(
        "Five wrong keys from this client within a minute: the form, not checked, with Retry-After.",
    );
    json!({
        "/": page("Overview: events and runs per minute or hour, failure rates, the queue", none.clone()),
        "/events": page("Event history with filters (name, source, status, from, to, within, q, cursor); a too long q is a 400 page", json!([
            query("q", &format!("Text the payload JSON contains, at most {MAX_SEARCH_CHARS} characters."), search()),
        ])),
        "/events/{id}": page("One event: payload, runs, chain, actions", id("event")),
        "/events/{id}/replay": post("Replay the event (form: payload, optional)", id("event")),
        "/events/{id}/cancel": post("Cancel a scheduled event", id("event")),
        "/events/bulk": post(&format!("Replay all events a filter selects (form: action=replay, the list's filter with q of at most {MAX_SEARCH_CHARS} characters, confirm): first a count to confirm, then the replays"), none.clone()),
        "/send": send_form,
        "/runs": page("Runs with filters", none.clone()),
        "/runs/bulk": post("Retry or cancel all runs a filter selects (form: action, the list's filter, confirm): first a count to confirm, then the action", none.clone()),
        "/runs/{id}": page("One run: payload, attempts on a timeline, logs, output", id("run")),
        "/runs/{id}/retry": post("Retry a failed or cancelled run", id("run")),
        "/runs/{id}/cancel": post("Cancel a queued or running run", id("run")),
        "/jobs": page("Jobs: settings, load, success rates, where each runs", none.clone()),
        "/jobs/{id}/pause": post("Pause a job: its runs wait until it is resumed", id("job")),
        "/jobs/{id}/resume": post("Resume a paused job", id("job")),
        "/endpoints": endpoints,
        "/endpoints/{id}/index": reindex,
        "/endpoints/{id}/remove": remove,
        "/workers": page("Workers: the live processes (nodes) on this database, the Flare version each runs, runs executing against its concurrency, its jobs, start and last beat", none.clone()),
        "/webhooks": page("Webhook sources (with the form that adds one), recent deliveries and rejections", none.clone()),
        "/webhook-sources": post("Add a webhook source (form: id, preset, secret)", none.clone()),
        "/webhook-sources/{id}": page("A webhook source: its URL, last deliveries with their events, refused deliveries with the reason", id("source")),
        "/webhook-sources/{id}/test": post("Send a test delivery to the source, signed with its secret", id("source")),
        "/webhook-sources/{id}/deliveries/{delivery}/replay": post("Replay a stored delivery's events",
            json!([id_param("source"), { "name": "delivery", "in": "path", "required": true, "description": "The delivery id.", "schema": string() }])),
        "/login": login,
        "/logout": post("Sign out: ends the session", none),
        "/assets/{file}": { "get": { "summary": "The dashboard's CSS and JavaScript", "tags": ["dashboard"], "security": [],
            "parameters": [{ "name": "file", "in": "path", "required": true, "schema": { "enum": ["dashboard.css", "dashboard.js"] } }],
            "responses": { "200": { "description": "The file.", "content": { "text/css": { "schema": string() }, "text/javascript": { "schema": string() } } },
                "404": { "description": "No such asset.", "content": { "text/html": { "schema": string() } } } } } },
    })
}
