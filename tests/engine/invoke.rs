//! Behaviour suite: `io.invoke` / `io.invoke_all` — a run starts runs of one job (not a
//! broadcast), waits for them holding no slot, and gets their outputs; a child's failure or a
//! timeout is a step error, and the caller's retry invokes the job again (a new child); a
//! child whose worker died resumes its parent when it ends, run again or failed by the
//! rescuer; an unknown job id is a clear fatal error with nothing written; a child records its
//! parent; cancelling the parent cancels its unfinished children; a child's end wakes its
//! parent at once. Fan-outs of thousands and their bad input are `fan_out.rs`.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use flare::store::{ClaimGroup, ClaimParams};
use flare::{
    event_trigger, CancelOn, Client, Clock, Io, Job, JobError, RetryPolicy, RunStatus, StepKind,
    StepStatus,
};
use serde_json::{json, Value};

use crate::backend_tests;
use crate::support::{settled, wait_for, TestDb};

pub(crate) const DAY: Duration = Duration::from_secs(86_400);

pub(crate) fn once() -> RetryPolicy {
    RetryPolicy::default().max_attempts(1)
}

/// `double` returns twice its `n`; `boom` fails; `sleepy` waits a day. Stored before this returns
/// (`register_job`): another node's caller invokes them by their stored definitions.
pub(crate) async fn children(client: &Client) {
    client
        .register_job(
            Job::new("double", "Double", "1.0.0")
                .trigger(event_trigger("never.sent"))
                .run(|p: Value, _io: Io| async move {
                    Ok(json!({ "n": p["n"].as_i64().unwrap_or(0) * 2 }))
                }),
        )
        .await
        .unwrap();
    client
        .register_job(
            Job::new("boom", "Boom", "1.0.0")
                .trigger(event_trigger("never.sent"))
                .retry(once())
                .run(|_p: Value, _io: Io| async move {
                    Err::<Value, JobError>(JobError::fatal("boom went the child"))
                }),
        )
        .await
        .unwrap();
    client
        .register_job(
            Job::new("sleepy", "Sleepy", "1.0.0")
                .trigger(event_trigger("never.sent"))
                .run(|_p: Value, io: Io| async move {
                    io.wait("nap", DAY).await;
                    Ok(json!(null))
                }),
        )
        .await
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

/// Waits until run `parent` is suspended on its children: queued, with its wait. Its invoke
/// waits are written with the children, while it still runs: a test that moves the clock past
/// its lease, or cancels it, before it suspended would race its suspension.
async fn suspended(client: &Client, parent: &str) {
    wait_for("the parent to wait", || async {
        let d = client.store().run_detail(parent).await.unwrap()?;
        (d.wait.is_some() && d.run.status == RunStatus::Queued).then_some(())
    })
    .await;
}

async fn invoke_returns_the_child_output_and_the_child_records_its_parent(db: TestDb) {
    let (client, _clock) = db.client().await;
    children(&client).await;
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
    children(&client).await;
    client.define_job(caller()).unwrap();
    let (ev, _) = start(&client, json!({ "job": "boom" })).await;
    let d = settled(&client, &ev).await;
    assert_eq!(d.runs[0].status, RunStatus::Failed);
    let error = d.runs[0].error.clone().unwrap_or_default();
    assert!(error.contains("boom went the child"), "{error}");

    let (ev, parent) = start(&client, json!({ "job": "sleepy", "ms": 60_000 })).await;
    let child = child_of(&client, &parent, "call").await;
    suspended(&client, &parent).await;
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
    children(&client).await;
    client.define_job(caller()).unwrap();
    let (ev, _) = start(&client, json!({ "many": 30 })).await;
    let d = settled(&client, &ev).await;
    assert_eq!(d.runs[0].status, RunStatus::Succeeded, "{:?}", d.runs[0]);
    let expected: Vec<Value> = (0..30).map(|n| json!({ "n": n * 2 })).collect();
    assert_eq!(d.runs[0].output, Some(json!({ "got": expected })));
}

async fn cancelling_the_parent_cancels_its_unfinished_children(db: TestDb) {
    let (client, clock) = db.client().await;
    children(&client).await;
    client.define_job(caller()).unwrap();
    let (_, parent) = start(&client, json!({ "job": "sleepy" })).await;
    let child = child_of(&client, &parent, "call").await;
    let child_run = child.runs[0].id.clone();
    suspended(&client, &parent).await;
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

/// A caller's retry after its child failed invokes the job again: a new child, whose output
/// the retry returns (the failed one's outcome is not served again).
async fn a_retry_of_the_caller_invokes_the_job_again(db: TestDb) {
    let (client, clock) = db.client().await;
    let runs = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&runs);
    client
        .define_job(
            Job::new("flaky", "Flaky", "1.0.0")
                .trigger(event_trigger("never.sent"))
                .retry(once())
                .run(move |_p: Value, _io: Io| {
                    let n = counted.fetch_add(1, Ordering::SeqCst);
                    async move {
                        if n == 0 {
                            return Err(JobError::fatal("the first child fails"));
                        }
                        Ok(json!({ "child": n + 1 }))
                    }
                }),
        )
        .unwrap();
    client
        .define_job(
            Job::new("caller", "Caller", "1.0.0")
                .trigger(event_trigger("call.start"))
                .retry(
                    RetryPolicy::default()
                        .max_attempts(2)
                        .delays(Duration::from_secs(1), Duration::from_secs(1)),
                )
                .run(|_p: Value, io: Io| async move {
                    let got: Value = io.invoke("call", "flaky", &json!({}), DAY).await?;
                    Ok(json!({ "got": got }))
                }),
        )
        .unwrap();
    let (ev, parent) = start(&client, json!({})).await;
    // Attempt 1 fails with the child's error; its invoke step is shown failed.
    let detail = wait_for("the caller's first attempt to fail", || async {
        let d = client.store().run_detail(&parent).await.unwrap()?;
        d.attempts
            .iter()
            .any(|a| a.outcome == "retrying")
            .then_some(d)
    })
    .await;
    let step = detail.steps.iter().find(|s| s.key == "call").unwrap();
    assert_eq!(step.kind, StepKind::Invoke);
    assert_eq!(step.status, StepStatus::Failed);
    assert!(
        step.error
            .as_deref()
            .unwrap_or_default()
            .contains("the first child fails"),
        "{step:?}"
    );
    clock.advance(Duration::from_secs(2));
    client.engine().wake();
    let d = settled(&client, &ev).await;
    assert_eq!(d.runs[0].status, RunStatus::Succeeded, "{:?}", d.runs[0]);
    assert_eq!(d.runs[0].output, Some(json!({ "got": { "child": 2 } })));
    let first = child_of(&client, &parent, "call").await;
    assert_eq!(first.runs[0].status, RunStatus::Failed);
    let again = client
        .store()
        .event_detail(&format!("{parent}-invoke2-call"))
        .await
        .unwrap()
        .expect("the retry's child");
    assert_eq!(again.runs[0].status, RunStatus::Succeeded);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "two children, one per attempt"
    );
    let step = client.store().run_detail(&parent).await.unwrap().unwrap();
    let step = step.steps.iter().find(|s| s.key == "call").unwrap();
    assert_eq!(step.status, StepStatus::Succeeded);
    assert_eq!(
        step.output.as_ref().unwrap()["runId"],
        json!(again.runs[0].id)
    );
}

/// A caller that timed out waiting for its child invokes the job again in its retry.
async fn a_retry_after_a_timeout_invokes_the_job_again(db: TestDb) {
    let (client, clock) = db.client().await;
    children(&client).await;
    client
        .define_job(
            Job::new("caller", "Caller", "1.0.0")
                .trigger(event_trigger("call.start"))
                .retry(
                    RetryPolicy::default()
                        .max_attempts(2)
                        .delays(Duration::from_secs(1), Duration::from_secs(1)),
                )
                .run(|p: Value, io: Io| async move {
                    // The first attempt waits for `sleepy` (a day) a minute; the retry for `double`.
                    let job = if io.attempt() == 1 {
                        "sleepy"
                    } else {
                        "double"
                    };
                    let _ = p;
                    let got: Value = io
                        .invoke("call", job, &json!({ "n": 4 }), Duration::from_secs(60))
                        .await?;
                    Ok(json!({ "got": got }))
                }),
        )
        .unwrap();
    let (ev, parent) = start(&client, json!({})).await;
    wait_for("the caller to wait", || async {
        let d = client.store().run_detail(&parent).await.unwrap()?;
        d.wait.is_some().then_some(())
    })
    .await;
    clock.advance(Duration::from_secs(61));
    client.engine().wake();
    wait_for("the caller's first attempt to time out", || async {
        let d = client.store().run_detail(&parent).await.unwrap()?;
        d.attempts
            .iter()
            .any(|a| a.outcome == "retrying")
            .then_some(())
    })
    .await;
    clock.advance(Duration::from_secs(2));
    client.engine().wake();
    let d = settled(&client, &ev).await;
    assert_eq!(d.runs[0].status, RunStatus::Succeeded, "{:?}", d.runs[0]);
    assert_eq!(d.runs[0].output, Some(json!({ "got": { "n": 8 } })));
}

/// The child's worker dies holding it: the rescuer queues it again (attempts left) and its
/// next attempt's end resumes the parent; or fails it for good (none left), which resumes the
/// parent with that failure.
async fn a_child_whose_worker_died_resumes_its_parent_when_it_ends(db: TestDb) {
    for attempts in [2, 1] {
        let (client, clock) = db.client().await;
        let dead = db.sender(&clock).await;
        let id = format!("work{attempts}");
        let job = Job::new(&id, "Work", "1.0.0")
            .trigger(event_trigger("never.sent"))
            .retry(RetryPolicy::default().max_attempts(attempts))
            .run(|_p: Value, _io: Io| async move { Ok(json!("done")) });
        // Stored by a process that will die holding the child; not defined in `client`'s engine
        // until then, so the dead one claims it.
        dead.register_job(job.clone()).await.unwrap();
        client.define_job(caller()).unwrap();
        let (ev, parent) = start(&client, json!({ "job": id })).await;
        let child = child_of(&client, &parent, "call").await.runs[0].id.clone();
        let now = clock.now_ms();
        let claimed = dead
            .store()
            .runs_claim(ClaimParams {
                node: None,
                now,
                lease_until: now + 30_000,
                groups: vec![ClaimGroup {
                    jobs: vec![id.clone()],
                    limit: 10,
                    flow: None,
                }],
            })
            .await
            .unwrap();
        assert_eq!(claimed.len(), 1);
        assert_eq!(claimed[0].id, child);
        suspended(&client, &parent).await;
        client.define_job(job).unwrap();
        clock.advance(Duration::from_secs(31));
        client.engine().maintenance().rescue_once().await.unwrap();
        client.engine().wake();
        let d = settled(&client, &ev).await;
        if attempts == 2 {
            assert_eq!(d.runs[0].status, RunStatus::Succeeded, "{:?}", d.runs[0]);
            assert_eq!(d.runs[0].output, Some(json!({ "got": "done" })));
        } else {
            assert_eq!(d.runs[0].status, RunStatus::Failed);
            let error = d.runs[0].error.clone().unwrap_or_default();
            assert!(error.contains("lease expired"), "{error}");
        }
        client.shutdown().await;
    }
}

/// A child of a job with `cancel_on` is armed like any run of that job: the event cancels it,
/// and its caller resumes with that end.
async fn an_invoked_child_is_cancelled_by_its_job_s_cancel_on(db: TestDb) {
    let (client, _clock) = db.client().await;
    client
        .define_job(
            Job::new("pack", "Pack", "1.0.0")
                .trigger(event_trigger("never.sent"))
                .cancel_on(CancelOn::event("order.cancelled").matching("payload.orderId"))
                .run(|_p: Value, io: Io| async move {
                    io.wait("slowly", DAY).await;
                    Ok(json!("packed"))
                }),
        )
        .unwrap();
    client.define_job(caller()).unwrap();
    let (ev, parent) = start(
        &client,
        json!({ "job": "pack", "payload": { "orderId": "o7" } }),
    )
    .await;
    let child = child_of(&client, &parent, "call").await.runs[0].id.clone();
    wait_for("the caller to wait", || async {
        let d = client.store().run_detail(&parent).await.unwrap()?;
        d.wait.is_some().then_some(())
    })
    .await;
    let cancelling = client
        .send_event("order.cancelled", &json!({ "orderId": "o7" }))
        .await
        .unwrap();
    let d = client.store().run_detail(&child).await.unwrap().unwrap();
    assert_eq!(d.run.status, RunStatus::Cancelled);
    assert_eq!(d.cancelled_by.unwrap().event_id, cancelling.id);
    let d = settled(&client, &ev).await;
    assert_eq!(d.runs[0].status, RunStatus::Failed);
    let error = d.runs[0].error.clone().unwrap_or_default();
    assert!(error.contains("cancelled"), "{error}");
}

/// A child is queued by its own payload where its job reads it: here a rate limit of one run per
/// team. Two children of two teams both start; queued by anything but their payloads (the same
/// key for both), the second would be refused and the fan-out would fail.
async fn an_invoked_child_is_queued_by_its_own_payload(db: TestDb) {
    let (client, _clock) = db.client().await;
    client
        .define_job(
            Job::new("per-team", "Per team", "1.0.0")
                .trigger(event_trigger("never.sent"))
                .rate_limit(1, DAY, Some("event.payload.team"))
                .run(|p: Value, _io: Io| async move { Ok(p["team"].clone()) }),
        )
        .unwrap();
    client
        .define_job(
            Job::new("teams", "Teams", "1.0.0")
                .trigger(event_trigger("teams.start"))
                .retry(once())
                .run(|_p: Value, io: Io| async move {
                    let teams = [json!({ "team": "a" }), json!({ "team": "b" })];
                    let got: Vec<Value> = io.invoke_all("each", "per-team", &teams, DAY).await?;
                    Ok(json!(got))
                }),
        )
        .unwrap();
    let ev = client.send_event("teams.start", &json!({})).await.unwrap();
    let d = settled(&client, &ev.id).await;
    assert_eq!(
        d.runs[0].status,
        RunStatus::Succeeded,
        "{:?}",
        d.runs[0].error
    );
    assert_eq!(d.runs[0].output, Some(json!(["a", "b"])));
}

/// Engine settings whose poll would come only after the test's deadline: a run made due must
/// wake the workers itself.
fn no_poll() -> flare::EngineConfig {
    flare::EngineConfig {
        poll_interval: Duration::from_secs(3_600),
        ..crate::support::test_config()
    }
}

/// The completion that ends a fan-out's last child wakes the workers: its parent resumes at
/// once, not at the next poll (the poll interval, 200 ms by default, was added to every fan-in).
async fn a_parent_resumes_when_its_last_child_ends_not_at_the_next_poll(db: TestDb) {
    let (client, _clock) = db.client_with(no_poll()).await;
    children(&client).await;
    client.define_job(caller()).unwrap();
    let (ev, _) = start(&client, json!({ "many": 3 })).await;
    let d = settled(&client, &ev).await;
    assert_eq!(d.runs[0].status, RunStatus::Succeeded, "{:?}", d.runs[0]);
    let expected: Vec<Value> = (0..3).map(|n| json!({ "n": n * 2 })).collect();
    assert_eq!(d.runs[0].output, Some(json!({ "got": expected })));
}

/// Cancelling a child resumes its waiting parent (with the step error) at once, too.
async fn a_cancelled_child_resumes_its_parent_at_once(db: TestDb) {
    let (client, clock) = db.client_with(no_poll()).await;
    children(&client).await;
    client.define_job(caller()).unwrap();
    let (ev, parent) = start(&client, json!({ "job": "sleepy" })).await;
    let child = child_of(&client, &parent, "call").await;
    suspended(&client, &parent).await;
    client
        .store()
        .run_cancel(&child.runs[0].id, flare::Clock::now_ms(&clock))
        .await
        .unwrap();
    let d = settled(&client, &ev).await;
    assert_eq!(d.runs[0].status, RunStatus::Failed, "{:?}", d.runs[0]);
    let error = d.runs[0].error.clone().unwrap_or_default();
    assert!(error.contains("cancelled"), "{error}");
}

/// PostgreSQL, two nodes: the children run on a node that does not run their caller's job, and
/// the completion there that ends the last one wakes the caller's node (`NOTIFY`), whose next
/// poll is an hour away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_last_child_ending_on_another_node_wakes_its_parent_s_node() {
    let Some(db) = TestDb::new_or_skip(crate::support::Backend::Postgres).await else {
        return;
    };
    let (client, clock) = db.client_with(no_poll()).await;
    let other = db.client_on(&clock, no_poll()).await;
    children(&other).await;
    client.define_job(caller()).unwrap();
    let (ev, _) = start(&client, json!({ "many": 3 })).await;
    let d = settled(&client, &ev).await;
    assert_eq!(d.runs[0].status, RunStatus::Succeeded, "{:?}", d.runs[0]);
    other.shutdown().await;
}

/// A caller that catches a child's timeout and invokes another child resumes as soon as that
/// one ends (the timed-out child no longer counts), and the timed-out child's late end changes
/// nothing of its step.
async fn a_timed_out_child_no_longer_holds_its_caller(db: TestDb) {
    let (client, clock) = db.client_with(no_poll()).await;
    children(&client).await;
    client
        .define_job(
            Job::new("catcher", "Catcher", "1.0.0")
                .trigger(event_trigger("catch.start"))
                .retry(once())
                .run(|_p: Value, io: Io| async move {
                    let slow: Result<Value, JobError> = io
                        .invoke("slow", "sleepy", &json!({}), Duration::from_secs(60))
                        .await;
                    let got: Value = io
                        .invoke(
                            "fast",
                            "double",
                            &json!({ "n": 5 }),
                            Duration::from_secs(3_600),
                        )
                        .await?;
                    Ok(json!({ "slowFailed": slow.is_err(), "got": got }))
                }),
        )
        .unwrap();
    let ev = client.send_event("catch.start", &json!({})).await.unwrap();
    let parent = ev.run_ids[0].clone();
    let slow = child_of(&client, &parent, "slow").await;
    suspended(&client, &parent).await;
    clock.advance(Duration::from_secs(61));
    client.engine().wake();
    // No poll comes and the clock stands still: only `fast`'s end can resume the caller.
    let d = settled(&client, &ev.id).await;
    assert_eq!(d.runs[0].status, RunStatus::Succeeded, "{:?}", d.runs[0]);
    assert_eq!(
        d.runs[0].output,
        Some(json!({ "slowFailed": true, "got": { "n": 10 } }))
    );
    // The timed-out child ends late: its caller's step keeps the timeout.
    client
        .store()
        .run_cancel(&slow.runs[0].id, flare::Clock::now_ms(&clock))
        .await
        .unwrap();
    let steps = client.store().run_steps(&parent).await.unwrap();
    let step = steps.iter().find(|s| s.key == "slow").unwrap();
    assert_eq!(step.status, StepStatus::Failed);
    assert_eq!(step.output, Some(Value::Null), "{step:?}");
    let caller = client.store().run_detail(&parent).await.unwrap().unwrap();
    assert_eq!(caller.run.status, RunStatus::Succeeded);
}

backend_tests!(
    a_timed_out_child_no_longer_holds_its_caller,
    invoke_returns_the_child_output_and_the_child_records_its_parent,
    a_failing_child_or_a_timeout_is_a_step_error,
    an_unknown_job_id_fails_the_caller_for_good,
    invoke_all_fans_out_and_returns_every_output_in_order,
    cancelling_the_parent_cancels_its_unfinished_children,
    a_retry_of_the_caller_invokes_the_job_again,
    a_retry_after_a_timeout_invokes_the_job_again,
    a_child_whose_worker_died_resumes_its_parent_when_it_ends,
    an_invoked_child_is_cancelled_by_its_job_s_cancel_on,
    an_invoked_child_is_queued_by_its_own_payload,
    a_parent_resumes_when_its_last_child_ends_not_at_the_next_poll,
    a_cancelled_child_resumes_its_parent_at_once,
);
