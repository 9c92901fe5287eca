//! The building blocks of the OpenAPI document: references, responses, parameters and the common
//! schemas, shared by the JSON API's paths (`mod.rs`), the compatible routes' (`compat.rs`) and
//! the dashboard's (`dashboard.rs`).

use serde_json::{json, Value};

use crate::store::events::MAX_SEARCH_CHARS;

pub(super) fn schema_ref(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

pub(super) fn ok(description: &str, schema: Value) -> Value {
    json!({ "description": description, "content": { "application/json": { "schema": schema } } })
}

pub(super) fn error(description: &str) -> Value {
    ok(description, schema_ref("Error"))
}

/// A query parameter; like every query parameter of the API, an empty value counts as absent.
pub(super) fn query(name: &str, description: &str, schema: Value) -> Value {
    json!({ "name": name, "in": "query", "required": false, "description": description,
        "allowEmptyValue": true, "schema": schema })
}

pub(super) fn id_param(what: &str) -> Value {
    json!({ "name": "id", "in": "path", "required": true, "description": format!("The {what} id."), "schema": { "type": "string" } })
}

pub(super) fn string() -> Value {
    json!({ "type": "string" })
}

/// The payload search `q`: its longest length is [`MAX_SEARCH_CHARS`].
pub(super) fn search() -> Value {
    json!({ "type": "string", "maxLength": MAX_SEARCH_CHARS })
}

pub(super) fn nullable_string() -> Value {
    json!({ "type": ["string", "null"] })
}

pub(super) fn time() -> Value {
    json!({ "type": "string", "format": "date-time" })
}

pub(super) fn nullable(schema: Value) -> Value {
    json!({ "oneOf": [schema, { "type": "null" }] })
}

pub(super) fn page_params() -> [Value; 2] {
    [
        query(
            "limit",
            "Page size, 1 to 500.",
            json!({ "type": "integer", "minimum": 1, "maximum": 500, "default": 50 }),
        ),
        query("cursor", "The nextCursor of the previous page.", string()),
    ]
}
