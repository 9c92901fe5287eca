//! The OpenAPI paths of webhook sources: the delivery route `POST /webhooks/{source}` and the
//! JSON API `/api/webhook-sources` (`src/http/{webhooks,webhook_sources}.rs`, docs/webhooks.md).

use serde_json::{json, Value};

use super::parts::{error, id_param, ok, string};

fn source_schema() -> Value {
    json!({ "type": "object", "required": ["id"], "properties": {
        "id": { "type": "string", "pattern": "^[a-z0-9][a-z0-9_-]{0,47}$", "description": "The last segment of /webhooks/{id}." },
        "preset": { "type": "string", "enum": ["stripe", "standard-webhooks", "clerk", "github", "shopify", "paddle", "slack", "database"] },
        "scheme": { "type": "string", "enum": ["hmac", "bearer", "basic", "none"], "description": "Without a preset; `none` (no verification) only when given explicitly." },
        "secret": { "description": "One secret, or a list (any verifies: rotation). Never shown back. basic: user:password.",
            "oneOf": [string(), { "type": "array", "items": string(), "minItems": 1, "maxItems": 10 }] },
        "algorithm": { "type": "string", "enum": ["sha1", "sha256", "sha512"], "description": "hmac (default sha256)." },
        "header": { "type": "string", "description": "hmac: the header carrying the signature." },
        "encoding": { "type": "string", "enum": ["hex", "base64"], "description": "hmac (default hex)." },
        "prefix": { "type": "string", "description": "hmac: text before the signature, e.g. sha256=." },
        "signedContent": { "type": "string", "description": "hmac: what is signed, a template of {body} (once), {timestamp}, {header.<name>}; default {body}." },
        "timestampHeader": { "type": "string", "description": "hmac: the header with the signing time (Unix seconds), required when {timestamp} is signed." },
        "toleranceSecs": { "type": "integer", "minimum": 1, "maximum": 86400, "description": "The replay window where the scheme signs a time (default 300; paddle 5)." },
        "eventName": { "type": "string", "description": "Template of the event name over {payload.<path>} and {header.<name>}, e.g. acme.{payload.type}; required without a preset." },
        "deliveryId": { "type": "string", "description": "Template of the dedupe key, e.g. {header.x-request-id} or {payload.id}; default the preset's, else a hash of the body." } } })
}

fn view_schema() -> Value {
    let mut view = source_schema();
    if let Some(props) = view["properties"].as_object_mut() {
        props.remove("secret");
        props.insert("secrets".into(), json!({ "type": "integer", "description": "How many secrets it has (never their values)." }));
        props.insert(
            "verified".into(),
            json!({ "type": "boolean", "description": "False for scheme none." }),
        );
        props.insert(
            "origin".into(),
            json!({ "type": "string", "enum": ["environment", "file", "api"] }),
        );
        props.insert("variable".into(), json!({ "type": "string", "description": "origin environment: the variable holding the secrets." }));
        props.insert("url".into(), json!({ "type": "string", "description": "The path to give the provider (/webhooks/{id})." }));
        props.insert(
            "createdAt".into(),
            json!({ "type": "string", "format": "date-time" }),
        );
        props.insert(
            "updatedAt".into(),
            json!({ "type": "string", "format": "date-time" }),
        );
    }
    view
}

/// `POST /webhooks/{source}` and `/api/webhook-sources…`.
pub(super) fn source_paths() -> Value {
    let body = json!({ "required": true, "content": { "application/json": { "schema": source_schema() } } });
    let view = ok("The source (its secrets never shown).", view_schema());
    let delivery = json!({ "name": "delivery", "in": "path", "required": true, "description": "The delivery id.", "schema": string() });
    json!({
        "/webhooks/{source}": { "post": {
            "summary": "A delivery to a webhook source (payments: Stripe, auth: Clerk, or any source created); becomes events of source webhook:{source}",
            "security": [],
            "parameters": [{ "name": "source", "in": "path", "required": true, "description": "The source's id.", "schema": string() }],
            "requestBody": { "required": true, "content": { "application/json": { "schema": {
                "description": "The provider's JSON body, verified byte for byte with the source's scheme (docs/webhooks.md)." } } } },
            "responses": {
                "200": ok("Verified and recorded (`duplicate`: recorded before, nothing new started); or a verified handshake answered as the provider expects (GitHub ping, Slack url_verification).",
                    json!({ "type": "object", "properties": { "received": { "const": true },
                        "eventIds": { "type": "array", "items": string() }, "duplicate": { "type": "boolean" },
                        "ping": { "type": "boolean" }, "challenge": string() } })),
                "400": error("Missing or wrong signature or credential, a timestamp outside the window, or a body the source cannot map; nothing stored."),
                "404": error("No such source (the answer of any unknown route)."),
                "413": error("The body is larger than --max-body-bytes."),
                "503": error("No secret configured, or storage unavailable; the provider retries."),
            }
        }},
        "/api/webhook-sources": {
            "get": { "summary": "Every webhook source: from the environment, the start-up file, and created",
                "responses": { "200": ok("The sources.", json!({ "type": "object", "properties": {
                    "sources": { "type": "array", "items": view_schema() } } })) } },
            "post": { "summary": "Create a webhook source (short form: {\"id\", \"preset\", \"secret\"})",
                "requestBody": body.clone(),
                "responses": { "201": view.clone(),
                    "400": error("What is wrong with the source: the message names the field."),
                    "409": error("The id is in use."),
                    "415": error("The body is not sent as application/json.") } },
        },
        "/api/webhook-sources/{id}": {
            "get": { "summary": "One webhook source", "parameters": [id_param("source")], "responses": { "200": view.clone(), "404": error("No such source.") } },
            "put": { "summary": "Replace a created source's settings (secrets kept unless given; the id cannot change)",
                "parameters": [id_param("source")], "requestBody": body,
                "responses": { "200": view, "400": error("What is wrong."), "404": error("No such source."),
                    "409": error("The source is defined in the environment or the start-up file.") } },
            "delete": { "summary": "Delete a created source (its deliveries stay until retention)",
                "parameters": [id_param("source")],
                "responses": { "200": ok("Deleted.", json!({ "type": "object", "properties": { "deleted": string() } })),
                    "404": error("No such source."), "409": error("The source is defined in the environment or the start-up file.") } },
        },
        "/api/webhook-sources/{id}/deliveries": { "get": {
            "summary": "A source's latest deliveries (with their events) and refused deliveries (with the reason)",
            "parameters": [id_param("source")],
            "responses": { "200": ok("Deliveries and rejections, newest first.", json!({ "type": "object", "properties": {
                "deliveries": { "type": "array", "items": { "type": "object" } },
                "rejections": { "type": "array", "items": { "type": "object", "properties": {
                    "source": string(), "at": { "type": "string", "format": "date-time" },
                    "status": { "type": "integer" }, "reason": string() } } } } })),
                "404": error("No such source.") } } },
        "/api/webhook-sources/{id}/test": { "post": {
            "summary": "Send a test delivery: the preset's bundled body, signed with the source's first secret, through the delivery route's path",
            "parameters": [id_param("source")],
            "responses": { "200": ok("What the delivery was answered.", json!({ "type": "object", "properties": {
                "status": { "type": "integer" }, "answer": { "type": "object" } } })),
                "404": error("No such source."), "503": error("The source has no secret.") } } },
        "/api/webhook-sources/{id}/deliveries/{delivery}/replay": { "post": {
            "summary": "Replay a stored delivery: each of its events sent again (source replay:<event id>)",
            "parameters": [id_param("source"), delivery],
            "responses": { "200": ok("The new events.", json!({ "type": "object", "properties": {
                "replayed": string(), "eventIds": { "type": "array", "items": string() } } })),
                "404": error("No such source or stored delivery.") } } },
    })
}

/// `POST /callbacks/{token}` (`io.callback`).
pub(super) fn callback_paths() -> Value {
    json!({
        "/callbacks/{token}": { "post": {
            "summary": "Answer a run's callback (io.callback): resumes the run waiting on it with the JSON body, once",
            "security": [],
            "parameters": [{ "name": "token", "in": "path", "required": true, "description": "The callback's unguessable token (the credential: no API key).", "schema": string() }],
            "requestBody": { "required": true, "content": { "application/json": { "schema": {
                "description": "Any JSON value, at most 256 KiB: what io.wait_for_callback returns." } } } },
            "responses": {
                "200": ok("The run was resumed with the body.", json!({ "type": "object", "properties": { "resumed": { "const": true } } })),
                "400": error("The body is not JSON; nothing changed."),
                "404": error("Unknown token, already answered, or past its deadline; nothing changed."),
                "413": error("The body is larger than 256 KiB; nothing changed."),
            }
        }}
    })
}
