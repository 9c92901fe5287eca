//! Behaviour suite: the completion that ends a parent's last invoked child (`io.invoke`) makes
//! the parent due and wakes this process's workers, on each backend: a worker asleep until its
//! next poll would otherwise leave the parent waiting up to a poll interval after its fan-in. A
//! child whose step timed out no longer counts: its end leaves the parent waiting.

use std::sync::Arc;
use std::time::Duration;

use flare::model::wait::invoke_event_id;
use flare::model::EventWait;
use flare::store::{ClaimedRun, Finish, Lease, NewChild, Store};
use serde_json::{json, Value};
use tokio::sync::Notify;

use crate::backend_tests;
use crate::fixture::{claim_params, completion, event, spec};
use crate::support::TestDb;

/// Whether a wake-up is pending: consumes it. The PostgreSQL listener's signals (its start,
/// the inserts' `NOTIFY`) arrive asynchronously, so a check for none lets them land first.
async fn woken(wake: &Notify) -> bool {
    tokio::time::timeout(Duration::from_millis(1), wake.notified())
        .await
        .is_ok()
}

async fn the_last_child_s_completion_makes_its_parent_due_and_wakes_the_workers(db: TestDb) {
    let store = Store::open(&db.url).await.unwrap();
    store
        .job_define(spec("parent", "order.placed", 1))
        .await
        .unwrap();
    store
        .job_define(spec("child", "never.sent", 1))
        .await
        .unwrap();
    store
        .event_insert(event("e1".into(), None, 1_000))
        .await
        .unwrap();
    let parent = store
        .runs_claim(claim_params("parent", Some("n"), 1_000, 60_000, 1))
        .await
        .unwrap()
        .remove(0);
    let lease = Lease {
        run_id: parent.id.clone(),
        token: parent.token,
    };
    let keys = ["a", "b"];
    let children: Vec<NewChild> = keys
        .iter()
        .map(|k| NewChild {
            key: (*k).to_string(),
            event_id: invoke_event_id(&parent.id, k, None),
            payload: json!({ "k": k }),
            until: 3_600_000,
        })
        .collect();
    let ids = store
        .runs_invoke(lease, "child", parent.attempt, children, 1_100)
        .await
        .unwrap()
        .unwrap();
    let suspend = Finish::Wait {
        key: "a".into(),
        until: 3_600_000,
        since: 1_100,
        event: Some(EventWait::invoke(&ids[0])),
    };
    store
        .runs_complete(vec![completion(&parent, 1_100, suspend)])
        .await
        .unwrap();
    let kids = store
        .runs_claim(claim_params("child", Some("n"), 1_200, 60_000, 2))
        .await
        .unwrap();
    assert_eq!(kids.len(), 2);

    let wake = Arc::clone(store.work_notify());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _ = woken(&wake).await;
    let done = |run: &ClaimedRun, at| completion(run, at, Finish::Succeeded(Value::Null));
    // The first child's end leaves the parent waiting for the second: no wake-up needed.
    store
        .runs_complete(vec![done(&kids[0], 1_300)])
        .await
        .unwrap();
    let early = store
        .runs_claim(claim_params("parent", Some("n"), 1_300, 60_000, 1))
        .await
        .unwrap();
    assert!(early.is_empty(), "the parent still waits for a child");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _ = woken(&wake).await;
    // The last child's end makes it due, and says so.
    store
        .runs_complete(vec![done(&kids[1], 1_400)])
        .await
        .unwrap();
    assert!(
        woken(&wake).await,
        "the completion that made the parent due woke the workers"
    );
    let resumed = store
        .runs_claim(claim_params("parent", Some("n"), 1_400, 60_000, 1))
        .await
        .unwrap();
    assert_eq!(resumed.len(), 1, "the parent is due");
    assert_eq!(resumed[0].id, parent.id);
}

/// A child whose step timed out no longer counts for its caller: its late end must not resume
/// the caller, which still waits for its other child.
async fn a_child_ending_after_its_step_timed_out_leaves_its_caller_waiting(db: TestDb) {
    let store = Store::open(&db.url).await.unwrap();
    store
        .job_define(spec("parent", "order.placed", 1))
        .await
        .unwrap();
    store
        .job_define(spec("child", "never.sent", 1))
        .await
        .unwrap();
    store
        .event_insert(event("e1".into(), None, 1_000))
        .await
        .unwrap();
    let claim_parent = |at| store.runs_claim(claim_params("parent", Some("n"), at, 60_000, 1));
    let parent = claim_parent(1_000).await.unwrap().remove(0);
    let lease = |run: &ClaimedRun| Lease {
        run_id: run.id.clone(),
        token: run.token,
    };
    // `a` times out at 2,000, `b` in an hour.
    let children: Vec<NewChild> = [("a", 2_000), ("b", 3_600_000)]
        .iter()
        .map(|(k, until)| NewChild {
            key: (*k).to_string(),
            event_id: invoke_event_id(&parent.id, k, None),
            payload: json!({ "k": k }),
            until: *until,
        })
        .collect();
    let ids = store
        .runs_invoke(lease(&parent), "child", parent.attempt, children, 1_100)
        .await
        .unwrap()
        .unwrap();
    let wait = |key: &str, until, child: &str| Finish::Wait {
        key: key.into(),
        until,
        since: 1_100,
        event: Some(EventWait::invoke(child)),
    };
    store
        .runs_complete(vec![completion(&parent, 1_100, wait("a", 2_000, &ids[0]))])
        .await
        .unwrap();
    let kids = store
        .runs_claim(claim_params("child", Some("n"), 1_200, 60_000, 2))
        .await
        .unwrap();
    assert_eq!(kids.len(), 2);
    let a = kids.iter().find(|k| k.id == ids[0]).unwrap();
    let b = kids.iter().find(|k| k.id == ids[1]).unwrap();
    // At `a`'s timeout the caller runs again: the step fails, and it waits for `b`.
    let again = claim_parent(2_100).await.unwrap().remove(0);
    let expired = store.wait_expire(lease(&again), "a", 2_100).await.unwrap();
    assert_eq!(expired, Some(Value::Null));
    store
        .runs_complete(vec![completion(
            &again,
            2_100,
            wait("b", 3_600_000, &ids[1]),
        )])
        .await
        .unwrap();
    let done = |run: &ClaimedRun, at| completion(run, at, Finish::Succeeded(Value::Null));
    // `a` ends late: the caller still waits for `b`.
    store.runs_complete(vec![done(a, 2_200)]).await.unwrap();
    assert!(
        claim_parent(2_200).await.unwrap().is_empty(),
        "a timed-out child's end resumed its caller"
    );
    let steps = store.run_steps(&parent.id).await.unwrap();
    let step_a = steps.iter().find(|s| s.key == "a").unwrap();
    assert_eq!(step_a.output, Some(Value::Null), "{step_a:?}");
    // `b`'s end resumes it.
    store.runs_complete(vec![done(b, 2_300)]).await.unwrap();
    let resumed = claim_parent(2_300).await.unwrap();
    assert_eq!(resumed.len(), 1, "the caller is due once `b` ended");
}

backend_tests!(
    the_last_child_s_completion_makes_its_parent_due_and_wakes_the_workers,
    a_child_ending_after_its_step_timed_out_leaves_its_caller_waiting
);
