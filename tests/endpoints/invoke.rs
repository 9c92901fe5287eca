//! Version 2 of the protocol: `invoke` steps, with a scripted endpoint playing an SDK. The child
//! is a run of that one job (the engine's `io.invoke`); the parent waits holding no slot and is
//! called again with the child's output as the step's `output`, or with its failure or the
//! timeout as the step's `error`, which the SDK throws (the job's retry policy sees it, and its
//! retry invokes the job again: a new child); an unknown job fails the run at once.

use std::time::Duration;

use flare::model::{StepKind, StepStatus};
use flare::{Client, RunStatus};
use serde_json::{json, Value};

use crate::backend_tests;
use crate::fixture::{json_answer, registry, run_of, Answer, App, SECRET};
use crate::steps::{job, serving_v2};
use crate::support::{wait_for, TestDb};

/// `parent` (on `parent.start`, two attempts) runs a step, then invokes `p.job` with `{"n": 21}`
/// (timeout `p.ms`, default an hour) and returns what it got; a step error is thrown, as an SDK
/// does. `double` returns twice its `n`; `failing` fails for good; `sleepy` sleeps a day.
fn family() -> impl Fn(&Value) -> Answer + Send + Sync + 'static {
    serving_v2(
        vec![
            job("parent", "parent.start", 2),
            job("double", "never.sent", 1),
            job("failing", "never.sent", 1),
            job("sleepy", "never.sent", 1),
        ],
        |req| {
            let steps = &req["steps"];
            match req["job"]["id"].as_str().unwrap_or_default() {
                "double" => json_answer(
                    json!({"output": {"n": req["event"]["payload"]["n"].as_i64().unwrap() * 2}}),
                ),
                "failing" => json_answer(json!({"error": "boom went the child", "retry": false})),
                "sleepy" if steps.get("nap").is_none() => json_answer(
                    json!({"steps": [{"key": "nap", "op": "sleep", "durationMs": 86_400_000}]}),
                ),
                "sleepy" => json_answer(json!({"output": null})),
                _ => {
                    let call = &steps["call"];
                    if let Some(output) = call.get("output") {
                        return json_answer(json!({"output": {"got": output}}));
                    }
                    if let Some(error) = call.get("error") {
                        return json_answer(json!({ "error": error }));
                    }
                    let p = &req["event"]["payload"];
                    let mut reached = vec![];
                    if steps.get("before").is_none() {
                        reached.push(json!({"key": "before", "op": "run", "output": 1}));
                    }
                    reached.push(json!({"key": "call", "op": "invoke", "job": p["job"],
                        "payload": {"n": 21}, "timeoutMs": p["ms"].as_u64().unwrap_or(3_600_000)}));
                    json_answer(json!({ "steps": reached }))
                }
            }
        },
    )
}

/// The requests the endpoint saw for job `id`.
fn seen_for(app: &App, id: &str) -> Vec<Value> {
    app.runs_seen()
        .into_iter()
        .filter(|r| r["job"]["id"] == id)
        .collect()
}

async fn start(client: &Client, p: Value) -> (String, String) {
    let ev = client.send_event("parent.start", &p).await.unwrap();
    (ev.id.clone(), ev.run_ids[0].clone())
}

async fn the_parent_gets_the_child_s_output_and_the_child_records_its_parent(db: TestDb) {
    let app = App::start(family()).await;
    let (client, _clock, registry) = registry(&db).await;
    registry.add(&app.url, Some(SECRET.into())).await.unwrap();
    let (ev, parent) = start(&client, json!({"job": "double"})).await;
    let run = run_of(&client, &ev, "parent").await;
    assert_eq!(run.run.status, RunStatus::Succeeded, "{run:?}");
    assert_eq!(run.run.output, Some(json!({"got": {"n": 42}})));
    assert_eq!(run.run.attempt, 1, "waiting for the child is no attempt");
    let step = run.steps.iter().find(|s| s.key == "call").unwrap();
    assert_eq!(
        (step.kind, step.status),
        (StepKind::Invoke, StepStatus::Succeeded)
    );

    let child = client
        .store()
        .event_detail(&format!("{parent}-invoke-call"))
        .await
        .unwrap()
        .expect("the child's event");
    assert_eq!(child.event.name, "flare/job.invoked");
    assert_eq!(child.event.parent_run_id.as_deref(), Some(parent.as_str()));
    assert_eq!(child.event.payload, json!({"n": 21}));
    assert_eq!(child.runs.len(), 1, "one run, of the invoked job alone");
    assert_eq!(child.runs[0].job_id, "double");

    // Two calls of the parent: the step and the invoke, then the child's output.
    let calls = seen_for(&app, "parent");
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[1]["steps"]["call"], json!({"output": {"n": 42}}));
    assert_eq!(calls[1]["steps"]["before"], json!({"output": 1}));
    client.shutdown().await;
}

async fn a_failing_child_is_a_step_error_the_retry_policy_sees(db: TestDb) {
    let app = App::start(family()).await;
    let (client, clock, registry) = registry(&db).await;
    registry.add(&app.url, Some(SECRET.into())).await.unwrap();
    let (ev, parent) = start(&client, json!({"job": "failing"})).await;
    // The first attempt fails with the child's error, and is retried after a second.
    wait_for("the parent's first attempt to fail", || async {
        let d = client.store().run_detail(&parent).await.unwrap()?;
        (d.run.status == RunStatus::Queued && d.run.error.is_some()).then_some(())
    })
    .await;
    clock.advance(Duration::from_secs(2));
    client.engine().wake();
    let run = run_of(&client, &ev, "parent").await;
    assert_eq!(run.run.status, RunStatus::Failed, "{run:?}");
    assert_eq!(run.run.attempt, 2, "retried by the parent's policy");
    let error = run.run.error.clone().unwrap_or_default();
    assert!(
        error.contains("invoke \"call\"") && error.contains("boom went the child"),
        "{error}"
    );
    let calls = seen_for(&app, "parent");
    let last = calls.last().unwrap();
    assert_eq!(last["run"]["attempt"], json!(2));
    assert!(
        last["steps"]["call"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("failed: boom went the child")),
        "the step is told as an error: {last}"
    );
    assert_eq!(
        seen_for(&app, "failing").len(),
        2,
        "the retry invoked the job again: a new child"
    );
    assert!(client
        .store()
        .event_get(&format!("{parent}-invoke2-call"))
        .await
        .unwrap()
        .is_some());
    client.shutdown().await;
}

async fn a_child_not_done_by_the_timeout_is_a_step_error(db: TestDb) {
    let app = App::start(family()).await;
    let (client, clock, registry) = registry(&db).await;
    registry.add(&app.url, Some(SECRET.into())).await.unwrap();
    let (ev, parent) = start(&client, json!({"job": "sleepy", "ms": 60_000})).await;
    wait_for("the parent to wait for its child", || async {
        let d = client.store().run_detail(&parent).await.unwrap()?;
        let waits = d.steps.iter().any(|s| {
            s.key == "call" && s.kind == StepKind::Invoke && s.status == StepStatus::Waiting
        });
        (waits && d.run.status == RunStatus::Queued).then_some(())
    })
    .await;
    // The parent waits and the child sleeps: neither holds a slot.
    wait_for("no run to hold a slot", || async {
        (client.engine().in_flight() == 0).then_some(())
    })
    .await;
    clock.advance(Duration::from_secs(60));
    client.engine().wake();
    wait_for("the parent's first attempt to fail", || async {
        let d = client.store().run_detail(&parent).await.unwrap()?;
        (d.run.status == RunStatus::Queued && d.run.error.is_some()).then_some(())
    })
    .await;
    // The retry invokes `sleepy` again, which times out again.
    clock.advance(Duration::from_secs(2));
    client.engine().wake();
    wait_for("the parent to wait for its second child", || async {
        let d = client.store().run_detail(&parent).await.unwrap()?;
        let waits = d
            .steps
            .iter()
            .any(|s| s.key == "call" && s.status == StepStatus::Waiting);
        (waits && d.run.status == RunStatus::Queued && d.run.attempt == 1).then_some(())
    })
    .await;
    clock.advance(Duration::from_secs(60));
    client.engine().wake();
    let run = run_of(&client, &ev, "parent").await;
    assert_eq!(run.run.status, RunStatus::Failed, "{run:?}");
    let error = run.run.error.unwrap_or_default();
    assert!(error.contains("did not end before the timeout"), "{error}");
    client.shutdown().await;
}

async fn an_unknown_job_fails_the_run_at_once(db: TestDb) {
    let app = App::start(family()).await;
    let (client, _clock, registry) = registry(&db).await;
    registry.add(&app.url, Some(SECRET.into())).await.unwrap();
    let (ev, parent) = start(&client, json!({"job": "no-such-job"})).await;
    let run = run_of(&client, &ev, "parent").await;
    assert_eq!(run.run.status, RunStatus::Failed, "{run:?}");
    assert_eq!(run.run.attempt, 1, "no retry fixes it");
    let error = run.run.error.unwrap_or_default();
    assert!(
        error.contains("step \"call\"") && error.contains("no job \"no-such-job\""),
        "{error}"
    );
    assert!(client
        .store()
        .event_get(&format!("{parent}-invoke-call"))
        .await
        .unwrap()
        .is_none());
    client.shutdown().await;
}

backend_tests!(
    the_parent_gets_the_child_s_output_and_the_child_records_its_parent,
    a_failing_child_is_a_step_error_the_retry_policy_sees,
    a_child_not_done_by_the_timeout_is_a_step_error,
    an_unknown_job_fails_the_run_at_once,
);
