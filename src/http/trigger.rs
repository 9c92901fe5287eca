//! `POST /trigger`: the seed's HTTP entry point.
//!
//! Body: `{"event": name, "payload": any}`, with the optional extensions `id` (idempotency: an
//! existing id returns the stored event and starts nothing), `delay` (an object
//! `{"seconds", "minutes", "hours", "days"}` whose numbers, ≥ 0, add up; or a string such as
//! `"2h"` or `"1h30m"`), `deliverAt` (RFC 3339) and `context`. Unknown fields are refused, so a
//! misspelt option (`deliver_at`) cannot silently send at once.
//!
//! Success is `200 {"success": true, "message": "Event '<name>' sent to the job platform",
//! "result": <the stored event, with runIds>, "duplicate": false, "conflict": false}`, answered
//! only after the event and its runs are committed. An `id` sent again answers the stored event
//! with `"duplicate": true` and a message saying so; when the name or payload sent differ from the
//! stored ones, also `"conflict": true` and `"conflictingFields"` (see [`super::duplicates`]).
//! Errors are JSON: 400 (missing fields, bad JSON, bad name or delay), 415, 413, 503.

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Value};

use super::body::JsonObject;
use super::duplicates;
use super::{ApiError, AppState};
use crate::client::SendEvent;
use crate::model::{DelaySpec, Source};

/// The routes of this module (protected).
pub fn routes() -> Router<AppState> {
    Router::new().route("/trigger", post(trigger))
}

/// The body of `POST /trigger`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TriggerRequest {
    /// Event name (required).
    #[serde(default)]
    pub event: Option<String>,
    /// Payload; `null` when absent.
    #[serde(default)]
    pub payload: Value,
    /// Idempotency id.
    #[serde(default)]
    pub id: Option<String>,
    /// Delay before delivery.
    #[serde(default)]
    pub delay: Option<DelaySpec>,
    /// Delivery time, RFC 3339.
    #[serde(default)]
    pub deliver_at: Option<String>,
    /// Caller context.
    #[serde(default)]
    pub context: Option<Value>,
}

/// Turns a request into the event to send, or a 400.
pub fn to_send_event(req: TriggerRequest) -> Result<SendEvent, ApiError> {
    let name = match req.event {
        Some(name) if !name.is_empty() => name,
        _ => {
            return Err(ApiError::BadRequest(
                "required fields are missing: `event` (the body must look like {\"event\": \"user.created\", \"payload\": {…}})".into(),
            ))
        }
    };
    let mut send = SendEvent::new(name, &req.payload);
    if let Some(id) = req.id {
        send = send.id(id);
    }
    if let Some(delay) = &req.delay {
        send = send.delay(delay.to_delay().map_err(ApiError::BadRequest)?);
    }
    if let Some(at) = &req.deliver_at {
        send = send.deliver_at(parse_time(at, "deliverAt")?);
    }
    if let Some(context) = req.context {
        send = send.context(context);
    }
    Ok(send)
}

/// Parses an RFC 3339 time, naming the field when it is not one.
pub(crate) fn parse_time(text: &str, field: &str) -> Result<DateTime<Utc>, ApiError> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| {
            ApiError::BadRequest(format!(
                "`{field}` must be an RFC 3339 time such as 2030-01-01T09:00:00Z"
            ))
        })
}

async fn trigger(
    State(state): State<AppState>,
    JsonObject(req): JsonObject<TriggerRequest>,
) -> Result<Json<Value>, ApiError> {
    let send = to_send_event(req)?;
    let sent = state.client.send_inserted(send, Source::Http).await?;
    let now = state.client.clock().now_ms();
    duplicates::log_conflicts(
        &state.conflicts,
        "trigger",
        now,
        std::slice::from_ref(&sent),
    );
    let message = duplicates::message(&sent)
        .unwrap_or_else(|| format!("Event '{}' sent to the job platform", sent.event.name));
    let answer = json!({
        "success": true,
        "message": message,
        "result": sent.event,
    });
    Ok(Json(duplicates::with_fields(answer, &sent)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_array_delay_inside_a_request_is_refused() {
        let req: TriggerRequest =
            crate::strict_json::from_value(json!({"event": "a.b", "delay": [1, 2]}))
                .expect("parses");
        assert!(to_send_event(req).is_err());
    }
}
