//! Behaviour suite: throttles (`model::throttle`, issue 26): at most `limit` run starts per
//! period per key, `burst` at once; the others wait queued, in order, and start as the window
//! allows; nothing is dropped; other keys are not held back. Time is given to the store.

use flare::model::ThrottleSpec;
use flare::store::{ClaimGroup, ClaimParams, ClaimedRun, FlowGroup, NewEvent, Store};
use serde_json::json;

use crate::backend_tests;
use crate::fixture::spec;
use crate::support::TestDb;

async fn define(store: &Store, burst: u32) -> Option<String> {
    let mut s = spec("poll", "feed.changed", 3);
    s.throttle = Some(
        ThrottleSpec {
            limit: 2,
            period_ms: 10_000,
            key: Some("event.payload.feed".into()),
            burst,
        }
        .check()
        .unwrap(),
    );
    let second = s.second_slot();
    store.job_define(s).await.unwrap();
    second
}

fn claim(second: &Option<String>, now: i64) -> ClaimParams {
    ClaimParams {
        node: Some("n".into()),
        now,
        lease_until: now + 1_000_000,
        groups: vec![ClaimGroup {
            jobs: vec!["poll".into()],
            limit: 50,
            flow: Some(FlowGroup {
                second_slot: second.clone(),
            }),
        }],
    }
}

async fn send(store: &Store, feed: &str, n: usize, now: i64) {
    for i in 0..n {
        store
            .event_insert(NewEvent {
                id: format!("{feed}-{i}-{now}"),
                name: "feed.changed".into(),
                payload: json!({"feed": feed, "i": i}),
                context: None,
                source: "api".into(),
                parent_run_id: None,
                deliver_at: None,
                now,
            })
            .await
            .unwrap();
    }
}

fn order(runs: &[ClaimedRun]) -> Vec<String> {
    runs.iter()
        .map(|r| format!("{}{}", r.payload["feed"].as_str().unwrap(), r.payload["i"]))
        .collect()
}

async fn a_throttle_spaces_starts_per_key_in_order(db: TestDb) {
    let store = Store::open(&db.url).await.unwrap();
    let second = define(&store, 1).await;
    send(&store, "a", 4, 1_000).await;
    // 2 per 10 s, burst 1: one start every 5 s per key; `b` has its own pace.
    assert_eq!(
        order(&store.runs_claim(claim(&second, 1_000)).await.unwrap()),
        ["a0"]
    );
    let waiting = store
        .runs_list(flare::store::RunQuery {
            status: Some(flare::RunStatus::Queued),
            ..Default::default()
        })
        .await
        .unwrap();
    let d = store
        .run_detail(&waiting.items[0].run.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        d.waiting_for.as_deref(),
        Some("throttled until 1970-01-01T00:00:06Z")
    );
    send(&store, "b", 1, 1_500).await;
    assert_eq!(
        order(&store.runs_claim(claim(&second, 2_000)).await.unwrap()),
        ["b0"]
    );
    assert!(store
        .runs_claim(claim(&second, 5_999))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        order(&store.runs_claim(claim(&second, 6_000)).await.unwrap()),
        ["a1"]
    );
    assert!(store
        .runs_claim(claim(&second, 10_000))
        .await
        .unwrap()
        .is_empty());
    // Starts do not pile up while nobody claims: after a long gap, one (burst 1) and the pace.
    assert_eq!(
        order(&store.runs_claim(claim(&second, 60_000)).await.unwrap()),
        ["a2"]
    );
    assert!(store
        .runs_claim(claim(&second, 64_000))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        order(&store.runs_claim(claim(&second, 65_000)).await.unwrap()),
        ["a3"]
    );
    // The worker's sleep: a new run is not due before the next start the throttle allows.
    send(&store, "a", 1, 65_500).await;
    let next = store.runs_next_due(vec!["poll".into()]).await.unwrap();
    assert_eq!(next, Some(70_000));
}

async fn a_burst_starts_at_once_then_the_pace_holds(db: TestDb) {
    let store = Store::open(&db.url).await.unwrap();
    let second = define(&store, 2).await;
    send(&store, "a", 5, 1_000).await;
    assert_eq!(
        order(&store.runs_claim(claim(&second, 1_000)).await.unwrap()),
        ["a0", "a1"]
    );
    assert!(store
        .runs_claim(claim(&second, 5_999))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        order(&store.runs_claim(claim(&second, 6_000)).await.unwrap()),
        ["a2"]
    );
    assert_eq!(
        order(&store.runs_claim(claim(&second, 11_000)).await.unwrap()),
        ["a3"]
    );
}

backend_tests!(
    a_throttle_spaces_starts_per_key_in_order,
    a_burst_starts_at_once_then_the_pace_holds,
);
