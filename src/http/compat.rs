//! Compatible ingest: existing Trigger.dev v2 and Inngest v3 clients send events to Flare
//! unchanged, only pointed at its URL. Protected routes (see [`super::auth`]).
//!
//! **Trigger.dev v2** (`@trigger.dev/sdk` 2.x, `Authorization: Bearer <key>`):
//! - `POST /api/v1/events` — `{event: {name, payload, id?, context?, timestamp?}, options?:
//!   {deliverAt?, deliverAfter? (seconds)}}` → the event as Trigger.dev's `ApiEventLog`:
//!   `{id, name, payload, context, timestamp, deliverAt, deliveredAt, cancelledAt}`;
//! - `POST /api/v1/events/bulk` — `{events: [...], options?}` → an array of those, stored in one
//!   transaction (the SDK's `sendEvents`). Each event log also says `duplicate` and `conflict`
//!   (with `conflictingFields`) for an id sent again (see [`super::duplicates`]);
//! - `POST /api/v1/events/{id}/cancel` — cancels a scheduled event (cancelling a cancelled event
//!   again answers it unchanged; a delivered one is 409);
//! - `GET /api/v1/events/{id}` and `GET /api/v2/events/{id}` (the SDK's `getEvent`) — the event
//!   plus Trigger.dev's `GetEvent` fields: `createdAt`, `updatedAt`, `runs: [{id, status,
//!   startedAt, completedAt}]` with Trigger.dev's status names.
//!
//! The caller's `timestamp` is not kept: Flare's `timestamp` is when it received the event. The
//! SDK refuses API keys not shaped `tr_<env>_<letters and digits>` before sending anything, so a
//! Flare used by Trigger.dev clients needs a `FLARE_API_KEY` of that shape (e.g. `tr_prod_…`).
//!
//! **Inngest** (`inngest` 3.x): `POST /e/{key}` — one event or an array of `{name, data, id?,
//! ts?, user?, v?}`; `data` becomes the payload (`{}` when absent), `id` the event id (sending it
//! again starts nothing), and a `ts` (ms) more than [`INNGEST_TS_GRACE_MS`] ahead of the server's
//! clock delays delivery until then (the SDK stamps every event with the sender's clock, so a
//! slightly fast sender clock does not delay). `user` and `v` are kept in the context. Without an
//! `id`, the ids derive from the SDK's `x-inngest-event-id-seed` header, so the SDK's own retries
//! of one send cannot store it twice. The whole array is stored in one transaction. Answer:
//! `{"ids": [...], "status": 200}`, plus `duplicates` (the ids that were stored already) and
//! `conflicts` (`[{id, conflictingFields}]`, those sent with another name or `data`) when there are
//! any. The key in the path is the credential (any key when Flare has
//! none). Inngest clients are lenient about content types, so this route is too.
//!
//! Event names follow Flare's rule in both dialects, which takes Inngest's `app/user.created`: `/`
//! separates segments as `.` does (see [`crate::model::validate_event_name`]); a job triggers on
//! the full name.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::body::{JsonObject, LenientJsonBody};
use super::duplicates;
use super::trigger::parse_time;
use super::{ApiError, AppState};
use crate::client::{self, SendEvent};
use crate::endpoints::trigger_dev_v2::event_log;
use crate::model::{Delay, RunStatus, Source};

/// The Inngest route, as matched (the auth layer accepts the key in its path).
pub const INNGEST_ROUTE: &str = "/e/{key}";

/// How far ahead of the server's clock an Inngest `ts` may be and still deliver at once, in ms.
pub const INNGEST_TS_GRACE_MS: i64 = 1000;

/// The routes of this module (protected).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/v1/events", post(trigger_dev_send))
        .route("/api/v1/events/bulk", post(trigger_dev_send_bulk))
        .route("/api/v1/events/{id}", get(trigger_dev_get))
        .route("/api/v2/events/{id}", get(trigger_dev_get))
        .route("/api/v1/events/{id}/cancel", post(trigger_dev_cancel))
        .route(INNGEST_ROUTE, post(inngest_send))
}

// ----- Trigger.dev v2 ----------------------------------------------------------------------

/// A Trigger.dev v2 raw event.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TriggerDevEvent {
    name: String,
    #[serde(default)]
    payload: Value,
    #[serde(default)]
    context: Option<Value>,
    #[serde(default)]
    id: Option<String>,
}

/// Trigger.dev v2 send options.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TriggerDevOptions {
    #[serde(default)]
    deliver_at: Option<String>,
    #[serde(default)]
    deliver_after: Option<i64>,
}

#[derive(Debug, Deserialize)]
struct TriggerDevSend {
    event: TriggerDevEvent,
    #[serde(default)]
    options: Option<TriggerDevOptions>,
}

#[derive(Debug, Deserialize)]
struct TriggerDevSendBulk {
    events: Vec<TriggerDevEvent>,
    #[serde(default)]
    options: Option<TriggerDevOptions>,
}

pub(crate) fn trigger_dev_event(
    event: TriggerDevEvent,
    options: Option<&TriggerDevOptions>,
) -> Result<SendEvent, ApiError> {
    let mut send = SendEvent::new(event.name, &event.payload);
    if let Some(id) = event.id {
        send = send.id(id);
    }
    if let Some(context) = event.context {
        send = send.context(context);
    }
    if let Some(options) = options {
        let (at, after) = options.checked()?;
        if let Some(at) = at {
            send = send.deliver_at(at);
        }
        if let Some(secs) = after {
            send = send.delay(Delay::seconds(secs));
        }
    }
    Ok(send)
}

impl TriggerDevOptions {
    /// `deliverAt` and `deliverAfter`, checked (also for a bulk send of no event, so that a bad
    /// option is refused whatever the events).
    fn checked(&self) -> Result<(Option<DateTime<Utc>>, Option<u64>), ApiError> {
        let at = match &self.deliver_at {
            Some(at) => Some(parse_time(at, "options.deliverAt")?),
            None => None,
        };
        let after = match self.deliver_after {
            Some(secs) => Some(u64::try_from(secs).map_err(|_| {
                ApiError::BadRequest(
                    "`options.deliverAfter` must be a number of seconds ≥ 0".into(),
                )
            })?),
            None => None,
        };
        Ok((at, after))
    }
}

async fn trigger_dev_send(
    State(state): State<AppState>,
    JsonObject(body): JsonObject<TriggerDevSend>,
) -> Result<Json<Value>, ApiError> {
    let send = trigger_dev_event(body.event, body.options.as_ref())?;
    let sent = state.client.send_inserted(send, Source::TriggerDev).await?;
    let now = state.client.clock().now_ms();
    duplicates::log_conflicts(
        &state.conflicts,
        "trigger.dev",
        now,
        std::slice::from_ref(&sent),
    );
    Ok(Json(duplicates::with_fields(event_log(&sent.event), &sent)))
}

async fn trigger_dev_send_bulk(
    State(state): State<AppState>,
    JsonObject(body): JsonObject<TriggerDevSendBulk>,
) -> Result<Json<Value>, ApiError> {
    if let Some(options) = &body.options {
        options.checked()?;
    }
    let sends = body
        .events
        .into_iter()
        .map(|e| trigger_dev_event(e, body.options.as_ref()))
        .collect::<Result<Vec<_>, _>>()?;
    let sent = state.client.send_batch(sends, Source::TriggerDev).await?;
    let now = state.client.clock().now_ms();
    duplicates::log_conflicts(&state.conflicts, "trigger.dev", now, &sent);
    Ok(Json(Value::Array(
        sent.iter()
            .map(|s| duplicates::with_fields(event_log(&s.event), s))
            .collect(),
    )))
}

async fn trigger_dev_cancel(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    match state.client.cancel_event(&id).await {
        Ok(event) => Ok(Json(event_log(&event))),
        Err(client::Error::Conflict(msg)) => match state.client.event(&id).await? {
            // Cancelling twice is harmless, as in Trigger.dev.
            Some(event) if event.cancelled_at.is_some() => Ok(Json(event_log(&event))),
            _ => Err(ApiError::Conflict(msg)),
        },
        Err(e) => Err(e.into()),
    }
}

/// Trigger.dev's run status names.
pub(crate) fn trigger_dev_status(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Queued => "QUEUED",
        RunStatus::Running => "EXECUTING",
        RunStatus::Succeeded => "SUCCESS",
        RunStatus::Failed => "FAILURE",
        RunStatus::Cancelled => "CANCELED",
    }
}

async fn trigger_dev_get(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let detail = state
        .client
        .store()
        .event_detail(&id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("event {id:?} not found")))?;
    let event = &detail.event;
    let updated = [
        Some(event.timestamp),
        event.delivered_at,
        event.cancelled_at,
    ]
    .into_iter()
    .flatten()
    .max()
    .unwrap_or(event.timestamp);
    let runs: Vec<Value> = detail
        .runs
        .iter()
        .map(|r| {
            json!({
                "id": r.id,
                "jobId": r.job_id,
                "status": trigger_dev_status(r.status),
                "startedAt": r.started_at,
                "completedAt": r.finished_at,
            })
        })
        .collect();
    let mut body = event_log(event);
    if let Value::Object(map) = &mut body {
        map.insert("createdAt".into(), json!(event.timestamp));
        map.insert("updatedAt".into(), json!(updated));
        map.insert("runs".into(), Value::Array(runs));
    }
    Ok(Json(body))
}

// ----- Inngest -----------------------------------------------------------------------------

#[derive(Debug, Deserialize)]
struct InngestEvent {
    name: String,
    #[serde(default)]
    data: Value,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    ts: Option<f64>,
    #[serde(default)]
    user: Option<Value>,
    #[serde(default)]
    v: Option<String>,
}

/// Header with which the Inngest SDK seeds event ids, identical across its retries of one send.
const INNGEST_SEED_HEADER: &str = "x-inngest-event-id-seed";

fn inngest_event(
    raw: Value,
    index: usize,
    seed: Option<&str>,
    now_ms: i64,
) -> Result<SendEvent, ApiError> {
    let event: InngestEvent = crate::strict_json::from_value(raw)
        .map_err(|e| ApiError::BadRequest(format!("invalid event at index {index}: {e}")))?;
    let data = match event.data {
        Value::Null => Value::Object(Map::new()),
        other => other,
    };
    let mut send = SendEvent::new(event.name, &data);
    let id = event
        .id
        .filter(|id| !id.is_empty())
        .or_else(|| seed.map(|seed| seeded_id(seed, index)));
    if let Some(id) = id {
        send = send.id(id);
    }
    if let Some(ts) = event.ts {
        if !ts.is_finite() {
            return Err(ApiError::BadRequest(format!(
                "invalid event at index {index}: `ts` must be milliseconds since the epoch"
            )));
        }
        // Float to integer milliseconds; out-of-range values saturate and are refused below.
        let ts = ts as i64;
        if ts > now_ms.saturating_add(INNGEST_TS_GRACE_MS) {
            let at = DateTime::<Utc>::from_timestamp_millis(ts).ok_or_else(|| {
                ApiError::BadRequest(format!(
                    "invalid event at index {index}: `ts` is out of range"
                ))
            })?;
            send = send.deliver_at(at);
        }
    }
    let mut context = Map::new();
    if let Some(user) = event.user {
        context.insert("user".into(), user);
    }
    if let Some(v) = event.v {
        context.insert("v".into(), Value::String(v));
    }
    if !context.is_empty() {
        send = send.context(Value::Object(context));
    }
    Ok(send)
}

/// A stable event id from the SDK's seed and the event's position in the send.
fn seeded_id(seed: &str, index: usize) -> String {
    let digest = Sha256::digest(format!("{seed}\n{index}").as_bytes());
    format!("inn_{}", &hex::encode(digest)[..32])
}

async fn inngest_send(
    State(state): State<AppState>,
    headers: HeaderMap,
    LenientJsonBody(body): LenientJsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    let items = match body {
        Value::Array(items) => items,
        one @ Value::Object(_) => vec![one],
        _ => {
            return Err(ApiError::BadRequest(
                "the body must be an event {\"name\", \"data\"} or an array of them".into(),
            ))
        }
    };
    let seed = headers
        .get(INNGEST_SEED_HEADER)
        .and_then(|v| v.to_str().ok());
    let now_ms = state.client.clock().now_ms();
    let sends = items
        .into_iter()
        .enumerate()
        .map(|(i, raw)| inngest_event(raw, i, seed, now_ms))
        .collect::<Result<Vec<_>, _>>()?;
    let sent = state.client.send_batch(sends, Source::Inngest).await?;
    duplicates::log_conflicts(&state.conflicts, "inngest", now_ms, &sent);
    let ids: Vec<&str> = sent.iter().map(|s| s.event.id.as_str()).collect();
    let mut answer = json!({ "ids": ids, "status": 200 });
    // Inngest's own answer is `{ids, status}`; the resend lists are added only when not empty.
    let duplicate: Vec<&str> = sent
        .iter()
        .filter(|s| s.duplicate())
        .map(|s| s.event.id.as_str())
        .collect();
    if !duplicate.is_empty() {
        answer["duplicates"] = json!(duplicate);
        let conflicts: Vec<Value> = sent
            .iter()
            .filter_map(|s| {
                let c = s.conflict.as_ref()?;
                Some(json!({ "id": s.event.id, "conflictingFields": c.fields() }))
            })
            .collect();
        if !conflicts.is_empty() {
            answer["conflicts"] = Value::Array(conflicts);
        }
    }
    Ok(Json(answer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_ids_are_stable_per_seed_and_position() {
        assert_eq!(seeded_id("1,abc", 0), seeded_id("1,abc", 0));
        assert_ne!(seeded_id("1,abc", 0), seeded_id("1,abc", 1));
        assert_ne!(seeded_id("1,abc", 0), seeded_id("2,abc", 0));
        assert!(seeded_id("s", 0).len() < 40);
    }

    #[test]
    fn statuses_use_trigger_dev_names() {
        assert_eq!(trigger_dev_status(RunStatus::Succeeded), "SUCCESS");
        assert_eq!(trigger_dev_status(RunStatus::Cancelled), "CANCELED");
    }
}
