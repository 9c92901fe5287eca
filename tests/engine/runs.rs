//! Behaviour suite: runs — outputs and logs, chaining without duplicates, leases and fencing,
//! concurrency limits, retention.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use flare::store::{ClaimGroup, ClaimParams, Completion, Finish};
use flare::{event_trigger, Clock, EngineConfig, Io, Job, RetryPolicy, RunStatus};
use serde_json::{json, Value};

use crate::backend_tests;
use crate::support::{settled, test_config, wait_for, TestDb};

async fn a_run_records_its_output_and_logs(db: TestDb) {
    let (client, _clock) = db.client().await;
    client
        .define_job(
            Job::new("greet", "Greet", "1.0.0")
                .trigger(event_trigger("user.created"))
                .run(|p: Value, io: Io| async move {
                    io.logger.debug("d");
                    io.logger.info(format!("hello {}", p["email"]));
                    io.logger.warn("w");
                    io.logger.error("e");
                    Ok(json!({"sent": true}))
                }),
        )
        .unwrap();
    let ev = client
        .send_event("user.created", &json!({"email": "ada@example.com"}))
        .await
        .unwrap();
    let detail = settled(&client, &ev.id).await;
    let run = client
        .store()
        .run_detail(&detail.runs[0].id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run.run.status, RunStatus::Succeeded);
    assert_eq!(run.run.attempt, 1);
    assert_eq!(run.run.output, Some(json!({"sent": true})));
    let lines: Vec<(String, String)> = run
        .logs
        .iter()
        .map(|l| (format!("{:?}", l.level).to_lowercase(), l.message.clone()))
        .collect();
    assert_eq!(
        lines,
        vec![
            ("debug".into(), "d".into()),
            ("info".into(), "hello \"ada@example.com\"".into()),
            ("warn".into(), "w".into()),
            ("error".into(), "e".into())
        ]
    );
    assert_eq!(run.attempts.len(), 1);
    assert_eq!(run.attempts[0].outcome, "succeeded");
    assert_eq!(run.attempts[0].attempt, 1);
    assert_eq!(run.attempts[0].started_at, run.run.started_at);
    assert_eq!(Some(run.attempts[0].finished_at), run.run.finished_at);
    assert_eq!(run.attempts[0].error, None);
}

async fn chained_events_are_sent_once_even_when_the_run_is_retried(db: TestDb) {
    let (client, clock) = db.client().await;
    let calls = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&calls);
    client
        .define_job(
            Job::new("process-upload", "Process upload", "1.0.0")
                .trigger(event_trigger("file.uploaded"))
                .retry(
                    RetryPolicy::default()
                        .delays(Duration::from_secs(1), Duration::from_secs(1))
                        .jitter(false),
                )
                .run(move |p: Value, io: Io| {
                    let c = Arc::clone(&c);
                    async move {
                        let sent = io
                            .send_event(
                                "file.processed",
                                &json!({"fileId": p["fileId"], "processingResult": "ok"}),
                            )
                            .await?;
                        if c.fetch_add(1, Ordering::SeqCst) == 0 {
                            return Err("crashed after sending".into());
                        }
                        Ok(json!({"sent": sent.id}))
                    }
                }),
        )
        .unwrap();
    client
        .define_job(
            Job::new("notify", "Notify", "1.0.0")
                .trigger(event_trigger("file.processed"))
                .run(|p: Value, _io: Io| async move { Ok(p) }),
        )
        .unwrap();
    let ev = client
        .send_event("file.uploaded", &json!({"fileId": "f1"}))
        .await
        .unwrap();
    wait_for("the first attempt to fail", || async {
        let r = client.store().run_detail(&ev.run_ids[0]).await.unwrap()?;
        (r.run.status == RunStatus::Queued && r.run.attempt == 1).then_some(())
    })
    .await;
    clock.advance(Duration::from_secs(1));
    client.engine().wake();
    let detail = settled(&client, &ev.id).await;
    assert_eq!(detail.runs[0].status, RunStatus::Succeeded);
    assert_eq!(
        detail.children.len(),
        1,
        "the retried run did not send a second file.processed"
    );
    let child = &detail.children[0];
    assert_eq!(child.parent_run_id.as_deref(), Some(ev.run_ids[0].as_str()));
    assert_eq!(child.source, format!("job:{}", ev.run_ids[0]));
    assert_eq!(detail.runs[0].output, Some(json!({"sent": child.id})));
    let child_detail = settled(&client, &child.id).await;
    assert_eq!(child_detail.runs.len(), 1);
    assert_eq!(
        child_detail.runs[0].output,
        Some(json!({"fileId": "f1", "processingResult": "ok"}))
    );
}

async fn a_run_whose_worker_died_runs_again_and_the_old_lease_is_fenced(db: TestDb) {
    let (client, clock) = db.client().await;
    let sender = db.sender(&clock).await;
    // The "dead worker" claims the run directly and never finishes it.
    sender
        .define_job(
            Job::new("work", "Work", "1.0.0")
                .trigger(event_trigger("work.todo"))
                .run(|_p: Value, _io: Io| async move { Ok(json!("dead")) }),
        )
        .unwrap();
    let ev = sender.send_event("work.todo", &json!({})).await.unwrap();
    let now = clock.now_ms();
    let claimed = sender
        .store()
        .runs_claim(ClaimParams {
            node: None,
            now,
            lease_until: now + 30_000,
            groups: vec![ClaimGroup {
                jobs: vec!["work".into()],
                limit: 10,
                flow: None,
            }],
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    let dead = claimed[0].clone();
    assert_eq!(dead.attempt, 1);

    client
        .define_job(
            Job::new("work", "Work", "1.0.0")
                .trigger(event_trigger("work.todo"))
                .run(|_p: Value, io: Io| async move { Ok(json!({"attempt": io.attempt()})) }),
        )
        .unwrap();
    let rescuer = client.engine().maintenance();
    assert_eq!(
        rescuer.rescue_once().await.unwrap(),
        0,
        "the lease has not expired yet"
    );
    clock.advance(Duration::from_secs(31));
    rescuer.rescue_once().await.unwrap();
    client.engine().wake();
    let detail = settled(&client, &ev.id).await;
    assert_eq!(detail.runs[0].status, RunStatus::Succeeded);
    assert_eq!(
        detail.runs[0].output,
        Some(json!({"attempt": 2})),
        "attempt count + 1"
    );

    // The dead worker wakes up and tries to record its result: refused by the fencing token.
    let held = sender
        .store()
        .runs_complete(vec![Completion {
            run_id: dead.id.clone(),
            job_id: dead.job_id.clone(),
            token: dead.token,
            attempt: dead.attempt,
            started_at: now,
            finished_at: clock.now_ms(),
            finish: Finish::Succeeded(json!("dead")),
            logs: vec![],
        }])
        .await
        .unwrap();
    assert_eq!(held, vec![false]);
    let run = client.store().run_detail(&dead.id).await.unwrap().unwrap();
    assert_eq!(run.run.output, Some(json!({"attempt": 2})));
    let outcomes: Vec<_> = run.attempts.iter().map(|a| a.outcome.as_str()).collect();
    assert_eq!(outcomes, vec!["lost", "succeeded"]);
}

async fn a_concurrency_limit_is_respected(db: TestDb) {
    let (client, _clock) = db.client().await;
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (r, p) = (Arc::clone(&running), Arc::clone(&peak));
    client
        .define_job(
            Job::new("serial", "Serial", "1.0.0")
                .trigger(event_trigger("work.todo"))
                .concurrency(2)
                .run(move |_p: Value, _io: Io| {
                    let (r, p) = (Arc::clone(&r), Arc::clone(&p));
                    async move {
                        let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                        p.fetch_max(now, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        r.fetch_sub(1, Ordering::SeqCst);
                        Ok(json!(null))
                    }
                }),
        )
        .unwrap();
    let mut ids = Vec::new();
    for _ in 0..8 {
        ids.push(client.send_event("work.todo", &json!({})).await.unwrap().id);
    }
    for id in &ids {
        settled(&client, id).await;
    }
    assert_eq!(
        peak.load(Ordering::SeqCst),
        2,
        "never more than 2 at once, and the limit was reached"
    );
}

async fn a_run_not_started_in_time_is_cancelled_by_the_rescuer_pass(db: TestDb) {
    let (client, clock) = db.client().await;
    let sender = db.sender(&clock).await;
    let job = || {
        Job::new("fresh", "Fresh", "1.0.0")
            .trigger(event_trigger("quote.asked"))
            .start_timeout(Duration::from_secs(5))
            .run(|_p: Value, _io: Io| async move { Ok(json!("ran")) })
    };
    // Sent while no process runs the job; six seconds pass before one does.
    sender.define_job(job()).unwrap();
    let ev = sender.send_event("quote.asked", &json!({})).await.unwrap();
    clock.advance(Duration::from_secs(6));
    client.define_job(job()).unwrap();
    client.engine().maintenance().rescue_once().await.unwrap();
    let detail = settled(&client, &ev.id).await;
    assert_eq!(detail.runs[0].status, RunStatus::Cancelled);
    assert_eq!(
        detail.runs[0].error.as_deref(),
        Some("expired before it started")
    );
    assert_eq!(detail.runs[0].attempt, 0, "no attempt made");
}

async fn retention_prunes_old_finished_events_only(db: TestDb) {
    let config = EngineConfig {
        retention: Some(Duration::from_secs(7 * 86_400)),
        ..test_config()
    };
    let (client, clock) = db.client_with(config).await;
    client
        .define_job(
            Job::new("a", "A", "1.0.0")
                .trigger(event_trigger("x.done"))
                .run(|_p: Value, io: Io| async move {
                    io.logger.info("logged");
                    Ok(json!(1))
                }),
        )
        .unwrap();
    let old = client.send_event("x.done", &json!({})).await.unwrap();
    settled(&client, &old.id).await;
    // An undelivered event and a never-claimed run are kept however old.
    let scheduled = client
        .send_event_with(flare::SendEvent::new("x.done", &json!({})).delay(flare::Delay::days(30)))
        .await
        .unwrap();
    let orphan = client
        .send_event("nobody.runs.this", &json!({}))
        .await
        .unwrap();
    clock.advance(Duration::from_secs(6 * 86_400));
    let pruner = client.engine().maintenance();
    assert_eq!(
        pruner.prune_once().await.unwrap(),
        0,
        "younger than the retention"
    );
    clock.advance(Duration::from_secs(2 * 86_400));
    let fresh = client.send_event("x.done", &json!({})).await.unwrap();
    settled(&client, &fresh.id).await;
    pruner.prune_once().await.unwrap();
    assert!(
        client.event(&old.id).await.unwrap().is_none(),
        "old finished event pruned"
    );
    assert!(
        client
            .store()
            .run_detail(&old.run_ids[0])
            .await
            .unwrap()
            .is_none(),
        "with its runs"
    );
    assert!(client.event(&fresh.id).await.unwrap().is_some());
    assert!(
        client.event(&scheduled.id).await.unwrap().is_some(),
        "undelivered events are kept"
    );
    // A delivered event with no runs is finished: pruned.
    assert!(client.event(&orphan.id).await.unwrap().is_none());
}

backend_tests!(
    a_run_records_its_output_and_logs,
    chained_events_are_sent_once_even_when_the_run_is_retried,
    a_run_whose_worker_died_runs_again_and_the_old_lease_is_fenced,
    a_concurrency_limit_is_respected,
    a_run_not_started_in_time_is_cancelled_by_the_rescuer_pass,
    retention_prunes_old_finished_events_only,
);
