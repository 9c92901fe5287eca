//! Behaviour suite: rate limits (`model::rate`, issue 26): at most `limit` runs created per
//! period per key, exact over a sliding window; an event beyond it starts no run of the job and
//! its detail lists the job under `skipped`; a duplicate event takes nothing; scheduled events
//! count when delivered.

use flare::model::RateLimitSpec;
use flare::store::{NewEvent, Store};
use serde_json::json;

use crate::backend_tests;
use crate::fixture::spec;
use crate::support::TestDb;

async fn define(store: &Store) {
    let mut s = spec("notify", "alert.raised", 3);
    s.rate_limit = Some(
        RateLimitSpec {
            limit: 2,
            period_ms: 10_000,
            key: Some("event.payload.customer".into()),
        }
        .check()
        .unwrap(),
    );
    store.job_define(s).await.unwrap();
    // A job without a limit on the same event, which every event starts.
    store
        .job_define(spec("audit", "alert.raised", 3))
        .await
        .unwrap();
}

fn alert(id: &str, customer: &str, now: i64, deliver_at: Option<i64>) -> NewEvent {
    NewEvent {
        id: id.into(),
        name: "alert.raised".into(),
        payload: json!({"customer": customer}),
        context: None,
        source: "api".into(),
        parent_run_id: None,
        deliver_at,
        now,
    }
}

async fn jobs_of(store: &Store, id: &str) -> (Vec<String>, Vec<(String, String)>) {
    let d = store.event_detail(id).await.unwrap().unwrap();
    let mut jobs: Vec<String> = d.runs.iter().map(|r| r.job_id.clone()).collect();
    jobs.sort();
    let skipped = d
        .skipped
        .iter()
        .map(|s| (s.job_id.clone(), s.reason.clone()))
        .collect();
    (jobs, skipped)
}

async fn events_over_a_rate_limit_start_no_run_of_the_job_and_say_so(db: TestDb) {
    let store = Store::open(&db.url).await.unwrap();
    define(&store).await;
    let a1 = store
        .event_insert(alert("a1", "a", 1_000, None))
        .await
        .unwrap();
    assert_eq!(a1.event.run_ids.len(), 2);
    store
        .event_insert(alert("a2", "a", 2_000, None))
        .await
        .unwrap();
    // The third of `a` within 10 s: `notify` is skipped, `audit` runs; `b` has its own count.
    let a3 = store
        .event_insert(alert("a3", "a", 3_000, None))
        .await
        .unwrap();
    assert_eq!(a3.event.run_ids.len(), 1, "only audit's run");
    let (jobs, skipped) = jobs_of(&store, "a3").await;
    assert_eq!(jobs, ["audit"]);
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0].0, "notify");
    assert!(
        skipped[0].1.contains("rate limit") && skipped[0].1.contains("key a"),
        "{skipped:?}"
    );
    let b1 = store
        .event_insert(alert("b1", "b", 3_000, None))
        .await
        .unwrap();
    assert_eq!(b1.event.run_ids.len(), 2);
    // Sending a1 again is a duplicate: it takes nothing.
    let again = store
        .event_insert(alert("a1", "a", 3_500, None))
        .await
        .unwrap();
    assert!(!again.created);
    // At 11.0 s the first left the window (a sliding one): one more, not two.
    let a4 = store
        .event_insert(alert("a4", "a", 11_001, None))
        .await
        .unwrap();
    assert_eq!(a4.event.run_ids.len(), 2);
    let a5 = store
        .event_insert(alert("a5", "a", 11_500, None))
        .await
        .unwrap();
    assert_eq!(a5.event.run_ids.len(), 1);
    assert_eq!(jobs_of(&store, "a5").await.1.len(), 1);
    // Several in one batch are counted one by one.
    let many: Vec<NewEvent> = (0..4)
        .map(|i| alert(&format!("c{i}"), "c", 20_000, None))
        .collect();
    let inserted = store.event_insert_many(many).await.unwrap();
    let started: Vec<usize> = inserted.iter().map(|i| i.event.run_ids.len()).collect();
    assert_eq!(started, [2, 2, 1, 1]);
}

async fn a_scheduled_event_counts_when_it_is_delivered(db: TestDb) {
    let store = Store::open(&db.url).await.unwrap();
    define(&store).await;
    store
        .event_insert(alert("d1", "d", 1_000, None))
        .await
        .unwrap();
    store
        .event_insert(alert("d2", "d", 1_000, None))
        .await
        .unwrap();
    store
        .event_insert(alert("later", "d", 1_000, Some(5_000)))
        .await
        .unwrap();
    assert_eq!(store.events_deliver_due(5_000, 100).await.unwrap(), 1);
    let (jobs, skipped) = jobs_of(&store, "later").await;
    assert_eq!(jobs, ["audit"]);
    assert_eq!(skipped.len(), 1);
}

backend_tests!(
    events_over_a_rate_limit_start_no_run_of_the_job_and_say_so,
    a_scheduled_event_counts_when_it_is_delivered,
);
