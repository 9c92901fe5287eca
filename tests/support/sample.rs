//! What the HTTP suites (API, dashboard) share: the sample jobs their fixtures define, a wait
//! until the engine is idle, and the router `flare serve` would run over a client.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use flare::config::RawServe;
use flare::http::{app, AppState};
use flare::{event_trigger, Client, Io, Job, JobError, RetryPolicy, RunStatus};
use serde_json::{json, Value};

use super::server::settings;

/// Defines `greet` on `user.created` (logs the email, succeeds), `explode` on `order.placed`
/// (one attempt; its first call fails with "card declined", later calls succeed) and `upload`
/// on `file.uploaded` (sends `file.processed` with the file and a thumbnail name, succeeds).
pub fn define_jobs(client: &Client) {
    client
        .define_job(
            Job::new("greet", "Greet", "1.0.0")
                .trigger(event_trigger("user.created"))
                .run(|p: Value, io: Io| async move {
                    io.logger
                        .info(format!("welcome {}", p["email"].as_str().unwrap_or("?")));
                    Ok(json!({"sent": true}))
                }),
        )
        .expect("greet");
    let calls = Arc::new(AtomicUsize::new(0));
    client
        .define_job(
            Job::new("explode", "Explode", "2.1.0")
                .trigger(event_trigger("order.placed"))
                .retry(RetryPolicy::default().max_attempts(1))
                .run(move |_: Value, _io: Io| {
                    let calls = Arc::clone(&calls);
                    async move {
                        if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                            return Err(JobError::from("card declined"));
                        }
                        Ok(json!({"charged": true}))
                    }
                }),
        )
        .expect("explode");
    client
        .define_job(
            Job::new("upload", "Process upload", "1.0.0")
                .trigger(event_trigger("file.uploaded"))
                .run(|p: Value, io: Io| async move {
                    io.send_event(
                        "file.processed",
                        &json!({"file": p["file"], "thumb": "a-small.png"}),
                    )
                    .await?;
                    Ok(json!({"processed": true}))
                }),
        )
        .expect("upload");
}

/// Waits until no run is queued or running (bounded).
pub async fn settle(client: &Client) {
    for _ in 0..1000 {
        let counts = client.store().run_counts().await.expect("counts");
        let active: u64 = [RunStatus::Queued, RunStatus::Running]
            .iter()
            .map(|s| counts.get(s).copied().unwrap_or(0))
            .sum();
        if active == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("runs did not finish in time");
}

/// The router of `flare serve` over `client` on `database_url`, behind `api_key` if given.
pub fn router(client: &Client, database_url: String, api_key: Option<&str>) -> Router {
    let config = RawServe {
        api_key: api_key.map(str::to_string),
        concurrency: 10,
        retention_days: 7,
        ..settings(&database_url)
    }
    .validate()
    .expect("config");
    app(AppState::new(client.clone(), config))
}
