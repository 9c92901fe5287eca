//! Behaviour suite: graceful shutdown — running runs finish within the grace period and the rest
//! are released, and the end comes in time even when the storage fails.

use std::sync::Arc;
use std::time::Duration;

use flare::{event_trigger, EngineConfig, Io, Job, RunStatus};
use serde_json::{json, Value};

use crate::backend_tests;
use crate::support::{settled, test_config, wait_for, TestDb};

async fn shutdown_ends_in_time_when_the_storage_fails(db: TestDb) {
    let config = EngineConfig {
        shutdown_grace: Duration::from_millis(300),
        shutdown_bound: Duration::from_millis(700),
        ..test_config()
    };
    let (client, _clock) = db.client_with(config).await;
    let started = Arc::new(tokio::sync::Notify::new());
    let s = Arc::clone(&started);
    client
        .define_job(
            Job::new("finishing", "Finishing", "1.0.0")
                .trigger(event_trigger("x.finishing"))
                .run(move |_p: Value, _io: Io| {
                    let s = Arc::clone(&s);
                    async move {
                        s.notify_one();
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        Ok(json!("done"))
                    }
                }),
        )
        .unwrap();
    client.send_event("x.finishing", &json!({})).await.unwrap();
    started.notified().await;
    // The storage refuses every write from now on (a full disk, a read-only database): the
    // run's outcome cannot be recorded, however often the completer tries.
    client.store().health_fail_writes(true).await.unwrap();
    let began = std::time::Instant::now();
    client.shutdown().await;
    let took = began.elapsed();
    assert!(
        took < Duration::from_millis(300 + 700 + 1500),
        "shutdown took {took:?}: more than the grace period plus the bound"
    );
}

async fn shutdown_lets_runs_finish_and_releases_the_rest(db: TestDb) {
    let config = EngineConfig {
        shutdown_grace: Duration::from_millis(300),
        ..test_config()
    };
    let (client, clock) = db.client_with(config).await;
    let started = Arc::new(tokio::sync::Notify::new());
    let s = Arc::clone(&started);
    client
        .define_job(
            Job::new("quick", "Quick", "1.0.0")
                .trigger(event_trigger("x.quick"))
                .run(|_p: Value, _io: Io| async move {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Ok(json!("finished"))
                }),
        )
        .unwrap();
    client
        .define_job(
            Job::new("stuck", "Stuck", "1.0.0")
                .trigger(event_trigger("x.stuck"))
                .run(move |_p: Value, _io: Io| {
                    let s = Arc::clone(&s);
                    async move {
                        s.notify_one();
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        Ok(json!(null))
                    }
                }),
        )
        .unwrap();
    let stuck = client.send_event("x.stuck", &json!({})).await.unwrap();
    started.notified().await;
    let quick = client.send_event("x.quick", &json!({})).await.unwrap();
    wait_for("quick to start", || async {
        (client.engine().in_flight() == 2).then_some(())
    })
    .await;
    client.shutdown().await;

    let q = client
        .store()
        .event_detail(&quick.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        q.runs[0].status,
        RunStatus::Succeeded,
        "a run within the grace period finishes"
    );
    let s = client
        .store()
        .run_detail(&stuck.run_ids[0])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        s.run.status,
        RunStatus::Queued,
        "the rest is released for another node"
    );
    assert_eq!(s.run.attempt, 0, "a released attempt does not count");

    // The next process picks it up.
    let next = flare::Client::builder(&db.url)
        .clock(Arc::new(clock.clone()))
        .config(test_config())
        .connect()
        .await
        .unwrap();
    next.define_job(
        Job::new("stuck", "Stuck", "1.0.0")
            .trigger(event_trigger("x.stuck"))
            .run(|_p: Value, _io: Io| async move { Ok(json!("second life")) }),
    )
    .unwrap();
    let d = settled(&next, &stuck.id).await;
    assert_eq!(d.runs[0].output, Some(json!("second life")));
}

backend_tests!(
    shutdown_lets_runs_finish_and_releases_the_rest,
    shutdown_ends_in_time_when_the_storage_fails,
);
