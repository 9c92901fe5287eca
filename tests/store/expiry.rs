//! Behaviour suite: start timeouts (issue 26): a run not started `startTimeoutMs` after it
//! became due is not claimed, and the rescuer's pass cancels it ("expired before it started"),
//! with no attempt made; it can be retried; a run that started once never expires.

use std::time::Duration;

use flare::store::{Completion, Finish, NewEvent, Store};
use flare::RunStatus;
use serde_json::json;

use crate::backend_tests;
use crate::fixture::{claim_params, spec};
use crate::support::TestDb;

async fn send(store: &Store, id: &str, now: i64) -> String {
    store
        .event_insert(NewEvent {
            id: id.into(),
            name: "report.asked".into(),
            payload: json!({}),
            context: None,
            source: "api".into(),
            parent_run_id: None,
            deliver_at: None,
            now,
        })
        .await
        .unwrap()
        .event
        .run_ids[0]
        .clone()
}

async fn a_run_not_started_in_time_expires_and_can_be_retried(db: TestDb) {
    let store = Store::open(&db.url).await.unwrap();
    let mut s = spec("report", "report.asked", 3);
    s.start_timeout = Some(Duration::from_secs(5));
    store.job_define(s).await.unwrap();
    let late = send(&store, "e1", 1_000).await;
    let started = send(&store, "e2", 1_000).await;
    // e2's run starts in time, then waits past the timeout: it does not expire.
    let mut first = store
        .runs_claim(claim_params("report", Some("n"), 2_000, 60_000, 1))
        .await
        .unwrap();
    assert_eq!(first.len(), 1);
    let run = first.remove(0);
    let other = if run.id == late {
        started.clone()
    } else {
        late.clone()
    };
    store
        .runs_complete(vec![Completion {
            run_id: run.id.clone(),
            job_id: run.job_id.clone(),
            token: run.token,
            attempt: run.attempt,
            started_at: run.started_at,
            finished_at: 2_100,
            finish: Finish::Wait {
                key: "w".into(),
                until: 30_000,
                since: 2_100,
                event: None,
            },
            logs: Vec::new(),
        }])
        .await
        .unwrap();
    // Past 6 s the other is not started by a claim, and the rescuer's pass cancels it.
    let none = store
        .runs_claim(claim_params("report", Some("n"), 6_001, 60_000, 10))
        .await
        .unwrap();
    assert!(
        none.is_empty(),
        "claimed {:?} (late {late}, started {started}, first {})",
        none.iter().map(|r| &r.id).collect::<Vec<_>>(),
        run.id
    );
    assert_eq!(store.runs_expire(6_001).await.unwrap(), 1);
    let d = store.run_detail(&other).await.unwrap().unwrap();
    assert_eq!(d.run.status, RunStatus::Cancelled);
    assert_eq!(d.run.error.as_deref(), Some("expired before it started"));
    assert!(d.attempts.is_empty(), "no attempt made: {:?}", d.attempts);
    let waiting = store.run_detail(&run.id).await.unwrap().unwrap();
    assert_eq!(waiting.run.status, RunStatus::Queued);
    // The waiting run resumes at 30 s; nothing else expires.
    let resumed = store
        .runs_claim(claim_params("report", Some("n"), 30_000, 90_000, 10))
        .await
        .unwrap();
    assert_eq!(resumed.len(), 1);
    assert_eq!(resumed[0].id, run.id);
    assert_eq!(store.runs_expire(40_000).await.unwrap(), 0);
    // Retried, the expired run is claimed.
    store.run_retry(&other, 50_000).await.unwrap();
    assert_eq!(store.runs_expire(50_001).await.unwrap(), 0);
    let again = store
        .runs_claim(claim_params("report", Some("n"), 50_001, 90_000, 10))
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].id, other);
}

backend_tests!(a_run_not_started_in_time_expires_and_can_be_retried);
