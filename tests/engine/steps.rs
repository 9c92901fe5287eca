//! Behaviour suite: durable steps — `io.run_task` results stored and returned on re-execution,
//! failing steps and the retry policy, unique keys, `io.wait` / `io.wait_until` ending the
//! execution and resuming when due (across a restart), fencing of step writes, steps in the run
//! detail and their pruning.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use flare::store::{ClaimGroup, ClaimParams, Lease, NewStep, RunDetail};
use flare::{
    event_trigger, Client, Clock, EngineConfig, Io, Job, JobError, ManualClock, RetryPolicy,
    RunStatus, StepKind, StepStatus,
};
use serde_json::{json, Value};

use crate::backend_tests;
use crate::support::{settled, test_config, wait_for, TestDb};

const HOUR: Duration = Duration::from_secs(3600);

/// Retries one second apart, without jitter.
fn every_second(max_attempts: u32) -> RetryPolicy {
    RetryPolicy::default()
        .max_attempts(max_attempts)
        .delays(Duration::from_secs(1), Duration::from_secs(1))
        .jitter(false)
}

fn counter() -> Arc<AtomicUsize> {
    Arc::new(AtomicUsize::new(0))
}

fn count(c: &AtomicUsize) -> usize {
    c.load(Ordering::SeqCst)
}

async fn detail(client: &Client, run_id: &str) -> RunDetail {
    client.store().run_detail(run_id).await.unwrap().unwrap()
}

/// Waits until the run is queued with `attempt` attempts counted.
async fn queued(client: &Client, run_id: &str, attempt: u32) -> RunDetail {
    wait_for("the run to be queued again", || async {
        let d = client.store().run_detail(run_id).await.unwrap()?;
        (d.run.status == RunStatus::Queued && d.run.attempt == attempt && !d.attempts.is_empty())
            .then_some(d)
    })
    .await
}

/// Moves the manual clock and wakes the worker.
fn advance(client: &Client, clock: &ManualClock, by: Duration) {
    clock.advance(by);
    client.engine().wake();
}

fn keys(d: &RunDetail) -> Vec<(String, StepKind, StepStatus)> {
    d.steps
        .iter()
        .map(|s| (s.key.clone(), s.kind, s.status))
        .collect()
}

fn outcomes(d: &RunDetail) -> Vec<(u32, String)> {
    d.attempts
        .iter()
        .map(|a| (a.attempt, a.outcome.clone()))
        .collect()
}

async fn a_completed_task_is_not_repeated_and_its_value_is_returned_on_retry(db: TestDb) {
    let (client, clock) = db.client().await;
    let charges = counter();
    let c = Arc::clone(&charges);
    client
        .define_job(
            Job::new("checkout", "Checkout", "1.0.0")
                .trigger(event_trigger("order.placed"))
                .retry(every_second(3))
                .run(move |_p: Value, io: Io| {
                    let c = Arc::clone(&c);
                    async move {
                        let charge: String = io
                            .run_task("charge", || async move {
                                let n = c.fetch_add(1, Ordering::SeqCst) + 1;
                                Ok(format!("ch_{n}"))
                            })
                            .await?;
                        if io.attempt() == 1 {
                            return Err("the shipping service is down".into());
                        }
                        Ok(json!({ "charge": charge }))
                    }
                }),
        )
        .unwrap();
    let ev = client.send_event("order.placed", &json!({})).await.unwrap();
    let run_id = &ev.run_ids[0];
    queued(&client, run_id, 1).await;
    advance(&client, &clock, Duration::from_secs(1));
    let d = settled(&client, &ev.id).await;
    assert_eq!(d.runs[0].status, RunStatus::Succeeded);
    assert_eq!(count(&charges), 1, "the charge ran once");
    assert_eq!(
        d.runs[0].output,
        Some(json!({ "charge": "ch_1" })),
        "the retry got the stored value"
    );
    let d = detail(&client, run_id).await;
    assert_eq!(
        keys(&d),
        vec![("charge".into(), StepKind::Task, StepStatus::Succeeded)]
    );
    assert_eq!(d.steps[0].attempt, 1, "recorded by the first attempt");
    assert_eq!(d.steps[0].output, Some(json!("ch_1")));
}

async fn a_failing_step_follows_the_retry_policy_then_fails_the_run_with_its_error(db: TestDb) {
    let (client, clock) = db.client().await;
    let calls = counter();
    let after = counter();
    let (c, a) = (Arc::clone(&calls), Arc::clone(&after));
    client
        .define_job(
            Job::new("pay", "Pay", "1.0.0")
                .trigger(event_trigger("order.placed"))
                .retry(every_second(2))
                .run(move |_p: Value, io: Io| {
                    let (c, a) = (Arc::clone(&c), Arc::clone(&a));
                    async move {
                        io.run_task("charge", || async move {
                            let n = c.fetch_add(1, Ordering::SeqCst) + 1;
                            Err::<String, JobError>(format!("card declined {n}").into())
                        })
                        .await?;
                        a.fetch_add(1, Ordering::SeqCst);
                        Ok(json!(null))
                    }
                }),
        )
        .unwrap();
    let ev = client.send_event("order.placed", &json!({})).await.unwrap();
    let run_id = &ev.run_ids[0];
    let first = queued(&client, run_id, 1).await;
    assert_eq!(first.run.error.as_deref(), Some("card declined 1"));
    assert_eq!(
        keys(&first),
        vec![("charge".into(), StepKind::Task, StepStatus::Failed)]
    );
    assert_eq!(first.steps[0].error.as_deref(), Some("card declined 1"));
    advance(&client, &clock, Duration::from_secs(1));
    let d = settled(&client, &ev.id).await;
    assert_eq!(d.runs[0].status, RunStatus::Failed);
    assert_eq!(
        d.runs[0].attempt, 2,
        "both attempts of the policy were used"
    );
    assert_eq!(d.runs[0].error.as_deref(), Some("card declined 2"));
    assert_eq!(
        count(&calls),
        2,
        "a failed step runs again in the next attempt"
    );
    assert_eq!(count(&after), 0);
    let d = detail(&client, run_id).await;
    assert_eq!(d.steps.len(), 1);
    assert_eq!(d.steps[0].status, StepStatus::Failed);
    assert_eq!(d.steps[0].attempt, 2);
    assert_eq!(d.steps[0].error.as_deref(), Some("card declined 2"));
}

async fn a_step_key_used_twice_in_a_run_is_an_error(db: TestDb) {
    let (client, _clock) = db.client().await;
    let calls = counter();
    let c = Arc::clone(&calls);
    client
        .define_job(
            Job::new("twice", "Twice", "1.0.0")
                .trigger(event_trigger("x.twice"))
                .run(move |_p: Value, io: Io| {
                    let c = Arc::clone(&c);
                    async move {
                        for _ in 0..2 {
                            let c = Arc::clone(&c);
                            io.run_task("same", || async move {
                                c.fetch_add(1, Ordering::SeqCst);
                                Ok(())
                            })
                            .await?;
                        }
                        Ok(json!("both ran"))
                    }
                }),
        )
        .unwrap();
    let ev = client.send_event("x.twice", &json!({})).await.unwrap();
    let d = settled(&client, &ev.id).await;
    let run = &d.runs[0];
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.attempt, 1, "a programming error is not retried");
    let error = run.error.as_deref().unwrap();
    assert!(
        error.contains("\"same\"") && error.contains("used twice"),
        "{error}"
    );
    assert_eq!(count(&calls), 1, "the second use did not run");

    // A wait cannot be handled with `?`: a repeated key fails the attempt all the same.
    client
        .define_job(
            Job::new("wait-twice", "Wait twice", "1.0.0")
                .trigger(event_trigger("x.wait-twice"))
                .run(|_p: Value, io: Io| async move {
                    io.wait("pause", Duration::ZERO).await;
                    io.wait("pause", Duration::ZERO).await;
                    Ok(json!("went on"))
                }),
        )
        .unwrap();
    let ev = client.send_event("x.wait-twice", &json!({})).await.unwrap();
    let d = settled(&client, &ev.id).await;
    assert_eq!(d.runs[0].status, RunStatus::Failed);
    assert_eq!(d.runs[0].attempt, 1);
    let error = d.runs[0].error.as_deref().unwrap();
    assert!(error.contains("\"pause\" is used twice"), "{error}");
}

/// A job on `nap.start` that runs `before`, waits an hour (`nap`) unless the payload says
/// `{"wait": false}`, then runs `after`. At most one runs at once.
fn napper(before: &Arc<AtomicUsize>, after: &Arc<AtomicUsize>) -> Job {
    let (b, a) = (Arc::clone(before), Arc::clone(after));
    Job::new("napper", "Napper", "1.0.0")
        .trigger(event_trigger("nap.start"))
        .concurrency(1)
        .run(move |p: Value, io: Io| {
            let (b, a) = (Arc::clone(&b), Arc::clone(&a));
            async move {
                io.run_task("before", || async move {
                    Ok(b.fetch_add(1, Ordering::SeqCst) + 1)
                })
                .await?;
                if p["wait"] != json!(false) {
                    io.logger.info("going to sleep");
                    io.wait("nap", HOUR).await;
                }
                let n = io
                    .run_task("after", || async move {
                        Ok(a.fetch_add(1, Ordering::SeqCst) + 1)
                    })
                    .await?;
                Ok(json!({ "after": n, "attempt": io.attempt() }))
            }
        })
}

/// Waits until `run_id` is suspended on its `nap` wait.
async fn napping(client: &Client, run_id: &str) -> RunDetail {
    wait_for("the run to wait", || async {
        let d = client.store().run_detail(run_id).await.unwrap()?;
        let waiting = d
            .steps
            .iter()
            .any(|s| s.key == "nap" && s.status == StepStatus::Waiting);
        (waiting && d.run.status == RunStatus::Queued).then_some(d)
    })
    .await
}

async fn a_wait_ends_the_execution_frees_its_slot_and_resumes_when_due(db: TestDb) {
    let (client, clock) = db.client().await;
    let (before, after) = (counter(), counter());
    client.define_job(napper(&before, &after)).unwrap();
    let t0 = clock.now_ms();
    let ev = client.send_event("nap.start", &json!({})).await.unwrap();
    let run_id = &ev.run_ids[0];
    let d = napping(&client, run_id).await;
    assert_eq!(
        d.run.run_at.timestamp_millis(),
        t0 + 3_600_000,
        "due when the wait is"
    );
    assert_eq!(d.run.attempt, 0, "a wait does not use up an attempt");
    assert_eq!(outcomes(&d), vec![(1, "waiting".to_string())]);
    let nap = &d.steps[1];
    assert_eq!((nap.kind, nap.finished_at), (StepKind::Wait, None));
    assert_eq!(
        nap.wait_until.map(|t| t.timestamp_millis()),
        Some(t0 + 3_600_000)
    );
    assert_eq!(
        d.logs.len(),
        1,
        "the suspended execution's log lines are kept"
    );
    assert_eq!((count(&before), count(&after)), (1, 0));
    wait_for("the slot to be free", || async {
        (client.engine().in_flight() == 0).then_some(())
    })
    .await;

    // The job allows one run at once: another one runs while the first waits.
    let other = client
        .send_event("nap.start", &json!({ "wait": false }))
        .await
        .unwrap();
    let o = settled(&client, &other.id).await;
    assert_eq!(o.runs[0].status, RunStatus::Succeeded);

    // Not before its time.
    advance(&client, &clock, HOUR - Duration::from_secs(1));
    let third = client
        .send_event("nap.start", &json!({ "wait": false }))
        .await
        .unwrap();
    settled(&client, &third.id).await;
    let d = detail(&client, run_id).await;
    assert_eq!(
        d.run.status,
        RunStatus::Queued,
        "still waiting a second before"
    );
    assert_eq!(
        count(&after),
        2,
        "only the two runs that did not wait went on"
    );

    advance(&client, &clock, Duration::from_secs(1));
    let d = settled(&client, &ev.id).await;
    assert_eq!(d.runs[0].status, RunStatus::Succeeded);
    assert_eq!(d.runs[0].output, Some(json!({ "after": 3, "attempt": 1 })));
    assert_eq!(count(&before), 3, "the first run's `before` ran once");
    let d = detail(&client, run_id).await;
    assert_eq!(
        keys(&d),
        vec![
            ("before".into(), StepKind::Task, StepStatus::Succeeded),
            ("nap".into(), StepKind::Wait, StepStatus::Succeeded),
            ("after".into(), StepKind::Task, StepStatus::Succeeded),
        ]
    );
    assert_eq!(
        outcomes(&d),
        vec![(1, "waiting".to_string()), (1, "succeeded".to_string())]
    );
}

async fn a_wait_survives_a_restart(db: TestDb) {
    let (before, after) = (counter(), counter());
    let (client, clock) = db.client().await;
    client.define_job(napper(&before, &after)).unwrap();
    let ev = client.send_event("nap.start", &json!({})).await.unwrap();
    let run_id = ev.run_ids[0].clone();
    napping(&client, &run_id).await;
    client.shutdown().await;
    drop(client);

    // A new process on the same database, past the due time.
    clock.advance(HOUR);
    let next = Client::builder(&db.url)
        .clock(Arc::new(clock.clone()))
        .config(test_config())
        .connect()
        .await
        .unwrap();
    next.define_job(napper(&before, &after)).unwrap();
    let d = settled(&next, &ev.id).await;
    assert_eq!(d.runs[0].status, RunStatus::Succeeded);
    assert_eq!((count(&before), count(&after)), (1, 1));
    let d = detail(&next, &run_id).await;
    assert_eq!(d.steps[1].status, StepStatus::Succeeded);
}

async fn a_wait_until_a_past_time_continues_at_once(db: TestDb) {
    let (client, clock) = db.client().await;
    let past = chrono::DateTime::from_timestamp_millis(clock.now_ms() - 60_000).unwrap();
    client
        .define_job(
            Job::new("late", "Late", "1.0.0")
                .trigger(event_trigger("x.late"))
                .run(move |_p: Value, io: Io| async move {
                    io.wait_until("deadline", past).await;
                    Ok(json!("went on"))
                }),
        )
        .unwrap();
    let ev = client.send_event("x.late", &json!({})).await.unwrap();
    let d = settled(&client, &ev.id).await;
    assert_eq!(d.runs[0].output, Some(json!("went on")));
    let d = detail(&client, &ev.run_ids[0]).await;
    assert_eq!(
        outcomes(&d),
        vec![(1, "succeeded".to_string())],
        "no suspension"
    );
    assert_eq!(
        keys(&d),
        vec![("deadline".into(), StepKind::Wait, StepStatus::Succeeded)]
    );
    assert_eq!(d.steps[0].wait_until, Some(past));
}

fn step(lease: &Lease, key: &str) -> NewStep {
    NewStep {
        lease: lease.clone(),
        key: key.into(),
        kind: StepKind::Task,
        status: StepStatus::Succeeded,
        attempt: 1,
        started_at: 0,
        finished_at: Some(1),
        wait_until: None,
        output: Some(json!(key)),
        error: None,
        label: None,
    }
}

async fn a_worker_whose_lease_expired_cannot_record_a_step(db: TestDb) {
    let clock = ManualClock::new(chrono::Utc::now().timestamp_millis());
    let sender = db.sender(&clock).await;
    sender
        .define_job(
            Job::new("work", "Work", "1.0.0")
                .trigger(event_trigger("work.todo"))
                .run(|_p: Value, _io: Io| async move { Ok(json!(null)) }),
        )
        .unwrap();
    let ev = sender.send_event("work.todo", &json!({})).await.unwrap();
    let store = sender.store();
    let claim = |now: i64| ClaimParams {
        node: None,
        now,
        lease_until: now + 30_000,
        groups: vec![ClaimGroup {
            jobs: vec!["work".into()],
            limit: 1,
            flow: None,
        }],
    };
    let dead = store.runs_claim(claim(clock.now_ms())).await.unwrap();
    let dead = Lease {
        run_id: dead[0].id.clone(),
        token: dead[0].token,
    };
    assert!(store.step_record(step(&dead, "first")).await.unwrap());

    // Its lease expires, the rescuer queues the run again and another worker claims it.
    clock.advance(Duration::from_secs(31));
    assert_eq!(store.runs_rescue(clock.now_ms()).await.unwrap(), 1);
    assert!(
        !store.step_record(step(&dead, "late")).await.unwrap(),
        "a queued run takes no step"
    );
    let alive = store.runs_claim(claim(clock.now_ms())).await.unwrap();
    let alive = Lease {
        run_id: alive[0].id.clone(),
        token: alive[0].token,
    };
    assert!(
        !store.step_record(step(&dead, "late")).await.unwrap(),
        "the old token is fenced off"
    );
    assert!(store.step_record(step(&alive, "second")).await.unwrap());
    // A step with a display label (a Trigger.dev v2 task's name and key) keeps it.
    let mut labelled = step(&alive, "3387d0daf76e4386");
    labelled.label = Some("Process file · process-file".into());
    assert!(store.step_record(labelled).await.unwrap());
    let stored: Vec<(String, Option<String>)> = store
        .run_steps(&ev.run_ids[0])
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.key, s.label))
        .collect();
    assert_eq!(
        stored,
        vec![
            (
                "3387d0daf76e4386".to_string(),
                Some("Process file · process-file".to_string())
            ),
            ("first".to_string(), None),
            ("second".to_string(), None),
        ]
    );
}

async fn steps_appear_in_the_run_detail(db: TestDb) {
    let (client, clock) = db.client().await;
    client
        .define_job(
            Job::new("steps", "Steps", "1.0.0")
                .trigger(event_trigger("x.steps"))
                .run(move |_p: Value, io: Io| async move {
                    let total: u32 = io
                        .run_task("add", || async { Ok::<u32, JobError>(2 + 2) })
                        .await?;
                    let sent = io.send_event("x.sent", &json!({ "total": total })).await?;
                    Ok(json!({ "sent": sent.id }))
                }),
        )
        .unwrap();
    let ev = client.send_event("x.steps", &json!({})).await.unwrap();
    let d = settled(&client, &ev.id).await;
    let child = d.children[0].id.clone();
    let d = detail(&client, &ev.run_ids[0]).await;
    assert_eq!(
        keys(&d),
        vec![
            ("add".into(), StepKind::Task, StepStatus::Succeeded),
            ("event:0".into(), StepKind::Event, StepStatus::Succeeded),
        ]
    );
    let json = serde_json::to_value(&d).unwrap();
    let add = &json["steps"][0];
    assert_eq!(add["key"], "add");
    assert_eq!(add["kind"], "task");
    assert_eq!(add["status"], "succeeded");
    assert_eq!(add["output"], 4);
    assert_eq!(add["durationMs"], 0);
    assert_eq!(add["attempt"], 1);
    let now = chrono::DateTime::from_timestamp_millis(clock.now_ms()).unwrap();
    assert_eq!(add["startedAt"], json!(now));
    assert_eq!(json["steps"][1]["output"], json!({ "eventId": child }));
}

async fn steps_are_pruned_with_their_run(db: TestDb) {
    let config = EngineConfig {
        retention: Some(Duration::from_secs(86_400)),
        ..test_config()
    };
    let (client, clock) = db.client_with(config).await;
    client
        .define_job(
            Job::new("once", "Once", "1.0.0")
                .trigger(event_trigger("x.once"))
                .run(|_p: Value, io: Io| async move {
                    io.run_task("a", || async { Ok(1) }).await?;
                    Ok(json!(null))
                }),
        )
        .unwrap();
    let ev = client.send_event("x.once", &json!({})).await.unwrap();
    settled(&client, &ev.id).await;
    let run_id = &ev.run_ids[0];
    assert_eq!(client.store().run_steps(run_id).await.unwrap().len(), 1);
    clock.advance(Duration::from_secs(2 * 86_400));
    assert_eq!(client.engine().maintenance().prune_once().await.unwrap(), 1);
    assert!(client.store().run_steps(run_id).await.unwrap().is_empty());
}

/// A line logged before a wait is recorded once (issue 25): the resumed execution runs the body
/// again from the start, and its replayed lines, identical to those the attempt recorded, are
/// dropped; a line after the wait, and a repeated line the first execution never reached, stay.
async fn a_line_logged_before_a_wait_is_recorded_once(db: TestDb) {
    let (client, clock) = db.client().await;
    client
        .define_job(
            Job::new("invoicer", "Invoicer", "1.0.0")
                .trigger(event_trigger("invoice.due"))
                .run(|_: Value, io: Io| async move {
                    io.logger.info("starting");
                    let id: String = io
                        .run_task("create", || async { Ok("inv-1".to_string()) })
                        .await?;
                    io.logger.info(format!("created {id}, waiting"));
                    io.wait("settle", HOUR).await;
                    io.logger.info("starting"); // the same text again, after the wait
                    io.logger.info(format!("resumed for {id}"));
                    Ok(json!(id))
                }),
        )
        .unwrap();
    let ev = client.send_event("invoice.due", &json!({})).await.unwrap();
    let run_id = ev.run_ids[0].clone();
    wait_for("the run to wait", || async {
        let d = client.store().run_detail(&run_id).await.unwrap()?;
        (d.run.status == RunStatus::Queued && d.logs.len() == 2).then_some(())
    })
    .await;
    advance(&client, &clock, HOUR);
    let d = settled(&client, &ev.id).await;
    assert_eq!(d.runs[0].status, RunStatus::Succeeded);
    let d = detail(&client, &run_id).await;
    let lines: Vec<(u32, &str)> = d
        .logs
        .iter()
        .map(|l| (l.attempt, l.message.as_str()))
        .collect();
    assert_eq!(
        lines,
        vec![
            (1, "starting"),
            (1, "created inv-1, waiting"),
            (1, "starting"),
            (1, "resumed for inv-1"),
        ]
    );
}

backend_tests!(
    a_line_logged_before_a_wait_is_recorded_once,
    a_completed_task_is_not_repeated_and_its_value_is_returned_on_retry,
    a_failing_step_follows_the_retry_policy_then_fails_the_run_with_its_error,
    a_step_key_used_twice_in_a_run_is_an_error,
    a_wait_ends_the_execution_frees_its_slot_and_resumes_when_due,
    a_wait_survives_a_restart,
    a_wait_until_a_past_time_continues_at_once,
    a_worker_whose_lease_expired_cannot_record_a_step,
    steps_appear_in_the_run_detail,
    steps_are_pruned_with_their_run,
);
