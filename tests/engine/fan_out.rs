//! Behaviour suite: `io.invoke_all`'s fan-out / fan-in — thousands of children started in
//! parts, the caller resumed once when the last one ended (on either of two nodes), a failing
//! child failing the caller after the last ended; bad input (an unknown job id, a payload that
//! is not JSON, a key already used) fails the caller for good with nothing of the fan-out
//! written. The single `io.invoke` and the rest of the fan-in are `invoke.rs`.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use flare::{event_trigger, Client, Io, Job, RunStatus, StepKind, StepStatus};
use serde_json::{json, Value};

use super::invoke::{children, once, DAY};
use crate::backend_tests;
use crate::support::{settled, TestDb};

/// Counts the executions of its body; fans out to `p.many` children of `p.job` (default
/// `double`), or `boom` for the indexes in `p.fail`.
fn fan_out(executions: Arc<AtomicU32>) -> Job {
    Job::new("fan", "Fan", "1.0.0")
        .trigger(event_trigger("fan.start"))
        .retry(once())
        .run(move |p: Value, io: Io| {
            executions.fetch_add(1, Ordering::SeqCst);
            async move {
                let many = p["many"].as_u64().unwrap_or(0);
                let payloads: Vec<Value> = (0..many).map(|n| json!({ "n": n })).collect();
                let job = p["job"].as_str().unwrap_or("double").to_string();
                let got: Vec<Value> = io.invoke_all("all", &job, &payloads, DAY).await?;
                Ok(json!({ "got": got.len(), "last": got.last() }))
            }
        })
}

/// Thousands of children: the caller's body runs twice (before the wait and after the last
/// child ended), not once per child.
///
/// 1,500 children: written in two parts (1,000 per transaction), whose first children run
/// and end while the next parts are written.
async fn a_fan_out_resumes_its_caller_once_when_every_child_ended(db: TestDb) {
    let (client, _clock) = db.client().await;
    children(&client).await;
    let executions = Arc::new(AtomicU32::new(0));
    client.define_job(fan_out(Arc::clone(&executions))).unwrap();
    let ev = client
        .send_event("fan.start", &json!({ "many": 1_500 }))
        .await
        .unwrap();
    let d = settled(&client, &ev.id).await;
    assert_eq!(d.runs[0].status, RunStatus::Succeeded, "{:?}", d.runs[0]);
    assert_eq!(
        d.runs[0].output,
        Some(json!({ "got": 1_500, "last": { "n": 2_998 } }))
    );
    assert_eq!(
        executions.load(Ordering::SeqCst),
        2,
        "the caller ran before the wait and once after"
    );
    let parent = client
        .store()
        .run_detail(&ev.run_ids[0])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(parent.steps.len(), 1_500);
    assert!(parent.wait.is_none(), "no wait left");
}

/// Children ending on two nodes at once: the caller still resumes once, after the last one
/// (on PostgreSQL two completions each ending a last-but-one child must not both miss the other).
async fn a_fan_out_whose_children_end_on_two_nodes_resumes_its_caller_once(db: TestDb) {
    let (client, clock) = db.client().await;
    let other = db.client_on(&clock, crate::support::test_config()).await;
    children(&client).await;
    children(&other).await;
    let executions = Arc::new(AtomicU32::new(0));
    client.define_job(fan_out(Arc::clone(&executions))).unwrap();
    for round in 0..3 {
        let ev = client
            .send_event("fan.start", &json!({ "many": 100, "round": round }))
            .await
            .unwrap();
        let d = settled(&client, &ev.id).await;
        assert_eq!(d.runs[0].status, RunStatus::Succeeded, "{:?}", d.runs[0]);
        assert_eq!(
            d.runs[0].output,
            Some(json!({ "got": 100, "last": { "n": 198 } }))
        );
    }
    assert_eq!(executions.load(Ordering::SeqCst), 6, "twice per caller");
    other.shutdown().await;
}

/// A failing child among several: the caller still resumes once, after the last one ended,
/// with that child's error.
async fn a_failing_child_of_a_fan_out_fails_the_caller_after_the_last_ended(db: TestDb) {
    let (client, _clock) = db.client().await;
    children(&client).await;
    let executions = Arc::new(AtomicU32::new(0));
    client.define_job(fan_out(Arc::clone(&executions))).unwrap();
    let ev = client
        .send_event("fan.start", &json!({ "many": 5, "job": "boom" }))
        .await
        .unwrap();
    let (_, error) = failed(&client, &ev.id).await;
    assert!(
        error.contains("\"all:0\"") && error.contains("boom went the child"),
        "{error}"
    );
    assert_eq!(executions.load(Ordering::SeqCst), 2);
    let parent = client
        .store()
        .run_detail(&ev.run_ids[0])
        .await
        .unwrap()
        .unwrap();
    assert!(parent.steps.iter().all(|s| s.status == StepStatus::Failed));
}

/// Waits until event `event_id`'s one run ended; asserts that it failed and returns the event's
/// detail and the run's error.
async fn failed(client: &Client, event_id: &str) -> (flare::store::EventDetail, String) {
    let d = settled(client, event_id).await;
    assert_eq!(d.runs[0].status, RunStatus::Failed);
    let error = d.runs[0].error.clone().unwrap_or_default();
    (d, error)
}

/// Asserts that run `parent`'s fan-out `all` of `n` children wrote none of their events.
async fn no_child_events(client: &Client, parent: &str, n: usize) {
    for i in 0..n {
        let event = format!("{parent}-invoke-all:{i}");
        assert!(
            client.store().event_get(&event).await.unwrap().is_none(),
            "{event}"
        );
    }
}

/// Asserts that run `parent`'s fan-out `all` of `n` children wrote none of them, nor a step;
/// returns the run's detail.
async fn nothing_started(client: &Client, parent: &str, n: usize) -> flare::store::RunDetail {
    no_child_events(client, parent, n).await;
    let detail = client.store().run_detail(parent).await.unwrap().unwrap();
    assert!(detail.steps.is_empty(), "{:?}", detail.steps);
    detail
}

/// An unknown job id to `invoke_all`: the caller fails for good naming it, and nothing of the
/// fan-out was written (no child, no step, no wait).
async fn an_unknown_job_id_in_a_fan_out_writes_nothing(db: TestDb) {
    let (client, _clock) = db.client().await;
    let executions = Arc::new(AtomicU32::new(0));
    client.define_job(fan_out(Arc::clone(&executions))).unwrap();
    let ev = client
        .send_event("fan.start", &json!({ "many": 50, "job": "no-such-job" }))
        .await
        .unwrap();
    let (_, error) = failed(&client, &ev.id).await;
    // The error names the first keys and how many, not every key of the fan-out.
    assert_eq!(
        error,
        "invoke [all:0, all:1, all:2, … 50 in all]: no job \"no-such-job\" is defined"
    );
    let parent = &ev.run_ids[0];
    let detail = nothing_started(&client, parent, 50).await;
    assert!(detail.wait.is_none());
    assert_eq!(executions.load(Ordering::SeqCst), 1, "fatal: not retried");
}

/// A fan-out whose last payload cannot be written as JSON (a map with keys that are not
/// strings) fails its caller for good, and starts none of the children before it.
async fn a_payload_that_is_not_json_fails_the_fan_out_and_starts_no_child(db: TestDb) {
    let (client, _clock) = db.client().await;
    children(&client).await;
    client
        .define_job(
            Job::new("bad-fan", "Bad fan-out", "1.0.0")
                .trigger(event_trigger("bad.fan"))
                .run(|_p: Value, io: Io| async move {
                    let bad = std::collections::BTreeMap::from([(vec![1u8], 1)]);
                    let mut payloads = vec![std::collections::BTreeMap::new(); 2];
                    payloads.push(bad);
                    let _: Vec<Value> = io
                        .invoke_all("all", "double", &payloads, Duration::from_secs(60))
                        .await?;
                    Ok(Value::Null)
                }),
        )
        .unwrap();
    let ev = client.send_event("bad.fan", &json!({})).await.unwrap();
    let (_, error) = failed(&client, &ev.id).await;
    assert!(
        error.contains("invoke \"all\": a payload is not JSON"),
        "{error}"
    );
    nothing_started(&client, &ev.run_ids[0], 3).await;
}

/// A fan-out whose keys clash with a step this execution already used (here `all:1`, a task's)
/// fails the caller for good, and starts none of its children: every key is taken before
/// anything is written.
async fn a_fan_out_whose_key_is_already_used_starts_no_child(db: TestDb) {
    let (client, _clock) = db.client().await;
    children(&client).await;
    client
        .define_job(
            Job::new("clash-fan", "Clashing fan-out", "1.0.0")
                .trigger(event_trigger("clash.fan"))
                .run(|_p: Value, io: Io| async move {
                    io.run_task("all:1", || async { Ok(json!("a task")) })
                        .await?;
                    let payloads: Vec<Value> = (0..3).map(|n| json!({ "n": n })).collect();
                    let _: Vec<Value> = io
                        .invoke_all("all", "double", &payloads, Duration::from_secs(60))
                        .await?;
                    Ok(Value::Null)
                }),
        )
        .unwrap();
    let ev = client.send_event("clash.fan", &json!({})).await.unwrap();
    let (d, error) = failed(&client, &ev.id).await;
    assert_eq!(d.runs[0].attempt, 1, "a programming error is not retried");
    assert!(error.contains("\"all:1\" is used twice"), "{error}");
    let parent = &ev.run_ids[0];
    no_child_events(&client, parent, 3).await;
    let steps = client.store().run_steps(parent).await.unwrap();
    let kinds: Vec<(&str, StepKind)> = steps.iter().map(|s| (s.key.as_str(), s.kind)).collect();
    assert_eq!(kinds, [("all:1", StepKind::Task)]);
}

backend_tests!(
    a_fan_out_resumes_its_caller_once_when_every_child_ended,
    a_fan_out_whose_children_end_on_two_nodes_resumes_its_caller_once,
    a_failing_child_of_a_fan_out_fails_the_caller_after_the_last_ended,
    an_unknown_job_id_in_a_fan_out_writes_nothing,
    a_payload_that_is_not_json_fails_the_fan_out_and_starts_no_child,
    a_fan_out_whose_key_is_already_used_starts_no_child,
);
