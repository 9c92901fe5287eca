//! Behaviour suite: failure events — a run that fails for good (its last attempt) or is
//! cancelled sends `flare/run.failed` / `flare/run.cancelled` (source `flare`) once, committed
//! with its final state; not per attempt; none from runs of `flare/…` events; `.on_failure`.

use std::time::Duration;

use flare::store::EventQuery;
use flare::{
    event_trigger, Client, Clock, Io, Job, JobError, RetryPolicy, RunFailure, RunStatus,
    StoredEvent,
};
use serde_json::{json, Value};

use crate::backend_tests;
use crate::support::{settled, wait_for, TestDb};

fn every_second(max_attempts: u32) -> RetryPolicy {
    RetryPolicy::default()
        .max_attempts(max_attempts)
        .delays(Duration::from_secs(1), Duration::from_secs(1))
        .jitter(false)
}

fn failing(id: &str, event: &str, attempts: u32) -> Job {
    Job::new(id, id, "1.2.3")
        .trigger(event_trigger(event))
        .retry(every_second(attempts))
        .run(|_p: Value, io: Io| async move {
            Err::<Value, JobError>(format!("declined on attempt {}", io.attempt()).into())
        })
}

async fn named(client: &Client, name: &str) -> Vec<StoredEvent> {
    client
        .store()
        .events_list(EventQuery {
            name: Some(name.to_string()),
            ..EventQuery::default()
        })
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|s| s.event)
        .collect()
}

async fn a_run_that_fails_for_good_sends_one_failed_event_with_its_outcome(db: TestDb) {
    let (client, clock) = db.client().await;
    client
        .define_job(failing("charge", "order.placed", 2))
        .unwrap();
    let ev = client
        .send_event("order.placed", &json!({ "order": 7 }))
        .await
        .unwrap();
    let run_id = ev.run_ids[0].clone();
    wait_for("the first attempt to fail", || async {
        let d = client.store().run_detail(&run_id).await.unwrap()?;
        (d.run.status == RunStatus::Queued && d.run.attempt == 1).then_some(())
    })
    .await;
    assert!(
        named(&client, "flare/run.failed").await.is_empty(),
        "an attempt that will be retried sends nothing"
    );
    clock.advance(Duration::from_secs(1));
    client.engine().wake();
    let d = settled(&client, &ev.id).await;
    assert_eq!(d.runs[0].status, RunStatus::Failed);
    let sent = named(&client, "flare/run.failed").await;
    assert_eq!(sent.len(), 1, "one event for the run, not one per attempt");
    assert_eq!(sent[0].source, "flare");
    assert_eq!(sent[0].parent_run_id.as_deref(), Some(run_id.as_str()));
    assert_eq!(
        sent[0].payload,
        json!({
            "runId": run_id,
            "jobId": "charge",
            "jobVersion": "1.2.3",
            "eventId": ev.id,
            "eventName": "order.placed",
            "attempt": 2,
            "error": "declined on attempt 2",
        })
    );
    // Retried by hand and failing again: a second failure, a second event.
    client
        .store()
        .run_retry(&run_id, clock.now_ms())
        .await
        .unwrap();
    client.engine().wake();
    settled(&client, &ev.id).await;
    assert_eq!(named(&client, "flare/run.failed").await.len(), 2);
}

async fn a_cancelled_run_sends_a_cancelled_event(db: TestDb) {
    let (client, clock) = db.client().await;
    client
        .define_job(
            Job::new("sleeper", "Sleeper", "1.0.0")
                .trigger(event_trigger("nap.start"))
                .run(|_p: Value, io: Io| async move {
                    io.wait("nap", Duration::from_secs(3600)).await;
                    Ok(json!(null))
                }),
        )
        .unwrap();
    let ev = client.send_event("nap.start", &json!({})).await.unwrap();
    let run_id = ev.run_ids[0].clone();
    wait_for("the run to wait", || async {
        let d = client.store().run_detail(&run_id).await.unwrap()?;
        (d.run.status == RunStatus::Queued && !d.steps.is_empty()).then_some(())
    })
    .await;
    client
        .store()
        .run_cancel(&run_id, clock.now_ms())
        .await
        .unwrap();
    let sent = named(&client, "flare/run.cancelled").await;
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].payload["runId"], json!(run_id));
    assert_eq!(sent[0].payload["error"], Value::Null);
    assert!(named(&client, "flare/run.failed").await.is_empty());
}

async fn on_failure_handles_the_failure_and_a_failing_handler_sends_nothing(db: TestDb) {
    let (client, _clock) = db.client().await;
    client
        .define_job(failing("charge", "order.placed", 1).on_failure(
            |failed: RunFailure, _io: Io| async move {
                // The handler fails too: its run is of a `flare/…` event, so no event follows.
                Err::<Value, JobError>(JobError::fatal(format!("alerted {}", failed.run_id)))
            },
        ))
        .unwrap();
    let ev = client.send_event("order.placed", &json!({})).await.unwrap();
    settled(&client, &ev.id).await;
    let sent = named(&client, "flare/run.failed").await;
    assert_eq!(sent.len(), 1);
    let handled = settled(&client, &sent[0].id).await;
    assert_eq!(handled.runs.len(), 1, "the handler ran");
    assert_eq!(handled.runs[0].job_id, "charge-on-failure");
    assert_eq!(handled.runs[0].status, RunStatus::Failed);
    assert_eq!(
        handled.runs[0].error.as_deref(),
        Some(format!("alerted {}", ev.run_ids[0]).as_str())
    );
    assert_eq!(
        named(&client, "flare/run.failed").await.len(),
        1,
        "no event for the handler's own failure"
    );
}

backend_tests!(
    a_run_that_fails_for_good_sends_one_failed_event_with_its_outcome,
    a_cancelled_run_sends_a_cancelled_event,
    on_failure_handles_the_failure_and_a_failing_handler_sends_nothing,
);
