//! Behaviour suite: `io.invoke` / `io.invoke_all` — a run starts runs of one job (not a
//! broadcast), waits for them holding no slot, and gets their outputs; a child's failure or a
//! timeout is a step error; an unknown job id is a clear fatal error; a child records its
//! parent; cancelling the parent cancels its unfinished children.

use std::time::Duration;

use flare::{event_trigger, Client, Io, Job, JobError, RetryPolicy, RunStatus};
use serde_json::{json, Value};

use crate::backend_tests;
use crate::support::{settled, wait_for, TestDb};

const DAY: Duration = Duration::from_secs(86_400);

fn once() -> RetryPolicy {
    RetryPolicy::default().max_attempts(1)
}

/// `double` returns twice its `n`; `boom` fails; `sleepy` waits a day.
fn children(client: &Client) {
    client
        .define_job(
            Job::new("double", "Double", "1.0.0")
                .trigger(event_trigger("never.sent"))
                .run(|p: Value, _io: Io| async move {
                    Ok(json!({ "n": p["n"].as_i64().unwrap_or(0) * 2 }))
                }),
        )
        .unwrap();
    client
        .define_job(
            Job::new("boom", "Boom", "1.0.0")
                .trigger(event_trigger("never.sent"))
                .retry(once())
                .run(|_p: Value, _io: Io| async move {
                    Err::<Value, JobError>(JobError::fatal("boom went the child"))
                }),
        )
        .unwrap();
    client
        .define_job(
            Job::new("sleepy", "Sleepy", "1.0.0")
                .trigger(event_trigger("never.sent"))
                .run(|_p: Value, io: Io| async move {
                    io.wait("nap", DAY).await;
                    Ok(json!(null))
                }),
        )
        .unwrap();
}

/// Invokes `p.job` with `p.payload` (or, with `p.many`, `double` once per n), timeout `p.ms`.
fn caller() -> Job {
    Job::new("caller", "Caller", "1.0.0")
        .trigger(event_trigger("call.start"))
        .retry(once())
        .run(|p: Value, io: Io| async move {
            let timeout = Duration::from_millis(p["ms"].as_u64().unwrap_or(3_600_000));
            if let Some(many) = p["many"].as_u64() {
                let payloads: Vec<Value> = (0..many).map(|n| json!({ "n": n })).collect();
                let got: Vec<Value> = io.invoke_all("all", "double", &payloads, timeout).await?;
                return Ok(json!({ "got": got }));
            }
            let job = p["job"].as_str().unwrap_or("double").to_string();
            let got: Value = io.invoke("call", &job, &p["payload"], timeout).await?;
            Ok(json!({ "got": got }))
        })
}

async fn start(client: &Client, p: Value) -> (String, String) {
    let ev = client.send_event("call.start", &p).await.unwrap();
    (ev.id.clone(), ev.run_ids[0].clone())
}

async fn child_of(client: &Client, parent: &str, key: &str) -> flare::store::EventDetail {
    let id = format!("{parent}-invoke-{key}");
    wait_for("the child run", || async {
        client.store().event_detail(&id).await.unwrap()
    })
    .await
}

async fn invoke_returns_the_child_output_and_the_child_records_its_parent(db: TestDb) {
    let (client, _clock) = db.client().await;
    children(&client);
    client.define_job(caller()).unwrap();
    let (ev, parent) = start(&client, json!({ "payload": { "n": 21 } })).await;
    let d = settled(&client, &ev).await;
    assert_eq!(d.runs[0].status, RunStatus::Succeeded, "{:?}", d.runs[0]);
    assert_eq!(d.runs[0].output, Some(json!({ "got": { "n": 42 } })));
    let child = child_of(&client, &parent, "call").await;
    assert_eq!(child.event.name, "flare/job.invoked");
    assert_eq!(child.event.parent_run_id.as_deref(), Some(parent.as_str()));
    assert_eq!(child.runs.len(), 1, "one run, of the invoked job alone");
    assert_eq!(child.runs[0].job_id, "double");
    assert_eq!(child.runs[0].status, RunStatus::Succeeded);
}

async fn a_failing_child_or_a_timeout_is_a_step_error(db: TestDb) {
    let (client, clock) = db.client().await;
    children(&client);
    client.define_job(caller()).unwrap();
    let (ev, _) = start(&client, json!({ "job": "boom" })).await;
    let d = settled(&client, &ev).await;
    assert_eq!(d.runs[0].status, RunStatus::Failed);
    let error = d.runs[0].error.clone().unwrap_or_default();
    assert!(error.contains("boom went the child"), "{error}");

    let (ev, parent) = start(&client, json!({ "job": "sleepy", "ms": 60_000 })).await;
    let child = child_of(&client, &parent, "call").await;
    wait_for("the parent to wait", || async {
        let d = client.store().run_detail(&parent).await.unwrap()?;
        d.wait.is_some().then_some(())
    })
    .await;
    let _ = child;
    clock.advance(Duration::from_secs(60));
    client.engine().wake();
    let d = settled(&client, &ev).await;
    assert_eq!(d.runs[0].status, RunStatus::Failed);
    let error = d.runs[0].error.clone().unwrap_or_default();
    assert!(error.contains("timeout"), "{error}");
}

async fn an_unknown_job_id_fails_the_caller_for_good(db: TestDb) {
    let (client, _clock) = db.client().await;
    client.define_job(caller()).unwrap();
    let (ev, parent) = start(&client, json!({ "job": "no-such-job" })).await;
    let d = settled(&client, &ev).await;
    assert_eq!(d.runs[0].status, RunStatus::Failed);
    let error = d.runs[0].error.clone().unwrap_or_default();
    assert!(error.contains("no job \"no-such-job\""), "{error}");
    assert!(client
        .store()
        .event_get(&format!("{parent}-invoke-call"))
        .await
        .unwrap()
        .is_none());
}

async fn invoke_all_fans_out_and_returns_every_output_in_order(db: TestDb) {
    let (client, _clock) = db.client().await;
    children(&client);
    client.define_job(caller()).unwrap();
    let (ev, _) = start(&client, json!({ "many": 30 })).await;
    let d = settled(&client, &ev).await;
    assert_eq!(d.runs[0].status, RunStatus::Succeeded, "{:?}", d.runs[0]);
    let expected: Vec<Value> = (0..30).map(|n| json!({ "n": n * 2 })).collect();
    assert_eq!(d.runs[0].output, Some(json!({ "got": expected })));
}

async fn cancelling_the_parent_cancels_its_unfinished_children(db: TestDb) {
    let (client, clock) = db.client().await;
    children(&client);
    client.define_job(caller()).unwrap();
    let (_, parent) = start(&client, json!({ "job": "sleepy" })).await;
    let child = child_of(&client, &parent, "call").await;
    let child_run = child.runs[0].id.clone();
    wait_for("the parent to wait", || async {
        let d = client.store().run_detail(&parent).await.unwrap()?;
        d.wait.is_some().then_some(())
    })
    .await;
    client
        .store()
        .run_cancel(&parent, flare::Clock::now_ms(&clock))
        .await
        .unwrap();
    let d = client
        .store()
        .run_detail(&child_run)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(d.run.status, RunStatus::Cancelled);
}

backend_tests!(
    invoke_returns_the_child_output_and_the_child_records_its_parent,
    a_failing_child_or_a_timeout_is_a_step_error,
    an_unknown_job_id_fails_the_caller_for_good,
    invoke_all_fans_out_and_returns_every_output_in_order,
    cancelling_the_parent_cancels_its_unfinished_children,
);
