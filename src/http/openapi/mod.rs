//! The OpenAPI 3.1 document of every route, served at `GET /api/openapi.json`: the JSON API,
//! `POST /trigger`, the endpoint routes, the compatible ingest routes (Trigger.dev, Inngest), the
//! webhook routes, health, `/metrics`, and the dashboard's pages and form actions (tag
//! `dashboard`: HTML, not an API, listed so the document is the whole surface).
//!
//! Written by hand rather than derived (utoipa): the types it describes live in `model` and
//! `store`, which stay free of HTTP-documentation derives, and a static document costs no
//! proc-macro build time. Tests keep it whole: `tests/api/stats.rs` checks that every path documented
//! here is routed, `tests::every_route_is_documented` reads every `.route(…)` of the modules
//! that build the router and checks that each method and path is documented, and
//! `tests::path_parameters_match_their_paths` that each operation declares exactly the
//! `{parameters}` of its path. `scripts/schemathesis.sh` fuzzes the server against it
//! (docs/schemathesis.md).

use serde_json::{json, Value};

use crate::store::events::MAX_SEARCH_CHARS;

mod compat;
mod dashboard;
mod parts;
mod sources;
use compat::{ingest_paths, trigger_dev_v2_paths};
use dashboard::dashboard_paths;
use parts::{
    error, id_param, nullable, nullable_string, ok, page_params, query, schema_ref, search, string,
    time,
};
use sources::{callback_paths, source_paths};

fn paths() -> Value {
    let [limit, cursor] = page_params();
    let bad = error("A query parameter is unknown, repeated or invalid; the message names it.");
    json!({
        "/api/events": { "get": {
            "summary": "List events, newest first",
            "parameters": [
                query("name", "Exact event name.", string()),
                query("source", "Exact source (`api`, `http`, `trigger.dev`, `inngest`, `webhook:payments`, …), or its kind before the colon (`job`, `replay`, `webhook`).", string()),
                query("status", "Outcome of the event.", schema_ref("EventStatus")),
                query("from", "Received at or after (RFC 3339).", time()),
                query("to", "Received before (RFC 3339).", time()),
                query("q", &format!("Text the payload JSON contains (ASCII letters in either case), at most {MAX_SEARCH_CHARS} characters; a longer one is 400."), search()),
                limit, cursor,
            ],
            "responses": {
                "200": ok("A page of events.", json!({ "type": "object", "properties": {
                    "events": { "type": "array", "items": schema_ref("EventSummary") },
                    "nextCursor": nullable(string()) } })),
                "400": bad,
            }
        }},
        "/api/events/{id}": { "get": {
            "summary": "An event with its runs and the events its runs sent",
            "parameters": [id_param("event")],
            "responses": { "200": ok("The event.", schema_ref("EventDetail")), "404": error("No such event.") }
        }},
        "/api/events/{id}/replay": { "post": {
            "summary": "Send a new event with the same name and context (source `replay:<id>`)",
            "parameters": [id_param("event")],
            "requestBody": { "required": false, "content": { "application/json": { "schema": {
                "type": "object", "additionalProperties": false,
                "properties": { "payload": { "description": "Replaces the original payload." } } } } } },
            "responses": {
                "200": ok("The new event.", schema_ref("Event")),
                "400": error("The body is not a JSON object with only `payload`."),
                "404": error("No such event."),
            }
        }},
        "/api/events/{id}/cancel": { "post": {
            "summary": "Cancel a scheduled event before it is delivered",
            "parameters": [id_param("event")],
            "responses": {
                "200": ok("The cancelled event.", schema_ref("Event")),
                "404": error("No such event."),
                "409": error("Already delivered or cancelled."),
            }
        }},
        "/api/runs": { "get": {
            "summary": "List runs, newest first",
            "parameters": [
                query("jobId", "Job id.", string()),
                query("status", "Run state.", schema_ref("RunStatus")),
                query("eventId", "The event that started the run.", string()),
                limit, cursor,
            ],
            "responses": {
                "200": ok("A page of runs.", json!({ "type": "object", "properties": {
                    "runs": { "type": "array", "items": schema_ref("RunSummary") },
                    "nextCursor": nullable(string()) } })),
                "400": bad,
            }
        }},
        "/api/runs/{id}": { "get": {
            "summary": "A run with its logs, attempts and durable steps",
            "parameters": [id_param("run")],
            "responses": { "200": ok("The run.", schema_ref("RunDetail")), "404": error("No such run.") }
        }},
        "/api/runs/{id}/retry": { "post": {
            "summary": "Queue a failed or cancelled run for one more attempt",
            "parameters": [id_param("run")],
            "responses": {
                "200": ok("The queued run.", schema_ref("Run")),
                "404": error("No such run."),
                "409": error("The run is not failed or cancelled."),
            }
        }},
        "/api/runs/{id}/cancel": { "post": {
            "summary": "Cancel a queued or running run; a running one is told through io and its late outcome is refused",
            "parameters": [id_param("run")],
            "responses": {
                "200": ok("The cancelled run.", schema_ref("Run")),
                "404": error("No such run."),
                "409": error("The run is already finished."),
            }
        }},
        "/api/runs/bulk": { "post": {
            "summary": "Retry or cancel every run a filter selects (at most 10,000 per call, newest first); dryRun only counts",
            "requestBody": { "required": true, "content": { "application/json": { "schema": {
                "type": "object", "required": ["action"], "properties": {
                    "action": { "enum": ["retry", "cancel"] },
                    "filter": { "type": "object", "additionalProperties": false,
                        "description": "A field sent as null counts as absent.", "properties": {
                        "jobId": nullable_string(), "status": nullable_string(),
                        "eventId": nullable_string() } },
                    "dryRun": { "type": "boolean" } } } } } },
            "responses": {
                "200": ok("What was selected (count) and changed (acted).", schema_ref("BulkOutcome")),
                "400": error("Unknown action, field or status."),
            }
        }},
        "/api/events/bulk": { "post": {
            "summary": "Replay every event a filter selects (at most 10,000 per call, newest first); dryRun only counts",
            "requestBody": { "required": true, "content": { "application/json": { "schema": {
                "type": "object", "required": ["action"], "properties": {
                    "action": { "enum": ["replay"] },
                    "filter": { "type": "object", "additionalProperties": false,
                        "description": "A field sent as null counts as absent.", "properties": {
                        "name": nullable_string(), "source": nullable_string(),
                        "status": nullable_string(),
                        "from": { "type": ["string", "null"], "format": "date-time" },
                        "to": { "type": ["string", "null"], "format": "date-time" },
                        "q": { "type": ["string", "null"], "maxLength": MAX_SEARCH_CHARS } } },
                    "dryRun": { "type": "boolean" } } } } } },
            "responses": {
                "200": ok("What was selected (count) and replayed (acted).", schema_ref("BulkOutcome")),
                "400": error("Unknown action, field or status, or filter.q too long."),
            }
        }},
        "/api/jobs": { "get": {
            "summary": "Job definitions with current load and recent success rates",
            "responses": { "200": ok("The jobs.", json!({ "type": "object", "properties": {
                "jobs": { "type": "array", "items": schema_ref("JobSummary") } } })) }
        }},
        "/api/jobs/{id}/pause": { "post": {
            "summary": "Pause a job: events still arrive and create its runs, which wait (queued) until it is resumed",
            "parameters": [id_param("job")],
            "responses": {
                "200": ok("The job, with paused: true.", schema_ref("JobSummary")),
                "404": error("No such job."),
            }
        }},
        "/api/jobs/{id}/resume": { "post": {
            "summary": "Resume a paused job: its waiting runs are claimed again",
            "parameters": [id_param("job")],
            "responses": {
                "200": ok("The job, with paused: false.", schema_ref("JobSummary")),
                "404": error("No such job."),
            }
        }},
        "/api/stats": { "get": {
            "summary": "Events and run outcomes per time bucket, per job, and the queue",
            "parameters": [query("window", "`1h` (minute buckets) or `24h` (hour buckets).",
                json!({ "type": "string", "enum": ["1h", "24h"], "default": "1h" }))],
            "responses": { "200": ok("The statistics.", schema_ref("Stats")), "400": error("Unknown window.") }
        }},
        "/api/openapi.json": { "get": {
            "summary": "This document",
            "responses": { "200": { "description": "OpenAPI 3.1 document." } }
        }},
        "/metrics": { "get": {
            "summary": "Prometheus metrics (text format)",
            "responses": { "200": { "description": "Counters, histograms and queue gauges.",
                "content": { "text/plain": { "schema": string() } } } }
        }},
    })
}

/// `POST /trigger` (`src/http/trigger.rs`).
fn trigger_paths() -> Value {
    let delay_units = json!({ "type": ["number", "null"], "minimum": 0 });
    json!({
        "/trigger": { "post": {
            "summary": "Send an event: answered once the event and its runs are committed",
            "requestBody": { "required": true, "content": { "application/json": { "schema": {
                "type": "object", "required": ["event"], "additionalProperties": false,
                "description": "An optional field sent as null counts as absent.",
                "properties": {
                    "event": { "type": "string", "minLength": 1, "maxLength": 200,
                        "pattern": "^[a-z0-9_-]+([./][a-z0-9_-]+)*$",
                        "description": "The event name: lowercase ASCII letters, digits, `_` and `-`, in segments joined by `.` or `/` (`user.created`, `app/user.created`)." },
                    "payload": { "description": "Any JSON value; null when absent." },
                    "id": { "type": ["string", "null"], "minLength": 1, "maxLength": 200, "pattern": "^[^\\u0000]*$",
                        "description": "Idempotency: an id already stored answers with that event and starts nothing. At most 200 bytes." },
                    "delay": { "oneOf": [
                        { "type": "string", "description": "Such as \"90s\", \"2h\" or \"1h30m\" (units s, m, h, d)." },
                        { "type": "object", "additionalProperties": false, "properties": {
                            "seconds": delay_units, "minutes": delay_units,
                            "hours": delay_units, "days": delay_units } },
                        { "type": "null" },
                    ], "description": "Deliver later, at most 365 days; not with deliverAt." },
                    "deliverAt": { "type": ["string", "null"], "format": "date-time",
                        "description": "Deliver at this time (RFC 3339), at most 365 days ahead; not with delay." },
                    "context": { "description": "Caller context, stored with the event." },
                } } } } },
            "responses": {
                "200": ok("The stored event: the new one, or for an id sent again the one stored first.", json!({ "type": "object", "required": ["success", "message", "result", "duplicate", "conflict"],
                    "properties": { "success": { "const": true }, "message": string(),
                        "result": schema_ref("Event"),
                        "duplicate": { "type": "boolean", "description": "The id was stored already: nothing new was stored or started." },
                        "conflict": { "type": "boolean", "description": "A duplicate whose name or payload differ from the stored event's: the event sent was dropped." },
                        "conflictingFields": { "type": "array", "items": { "enum": ["name", "payload"] },
                            "description": "With a conflict: which differ." } } })),
                "400": error("The body is not JSON, misses `event`, or has an unknown field or a bad value; the message says which."),
                "415": error("The body is not sent as `Content-Type: application/json`."),
            }
        }},
    })
}

/// The HTTP job endpoint routes (`src/http/endpoints.rs`).
fn endpoint_paths() -> Value {
    let endpoint = || ok("The endpoint.", schema_ref("Endpoint"));
    json!({
        "/api/endpoints": {
            "get": {
                "summary": "HTTP job endpoints, by URL",
                "responses": { "200": ok("The endpoints.", json!({ "type": "object", "properties": {
                    "endpoints": { "type": "array", "items": schema_ref("Endpoint") } } })) }
            },
            "post": {
                "summary": "Register an endpoint: Flare indexes it first and stores nothing when that fails",
                "requestBody": { "required": true, "content": { "application/json": { "schema": {
                    "type": "object", "required": ["url", "secret"], "additionalProperties": false,
                    "properties": { "url": string(), "secret": { "type": "string",
                        "description": "Flare's protocol: the Standard Webhooks secret (whsec_…) the endpoint checks Flare's signatures with. trigger.dev-v2: the endpoint's API key (sent as x-trigger-api-key)." },
                        "protocol": { "type": "string", "enum": ["flare", "trigger.dev-v2"],
                            "description": "The protocol the endpoint speaks (default flare; docs/trigger-dev-v2.md)." },
                        "clientId": { "type": "string",
                            "description": "trigger.dev-v2: the TriggerClient's id (sent as x-trigger-endpoint-id on PING)." } } } } } },
                "responses": {
                    "201": endpoint(),
                    "400": error("Bad body, URL or secret; or a URL at an address Flare does not call (link-local, cloud metadata, unspecified) unless --endpoint-allow allows it."),
                    "415": error("The body is not sent as application/json."),
                    "409": error("The URL is registered already, or a job id is taken."),
                    "422": error("Indexing failed (unreachable, bad answer, invalid index); nothing was stored."),
                }
            }
        },
        "/api/endpoints/{id}": {
            "get": {
                "summary": "One endpoint",
                "parameters": [id_param("endpoint")],
                "responses": { "200": endpoint(), "404": error("No such endpoint.") }
            },
            "delete": {
                "summary": "Remove an endpoint: its jobs stop being triggered, their queued runs are cancelled",
                "parameters": [id_param("endpoint")],
                "responses": {
                    "200": ok("What was removed.", json!({ "type": "object", "properties": {
                        "removed": string(), "removedJobs": { "type": "array", "items": string() },
                        "cancelledRuns": { "type": "integer" } } })),
                    "404": error("No such endpoint."),
                }
            }
        },
        "/api/endpoints/{id}/index": { "post": {
            "summary": "Ask the endpoint for its jobs again; jobs that left its index are removed and their queued runs cancelled",
            "parameters": [id_param("endpoint")],
            "responses": {
                "200": ok("The endpoint, with removedJobs and cancelledRuns.", schema_ref("Endpoint")),
                "404": error("No such endpoint."),
                "409": error("A job id of the new index is taken."),
                "422": error("Indexing failed; the previous index stays and the error is recorded."),
            }
        }},
        "/api/nodes": { "get": {
            "summary": "The processes running jobs, with the jobs each defines",
            "responses": { "200": ok("The nodes.", json!({ "type": "object", "properties": {
                "nodes": { "type": "array", "items": schema_ref("Node") } } })) }
        }},
    })
}

/// Schemas of the endpoint routes and of where a job runs.
fn endpoint_schemas() -> Value {
    let strings = json!({ "type": "array", "items": { "type": "string" } });
    json!({
        "Endpoint": { "type": "object", "properties": {
            "id": string(), "url": string(), "createdAt": time(), "indexedAt": nullable(time()),
            "jobs": strings, "lastOkAt": nullable(time()), "lastErrorAt": nullable(time()),
            "recentErrors": { "type": "array", "items": { "type": "object", "properties": {
                "at": time(), "message": string() } } },
            "health": { "type": "string", "enum": ["ok", "failing", "unindexed"] },
            "protocol": { "type": "string", "enum": ["flare", "trigger.dev-v2"] },
            "clientId": string(),
            "skippedJobs": { "type": "array", "description": "Jobs of the last index Flare did not take, with why.",
                "items": { "type": "object", "properties": { "id": string(), "reason": string() } } } } },
        "Node": { "type": "object", "properties": {
            "id": string(), "startedAt": time(), "seenAt": time(), "jobs": strings,
            "live": { "type": "boolean" },
            "version": { "type": "string", "description": "The Flare version the node runs (empty for a node before it said)." },
            "concurrency": { "type": "integer", "description": "Runs it executes at once at most." },
            "running": { "type": "integer", "description": "Runs it executed at its last beat." } } },
        "JobPlacement": { "type": "object", "properties": {
            "endpoint": nullable(json!({ "type": "object", "properties": { "id": string(), "url": string() } })),
            "nodes": strings,
            "served": { "type": "boolean", "description": "False when no live node or endpoint runs the job: its runs stay queued." },
            "ownerNote": nullable(json!({ "type": "object",
                "description": "The last change of the job's owner (one job id, one owner): a job defined in code that displaced an endpoint's job with its id, or an endpoint that took over a job no running process defines.",
                "properties": { "message": string(), "at": time() } })) } },
    })
}

/// `a` with the members of `b` added (both JSON objects).
fn merged(mut a: Value, b: Value) -> Value {
    if let (Value::Object(a), Value::Object(b)) = (&mut a, b) {
        a.extend(b);
    }
    a
}

fn outcomes() -> Value {
    let rate = nullable(json!({ "type": "number", "minimum": 0, "maximum": 1 }));
    json!({ "type": "object", "properties": {
        "succeeded": { "type": "integer" }, "failed": { "type": "integer" },
        "cancelled": { "type": "integer" }, "successRate": rate, "failureRate": rate } })
}

fn schemas() -> Value {
    let json_any = json!({ "description": "Any JSON value." });
    let counts = json!({ "type": "object", "properties": {
        "queued": { "type": "integer" }, "running": { "type": "integer" },
        "succeeded": { "type": "integer" }, "failed": { "type": "integer" },
        "cancelled": { "type": "integer" } } });
    let events = json!({
        "Error": { "type": "object", "required": ["error"], "properties": { "error": string() } },
        "EventStatus": { "type": "string",
            "enum": ["scheduled", "cancelled", "no_runs", "running", "failed", "succeeded"],
            "description": "Decided in this order: cancelled (the event was cancelled, or all its runs were); scheduled (not delivered yet); no_runs (no job matched); running (a run is queued or running); failed (all runs finished, one failed); succeeded (all finished, none failed, one succeeded)." },
        "RunStatus": { "type": "string", "enum": ["queued", "running", "succeeded", "failed", "cancelled"] },
        "Event": { "type": "object", "properties": {
            "id": string(), "name": string(), "payload": json_any, "context": json_any,
            "source": { "type": "string", "description": "api (Rust), http (POST /trigger), trigger.dev (the Trigger.dev routes), inngest (POST /e/{key}), webhook:<source id> (webhook:payments, webhook:auth, …), job:<run id>, replay:<event id>" },
            "timestamp": time(), "deliverAt": nullable(time()), "deliveredAt": nullable(time()),
            "cancelledAt": nullable(time()), "parentRunId": nullable(string()),
            "runIds": { "type": "array", "items": string() } } },
        "RunCounts": counts,
        "TriggerDevEvent": { "type": "object", "properties": {
            "id": string(), "name": string(), "payload": json_any, "context": json_any,
            "timestamp": time(), "deliverAt": nullable(time()), "deliveredAt": nullable(time()),
            "cancelledAt": nullable(time()),
            "duplicate": { "type": "boolean" }, "conflict": { "type": "boolean" },
            "conflictingFields": { "type": "array", "items": { "enum": ["name", "payload"] } } } },
        "TriggerDevEventRuns": { "allOf": [schema_ref("TriggerDevEvent"), { "type": "object", "properties": {
            "createdAt": time(), "updatedAt": time(),
            "runs": { "type": "array", "items": { "type": "object", "properties": {
                "id": string(), "jobId": string(),
                "status": { "enum": ["QUEUED", "EXECUTING", "SUCCESS", "FAILURE", "CANCELED"] },
                "startedAt": nullable(time()), "completedAt": nullable(time()) } } } } }] },
        "InngestEvent": { "type": "object", "required": ["name"], "properties": {
            "name": string(), "data": json_any, "id": string(),
            "ts": { "type": "number", "description": "Milliseconds; later than now delays delivery until then." },
            "user": json_any, "v": string() } },
        "EventSummary": { "allOf": [schema_ref("Event"), { "type": "object", "properties": {
            "status": schema_ref("EventStatus"), "runCounts": schema_ref("RunCounts") } }] },
        "EventDetail": { "allOf": [schema_ref("Event"), { "type": "object", "properties": {
            "status": schema_ref("EventStatus"), "runCounts": schema_ref("RunCounts"),
            "runs": { "type": "array", "items": schema_ref("Run") },
            "children": { "type": "array", "items": schema_ref("Event") },
            "skipped": { "type": "array", "description": "Jobs the event matched but started no run of: over their rate limit.",
                "items": { "type": "object", "properties": { "jobId": string(), "reason": string() } } },
            "debounced": { "type": "array", "description": "Runs of debounced jobs the event was folded into: a later event of the burst now starts the run.",
                "items": { "type": "object", "properties": { "jobId": string(), "runId": string() } } },
            "resumedRuns": { "type": "array", "items": schema_ref("LinkedRun"),
                "description": "Runs waiting for this event (io.wait_for_event) that it resumed, with when." },
            "cancelledRuns": { "type": "array", "items": schema_ref("LinkedRun"),
                "description": "Runs it cancelled (their job's cancelOn, and the runs those had invoked), with when." } } }] },
        "LinkedRun": { "type": "object", "description": "A run linked from another run or an event, with its state now.", "properties": {
            "runId": string(), "jobId": string(), "status": schema_ref("RunStatus"),
            "stepKey": { "type": "string", "description": "An invoked run: the invoking step's key (io.invoke's key; <key>:<n> for io.invoke_all)." },
            "at": { "type": "string", "format": "date-time", "description": "A run an event resumed or cancelled: when." } } },
        "JobKeys": { "type": "object",
            "description": "Flow control now: how many of the job's keys (or the whole job) are at their concurrency limit, and up to 5 with the most queued runs (`key` null: the whole job; `limit` null: a throttle's key without a concurrency limit).",
            "properties": { "atLimit": { "type": "integer" }, "top": { "type": "array", "items": { "type": "object",
                "properties": { "key": nullable(string()), "running": { "type": "integer" },
                    "limit": nullable(json!({ "type": "integer" })), "queued": { "type": "integer" } } } } } },
    });
    let runs = json!({
        "Run": { "type": "object", "properties": {
            "id": string(), "eventId": string(), "jobId": string(), "jobVersion": string(),
            "status": schema_ref("RunStatus"), "attempt": { "type": "integer" },
            "maxAttempts": { "type": "integer" }, "runAt": time(), "startedAt": nullable(time()),
            "finishedAt": nullable(time()), "output": json_any, "error": nullable(string()),
            "createdAt": time(), "node": nullable(string()) } },
        "RunSummary": { "allOf": [schema_ref("Run"), { "type": "object", "properties": { "eventName": string() } }] },
        "LogLine": { "type": "object", "properties": {
            "attempt": { "type": "integer" },
            "level": { "type": "string", "enum": ["debug", "info", "warn", "error"] },
            "message": string(), "fields": json_any, "at": time() } },
        "Attempt": { "type": "object", "properties": {
            "attempt": { "type": "integer" },
            "outcome": { "type": "string", "enum": ["succeeded", "failed", "retrying", "lost", "released", "waiting"],
                "description": "waiting: the execution ended at an io.wait not yet due; the attempt is not counted and the run is queued again for the wait's due time." },
            "startedAt": nullable(time()), "finishedAt": time(), "error": nullable(string()) } },
        "RunDetail": { "allOf": [schema_ref("Run"), { "type": "object", "properties": {
            "logs": { "type": "array", "items": schema_ref("LogLine") },
            "attempts": { "type": "array", "items": schema_ref("Attempt") },
            "steps": { "type": "array", "items": schema_ref("Step"),
                "description": "Durable steps (io.run_task, io.wait, io.wait_for_event, chained io.send_event), in the order they first started." },
            "wait": nullable(schema_ref("PendingWait")),
            "waitingFor": nullable(json!({ "type": "string",
                "description": "What holds a queued run back, if a limit does: `concurrency: 2 of 2 running for key cus_1`, `concurrency: 10 of 10 running in group openai`, `throttled until 2024-05-01T12:00:01Z`, `debounced: starts at 12:00:05 unless another event comes` (UTC)." })),
            "cancelledBy": nullable(json!({ "type": "object", "description": "The event that cancelled the run (its job's cancelOn), while it is cancelled so.",
                "properties": { "eventId": string(), "eventName": string(), "at": time() } })),
            "parentRunId": nullable(json!({ "type": "string", "description": "The run that invoked this one (io.invoke)." })),
            "children": { "type": "array", "items": schema_ref("LinkedRun"),
                "description": "The runs it invoked (io.invoke, io.invoke_all), in order, with their states." } } }] },
        "PendingWait": { "type": "object", "description": "The durable wait a run is in (io.wait_for_event; io.invoke waits for flare/job.invoked; io.callback): what it waits for, until when.", "properties": {
            "stepKey": string(), "event": { "type": "string", "description": "The event name waited for." },
            "match": nullable(string()), "matchValue": nullable(string()),
            "condition": nullable(string()),
            "since": time(), "until": { "type": "string", "format": "date-time", "description": "The deadline: the wait ends with nothing then." },
            "callbackUrl": { "type": "string", "description": "A callback (io.callback): the path a POST of JSON resumes the run at, after the server's address: /callbacks/<token>." } } },
        "Step": { "type": "object", "properties": {
            "key": { "type": "string", "description": "Unique within the run; a chained event's is event:<n> (call order) or event:<key>." },
            "label": { "type": "string", "description": "Present when the key says little: a Trigger.dev v2 task's name and key (its step key is the SDK's idempotency hash)." },
            "kind": { "type": "string", "enum": ["task", "wait", "event", "event_wait", "invoke", "callback"] },
            "status": { "type": "string", "enum": ["succeeded", "failed", "waiting"],
                "description": "A succeeded step is final: a run executing again gets its output without running it. A failed one runs again in the next attempt. A waiting one is a wait not yet due." },
            "attempt": { "type": "integer", "description": "The run's attempt that last ran it." },
            "startedAt": time(), "finishedAt": nullable(time()),
            "durationMs": nullable(json!({ "type": "integer" })),
            "waitUntil": nullable(time()),
            "output": json_any, "error": nullable(string()) } },
        "Outcomes": outcomes(),
        "BulkOutcome": { "type": "object", "properties": {
            "action": string(), "dryRun": { "type": "boolean" },
            "count": { "type": "integer", "description": "Records selected: matched by the filter and subject to the action." },
            "acted": { "type": "integer", "description": "Records changed (0 on a dry run)." },
            "limit": { "type": "integer" },
            "truncated": { "type": "boolean", "description": "More matched than limit: call again for the next ones." } } },
        "JobSummary": { "type": "object", "properties": {
            "id": string(), "name": string(), "version": string(), "event": string(),
            "filter": json_any, "maxAttempts": { "type": "integer" }, "timeoutMs": { "type": "integer" },
            "concurrency": nullable(json!({ "type": "integer",
                "description": "The whole job's concurrency limit: runs executing at once across every process sharing the database." })),
            "concurrencyLimits": { "type": "array", "items": schema_ref("ConcurrencyLimit"),
                "description": "Every concurrency limit of the job (at most two, of different shapes); empty without." },
            "rateLimit": nullable(json!({ "type": "object",
                "description": "At most `limit` runs created per `periodMs` per value of `key` (CEL over `event`; absent: the whole job); an event beyond it starts no run of the job and lists it under `skipped`.",
                "properties": { "limit": { "type": "integer" }, "periodMs": { "type": "integer" }, "key": string() } })),
            "throttle": nullable(json!({ "type": "object",
                "description": "At most `limit` run starts per `periodMs` per value of `key`, `burst` at once after a quiet spell; the other runs wait queued, in order.",
                "properties": { "limit": { "type": "integer" }, "periodMs": { "type": "integer" }, "burst": { "type": "integer" }, "key": string() } })),
            "startTimeoutMs": nullable(json!({ "type": "integer",
                "description": "A run not started this long after it became due is cancelled with the error \"expired before it started\"." })),
            "debounce": nullable(json!({ "type": "object",
                "description": "One run per burst of events per value of `key`, started `periodMs` after the last of them with its payload, never later than `timeoutMs` after the first; the earlier events list the run under `debounced`.",
                "properties": { "periodMs": { "type": "integer" }, "key": string(), "timeoutMs": { "type": "integer" } } })),
            "priority": nullable(json!({ "type": "object",
                "description": "`run`: a CEL expression over `event` giving seconds (-600 to 600, clamped; not a whole number: 0), evaluated when a run is created. Among due runs, one with priority p is taken as if it had become due p seconds earlier, never before it is due.",
                "properties": { "run": string() } })),
            "updatedAt": time(),
            "paused": { "type": "boolean", "description": "Its runs are created but not claimed until it is resumed." },
            "queued": { "type": "integer" }, "running": { "type": "integer" },
            "lastHour": schema_ref("Outcomes"), "lastDay": schema_ref("Outcomes"),
            "placement": schema_ref("JobPlacement"),
            "schedule": nullable(schema_ref("JobSchedule")),
            "keys": schema_ref("JobKeys") } },
        "ConcurrencyLimit": { "type": "object", "required": ["limit"],
            "description": "At most `limit` runs executing at once (a run suspended on a wait holds no slot), across every process: over the whole job, per value of `key` (a CEL expression over `event`, evaluated when the run is created; one that does not evaluate is the key `null`), or shared by every job naming `group`.",
            "properties": {
                "limit": { "type": "integer", "minimum": 1 },
                "key": { "type": "string", "description": "CEL over event.name, event.payload, event.context, event.id, event.source" },
                "group": { "type": "string" } } },
        "JobSchedule": { "type": "object",
            "description": "A scheduled job's schedule: a cron expression in a time zone, or an interval. Each tick sends the event `schedule.<job id>`.",
            "properties": {
            "cron": nullable(string()), "timezone": nullable(string()),
            "intervalSeconds": nullable(json!({ "type": "number" })), "description": string(),
            "nextRuns": { "type": "array", "items": time() }, "lastRun": nullable(time()) } },
        "Stats": { "type": "object", "properties": {
            "window": { "type": "string", "enum": ["1h", "24h"] },
            "bucketSeconds": { "type": "integer" }, "from": time(), "to": time(),
            "events": { "type": "integer" }, "runs": schema_ref("Outcomes"),
            "buckets": { "type": "array", "items": { "allOf": [schema_ref("Outcomes"), { "type": "object",
                "properties": { "start": time(), "events": { "type": "integer" } } }] } },
            "jobs": { "type": "array", "items": { "allOf": [schema_ref("Outcomes"), { "type": "object",
                "properties": { "jobId": string() } }] } },
            "queue": { "type": "object", "properties": {
                "ready": { "type": "integer" }, "delayed": { "type": "integer" },
                "running": { "type": "integer" }, "scheduledEvents": { "type": "integer" } } } } },
    });
    // Two objects: one would pass the json! macro's recursion limit.
    merged(events, runs)
}

/// Adds to every operation the answers that the layers around the routes may give (access
/// control, the browser guards, the body limit, storage), unless the operation documents its own.
fn with_common_responses(mut paths: Value) -> Value {
    for (path, item) in paths.as_object_mut().into_iter().flatten() {
        let health = matches!(path.as_str(), "/healthz" | "/readyz");
        let signed = path.starts_with("/webhooks/");
        for (method, operation) in item.as_object_mut().into_iter().flatten() {
            let has_body = operation.get("requestBody").is_some();
            // An operation open without the key says so with an empty `security`.
            let open = operation.get("security") == Some(&json!([]));
            // The dashboard redirects to its sign-in form instead (its 303).
            let page = operation["tags"]
                .as_array()
                .is_some_and(|t| t.contains(&json!("dashboard")));
            let Some(responses) = operation
                .get_mut("responses")
                .and_then(Value::as_object_mut)
            else {
                continue;
            };
            let mut add = |code: &str, description: &str| {
                responses.entry(code).or_insert_with(|| error(description));
            };
            add("400", "The request has more than one Host header.");
            if !open && !page {
                add("401", "FLARE_API_KEY is set and the request does not send it as `Authorization: Bearer <key>`.");
                add("429", "Too many wrong API keys from this client address (5 within a minute): wrong keys are refused for a minute (`Retry-After`); a request with the right key is still served.");
            }
            if !health {
                add(
                    "421",
                    "No API key is set and the request's Host is not a loopback name.",
                );
            }
            if method != "get" && !signed {
                add("403", "The browser says the request comes from another site (Sec-Fetch-Site, Origin or Referer).");
            }
            if has_body {
                add("413", "The body is larger than --max-body-bytes.");
            }
            if !matches!(
                path.as_str(),
                "/api/openapi.json" | "/healthz" | "/assets/{file}"
            ) {
                add("503", "Storage is unavailable; try again.");
            }
        }
    }
    paths
}

/// The document.
pub fn document() -> Value {
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Flare API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Every route of Flare: the JSON API, POST /trigger, the compatible ingest routes (Trigger.dev v2, Inngest), the webhook routes, health, metrics, and the dashboard's HTML pages (tag dashboard). JSON fields are camelCase; errors are {\"error\": \"…\"} (HTML pages for the dashboard). An empty query parameter counts as absent. With FLARE_API_KEY set, send Authorization: Bearer <key> (the webhook routes are signed instead, the Inngest route takes the key in its path, the health routes are open).",
        },
        "components": {
            "schemas": merged(schemas(), endpoint_schemas()),
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" },
                "session": { "type": "apiKey", "in": "cookie", "name": crate::http::auth::SESSION_COOKIE,
                    "description": "The dashboard's session, set by POST /login (dashboard pages and actions only)." } },
        },
        "security": [{ "bearer": [] }],
        "tags": [{ "name": "dashboard", "description": "HTML pages and form actions for people, not an API." }],
        "paths": with_common_responses(
            [trigger_paths(), endpoint_paths(), ingest_paths(), source_paths(), callback_paths(), trigger_dev_v2_paths(), dashboard_paths()]
                .into_iter()
                .fold(paths(), merged),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The payload search's longest length is in the document wherever `q` is taken.
    #[test]
    fn the_payload_search_documents_its_longest_length() {
        let paths = document()["paths"].clone();
        let q_param = |path: &str| {
            paths[path]["get"]["parameters"]
                .as_array()
                .and_then(|ps| ps.iter().find(|p| p["name"] == "q"))
                .map(|p| p["schema"]["maxLength"].clone())
        };
        let longest = json!(MAX_SEARCH_CHARS);
        assert_eq!(q_param("/api/events"), Some(longest.clone()));
        assert_eq!(q_param("/events"), Some(longest.clone()));
        let bulk = &paths["/api/events/bulk"]["post"]["requestBody"]["content"]["application/json"];
        assert_eq!(
            bulk["schema"]["properties"]["filter"]["properties"]["q"]["maxLength"],
            longest
        );
    }

    /// Every `$ref` in the document names a schema it defines.
    #[test]
    fn every_reference_resolves() {
        let doc = document();
        let schemas = doc["components"]["schemas"]
            .as_object()
            .expect("schemas")
            .clone();
        fn walk(v: &Value, found: &mut Vec<String>) {
            match v {
                Value::Object(m) => {
                    if let Some(Value::String(r)) = m.get("$ref") {
                        found.push(r.clone());
                    }
                    m.values().for_each(|x| walk(x, found));
                }
                Value::Array(a) => a.iter().for_each(|x| walk(x, found)),
                _ => {}
            }
        }
        let mut refs = Vec::new();
        walk(&doc, &mut refs);
        assert!(refs.len() > 20);
        for r in refs {
            let name = r.trim_start_matches("#/components/schemas/");
            assert!(schemas.contains_key(name), "{r} is not defined");
        }
    }

    /// Every `{name}` in a path is a required path parameter declared by each of its
    /// operations, and each operation declares no path parameter its path lacks.
    #[test]
    fn path_parameters_match_their_paths() {
        let doc = document();
        let mut operations = 0;
        for (path, item) in doc["paths"].as_object().expect("paths") {
            let in_path: std::collections::BTreeSet<&str> = path
                .split('{')
                .skip(1)
                .filter_map(|rest| Some(rest.split_once('}')?.0))
                .collect();
            for (method, operation) in item.as_object().expect("a path item") {
                let declared: Vec<&Value> = operation["parameters"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|p| p["in"] == "path")
                    .collect();
                let names: std::collections::BTreeSet<&str> =
                    declared.iter().filter_map(|p| p["name"].as_str()).collect();
                let operation = format!("{} {path}", method.to_uppercase());
                assert_eq!(names, in_path, "{operation}: declared vs in the path");
                assert_eq!(names.len(), declared.len(), "{operation}: a name twice");
                assert!(
                    declared.iter().all(|p| p["required"] == true),
                    "{operation}: path parameters are required"
                );
                operations += 1;
            }
        }
        assert!(operations >= 80, "only {operations} operations");
    }

    /// The modules whose `routes()` make up the router ([`crate::http::public_routes`] and
    /// [`crate::http::protected_routes`]), with their source.
    const ROUTE_MODULES: &[(&str, &str)] = &[
        ("mod", include_str!("../mod.rs")),
        ("api", include_str!("../api.rs")),
        ("endpoints", include_str!("../endpoints.rs")),
        ("trigger", include_str!("../trigger.rs")),
        ("compat", include_str!("../compat.rs")),
        ("trigger_dev_v2", include_str!("../trigger_dev_v2.rs")),
        ("webhooks", include_str!("../webhooks.rs")),
        ("webhook_sources", include_str!("../webhook_sources.rs")),
        ("callbacks", include_str!("../callbacks.rs")),
        ("bulk", include_str!("../bulk.rs")),
        ("dashboard", include_str!("../dashboard/mod.rs")),
    ];

    /// The `(method, path)` of every `.route(path, get(..).post(..))` in `source`; a path given
    /// by a constant is read through `constants`.
    fn routes_in(source: &str, constants: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for call in source.split(".route(").skip(1) {
            // The call's text up to its closing parenthesis.
            let mut depth = 1;
            let end = call
                .char_indices()
                .find(|&(_, c)| {
                    match c {
                        '(' => depth += 1,
                        ')' => depth -= 1,
                        _ => {}
                    }
                    depth == 0
                })
                .map_or(call.len(), |(i, _)| i);
            let call = &call[..end];
            let Some((path, handlers)) = call.split_once(',') else {
                continue;
            };
            let path = path.trim();
            let path = match path.strip_prefix('"').and_then(|p| p.strip_suffix('"')) {
                Some(literal) => literal.to_string(),
                None => constants
                    .iter()
                    .find(|(name, _)| *name == path)
                    .map(|(_, value)| value.to_string())
                    .unwrap_or_else(|| panic!("unknown route constant {path}")),
            };
            // A catch-all `{*rest}` is a path parameter `{rest}` in OpenAPI.
            let path = path.replace("{*", "{");
            for method in ["get", "post", "put", "patch", "delete"] {
                let called = handlers.match_indices(&format!("{method}(")).any(|(i, _)| {
                    i == 0 || matches!(handlers.as_bytes()[i - 1], b'.' | b' ' | b'\n')
                });
                if called {
                    out.push((method.to_string(), path.clone()));
                }
            }
        }
        out
    }

    /// Every route the router serves is in the document, with its method: a route added without
    /// documenting it fails here. The router is built only from the modules read here: a new
    /// module merged into it fails too until it is added to [`ROUTE_MODULES`].
    #[test]
    fn every_route_is_documented() {
        let merged: Vec<&str> = ROUTE_MODULES[0]
            .1
            .split(".merge(")
            .skip(1)
            .filter_map(|m| {
                let (name, _) = m.split_once("::routes()")?;
                name.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_')
                    .then_some(name)
            })
            .collect();
        for module in &merged {
            assert!(
                ROUTE_MODULES.iter().any(|(name, _)| name == module),
                "the router merges {module}::routes(): add it to ROUTE_MODULES"
            );
        }
        let constants = [("INNGEST_ROUTE", crate::http::compat::INNGEST_ROUTE)];
        let doc = document();
        let paths = doc["paths"].as_object().expect("paths");
        let mut seen = 0;
        for (module, source) in ROUTE_MODULES {
            // Only the code, not the tests at the end of the file.
            let code = source.split("#[cfg(test)]").next().unwrap_or(source);
            for (method, path) in routes_in(code, &constants) {
                seen += 1;
                assert!(
                    paths
                        .get(&path)
                        .and_then(|item| item.get(&method))
                        .is_some(),
                    "{} {path} ({module}) is not in the OpenAPI document",
                    method.to_uppercase()
                );
            }
        }
        // The walk found the routes (a parser that found none would pass vacuously).
        assert!(seen >= 45, "only {seen} routes found");
    }
}
