//! The JSON API for the dashboard and scripts (`/api/…`), and `GET /metrics`.
//!
//! Reads go straight to the store's read side ([`crate::store::query`]); actions go through the
//! client (replay, cancel) or the store (retry). JSON is camelCase. Query parameters are checked
//! strictly: an unknown or repeated parameter, or a bad value, is a 400 naming the parameter; an
//! empty value counts as absent (as an HTML form sends it). Unknown ids are 404; an action the
//! record's state does not allow is 409.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{json, Value};

use super::{openapi, ApiError, AppState};
use crate::client::SendEvent;
use crate::model::{ms_to_time, RunStatus, Source};
use crate::store::query::{
    Cursor, EventQuery, EventStatus, RunCounts, RunQuery, StatsQuery, StatsWindow, DEFAULT_LIMIT,
    MAX_LIMIT,
};
use crate::store::EventDetail;

/// The API's routes (all in the protected group).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/events", get(events_list))
        .route("/api/events/{id}", get(event_detail))
        .route("/api/events/{id}/replay", post(event_replay))
        .route("/api/events/{id}/cancel", post(event_cancel))
        .route("/api/runs", get(runs_list))
        .route("/api/runs/{id}", get(run_detail))
        .route("/api/runs/{id}/retry", post(run_retry))
        .route("/api/runs/{id}/cancel", post(run_cancel))
        .route("/api/jobs", get(jobs_list))
        .route("/api/jobs/{id}/pause", post(job_pause_route))
        .route("/api/jobs/{id}/resume", post(job_resume_route))
        .route("/api/stats", get(stats))
        .route("/api/openapi.json", get(openapi_document))
        .route("/metrics", get(metrics))
}

/// Query parameters, checked against the names a route accepts.
struct Params(HashMap<String, String>);

impl Params {
    fn new(
        raw: Result<Query<Vec<(String, String)>>, QueryRejection>,
        allowed: &[&str],
    ) -> Result<Self, ApiError> {
        let Query(pairs) =
            raw.map_err(|e| ApiError::BadRequest(format!("invalid query string: {e}")))?;
        let mut map = HashMap::new();
        for (key, value) in pairs {
            if !allowed.contains(&key.as_str()) {
                return Err(ApiError::BadRequest(format!(
                    "unknown query parameter {key:?}; this route accepts: {}",
                    allowed.join(", ")
                )));
            }
            if map.contains_key(&key) {
                return Err(ApiError::BadRequest(format!(
                    "query parameter {key:?} is given more than once"
                )));
            }
            map.insert(key, value);
        }
        map.retain(|_, v| !v.is_empty());
        Ok(Self(map))
    }

    /// Text matched against stored text: a NUL character (`%00`) cannot be stored, so it is
    /// refused rather than matching nothing.
    fn text(&mut self, key: &str) -> Result<Option<String>, ApiError> {
        match self.0.remove(key) {
            Some(v) if !crate::store::storable(&v) => Err(ApiError::BadRequest(format!(
                "invalid {key} {v:?}: it must not contain a NUL character (%00)"
            ))),
            v => Ok(v),
        }
    }

    fn parse<T>(
        &mut self,
        key: &str,
        expected: &str,
        f: impl FnOnce(&str) -> Option<T>,
    ) -> Result<Option<T>, ApiError> {
        match self.0.remove(key) {
            None => Ok(None),
            Some(v) => f(&v).map(Some).ok_or_else(|| {
                ApiError::BadRequest(format!("invalid {key} {v:?}: expected {expected}"))
            }),
        }
    }

    fn time(&mut self, key: &str) -> Result<Option<DateTime<Utc>>, ApiError> {
        self.parse(key, "an RFC 3339 time such as 2024-05-01T12:00:00Z", |v| {
            DateTime::parse_from_rfc3339(v)
                .ok()
                .map(|t| t.with_timezone(&Utc))
        })
    }

    fn limit(&mut self) -> Result<usize, ApiError> {
        let expected = format!("a whole number from 1 to {MAX_LIMIT}");
        Ok(self
            .parse("limit", &expected, |v| {
                v.parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
            })?
            .unwrap_or(DEFAULT_LIMIT))
    }

    fn cursor(&mut self) -> Result<Option<Cursor>, ApiError> {
        self.parse(
            "cursor",
            "the nextCursor value of the previous page, unchanged",
            |v| v.parse().ok(),
        )
    }
}

fn now(state: &AppState) -> DateTime<Utc> {
    ms_to_time(state.client.clock().now_ms())
}

async fn events_list(
    State(state): State<AppState>,
    raw: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let mut p = Params::new(
        raw,
        &[
            "name", "source", "status", "from", "to", "q", "limit", "cursor",
        ],
    )?;
    let statuses = EventStatus::ALL.map(EventStatus::as_str).join(", ");
    let query = EventQuery {
        name: p.text("name")?,
        source: p.text("source")?,
        status: p.parse("status", &format!("one of {statuses}"), EventStatus::parse)?,
        from: p.time("from")?,
        to: p.time("to")?,
        q: p.text("q")?,
        limit: p.limit()?,
        cursor: p.cursor()?,
    };
    let page = state.client.store().events_list(query).await?;
    Ok(Json(json!({"events": page.items, "nextCursor": page.next_cursor})).into_response())
}

/// An event's detail with its outcome.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EventDetailBody {
    #[serde(flatten)]
    detail: EventDetail,
    status: EventStatus,
    run_counts: RunCounts,
}

async fn event_detail(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let detail = state
        .client
        .store()
        .event_detail(&id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("event {id:?} not found")))?;
    let run_counts = RunCounts::of_runs(&detail.runs);
    let status = EventStatus::of(&detail.event, &run_counts);
    Ok(Json(EventDetailBody {
        detail,
        status,
        run_counts,
    })
    .into_response())
}

/// Reads the optional replay body `{"payload": …}`: `None` keeps the original payload.
fn replay_payload(body: &Bytes) -> Result<Option<Value>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("invalid JSON body: {e}")))?;
    let Value::Object(mut fields) = value else {
        return Err(ApiError::BadRequest(
            "the body must be a JSON object such as {\"payload\": …}".into(),
        ));
    };
    if let Some(key) = fields.keys().find(|k| k.as_str() != "payload") {
        return Err(ApiError::BadRequest(format!(
            "unknown field {key:?}: the body may only have \"payload\""
        )));
    }
    Ok(fields.remove("payload"))
}

async fn event_replay(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let edited = replay_payload(&body)?;
    Ok(Json(replay(&state, &id, edited).await?).into_response())
}

/// Sends event `id` again (source `replay:<id>`), with `payload` instead of the original one when
/// given; returns the new event. Shared by the API and the dashboard.
pub(crate) async fn replay(
    state: &AppState,
    id: &str,
    payload: Option<Value>,
) -> Result<crate::model::StoredEvent, ApiError> {
    let original = replayed(state, id).await?;
    let inserted = state
        .client
        .send_inserted(replay_of(original, payload), Source::Replay(id.to_string()))
        .await?;
    Ok(inserted.event)
}

/// Event `id`, to replay; 404 when there is none.
pub(crate) async fn replayed(
    state: &AppState,
    id: &str,
) -> Result<crate::model::StoredEvent, ApiError> {
    state
        .client
        .store()
        .event_get(id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("event {id:?} not found")))
}

/// The event that replays `original`: its name and context, with `payload` or its own.
pub(crate) fn replay_of(original: crate::model::StoredEvent, payload: Option<Value>) -> SendEvent {
    let payload = payload.unwrap_or(original.payload);
    let mut send = SendEvent::new(original.name, &payload);
    if let Some(context) = original.context {
        send = send.context(context);
    }
    send
}

async fn event_cancel(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let event = state.client.cancel_event(&id).await?;
    Ok(Json(event).into_response())
}

async fn runs_list(
    State(state): State<AppState>,
    raw: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let mut p = Params::new(raw, &["jobId", "status", "eventId", "limit", "cursor"])?;
    let statuses = RunStatus::ALL.map(RunStatus::as_str).join(", ");
    let query = RunQuery {
        job_id: p.text("jobId")?,
        status: p.parse("status", &format!("one of {statuses}"), RunStatus::parse)?,
        event_id: p.text("eventId")?,
        limit: p.limit()?,
        cursor: p.cursor()?,
    };
    let page = state.client.store().runs_list(query).await?;
    Ok(Json(json!({"runs": page.items, "nextCursor": page.next_cursor})).into_response())
}

async fn run_detail(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let detail = state
        .client
        .store()
        .run_detail(&id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("run {id:?} not found")))?;
    Ok(Json(detail).into_response())
}

async fn run_retry(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(retry(&state, &id).await?).into_response())
}

/// Queues failed or cancelled run `id` again with one more attempt; returns the run. Shared by
/// the API and the dashboard.
pub(crate) async fn retry(state: &AppState, id: &str) -> Result<crate::model::Run, ApiError> {
    let store = state.client.store();
    store.run_retry(id, state.client.clock().now_ms()).await?;
    let detail = store
        .run_detail(id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("run {id:?} not found")))?;
    Ok(detail.run)
}

async fn run_cancel(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(cancel(&state, &id).await?).into_response())
}

/// Cancels queued or running run `id` (a running one is stopped: see
/// [`crate::engine::Engine::run_cancel`]); returns the run. Shared by the API and the dashboard.
pub(crate) async fn cancel(state: &AppState, id: &str) -> Result<crate::model::Run, ApiError> {
    state.client.engine().run_cancel(id).await?;
    let detail = state
        .client
        .store()
        .run_detail(id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("run {id:?} not found")))?;
    Ok(detail.run)
}

async fn job_pause_route(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(job_pause(&state, &id, true).await?).into_response())
}

async fn job_resume_route(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(job_pause(&state, &id, false).await?).into_response())
}

/// Pauses (`paused`) or resumes job `id`; returns its summary as `/api/jobs` lists it. Shared by
/// the API and the dashboard.
pub(crate) async fn job_pause(
    state: &AppState,
    id: &str,
    paused: bool,
) -> Result<crate::store::query::JobSummary, ApiError> {
    let store = state.client.store();
    store.job_pause(id, paused).await?;
    let now = crate::model::ms_to_time(state.client.clock().now_ms());
    store
        .jobs_list(now)
        .await?
        .into_iter()
        .find(|j| j.job.id == id)
        .ok_or_else(|| ApiError::NotFound(format!("job {id:?} not found")))
}

async fn jobs_list(
    State(state): State<AppState>,
    raw: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Response, ApiError> {
    Params::new(raw, &[])?;
    let jobs = state.client.store().jobs_list(now(&state)).await?;
    Ok(Json(json!({ "jobs": jobs })).into_response())
}

async fn stats(
    State(state): State<AppState>,
    raw: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let mut p = Params::new(raw, &["window"])?;
    let window = p
        .parse("window", "1h or 24h", StatsWindow::parse)?
        .unwrap_or(StatsWindow::Hour);
    let stats = state
        .client
        .store()
        .stats(StatsQuery {
            window,
            now: now(&state),
        })
        .await?;
    Ok(Json(stats).into_response())
}

async fn openapi_document() -> Response {
    Json(openapi::document()).into_response()
}

async fn metrics(State(state): State<AppState>) -> Result<Response, ApiError> {
    let queue = state.client.store().queue_depth(now(&state)).await?;
    let waiting = state.client.store().runs_waiting(now(&state)).await?;
    let held = state.client.store().runs_held(now(&state)).await?;
    Ok((
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        crate::metrics::render(&queue.gauges(), &waiting.gauges(), &held.gauges()),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_bodies_keep_or_replace_the_payload() {
        assert_eq!(replay_payload(&Bytes::from_static(b"")).ok(), Some(None));
        assert_eq!(replay_payload(&Bytes::from_static(b" \n")).ok(), Some(None));
        assert_eq!(replay_payload(&Bytes::from_static(b"{}")).ok(), Some(None));
        assert_eq!(
            replay_payload(&Bytes::from_static(br#"{"payload": null}"#)).ok(),
            Some(Some(Value::Null))
        );
        assert_eq!(
            replay_payload(&Bytes::from_static(br#"{"payload": {"a": 1}}"#)).ok(),
            Some(Some(json!({"a": 1})))
        );
        for bad in [&b"[1]"[..], b"{", br#"{"payload": 1, "x": 2}"#] {
            assert!(
                matches!(
                    replay_payload(&Bytes::copy_from_slice(bad)),
                    Err(ApiError::BadRequest(_))
                ),
                "{bad:?}"
            );
        }
    }
}
