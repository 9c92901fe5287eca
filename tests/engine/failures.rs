//! Behaviour suite: failing runs — retries with backoff, running out of attempts, invalid
//! payloads, panics and timeouts, manual retries and the attempt limit, and the outcome counts as
//! runs fail and retry.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use flare::store::query::{StatsQuery, StatsWindow};
use flare::{event_trigger, Clock, Io, Job, JobError, RetryPolicy, RunStatus};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::backend_tests;
use crate::support::{settled, wait_for, TestDb};

/// Fails `fail_times` times, then succeeds.
fn flaky(fail_times: usize, calls: Arc<AtomicUsize>, policy: RetryPolicy) -> Job {
    Job::new("flaky", "Flaky", "1.0.0")
        .trigger(event_trigger("work.todo"))
        .retry(policy)
        .run(move |_p: Value, io: Io| {
            let calls = Arc::clone(&calls);
            async move {
                let n = calls.fetch_add(1, Ordering::SeqCst);
                if n < fail_times {
                    return Err(format!("failure number {}", n + 1).into());
                }
                Ok(json!({"attempt": io.attempt()}))
            }
        })
}

async fn a_failing_run_is_retried_with_backoff(db: TestDb) {
    let (client, clock) = db.client().await;
    let calls = Arc::new(AtomicUsize::new(0));
    let policy = RetryPolicy::default()
        .max_attempts(3)
        .delays(Duration::from_secs(10), Duration::from_secs(60))
        .jitter(false);
    client
        .define_job(flaky(2, Arc::clone(&calls), policy))
        .unwrap();
    let ev = client.send_event("work.todo", &json!({})).await.unwrap();
    let run_id = ev.run_ids[0].clone();
    let store = client.store().clone();

    let queued_again = |attempt: u32| {
        let store = store.clone();
        let run_id = run_id.clone();
        async move {
            wait_for("the run to be queued for a retry", || async {
                let r = store.run_detail(&run_id).await.unwrap()?;
                (r.run.status == RunStatus::Queued && r.run.attempt == attempt).then_some(r)
            })
            .await
        }
    };
    let after_first = queued_again(1).await;
    let now = clock.now_ms();
    assert_eq!(
        after_first.run.run_at.timestamp_millis() - now,
        10_000,
        "first backoff is min_delay"
    );
    assert_eq!(after_first.run.error.as_deref(), Some("failure number 1"));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "not retried before its time"
    );

    clock.advance(Duration::from_secs(10));
    client.engine().wake();
    let after_second = queued_again(2).await;
    assert_eq!(
        after_second.run.run_at.timestamp_millis() - clock.now_ms(),
        20_000,
        "backoff doubles"
    );

    clock.advance(Duration::from_secs(20));
    client.engine().wake();
    let detail = settled(&client, &ev.id).await;
    assert_eq!(detail.runs[0].status, RunStatus::Succeeded);
    assert_eq!(detail.runs[0].output, Some(json!({"attempt": 3})));
    let run = client.store().run_detail(&run_id).await.unwrap().unwrap();
    let outcomes: Vec<_> = run.attempts.iter().map(|a| a.outcome.as_str()).collect();
    assert_eq!(outcomes, vec!["retrying", "retrying", "succeeded"]);
}

async fn a_run_out_of_attempts_fails(db: TestDb) {
    let (client, clock) = db.client().await;
    let calls = Arc::new(AtomicUsize::new(0));
    let policy = RetryPolicy::default()
        .max_attempts(2)
        .delays(Duration::from_secs(1), Duration::from_secs(1))
        .jitter(false);
    client
        .define_job(flaky(10, Arc::clone(&calls), policy))
        .unwrap();
    let ev = client.send_event("work.todo", &json!({})).await.unwrap();
    wait_for("first attempt", || async {
        (calls.load(Ordering::SeqCst) == 1).then_some(())
    })
    .await;
    wait_for("retry to be queued", || async {
        let r = client.store().run_detail(&ev.run_ids[0]).await.unwrap()?;
        (r.run.status == RunStatus::Queued).then_some(())
    })
    .await;
    clock.advance(Duration::from_secs(1));
    client.engine().wake();
    let detail = settled(&client, &ev.id).await;
    assert_eq!(detail.runs[0].status, RunStatus::Failed);
    assert_eq!(detail.runs[0].attempt, 2);
    assert_eq!(detail.runs[0].error.as_deref(), Some("failure number 2"));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Strict {
    user_id: String,
}

async fn an_invalid_payload_fails_at_once_with_a_clear_error(db: TestDb) {
    let (client, _clock) = db.client().await;
    client
        .define_job(
            Job::new("strict", "Strict", "1.0.0")
                .trigger(event_trigger("user.created"))
                .run(|_p: Strict, _io: Io| async move { Ok(json!(1)) }),
        )
        .unwrap();
    let ev = client
        .send_event("user.created", &json!({"email": "x"}))
        .await
        .unwrap();
    let detail = settled(&client, &ev.id).await;
    let run = &detail.runs[0];
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.attempt, 1, "no retries for an invalid payload");
    let error = run.error.as_deref().unwrap();
    assert!(
        error.contains("invalid payload for job 'strict'") && error.contains("user_id"),
        "{error}"
    );
    // It stays visible with its payload, so it can be replayed.
    assert_eq!(detail.event.payload, json!({"email": "x"}));
}

async fn panics_and_timeouts_are_caught_and_recorded(db: TestDb) {
    let (client, _clock) = db.client().await;
    client
        .define_job(
            Job::new("boom", "Boom", "1.0.0")
                .trigger(event_trigger("x.panic"))
                .retry(RetryPolicy::none())
                .run(|_p: Value, _io: Io| async move {
                    if true {
                        panic!("kaboom");
                    }
                    Ok(json!(null))
                }),
        )
        .unwrap();
    client
        .define_job(
            Job::new("slow", "Slow", "1.0.0")
                .trigger(event_trigger("x.slow"))
                .retry(RetryPolicy::none())
                .timeout(Duration::from_millis(50))
                .run(|_p: Value, _io: Io| async move {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    Ok(json!(null))
                }),
        )
        .unwrap();
    client
        .define_job(
            Job::new("fatal", "Fatal", "1.0.0")
                .trigger(event_trigger("x.fatal"))
                .run(|_p: Value, _io: Io| async move {
                    Err::<Value, _>(JobError::fatal("card declined"))
                }),
        )
        .unwrap();
    let p = client.send_event("x.panic", &json!({})).await.unwrap();
    let s = client.send_event("x.slow", &json!({})).await.unwrap();
    let f = client.send_event("x.fatal", &json!({})).await.unwrap();
    let p = settled(&client, &p.id).await;
    assert_eq!(p.runs[0].status, RunStatus::Failed);
    assert_eq!(p.runs[0].error.as_deref(), Some("panicked: kaboom"));
    let s = settled(&client, &s.id).await;
    assert_eq!(s.runs[0].status, RunStatus::Failed);
    assert!(
        s.runs[0]
            .error
            .as_deref()
            .unwrap()
            .starts_with("timed out after"),
        "{:?}",
        s.runs[0].error
    );
    let f = settled(&client, &f.id).await;
    assert_eq!(f.runs[0].status, RunStatus::Failed);
    assert_eq!(
        f.runs[0].attempt, 1,
        "a fatal error is not retried (default policy has 3 attempts)"
    );
    // The engine is still healthy after a panic.
    client
        .define_job(
            Job::new("ok", "Ok", "1.0.0")
                .trigger(event_trigger("x.ok"))
                .run(|_p: Value, _io: Io| async move { Ok(json!(1)) }),
        )
        .unwrap();
    let ok = client.send_event("x.ok", &json!({})).await.unwrap();
    assert_eq!(
        settled(&client, &ok.id).await.runs[0].status,
        RunStatus::Succeeded
    );
}

/// Finished runs by outcome in the last hour, from the statistics and from the job list (both
/// backends keep them differently: SQLite reads the runs, PostgreSQL per-minute counters).
async fn outcomes_now(client: &flare::Client, clock: &flare::ManualClock, job: &str) -> [u64; 3] {
    let now = chrono::DateTime::from_timestamp_millis(clock.now_ms()).unwrap();
    let stats = client
        .store()
        .stats(StatsQuery {
            window: StatsWindow::Hour,
            now,
        })
        .await
        .unwrap();
    let listed = client.store().jobs_list(now).await.unwrap();
    let per_job = listed
        .iter()
        .find(|j| j.job.id == job)
        .map(|j| j.last_hour)
        .unwrap_or_default();
    let counts = |o: flare::store::query::Outcomes| [o.succeeded, o.failed, o.cancelled];
    let job_stats = stats
        .jobs
        .iter()
        .find(|j| j.job_id == job)
        .map(|j| j.runs)
        .unwrap_or_default();
    assert_eq!(
        counts(per_job),
        counts(job_stats),
        "job list and statistics agree"
    );
    let buckets = stats.buckets.iter().fold([0; 3], |acc, b| {
        let c = counts(b.runs);
        [acc[0] + c[0], acc[1] + c[1], acc[2] + c[2]]
    });
    assert_eq!(buckets, counts(stats.runs), "buckets add up to the window");
    counts(job_stats)
}

/// The success and failure rates count each run's current outcome: a failed run retried by hand
/// counts as what it became, a cancelled one retried stops counting, a pruned one counts nothing.
async fn outcome_counts_follow_each_runs_current_outcome(db: TestDb) {
    let (client, clock) = db.client().await;
    let calls = Arc::new(AtomicUsize::new(0));
    client
        .define_job(flaky(
            1,
            Arc::clone(&calls),
            RetryPolicy::default().max_attempts(1),
        ))
        .unwrap();
    let failed = client.send_event("work.todo", &json!({})).await.unwrap();
    settled(&client, &failed.id).await;
    let ok = client.send_event("work.todo", &json!({})).await.unwrap();
    settled(&client, &ok.id).await;
    assert_eq!(outcomes_now(&client, &clock, "flaky").await, [1, 1, 0]);

    let run = &failed.run_ids[0];
    client.store().run_retry(run, clock.now_ms()).await.unwrap();
    client.engine().wake();
    wait_for("the retried run to succeed", || async {
        let r = client.store().run_detail(run).await.unwrap()?;
        (r.run.status == RunStatus::Succeeded).then_some(())
    })
    .await;
    assert_eq!(outcomes_now(&client, &clock, "flaky").await, [2, 0, 0]);

    // A job defined on another node, whose runs nobody here claims: one is cancelled, then
    // retried (queued again).
    let other = flare::Client::builder(&db.url)
        .workers(false)
        .clock(Arc::new(clock.clone()))
        .connect()
        .await
        .unwrap();
    other
        .register_job(
            Job::new("elsewhere", "Elsewhere", "1.0.0")
                .trigger(event_trigger("work.elsewhere"))
                .run(|_p: Value, _io: Io| async move { Ok(json!(null)) }),
        )
        .await
        .unwrap();
    let parked = other
        .send_event("work.elsewhere", &json!({}))
        .await
        .unwrap();
    let parked_run = &parked.run_ids[0];
    client
        .store()
        .run_cancel(parked_run, clock.now_ms())
        .await
        .unwrap();
    assert_eq!(outcomes_now(&client, &clock, "elsewhere").await, [0, 0, 1]);
    client
        .store()
        .run_retry(parked_run, clock.now_ms())
        .await
        .unwrap();
    assert_eq!(outcomes_now(&client, &clock, "elsewhere").await, [0, 0, 0]);

    // Outside the window they no longer count; pruned, they count nothing even inside it.
    let at = clock.now_ms();
    clock.advance(Duration::from_secs(3_600));
    assert_eq!(outcomes_now(&client, &clock, "flaky").await, [0, 0, 0]);
    assert!(client.store().events_prune(at + 1, 100).await.unwrap() >= 2);
    let back = chrono::DateTime::from_timestamp_millis(at).unwrap();
    let stats = client
        .store()
        .stats(StatsQuery {
            window: StatsWindow::Hour,
            now: back,
        })
        .await
        .unwrap();
    assert_eq!((stats.runs.succeeded, stats.runs.failed), (0, 0));
}

/// A manual retry never takes attempts away: a run that ended early keeps its limit, one out of
/// attempts gets one more (maxAttempts = max(maxAttempts, attempt + 1)).
async fn a_manual_retry_keeps_the_attempt_limit_or_grants_one_more(db: TestDb) {
    let (client, clock) = db.client().await;
    client
        .define_job(
            Job::new("strict", "Strict", "1.0.0")
                .trigger(event_trigger("user.created"))
                .retry(RetryPolicy::default().max_attempts(3))
                .run(|_p: Strict, _io: Io| async move { Ok(json!(1)) }),
        )
        .unwrap();
    let limits = |run: &flare::Run| (run.status, run.attempt, run.max_attempts);
    // An invalid payload fails at its first attempt, with two left.
    let ev = client
        .send_event("user.created", &json!({"email": "x"}))
        .await
        .unwrap();
    let run = settled(&client, &ev.id).await.runs[0].clone();
    assert_eq!(limits(&run), (RunStatus::Failed, 1, 3));
    client
        .store()
        .run_retry(&run.id, clock.now_ms())
        .await
        .unwrap();
    client.engine().wake();
    let run = settled(&client, &ev.id).await.runs[0].clone();
    assert_eq!(
        limits(&run),
        (RunStatus::Failed, 2, 3),
        "3 → 2 before the fix"
    );

    // Out of attempts (3 of 3): the retry grants a fourth.
    client
        .store()
        .run_retry(&run.id, clock.now_ms())
        .await
        .unwrap();
    client.engine().wake();
    let run = settled(&client, &ev.id).await.runs[0].clone();
    assert_eq!(limits(&run), (RunStatus::Failed, 3, 3));
    client
        .store()
        .run_retry(&run.id, clock.now_ms())
        .await
        .unwrap();
    client.engine().wake();
    let run = settled(&client, &ev.id).await.runs[0].clone();
    assert_eq!(limits(&run), (RunStatus::Failed, 4, 4));

    // A run cancelled before its first attempt keeps all three.
    let other = flare::Client::builder(&db.url)
        .workers(false)
        .clock(Arc::new(clock.clone()))
        .connect()
        .await
        .unwrap();
    other
        .register_job(
            Job::new("elsewhere", "Elsewhere", "1.0.0")
                .trigger(event_trigger("work.elsewhere"))
                .retry(RetryPolicy::default().max_attempts(3))
                .run(|_p: Value, _io: Io| async move { Ok(json!(null)) }),
        )
        .await
        .unwrap();
    let parked = other
        .send_event("work.elsewhere", &json!({}))
        .await
        .unwrap();
    let parked_run = &parked.run_ids[0];
    client
        .store()
        .run_cancel(parked_run, clock.now_ms())
        .await
        .unwrap();
    client
        .store()
        .run_retry(parked_run, clock.now_ms())
        .await
        .unwrap();
    let run = client
        .store()
        .run_detail(parked_run)
        .await
        .unwrap()
        .unwrap()
        .run;
    assert_eq!(
        limits(&run),
        (RunStatus::Queued, 0, 3),
        "3 → 1 before the fix"
    );
}

backend_tests!(
    a_manual_retry_keeps_the_attempt_limit_or_grants_one_more,
    a_failing_run_is_retried_with_backoff,
    a_run_out_of_attempts_fails,
    an_invalid_payload_fails_at_once_with_a_clear_error,
    panics_and_timeouts_are_caught_and_recorded,
    outcome_counts_follow_each_runs_current_outcome,
);
