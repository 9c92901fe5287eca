//! The OpenAPI paths of the routes that speak other platforms' protocols: health, the webhook
//! routes, the compatible ingest routes (Trigger.dev v2 events, Inngest) and the Trigger.dev v2
//! platform routes the SDK calls while a run executes.

use serde_json::{json, Value};

use super::parts::{error, id_param, ok, schema_ref, string};

/// Health, the webhook routes and the compatible ingest routes (`src/http/{mod,webhooks,compat}.rs`).
pub(super) fn ingest_paths() -> Value {
    let open = json!([]);
    let status = |value: &str| json!({ "type": "object", "required": ["status"], "properties": { "status": { "const": value } } });
    let raw_json = json!({ "required": true, "content": { "application/json": { "schema": {
        "description": "The provider's JSON body, verified byte for byte." } } } });
    let received = ok(
        "Verified and recorded, or a delivery recorded before (`duplicate`: nothing new started).",
        json!({ "type": "object", "required": ["received", "eventIds", "duplicate"], "properties": {
            "received": { "const": true }, "eventIds": { "type": "array", "items": string() },
            "duplicate": { "type": "boolean" } } }),
    );
    let header = |name: &str, description: &str| json!({ "name": name, "in": "header", "required": false, "description": description, "schema": string() });
    // As the SDK sends them; an optional field sent as null counts as absent.
    let td_event = json!({ "type": "object", "required": ["name"], "properties": {
        "name": string(), "payload": { "description": "Any JSON value." },
        "context": { "description": "Any JSON value." }, "id": { "type": ["string", "null"] },
        "timestamp": { "description": "Ignored: Flare stamps the time it received the event." } } });
    let td_options = json!({ "type": ["object", "null"], "properties": {
        "deliverAt": { "type": ["string", "null"], "format": "date-time" },
        "deliverAfter": { "type": ["integer", "null"], "minimum": 0, "description": "Seconds." } } });
    json!({
        "/healthz": { "get": {
            "summary": "The process is up", "security": open,
            "responses": { "200": ok("Up.", status("ok")) }
        }},
        "/readyz": { "get": {
            "summary": "Storage answers a read and takes a write", "security": open,
            "responses": { "200": ok("Ready.", status("ready")),
                "503": error("Not ready: says whether reads or writes failed.") }
        }},
        "/webhooks/payments": { "post": {
            "summary": "A Stripe webhook (signed with STRIPE_WEBHOOK_SECRET); becomes events of source webhook:payments",
            "security": open,
            "parameters": [header("Stripe-Signature", "`t=<unix seconds>,v1=<hex HMAC-SHA256 of \"<t>.<body>\">`.")],
            "requestBody": raw_json.clone(),
            "responses": { "200": received.clone(),
                "400": error("Missing or wrong signature, a timestamp older than 5 minutes, or a body that is not a Stripe event; nothing stored."),
                "503": error("No secret configured, or storage unavailable; the provider retries.") }
        }},
        "/webhooks/auth": { "post": {
            "summary": "A Clerk webhook (Svix / Standard Webhooks, CLERK_WEBHOOK_SECRET); becomes events of source webhook:auth",
            "security": open,
            "parameters": [
                header("svix-id", "The delivery id (or `webhook-id`)."),
                header("svix-timestamp", "Unix seconds (or `webhook-timestamp`)."),
                header("svix-signature", "`v1,<base64 HMAC-SHA256>` (or `webhook-signature`)."),
            ],
            "requestBody": raw_json,
            "responses": { "200": received,
                "400": error("Missing or wrong signature, a stale timestamp, or a body that is not a Clerk event; nothing stored."),
                "503": error("No secret configured, or storage unavailable; the provider retries.") }
        }},
        "/api/v1/events": { "post": {
            "summary": "Trigger.dev v2 sendEvent: store one event (source trigger.dev)",
            "requestBody": { "required": true, "content": { "application/json": { "schema": {
                "type": "object", "required": ["event"], "properties": {
                    "event": td_event.clone(), "options": td_options.clone() } } } } },
            "responses": { "200": ok("The event, as Trigger.dev's ApiEventLog.", schema_ref("TriggerDevEvent")),
                "400": error("Bad body, name, id or time."), "415": error("Not sent as application/json.") }
        }},
        "/api/v1/events/bulk": { "post": {
            "summary": "Trigger.dev v2 sendEvents: store several events in one transaction (all or none)",
            "requestBody": { "required": true, "content": { "application/json": { "schema": {
                "type": "object", "required": ["events"], "properties": {
                    "events": { "type": "array", "items": td_event }, "options": td_options } } } } },
            "responses": { "200": ok("The events, in the order sent.", json!({ "type": "array", "items": schema_ref("TriggerDevEvent") })),
                "400": error("A bad event: nothing was stored."), "415": error("Not sent as application/json.") }
        }},
        "/api/v1/events/{id}": { "get": {
            "summary": "Trigger.dev getEvent: the event with its runs",
            "parameters": [id_param("event")],
            "responses": { "200": ok("The event.", schema_ref("TriggerDevEventRuns")), "404": error("No such event.") }
        }},
        "/api/v2/events/{id}": { "get": {
            "summary": "Trigger.dev getEvent (v2 path): the event with its runs",
            "parameters": [id_param("event")],
            "responses": { "200": ok("The event.", schema_ref("TriggerDevEventRuns")), "404": error("No such event.") }
        }},
        "/api/v1/events/{id}/cancel": { "post": {
            "summary": "Trigger.dev cancelEvent: cancel a scheduled event (again: unchanged)",
            "parameters": [id_param("event")],
            "responses": { "200": ok("The cancelled event.", schema_ref("TriggerDevEvent")),
                "404": error("No such event."), "409": error("Already delivered.") }
        }},
        "/e/{key}": { "post": {
            "summary": "Inngest send: one event or an array, stored in one transaction (source inngest)",
            "security": open,
            "parameters": [{ "name": "key", "in": "path", "required": true, "schema": string(),
                "description": "The event key: FLARE_API_KEY when one is set, anything otherwise." },
                header("x-inngest-event-id-seed", "The SDK's seed: events without an id get ids derived from it, so its retries store once.")],
            "requestBody": { "required": true, "content": { "application/json": { "schema": {
                "oneOf": [schema_ref("InngestEvent"), { "type": "array", "items": schema_ref("InngestEvent") }] } } } },
            "responses": {
                "200": ok("The ids, in the order sent.", json!({ "type": "object", "required": ["ids", "status"], "properties": {
                    "ids": { "type": "array", "items": string() }, "status": { "const": 200 },
                    "duplicates": { "type": "array", "items": string(), "description": "Ids stored already (only when there are any)." },
                    "conflicts": { "type": "array", "description": "Ids stored already with another name or data (only when there are any).",
                        "items": { "type": "object", "properties": { "id": string(),
                            "conflictingFields": { "type": "array", "items": { "enum": ["name", "payload"] } } } } } } })),
                "400": error("A bad event: nothing was stored."),
                "401": error("FLARE_API_KEY is set and the key in the path is not it."),
            }
        }},
    })
}

/// A path parameter named `name`.
fn path_param(name: &str, description: &str) -> Value {
    json!({ "name": name, "in": "path", "required": true, "description": description, "schema": string() })
}

/// The Trigger.dev v2 platform routes the SDK calls (`http/trigger_dev_v2.rs`, docs/trigger-dev-v2.md).
pub(super) fn trigger_dev_v2_paths() -> Value {
    let run = path_param("run", "The run id.");
    let task = path_param("id", "The task id Flare gave.");
    let job = path_param("job", "The job id.");
    let object = json!({ "type": "object" });
    let body = json!({ "required": true, "content": { "application/json": { "schema": object } } });
    let not_executing =
        error("The run is not executing now: only its current execution writes its tasks.");
    // A feature Flare lacks: `methods` (those the SDK sends) answer 501 naming it.
    let unsupported = |feature: &str, methods: &[&str], params: Value| {
        let operation = json!({
            "summary": format!("Trigger.dev v2 {feature}: not in Flare"),
            "parameters": params,
            "responses": { "501": error(&format!("Flare does not have {feature}; the message names it.")) } });
        Value::Object(
            methods
                .iter()
                .map(|m| (m.to_string(), operation.clone()))
                .collect(),
        )
    };
    let key = path_param("key", "The SDK's key.");
    let client = path_param("client", "The TriggerClient's id.");
    let rest = path_param("rest", "The rest of the SDK's path.");
    json!({
        "/api/v1/endpoints": { "post": {
            "summary": "Trigger.dev v2 CLI: register an endpoint {url, name} (PING, then INDEX_ENDPOINT)",
            "requestBody": { "required": true, "content": { "application/json": { "schema": {
                "type": "object", "required": ["url", "name"], "properties": { "url": string(), "name": string() } } } } },
            "responses": { "200": ok("The endpoint, as /api/endpoints/{id} shows it.", object.clone()),
                "400": error("Bad body, URL (one Flare does not call included: link-local, cloud metadata, unspecified) or key."),
                "409": error("A job id of its index is taken by another endpoint or by code."),
                "415": error("Not sent as application/json."),
                "422": error("The endpoint's PING or index failed, or its index is invalid; the message says how. Nothing was stored.") }
        }},
        "/api/v1/runs/{run}/tasks": { "post": {
            "summary": "Trigger.dev v2 io.runTask: create a task, or return the stored one for its idempotency key",
            "parameters": [run.clone()], "requestBody": body.clone(),
            "responses": { "200": ok("The task (ServerTask), with cached tasks when the SDK asks for them.", object.clone()),
                "400": error("Bad task."), "404": error("No such run."), "409": not_executing.clone() }
        }},
        "/api/v1/runs/{run}/tasks/{id}/complete": { "post": {
            "summary": "Trigger.dev v2: a task completed with its output",
            "parameters": [run.clone(), task.clone()], "requestBody": body.clone(),
            "responses": { "200": ok("The task.", object.clone()),
                "400": error("The body is empty, not JSON, or not {output?: string}."),
                "404": error("No such task."), "409": not_executing.clone(),
                "413": error("The output is over the limit."), "415": error("Not sent as application/json.") }
        }},
        "/api/v1/runs/{run}/tasks/{id}/fail": { "post": {
            "summary": "Trigger.dev v2: a task failed with its error",
            "parameters": [run.clone(), task], "requestBody": body,
            "responses": { "200": ok("The task.", object.clone()),
                "400": error("The body is empty, not JSON, or has no error {message, name?, stack?}."),
                "404": error("No such task."), "409": not_executing, "415": error("Not sent as application/json.") }
        }},
        "/api/v2/runs/{run}": { "get": {
            "summary": "Trigger.dev v2 getRun", "parameters": [run.clone()],
            "responses": { "200": ok("The run.", object.clone()), "404": error("No such run.") }
        }},
        "/api/v2/runs/{run}/statuses": { "get": {
            "summary": "Trigger.dev v2 getRunStatuses", "parameters": [run.clone()],
            "responses": { "200": ok("The run's status and statuses.", object.clone()), "404": error("No such run.") }
        }},
        "/api/v1/runs/{run}/cancel": { "post": {
            "summary": "Trigger.dev v2 cancelRun", "parameters": [run.clone()],
            "responses": { "200": ok("The run.", object.clone()), "404": error("No such run."), "409": error("The run has finished.") }
        }},
        "/api/v1/jobs/{job}/runs": { "get": {
            "summary": "Trigger.dev v2 getRuns: a job's runs, newest first",
            "parameters": [job.clone()],
            "responses": { "200": ok("The runs.", object.clone()) }
        }},
        "/api/v1/events/{id}/cancel-runs": { "post": {
            "summary": "Trigger.dev v2 cancelRunsForEvent", "parameters": [id_param("event")],
            "responses": { "200": ok("The runs cancelled and those that could not be.", object.clone()), "404": error("No such event.") }
        }},
        "/api/v1/jobs/{job}/invoke": { "post": {
            "summary": "Trigger.dev v2 invokeJob: a run of that one job (the Idempotency-Key header makes it once per key); with options.callbackUrl, a child of the waiting task's run, which waits for it (invokeAndWaitForCompletion)",
            "parameters": [job.clone(), { "name": "Idempotency-Key", "in": "header", "required": false,
                "description": "The run's event id is invoke-<key>: the same key, the same run.", "schema": string() }],
            "requestBody": { "required": true, "content": { "application/json": { "schema": {
                "type": "object", "properties": { "payload": {}, "context": {}, "options": { "type": "object",
                    "properties": { "callbackUrl": string(), "accountId": string() } } } } } } },
            "responses": { "200": ok("{id}: the run's id.", object.clone()),
                "400": error("Bad body or header; options.accountId (not supported)."),
                "404": error("No such job, or options.callbackUrl is not a waiting task's of a run executing on this node."),
                "409": error("The Idempotency-Key's event has no run of this job."),
                "415": error("Not sent as application/json.") }
        }},
        "/api/v1/jobs/{job}/cancel-runs": { "post": {
            "summary": "Trigger.dev v2 cancelRunsForJob: cancels the job's queued, waiting and running runs (at most 10,000)",
            "parameters": [job],
            "responses": { "200": ok("{cancelledRunIds, failedToCancelRunIds}.", object.clone()) }
        }},
        "/api/v1/event-dispatchers/ephemeral": { "post": {
            "summary": "Trigger.dev v2 io.waitForEvent: the waiting task whose callback URL it names waits for the first event of that name whose payload passes the filter",
            "requestBody": { "required": true, "content": { "application/json": { "schema": {
                "type": "object", "required": ["url", "name"], "properties": { "url": string(), "name": {},
                    "filter": { "type": "object" }, "source": string(), "timeoutInSeconds": { "type": "number" } } } } } },
            "responses": { "200": ok("{id}.", object),
                "400": error("Bad body; several names, another source, contextFilter or accountId (not supported), or a filter Flare does not read; the message names the field."),
                "404": error("url is not the callback URL of a waiting task of a run executing on this node."),
                "415": error("Not sent as application/json.") }
        }},
        "/api/v1/runs/{run}/statuses/{id}": unsupported("io.createStatus", &["put"],
            json!([run, path_param("id", "The status id.")])),
        "/api/v1/store/{key}": unsupported("io.store", &["get", "put", "delete"], json!([key.clone()])),
        "/api/v1/webhooks/{key}": unsupported("webhook triggers", &["put"], json!([key])),
        "/api/v1/{client}/auth/{id}": unsupported("integrations", &["get"],
            json!([client.clone(), path_param("id", "The integration id.")])),
        "/api/v1/{client}/schedules/{rest}": unsupported("dynamic schedules", &["post", "delete"],
            json!([client.clone(), rest.clone()])),
        "/api/v2/{client}/sources/{rest}": unsupported("external sources", &["put"],
            json!([client.clone(), rest.clone()])),
        "/api/v2/{client}/triggers/{rest}": unsupported("dynamic triggers", &["put"], json!([client, rest])),
    })
}
