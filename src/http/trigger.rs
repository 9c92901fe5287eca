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

use std::time::Duration;

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
use crate::model::{Delay, Source};

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

/// A delay as sent over HTTP: `{"hours": 1, "minutes": 30}` or `"1h30m"`.
#[derive(Debug)]
pub enum DelaySpec {
    /// `"2h"`, `"90s"`, `"1d"`, `"1h30m"`.
    Text(String),
    /// Units that add up; each a number ≥ 0 (fractions allowed).
    Units(DelayUnits),
    /// Anything else: refused with a clear message.
    Other(Value),
}

/// Picks the form from the JSON value itself rather than with `#[serde(untagged)]`, which would
/// read [`DelayUnits`] from serde's buffer and so take an array (`[1, 2]`: 1 s and 2 min) for the
/// object form (see [`crate::strict_json`]).
impl<'de> Deserialize<'de> for DelaySpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match Value::deserialize(d)? {
            Value::String(text) => DelaySpec::Text(text),
            object @ Value::Object(_) => crate::strict_json::from_value(object.clone())
                .map_or(DelaySpec::Other(object), DelaySpec::Units),
            other => DelaySpec::Other(other),
        })
    }
}

/// The object form of a delay.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelayUnits {
    /// Seconds.
    #[serde(default)]
    pub seconds: Option<f64>,
    /// Minutes.
    #[serde(default)]
    pub minutes: Option<f64>,
    /// Hours.
    #[serde(default)]
    pub hours: Option<f64>,
    /// Days.
    #[serde(default)]
    pub days: Option<f64>,
}

const DELAY_SHAPE: &str =
    "`delay` must be an object such as {\"hours\": 1, \"minutes\": 30} (seconds, minutes, hours, days; numbers ≥ 0) or a string such as \"2h\"";

impl DelaySpec {
    /// The delay, or a 400 message.
    pub fn to_delay(&self) -> Result<Delay, String> {
        match self {
            DelaySpec::Text(text) => Delay::parse(text),
            DelaySpec::Units(units) => units.to_delay(),
            DelaySpec::Other(_) => Err(DELAY_SHAPE.into()),
        }
    }
}

impl DelayUnits {
    /// Adds the units up; each must be a finite number ≥ 0, the total at most 365 days.
    pub fn to_delay(&self) -> Result<Delay, String> {
        let parts = [
            ("seconds", self.seconds, 1.0),
            ("minutes", self.minutes, 60.0),
            ("hours", self.hours, 3600.0),
            ("days", self.days, 86_400.0),
        ];
        let mut total = 0.0_f64;
        for (unit, value, factor) in parts {
            let Some(v) = value else { continue };
            if !v.is_finite() || v < 0.0 {
                return Err(format!("`delay.{unit}` must be a number ≥ 0"));
            }
            total += v * factor;
        }
        let max = crate::model::MAX_DELAY.as_secs_f64();
        if total > max {
            return Err("the maximum delay is 365 days".into());
        }
        Duration::try_from_secs_f64(total)
            .map(Delay::from)
            .map_err(|_| DELAY_SHAPE.to_string())
    }
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

    fn units(s: f64, m: f64, h: f64, d: f64) -> DelayUnits {
        DelayUnits {
            seconds: Some(s),
            minutes: Some(m),
            hours: Some(h),
            days: Some(d),
        }
    }

    #[test]
    fn delay_units_add_up_and_refuse_negative_or_huge() {
        assert_eq!(
            units(1.0, 1.0, 1.0, 1.0).to_delay(),
            Ok(Delay::seconds(86_400 + 3600 + 60 + 1))
        );
        assert_eq!(
            DelayUnits {
                hours: Some(1.5),
                ..DelayUnits::default()
            }
            .to_delay(),
            Ok(Delay::minutes(90))
        );
        assert!(units(-1.0, 0.0, 0.0, 0.0)
            .to_delay()
            .unwrap_err()
            .contains("delay.seconds"));
        assert!(units(0.0, 0.0, 0.0, 366.0)
            .to_delay()
            .unwrap_err()
            .contains("365 days"));
        assert!(units(0.0, 0.0, 0.0, f64::MAX).to_delay().is_err());
        assert_eq!(DelayUnits::default().to_delay(), Ok(Delay::seconds(0)));
    }

    #[test]
    fn delay_accepts_text_and_refuses_other_shapes() {
        let text: DelaySpec = serde_json::from_value(json!("1h30m")).expect("parses");
        assert_eq!(text.to_delay(), Ok(Delay::minutes(90)));
        let number: DelaySpec = serde_json::from_value(json!(60)).expect("parses");
        assert!(number.to_delay().unwrap_err().contains("must be an object"));
        let unknown: DelaySpec = serde_json::from_value(json!({"weeks": 1})).expect("parses");
        assert!(unknown.to_delay().is_err());
        // An array is not the object form, at the top or inside a request.
        let array: DelaySpec = serde_json::from_value(json!([1, 2])).expect("parses");
        assert!(array.to_delay().unwrap_err().contains("must be an object"));
        let req: TriggerRequest =
            crate::strict_json::from_value(json!({"event": "a.b", "delay": [1, 2]}))
                .expect("parses");
        assert!(to_send_event(req).is_err());
    }
}
