//! Behaviour suite: control — cancelling a running run (the job is told, its late outcome is
//! refused), pausing and resuming a job, bulk retry / cancel / replay by a filter.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use flare::store::{ClaimGroup, ClaimParams, Completion, Finish, Lease};
use flare::{event_trigger, Clock, EngineConfig, Io, Job, RunStatus};
use serde_json::{json, Value};

use crate::backend_tests;
use crate::support::{test_config, wait_for, TestDb};

/// A job that runs until it is cancelled, then notes that it saw it and returns a success
/// (which must not land).
fn stubborn(saw: Arc<AtomicBool>, started: Arc<AtomicBool>) -> Job {
    Job::new("long", "Long", "1.0.0")
        .trigger(event_trigger("long.todo"))
        .run(move |_p: Value, io: Io| {
            let saw = Arc::clone(&saw);
            let started = Arc::clone(&started);
            async move {
                started.store(true, Ordering::SeqCst);
                tokio::select! {
                    () = io.cancelled() => {
                        assert!(io.is_cancelled());
                        saw.store(true, Ordering::SeqCst);
                        Ok(json!("late success"))
                    }
                    () = tokio::time::sleep(Duration::from_secs(60)) => Ok(json!("ran to the end")),
                }
            }
        })
}

async fn run_of(client: &flare::Client, event_id: &str) -> flare::store::RunDetail {
    let detail = client
        .store()
        .event_detail(event_id)
        .await
        .unwrap()
        .unwrap();
    client
        .store()
        .run_detail(&detail.runs[0].id)
        .await
        .unwrap()
        .unwrap()
}

/// Cancelled from another process (only the store is told): the heartbeat finds the lease gone,
/// the job sees `io.cancelled()`, its success is refused and the run stays cancelled.
async fn a_running_run_cancelled_elsewhere_is_told_and_its_success_refused(db: TestDb) {
    let (client, clock) = db
        .client_with(EngineConfig {
            lease: Duration::from_millis(300),
            ..test_config()
        })
        .await;
    let other = db.sender(&clock).await;
    let saw = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicBool::new(false));
    client
        .define_job(stubborn(Arc::clone(&saw), Arc::clone(&started)))
        .unwrap();
    let ev = client.send_event("long.todo", &json!({})).await.unwrap();
    wait_for("the job to start", || async {
        started.load(Ordering::SeqCst).then_some(())
    })
    .await;
    let run_id = run_of(&client, &ev.id).await.run.id;
    other
        .store()
        .run_cancel(&run_id, clock.now_ms())
        .await
        .unwrap();
    wait_for("the job to see the cancel", || async {
        saw.load(Ordering::SeqCst).then_some(())
    })
    .await;
    wait_for("the execution to end", || async {
        (client.engine().in_flight() == 0).then_some(())
    })
    .await;
    // Give the completer its turn: the refused success must not land.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let run = run_of(&client, &ev.id).await;
    assert_eq!(run.run.status, RunStatus::Cancelled);
    assert_eq!(run.run.output, None, "the late success was refused");
    let outcomes: Vec<_> = run.attempts.iter().map(|a| a.outcome.as_str()).collect();
    assert_eq!(outcomes, vec!["cancelled"]);
    client.shutdown().await;
}

/// Cancelled through this process's engine (the API's way): the execution stops at once, even a
/// job that never looks at `io`.
async fn a_running_run_cancelled_here_stops_at_once(db: TestDb) {
    let (client, _clock) = db.client().await; // 30 s leases: no heartbeat during the test
    let started = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&started);
    client
        .define_job(
            Job::new("deaf", "Deaf", "1.0.0")
                .trigger(event_trigger("deaf.todo"))
                .run(move |_p: Value, _io: Io| {
                    let flag = Arc::clone(&flag);
                    async move {
                        flag.store(true, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_secs(60)).await;
                        Ok(json!("never"))
                    }
                }),
        )
        .unwrap();
    let ev = client.send_event("deaf.todo", &json!({})).await.unwrap();
    wait_for("the job to start", || async {
        started.load(Ordering::SeqCst).then_some(())
    })
    .await;
    let run_id = run_of(&client, &ev.id).await.run.id;
    assert_eq!(client.engine().in_flight(), 1);
    client.engine().run_cancel(&run_id).await.unwrap();
    wait_for("the execution to stop", || async {
        (client.engine().in_flight() == 0).then_some(())
    })
    .await;
    let run = run_of(&client, &ev.id).await;
    assert_eq!(run.run.status, RunStatus::Cancelled);
    let err = client.engine().run_cancel(&run_id).await.unwrap_err();
    assert!(err.to_string().contains("cancelled"), "{err}");
    client.shutdown().await;
}

/// The store's rules, without an engine: a running run's cancel removes its lease, so the
/// heartbeat reports it lost and its completion is refused; it counts once as cancelled.
async fn a_cancelled_runs_lease_is_gone_and_its_completion_refused(db: TestDb) {
    let (_client, clock) = db.client().await;
    let sender = db.sender(&clock).await;
    sender
        .define_job(
            Job::new("work", "Work", "1.0.0")
                .trigger(event_trigger("work.todo"))
                .run(|_p: Value, _io: Io| async move { Ok(json!(1)) }),
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
    let run = claimed[0].clone();
    assert_eq!(run.event_id, ev.id);
    let lease = Lease {
        run_id: run.id.clone(),
        token: run.token,
    };
    let lost = sender
        .store()
        .runs_heartbeat(vec![lease.clone()], now + 60_000)
        .await
        .unwrap();
    assert!(lost.is_empty(), "the lease is held before the cancel");
    sender.store().run_cancel(&run.id, now + 10).await.unwrap();
    let lost = sender
        .store()
        .runs_heartbeat(vec![lease], now + 60_000)
        .await
        .unwrap();
    assert_eq!(lost, vec![run.id.clone()]);
    let held = sender
        .store()
        .runs_complete(vec![Completion {
            run_id: run.id.clone(),
            job_id: run.job_id.clone(),
            token: run.token,
            attempt: run.attempt,
            started_at: now,
            finished_at: now + 20,
            finish: Finish::Succeeded(json!("late")),
            logs: vec![],
        }])
        .await
        .unwrap();
    assert_eq!(held, vec![false]);
    let detail = sender.store().run_detail(&run.id).await.unwrap().unwrap();
    assert_eq!(detail.run.status, RunStatus::Cancelled);
    assert_eq!(detail.run.output, None);
    assert_eq!(detail.run.attempt, 1);
    // Nothing left to claim: the queue no longer holds it.
    let again = sender
        .store()
        .runs_claim(ClaimParams {
            node: None,
            now: now + 100_000,
            lease_until: now + 130_000,
            groups: vec![ClaimGroup {
                jobs: vec!["work".into()],
                limit: 10,
                flow: None,
            }],
        })
        .await
        .unwrap();
    assert!(again.is_empty());
    // And a retry queues it again (counts move back).
    sender.store().run_retry(&run.id, now + 200).await.unwrap();
    sender.store().run_cancel(&run.id, now + 300).await.unwrap();
}

/// A paused job's runs are created (the event fans out) but wait; resumed, they run. Another
/// job's runs are not held back meanwhile.
async fn a_paused_jobs_runs_wait_until_it_is_resumed(db: TestDb) {
    let (client, _clock) = db.client().await;
    let ran = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for id in ["held", "free"] {
        let ran = Arc::clone(&ran);
        client
            .define_job(
                Job::new(id, id, "1.0.0")
                    .trigger(event_trigger("pause.todo"))
                    .run(move |_p: Value, _io: Io| {
                        let ran = Arc::clone(&ran);
                        async move {
                            ran.fetch_add(1, Ordering::SeqCst);
                            Ok(json!("done"))
                        }
                    }),
            )
            .unwrap();
    }
    // The definitions are written in the background: wait for both rows.
    wait_for("the job rows", || async {
        let jobs = client.store().jobs_list(chrono::Utc::now()).await.ok()?;
        (jobs.len() == 2).then_some(())
    })
    .await;
    client.store().job_pause("held", true).await.unwrap();
    let jobs = client.store().jobs_list(chrono::Utc::now()).await.unwrap();
    let paused: Vec<(&str, bool)> = jobs
        .iter()
        .map(|j| (j.job.id.as_str(), j.job.paused))
        .collect();
    assert_eq!(paused, vec![("free", false), ("held", true)]);

    let ev = client.send_event("pause.todo", &json!({})).await.unwrap();
    assert_eq!(ev.run_ids.len(), 2, "a paused job's runs are still created");
    let status_of = |job: &'static str| {
        let client = client.clone();
        let ev = ev.id.clone();
        async move {
            let d = client.store().event_detail(&ev).await.unwrap().unwrap();
            d.runs.iter().find(|r| r.job_id == job).unwrap().status
        }
    };
    wait_for("the free job's run", || async {
        (status_of("free").await == RunStatus::Succeeded).then_some(())
    })
    .await;
    // Several claim passes later the paused job's run still waits.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(status_of("held").await, RunStatus::Queued);
    assert_eq!(ran.load(Ordering::SeqCst), 1);

    client.store().job_pause("held", false).await.unwrap();
    wait_for("the resumed job's run", || async {
        (status_of("held").await == RunStatus::Succeeded).then_some(())
    })
    .await;
    assert_eq!(ran.load(Ordering::SeqCst), 2);
    let err = client.store().job_pause("nope", true).await.unwrap_err();
    assert!(err.to_string().contains("not found"), "{err}");
    client.shutdown().await;
}

backend_tests!(
    a_paused_jobs_runs_wait_until_it_is_resumed,
    a_running_run_cancelled_elsewhere_is_told_and_its_success_refused,
    a_running_run_cancelled_here_stops_at_once,
    a_cancelled_runs_lease_is_gone_and_its_completion_refused,
);
