//! Bulk actions on what a list's filter selects: `POST /api/runs/bulk` (`retry`, `cancel`) and
//! `POST /api/events/bulk` (`replay`), shared with the dashboard's "Retry all N" buttons.
//!
//! The filter is the one the list takes ([`RunQuery`], [`EventQuery`]; same names as the
//! list's query parameters). Only the runs the action applies to are selected (failed or
//! cancelled for a retry, queued or running for a cancel), so a dry run (`dryRun: true`) counts
//! exactly what the action would change. One call selects at most [`BULK_MAX`] (10,000),
//! newest first; `truncated` says more matched, and calling again acts on the next ones. Runs are
//! changed, and events replayed (oldest first), [`BULK_CHUNK`] per transaction (replays: at most
//! 8 MiB of payloads).

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::body::LenientJsonBody;
use super::{api, ApiError, AppState};
use crate::model::{RunStatus, Source};
use crate::store::query::{EventQuery, EventStatus, RunQuery, MAX_LIMIT};
use crate::store::{BulkRunAction, BULK_CHUNK};

/// Most records one bulk call selects.
pub const BULK_MAX: usize = 10_000;

/// Most payload bytes (and contexts) replayed in one transaction: payloads may be as large as a
/// request body, so a batch is bounded by size as well as by [`BULK_CHUNK`].
const REPLAY_BATCH_BYTES: usize = 8 * 1024 * 1024;

/// The routes (in the protected group).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/runs/bulk", post(runs_bulk))
        .route("/api/events/bulk", post(events_bulk))
}

/// A run list's filter, as `/api/runs` takes it.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunFilter {
    /// Job id.
    pub job_id: Option<String>,
    /// Run state.
    pub status: Option<String>,
    /// The event that started the runs.
    pub event_id: Option<String>,
}

/// An event list's filter, as `/api/events` takes it.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EventFilter {
    /// Exact name.
    pub name: Option<String>,
    /// Source.
    pub source: Option<String>,
    /// Outcome.
    pub status: Option<String>,
    /// Received at or after.
    pub from: Option<DateTime<Utc>>,
    /// Received before.
    pub to: Option<DateTime<Utc>>,
    /// Payload text.
    pub q: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RunsBody {
    action: String,
    #[serde(default)]
    filter: RunFilter,
    #[serde(default)]
    dry_run: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct EventsBody {
    action: String,
    #[serde(default)]
    filter: EventFilter,
    #[serde(default)]
    dry_run: bool,
}

/// What a bulk call selected and did.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BulkOutcome {
    /// The action.
    pub action: &'static str,
    /// Whether nothing was changed (a count only).
    pub dry_run: bool,
    /// Records selected: those the filter matches and the action applies to (at most `limit`).
    pub count: usize,
    /// Records changed (0 on a dry run; fewer than `count` when some changed state meanwhile).
    pub acted: usize,
    /// The most one call selects.
    pub limit: usize,
    /// More records matched than `limit`: call again for the next ones.
    pub truncated: bool,
}

fn text(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.is_empty())
}

/// The action a run list's bulk call names.
pub fn run_action(action: &str) -> Result<BulkRunAction, ApiError> {
    match action {
        "retry" => Ok(BulkRunAction::Retry),
        "cancel" => Ok(BulkRunAction::Cancel),
        other => Err(ApiError::BadRequest(format!(
            "unknown action {other:?}: runs take \"retry\" or \"cancel\""
        ))),
    }
}

/// Selects the runs `filter` matches that `action` applies to, newest first, at most
/// [`BULK_MAX`]; changes them unless `dry_run`.
pub async fn runs(
    state: &AppState,
    action: BulkRunAction,
    filter: RunFilter,
    dry_run: bool,
) -> Result<BulkOutcome, ApiError> {
    let status = match text(filter.status) {
        Some(s) => Some(RunStatus::parse(&s).ok_or_else(|| {
            ApiError::BadRequest(format!("filter.status: unknown run state {s:?}"))
        })?),
        None => None,
    };
    let applies: &[RunStatus] = match action {
        BulkRunAction::Retry => &[RunStatus::Failed, RunStatus::Cancelled],
        BulkRunAction::Cancel => &[RunStatus::Queued, RunStatus::Running],
    };
    let store = state.client.store();
    let mut ids = Vec::new();
    let mut truncated = false;
    let mut cursor = None;
    // A status outside what the action applies to selects nothing.
    if status.is_none_or(|s| applies.contains(&s)) {
        loop {
            let page = store
                .runs_list(RunQuery {
                    job_id: text(filter.job_id.clone()),
                    status,
                    event_id: text(filter.event_id.clone()),
                    limit: MAX_LIMIT,
                    cursor,
                })
                .await?;
            for run in page
                .items
                .iter()
                .filter(|r| applies.contains(&r.run.status))
            {
                if ids.len() == BULK_MAX {
                    truncated = true;
                    break;
                }
                ids.push(run.run.id.clone());
            }
            match page.next_cursor {
                Some(next) if !truncated => cursor = Some(next),
                _ => break,
            }
        }
    }
    let mut acted = 0;
    if !dry_run {
        let now = state.client.clock().now_ms();
        for chunk in ids.chunks(BULK_CHUNK) {
            acted += match action {
                // Through the engine, so runs executing here stop at once.
                BulkRunAction::Cancel => state.client.engine().runs_cancel(chunk.to_vec()).await?,
                BulkRunAction::Retry => store.runs_bulk(action, chunk.to_vec(), now).await?,
            };
        }
    }
    Ok(BulkOutcome {
        action: match action {
            BulkRunAction::Retry => "retry",
            BulkRunAction::Cancel => "cancel",
        },
        dry_run,
        count: ids.len(),
        acted,
        limit: BULK_MAX,
        truncated,
    })
}

/// Selects the events `filter` matches, newest first, at most [`BULK_MAX`]; replays them (each
/// sent again with its payload, source `replay:<id>`) unless `dry_run`.
pub async fn events(
    state: &AppState,
    filter: EventFilter,
    dry_run: bool,
) -> Result<BulkOutcome, ApiError> {
    let status = match text(filter.status) {
        Some(s) => Some(EventStatus::parse(&s).ok_or_else(|| {
            ApiError::BadRequest(format!("filter.status: unknown event status {s:?}"))
        })?),
        None => None,
    };
    let store = state.client.store();
    let mut ids = Vec::new();
    let mut truncated = false;
    let mut cursor = None;
    loop {
        let page = store
            .events_list(EventQuery {
                name: text(filter.name.clone()),
                source: text(filter.source.clone()),
                status,
                from: filter.from,
                to: filter.to,
                q: text(filter.q.clone()),
                limit: MAX_LIMIT,
                cursor,
            })
            .await?;
        for event in &page.items {
            if ids.len() == BULK_MAX {
                truncated = true;
                break;
            }
            ids.push(event.event.id.clone());
        }
        match page.next_cursor {
            Some(next) if !truncated => cursor = Some(next),
            _ => break,
        }
    }
    let mut acted = 0;
    if !dry_run {
        // Oldest first, so the replays keep the originals' order; [`BULK_CHUNK`] events (or
        // [`REPLAY_BATCH_BYTES`] of payloads) per transaction: one commit per replay made
        // 10,000 take a quarter of a minute.
        let mut batch = Vec::new();
        let mut bytes = 0;
        for (i, id) in ids.iter().rev().enumerate() {
            let original = api::replayed(state, id).await?;
            bytes += json_len(&original.payload) + original.context.as_ref().map_or(0, json_len);
            batch.push((api::replay_of(original, None), Source::Replay(id.clone())));
            if batch.len() == BULK_CHUNK || bytes >= REPLAY_BATCH_BYTES || i + 1 == ids.len() {
                let sends = std::mem::take(&mut batch);
                acted += state.client.send_batch_from(sends).await?.len();
                bytes = 0;
            }
        }
    }
    Ok(BulkOutcome {
        action: "replay",
        dry_run,
        count: ids.len(),
        acted,
        limit: BULK_MAX,
        truncated,
    })
}

/// The length of `value` as JSON text, without writing the text.
fn json_len(value: &serde_json::Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a `Value` to a writer that never fails cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

async fn runs_bulk(
    State(state): State<AppState>,
    LenientJsonBody(body): LenientJsonBody<RunsBody>,
) -> Result<Response, ApiError> {
    let action = run_action(&body.action)?;
    Ok(Json(runs(&state, action, body.filter, body.dry_run).await?).into_response())
}

async fn events_bulk(
    State(state): State<AppState>,
    LenientJsonBody(body): LenientJsonBody<EventsBody>,
) -> Result<Response, ApiError> {
    if body.action != "replay" {
        return Err(ApiError::BadRequest(format!(
            "unknown action {:?}: events take \"replay\"",
            body.action
        )));
    }
    Ok(Json(events(&state, body.filter, body.dry_run).await?).into_response())
}
