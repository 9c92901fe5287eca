//! The Trigger.dev v2 platform API that `@trigger.dev/sdk` 2.x calls (protected routes; the SDK
//! sends `Authorization: Bearer <apiKey>`): endpoint registration as the v2 CLI does it, the
//! task calls of a run in progress (see [`crate::endpoints::v2_execution`]), `io.waitForEvent`'s
//! event dispatcher, invoking a job (`invokeJob`, `invokeAndWaitForCompletion`), cancelling a
//! job's runs, and the read routes Flare has a counterpart for. The SDK's other calls
//! (integrations, sources, dynamic triggers and schedules, status updates, the key-value store)
//! answer 501 with a JSON error that names the feature, for the methods the SDK sends (others:
//! 405 with `Allow`). The event routes are in [`super::compat`].

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::body::JsonObject;
use super::compat::{trigger_dev_event, trigger_dev_status, TriggerDevEvent, TriggerDevOptions};
use super::{ApiError, AppState};
use crate::endpoints::trigger_dev_v2::{ErrorWithStack, LAZY_LOADED_CACHED_TASKS};
use crate::endpoints::v2_callbacks::{token_of, Dispatcher, InvokeBody};
use crate::endpoints::v2_execution::Execution;
use crate::endpoints::v2_tasks::{task_id, NewTask, TaskError};
use crate::model::{Run, RunStatus, Source};
use crate::store::endpoints::Protocol;
use crate::store::query::RunQuery;

/// The routes (protected).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/v1/endpoints", post(register))
        .route("/api/v1/runs/{run}/tasks", post(task_create))
        .route(
            "/api/v1/runs/{run}/tasks/{id}/complete",
            post(task_complete),
        )
        .route("/api/v1/runs/{run}/tasks/{id}/fail", post(task_fail))
        .route("/api/v2/runs/{run}", get(run_get))
        .route("/api/v2/runs/{run}/statuses", get(run_statuses))
        .route("/api/v1/runs/{run}/cancel", post(run_cancel))
        .route("/api/v1/jobs/{job}/runs", get(job_runs))
        .route("/api/v1/events/{id}/cancel-runs", post(event_cancel_runs))
        .route("/api/v1/jobs/{job}/invoke", post(job_invoke))
        .route("/api/v1/jobs/{job}/cancel-runs", post(job_cancel_runs))
        .route(
            "/api/v1/event-dispatchers/ephemeral",
            post(dispatcher_create),
        )
        // The SDK's calls of features Flare lacks, each with the methods the SDK uses (another
        // method is 405 with `Allow`, as on every route).
        .route(
            "/api/v1/runs/{run}/statuses/{id}",
            put(unsupported_statuses),
        )
        .route(
            "/api/v1/store/{key}",
            get(unsupported_store)
                .put(unsupported_store)
                .delete(unsupported_store),
        )
        .route("/api/v1/webhooks/{key}", put(unsupported_webhooks))
        .route("/api/v1/{client}/auth/{id}", get(unsupported_auth))
        .route(
            "/api/v1/{client}/schedules/{*rest}",
            post(unsupported_schedules).delete(unsupported_schedules),
        )
        .route("/api/v2/{client}/sources/{*rest}", put(unsupported_sources))
        .route(
            "/api/v2/{client}/triggers/{*rest}",
            put(unsupported_triggers),
        )
}

/// `POST /api/v1/endpoints` as the v2 CLI sends it.
#[derive(Debug, Deserialize)]
struct Register {
    url: String,
    name: String,
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, key) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| key.trim().to_string())
        .filter(|k| !k.is_empty())
}

/// Registers (or registers again) a Trigger.dev v2 endpoint: Flare PINGs it with the client id
/// and the Bearer key, indexes it and answers the endpoint record.
async fn register(
    State(state): State<AppState>,
    headers: HeaderMap,
    JsonObject(body): JsonObject<Register>,
) -> Result<Response, ApiError> {
    let key = bearer(&headers).ok_or_else(|| {
        ApiError::BadRequest(
            "send Authorization: Bearer <apiKey>: Flare calls the endpoint back with that key (x-trigger-api-key)".into(),
        )
    })?;
    let summary = state
        .endpoints
        .add_with(
            &body.url,
            Some(key),
            Protocol::TriggerDevV2,
            Some(body.name.clone()),
        )
        .await?;
    let mut record = serde_json::to_value(&summary).unwrap_or(Value::Null);
    if let Value::Object(fields) = &mut record {
        fields.insert("name".into(), json!(body.name));
        fields.insert("slug".into(), json!(body.name));
    }
    Ok(Json(record).into_response())
}

fn execution(state: &AppState, run: &str) -> Result<std::sync::Arc<Execution>, ApiError> {
    state.endpoints.v2_runs().get(run).ok_or_else(|| {
        ApiError::Conflict(format!(
            "run {run:?} is not executing on this Flare node: only the run's current execution may create, complete or fail its tasks"
        ))
    })
}

impl From<TaskError> for ApiError {
    fn from(e: TaskError) -> Self {
        match e {
            TaskError::NotFound(m) => ApiError::NotFound(m),
            TaskError::Conflict(m) => ApiError::Conflict(m),
            TaskError::BadRequest(m) => ApiError::BadRequest(m),
            TaskError::TooLarge(m) => ApiError::PayloadTooLarge(m),
            TaskError::Unsupported(m) => ApiError::NotImplemented(m),
        }
    }
}

/// The `params` of a `Send Event` task.
#[derive(Debug, Deserialize)]
struct SendEventParams {
    event: TriggerDevEvent,
    #[serde(default)]
    options: Option<TriggerDevOptions>,
}

async fn task_create(
    State(state): State<AppState>,
    Path(run): Path<String>,
    headers: HeaderMap,
    JsonObject(body): JsonObject<Value>,
) -> Result<Response, ApiError> {
    // The body is checked before the run is looked up, as the other routes' extractors do.
    let new: NewTask = crate::strict_json::from_value(body)
        .map_err(|e| ApiError::BadRequest(format!("invalid task: {e}")))?;
    let send = match (new.name.as_deref(), &new.params) {
        (Some("Send Event"), Some(params)) => {
            let p: SendEventParams = crate::strict_json::from_value(params.clone())
                .map_err(|e| ApiError::BadRequest(format!("invalid Send Event params: {e}")))?;
            Some(trigger_dev_event(p.event, p.options.as_ref())?)
        }
        _ => None,
    };
    let exec = execution(&state, &run)?;
    let task = exec.create(new, send, &base_url(&headers)).await?;
    let lazy = headers.get("trigger-version").and_then(|v| v.to_str().ok())
        == Some(LAZY_LOADED_CACHED_TASKS);
    if lazy {
        let mut res = Json(json!({ "task": task, "cachedTasks": { "tasks": [] } })).into_response();
        res.headers_mut().insert(
            "trigger-version",
            HeaderValue::from_static(LAZY_LOADED_CACHED_TASKS),
        );
        Ok(res)
    } else {
        Ok(Json(task).into_response())
    }
}

#[derive(Debug, Deserialize)]
struct Complete {
    #[serde(default)]
    output: Option<String>,
}

async fn task_complete(
    State(state): State<AppState>,
    Path((run, id)): Path<(String, String)>,
    JsonObject(body): JsonObject<Complete>,
) -> Result<Response, ApiError> {
    let exec = execution(&state, &run)?;
    Ok(Json(exec.complete(&id, body.output.as_deref()).await?).into_response())
}

#[derive(Debug, Deserialize)]
struct Fail {
    error: ErrorWithStack,
}

async fn task_fail(
    State(state): State<AppState>,
    Path((run, id)): Path<(String, String)>,
    JsonObject(body): JsonObject<Fail>,
) -> Result<Response, ApiError> {
    let exec = execution(&state, &run)?;
    Ok(Json(exec.fail(&id, &body.error).await?).into_response())
}

/// Trigger.dev's `Run` fields of a Flare run.
fn run_json(run: &Run) -> Value {
    json!({
        "id": run.id,
        "status": trigger_dev_status(run.status),
        "startedAt": run.started_at,
        "updatedAt": run.finished_at.or(run.started_at).unwrap_or(run.created_at),
        "completedAt": run.finished_at,
    })
}

async fn run_get(
    State(state): State<AppState>,
    Path(run): Path<String>,
) -> Result<Response, ApiError> {
    let detail = state
        .client
        .store()
        .run_detail(&run)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("run {run:?} not found")))?;
    let tasks: Vec<Value> = detail
        .steps
        .iter()
        .filter(|s| !s.key.starts_with("flare:"))
        .map(|s| {
            json!({
                "id": task_id(&run, &s.key),
                "displayKey": s.key,
                "status": match s.status {
                    crate::model::StepStatus::Succeeded => "COMPLETED",
                    crate::model::StepStatus::Failed => "ERRORED",
                    _ => "WAITING",
                },
                "name": s.kind.as_str(),
                "icon": null,
                "startedAt": s.started_at,
                "completedAt": s.finished_at,
            })
        })
        .collect();
    let mut body = run_json(&detail.run);
    if let Value::Object(fields) = &mut body {
        fields.insert(
            "output".into(),
            detail.run.output.clone().unwrap_or(Value::Null),
        );
        fields.insert("tasks".into(), Value::Array(tasks));
        fields.insert("statuses".into(), json!([]));
    }
    Ok(Json(body).into_response())
}

async fn run_statuses(
    State(state): State<AppState>,
    Path(run): Path<String>,
) -> Result<Response, ApiError> {
    let detail = state
        .client
        .store()
        .run_detail(&run)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("run {run:?} not found")))?;
    Ok(Json(json!({
        "run": {"id": detail.run.id, "status": trigger_dev_status(detail.run.status), "output": detail.run.output},
        "statuses": [],
    }))
    .into_response())
}

async fn run_cancel(
    State(state): State<AppState>,
    Path(run): Path<String>,
) -> Result<Response, ApiError> {
    let now = state.client.clock().now_ms();
    state.client.store().run_cancel(&run, now).await?;
    run_get(State(state), Path(run)).await
}

#[derive(Debug, Deserialize)]
struct RunsQuery {
    #[serde(default)]
    take: Option<usize>,
}

async fn job_runs(
    State(state): State<AppState>,
    Path(job): Path<String>,
    Query(q): Query<RunsQuery>,
) -> Result<Response, ApiError> {
    let page = state
        .client
        .store()
        .runs_list(RunQuery {
            job_id: Some(job),
            limit: q.take.unwrap_or(20).clamp(1, 50),
            ..RunQuery::default()
        })
        .await?;
    let runs: Vec<Value> = page.items.iter().map(|r| run_json(&r.run)).collect();
    Ok(Json(json!({ "runs": runs })).into_response())
}

/// Cancels the queued runs of an event (runs already executing or finished are left).
async fn event_cancel_runs(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let store = state.client.store();
    let detail = store
        .event_detail(&id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("event {id:?} not found")))?;
    let now = state.client.clock().now_ms();
    let mut cancelled = Vec::new();
    let mut failed = Vec::new();
    for run in &detail.runs {
        if run.status == crate::model::RunStatus::Queued {
            match store.run_cancel(&run.id, now).await {
                Ok(()) => cancelled.push(run.id.clone()),
                Err(e) => failed.push(json!({"id": run.id, "error": e.to_string()})),
            }
        }
    }
    Ok(
        Json(json!({ "cancelledRunIds": cancelled, "failedToCancelRunIds": failed }))
            .into_response(),
    )
}

/// Flare's address as the client of this request reached it (`http://host:port`), for the
/// callback URLs it gives: the SDK calls Flare at its `apiUrl`, so the URL is reachable wherever
/// the application reaches Flare. `X-Forwarded-Proto: https` (a TLS proxy) makes it `https`.
fn base_url(headers: &HeaderMap) -> String {
    let header = |name| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(',').next())
            .map(str::trim)
            .filter(|v| !v.is_empty())
    };
    let scheme = match header("x-forwarded-proto") {
        Some(p) if p.eq_ignore_ascii_case("https") => "https",
        _ => "http",
    };
    let host = header("host").unwrap_or("localhost");
    format!("{scheme}://{host}")
}

/// `POST /api/v1/event-dispatchers/ephemeral` (`io.waitForEvent`): the waiting task whose
/// callback URL it names waits for the event it describes.
async fn dispatcher_create(
    State(state): State<AppState>,
    JsonObject(body): JsonObject<Dispatcher>,
) -> Result<Response, ApiError> {
    let exec = waiting_task(&state, &body.url, "url").await?;
    let token = token_of(&body.url).unwrap_or_default().to_string();
    Ok(Json(exec.dispatch(&token, &body).await?).into_response())
}

/// The execution with a waiting callback task at `url` (the request's `field`), or a 404.
async fn waiting_task(
    state: &AppState,
    url: &str,
    field: &str,
) -> Result<std::sync::Arc<Execution>, ApiError> {
    state
        .endpoints
        .v2_runs()
        .by_callback_url(url)
        .await
        .ok_or_else(|| {
            ApiError::NotFound(format!(
                "{field}: {url:?} is not the callback URL of a waiting task of a run executing on this Flare node"
            ))
        })
}

/// The name of the event of a run invoked by `client.invokeJob` (no fan-out: it starts the one
/// job invoked), as of one invoked by another run.
const INVOKE_EVENT: &str = crate::model::wait::INVOKE_EVENT;

/// `POST /api/v1/jobs/{job}/invoke` (`client.invokeJob`, `job.invoke`,
/// `invokeAndWaitForCompletion`): a run of that one job. With `options.callbackUrl` (a waiting
/// task's), a child of the task's run, which waits for it; otherwise a run of its own, whose
/// event id is the `Idempotency-Key` (`invoke-<key>`: the same key gives the same run). Answers
/// `{id}`, the run's id.
async fn job_invoke(
    State(state): State<AppState>,
    Path(job): Path<String>,
    headers: HeaderMap,
    JsonObject(body): JsonObject<InvokeBody>,
) -> Result<Response, ApiError> {
    let options = body.options.unwrap_or_default();
    if options.account_id.is_some() {
        return Err(ApiError::BadRequest(
            "options.accountId: external accounts are not supported by Flare".into(),
        ));
    }
    let payload = body.payload.unwrap_or_else(|| json!({}));
    if let Some(url) = &options.callback_url {
        let exec = waiting_task(&state, url, "options.callbackUrl").await?;
        let token = token_of(url).unwrap_or_default();
        let id = exec.invoke(token, &job, payload).await?;
        return Ok(Json(json!({ "id": id })).into_response());
    }
    let key = headers
        .get("idempotency-key")
        .map(|v| {
            v.to_str()
                .map(|k| k.trim().to_string())
                .map_err(|_| ApiError::BadRequest("Idempotency-Key: visible ASCII only".into()))
        })
        .transpose()?
        .filter(|k| !k.is_empty());
    // An invoke made from a task (`job.invoke(cacheKey, …)`) names the run that sent it.
    let caller = match &key {
        Some(k) => state.endpoints.v2_runs().by_task_key(k).await,
        None => None,
    };
    let source = caller.map_or(Source::TriggerDev, |e| Source::Job(e.run_id().to_string()));
    let mut event = crate::client::SendEvent::new(INVOKE_EVENT, &payload);
    if let Some(k) = &key {
        event = event.id(format!("invoke-{k}"));
    }
    if let Some(context) = body
        .context
        .filter(|c| c.as_object().is_none_or(|o| !o.is_empty()) && !c.is_null())
    {
        event = event.context(context);
    }
    let now = state.client.clock().now_ms();
    let new = crate::send::prepare(event, &source, None, now).map_err(|e| match e {
        crate::client::Error::InvalidId(why) => {
            ApiError::BadRequest(format!("Idempotency-Key: {why}"))
        }
        other => other.into(),
    })?;
    let event_id = new.id.clone();
    match state.client.store().job_invoke(&job, new).await {
        Ok(Some(id)) => Ok(Json(json!({ "id": id })).into_response()),
        Ok(None) => Err(ApiError::Conflict(format!(
            "event {event_id:?} (the Idempotency-Key) has no run of {job:?}: it was used for another event, or the job's rate limit skipped the run"
        ))),
        Err(crate::store::Error::NotFound { what: "job", .. }) => Err(ApiError::NotFound(
            format!("no job {job:?} is defined in Flare"),
        )),
        Err(e) => Err(e.into()),
    }
}

/// `POST /api/v1/jobs/{job}/cancel-runs` (`cancelRunsForJob`): cancels the job's runs that have
/// not ended (queued, waiting or running; at most [`super::bulk::BULK_MAX`], newest first), each
/// as the API's cancel does it (an invoked child of one is cancelled with it).
async fn job_cancel_runs(
    State(state): State<AppState>,
    Path(job): Path<String>,
) -> Result<Response, ApiError> {
    let store = state.client.store();
    let mut ids = Vec::new();
    for status in [RunStatus::Running, RunStatus::Queued] {
        let mut cursor = None;
        loop {
            let page = store
                .runs_list(RunQuery {
                    job_id: Some(job.clone()),
                    status: Some(status),
                    limit: crate::store::page::MAX_LIMIT,
                    cursor,
                    ..RunQuery::default()
                })
                .await?;
            ids.extend(page.items.into_iter().map(|r| r.run.id));
            match page.next_cursor {
                Some(next) if ids.len() < super::bulk::BULK_MAX => cursor = Some(next),
                _ => break,
            }
        }
    }
    ids.truncate(super::bulk::BULK_MAX);
    let mut cancelled = Vec::new();
    let mut failed = Vec::new();
    for id in ids {
        match state.client.engine().run_cancel(&id).await {
            Ok(()) => cancelled.push(id),
            Err(e) => {
                // Ended meanwhile (a parent's cancel takes its children along): cancelled or not.
                let now_cancelled = store
                    .run_detail(&id)
                    .await
                    .ok()
                    .flatten()
                    .is_some_and(|d| d.run.status == RunStatus::Cancelled);
                if now_cancelled {
                    cancelled.push(id);
                } else {
                    tracing::debug!(run = %id, error = %e, "cancelRunsForJob: not cancelled");
                    failed.push(id);
                }
            }
        }
    }
    Ok(
        Json(json!({ "cancelledRunIds": cancelled, "failedToCancelRunIds": failed }))
            .into_response(),
    )
}

fn unsupported(feature: &str) -> ApiError {
    ApiError::NotImplemented(format!(
        "{feature} is a Trigger.dev v2 feature Flare does not have (see docs/trigger-dev-v2.md)"
    ))
}

async fn unsupported_statuses() -> ApiError {
    unsupported("run status updates (io.createStatus)")
}
async fn unsupported_store() -> ApiError {
    unsupported("the key-value store (io.store)")
}
async fn unsupported_webhooks() -> ApiError {
    unsupported("webhook triggers")
}
async fn unsupported_auth() -> ApiError {
    unsupported("integration connections (auth)")
}
async fn unsupported_schedules() -> ApiError {
    unsupported("dynamic schedules")
}
async fn unsupported_sources() -> ApiError {
    unsupported("external sources")
}
async fn unsupported_triggers() -> ApiError {
    unsupported("dynamic triggers")
}
