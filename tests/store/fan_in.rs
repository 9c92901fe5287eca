//! Behaviour suite: a caller's fan-in of the children it invoked (`io.invoke`), on each backend.
//! The completion that ends its last child makes it due and wakes this process's workers (a
//! worker asleep until its next poll would otherwise leave it waiting up to a poll interval). A
//! child whose step timed out, and a failed child an operator retried, are not counted again
//! when they end; a child pruned by retention leaves its outcome with its waiting caller.

use std::sync::Arc;
use std::time::Duration;

use flare::model::wait::invoke_event_id;
use flare::model::{EventWait, StepStatus};
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

/// A run of job `parent` that invoked a run of job `child` per key at 1,100 and waits for the
/// first; the children are claimed at 1,200.
struct FanOut {
    store: Store,
    parent: ClaimedRun,
    /// The children's run ids, in the order of their keys.
    ids: Vec<String>,
    /// The children as claimed, in the same order.
    kids: Vec<ClaimedRun>,
}

impl FanOut {
    /// `children`: each child's step key and timeout (ms since the epoch).
    async fn start(db: &TestDb, children: &[(&str, i64)]) -> Self {
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
        let new: Vec<NewChild> = children
            .iter()
            .map(|(k, until)| NewChild {
                key: (*k).to_string(),
                event_id: invoke_event_id(&parent.id, k, None),
                payload: serde_json::value::to_raw_value(&json!({ "k": k })).unwrap(),
                until: *until,
            })
            .collect();
        let ids = store
            .runs_invoke(lease(&parent), "child", parent.attempt, new, 1_100)
            .await
            .unwrap()
            .unwrap();
        let suspend = wait(children[0].0, children[0].1, &ids[0]);
        store
            .runs_complete(vec![completion(&parent, 1_100, suspend)])
            .await
            .unwrap();
        let claimed = store
            .runs_claim(claim_params("child", Some("n"), 1_200, 60_000, ids.len()))
            .await
            .unwrap();
        let kids = ids
            .iter()
            .map(|id| claimed.iter().find(|k| &k.id == id).unwrap().clone())
            .collect();
        Self {
            store,
            parent,
            ids,
            kids,
        }
    }

    /// The parent, claimed at `at` if it is due.
    async fn claim_parent(&self, at: i64) -> Vec<ClaimedRun> {
        self.store
            .runs_claim(claim_params("parent", Some("n"), at, 60_000, 1))
            .await
            .unwrap()
    }

    /// Completes attempt `run` at `at` with `finish`.
    async fn complete(&self, run: &ClaimedRun, at: i64, finish: Finish) {
        self.store
            .runs_complete(vec![completion(run, at, finish)])
            .await
            .unwrap();
    }

    /// The parent's step `key` as read back.
    async fn step(&self, key: &str) -> flare::model::Step {
        let steps = self.store.run_steps(&self.parent.id).await.unwrap();
        steps.into_iter().find(|s| s.key == key).unwrap()
    }
}

fn lease(run: &ClaimedRun) -> Lease {
    Lease {
        run_id: run.id.clone(),
        token: run.token,
    }
}

/// The suspension of a caller on its invoke step `key` (child `child`, timing out at `until`).
fn wait(key: &str, until: i64, child: &str) -> Finish {
    Finish::Wait {
        key: key.into(),
        until,
        since: 1_100,
        event: Some(EventWait::invoke(child)),
    }
}

fn done() -> Finish {
    Finish::Succeeded(json!({ "ok": 1 }))
}

async fn the_last_child_s_completion_makes_its_parent_due_and_wakes_the_workers(db: TestDb) {
    let f = FanOut::start(&db, &[("a", 3_600_000), ("b", 3_600_000)]).await;
    let wake = Arc::clone(f.store.work_notify());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _ = woken(&wake).await;
    // The first child's end leaves the parent waiting for the second: no wake-up needed.
    f.complete(&f.kids[0], 1_300, done()).await;
    assert!(
        f.claim_parent(1_300).await.is_empty(),
        "the parent still waits for a child"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _ = woken(&wake).await;
    // The last child's end makes it due, and says so.
    f.complete(&f.kids[1], 1_400, done()).await;
    assert!(
        woken(&wake).await,
        "the completion that made the parent due woke the workers"
    );
    let resumed = f.claim_parent(1_400).await;
    assert_eq!(resumed.len(), 1, "the parent is due");
    assert_eq!(resumed[0].id, f.parent.id);
}

/// A child whose step timed out no longer counts for its caller: its late end must not resume
/// the caller, which still waits for its other child.
async fn a_child_ending_after_its_step_timed_out_leaves_its_caller_waiting(db: TestDb) {
    // `a` times out at 2,000, `b` in an hour.
    let f = FanOut::start(&db, &[("a", 2_000), ("b", 3_600_000)]).await;
    // At `a`'s timeout the caller runs again: the step fails, and it waits for `b`.
    let again = f.claim_parent(2_100).await.remove(0);
    let expired = f
        .store
        .wait_expire(lease(&again), "a", 2_100)
        .await
        .unwrap();
    assert_eq!(expired, Some(Value::Null));
    f.complete(&again, 2_100, wait("b", 3_600_000, &f.ids[1]))
        .await;
    // `a` ends late: the caller still waits for `b`.
    f.complete(&f.kids[0], 2_200, done()).await;
    assert!(
        f.claim_parent(2_200).await.is_empty(),
        "a timed-out child's end resumed its caller"
    );
    let a = f.step("a").await;
    assert_eq!(a.output, Some(Value::Null), "{a:?}");
    // `b`'s end resumes it.
    f.complete(&f.kids[1], 2_300, done()).await;
    assert_eq!(
        f.claim_parent(2_300).await.len(),
        1,
        "the caller is due once `b` ended"
    );
}

/// A failed child retried by an operator ends again; its caller counted its end already: the
/// caller, still waiting for its other child, stays waiting, and its step keeps the failure.
async fn a_failed_child_retried_by_hand_is_not_counted_twice(db: TestDb) {
    let hour = 3_600_000;
    let f = FanOut::start(&db, &[("a", hour), ("b", hour), ("c", hour)]).await;
    // `a` fails for good, and an operator retries it; it succeeds the second time.
    f.complete(&f.kids[0], 1_300, Finish::Failed("boom".into()))
        .await;
    f.store.run_retry(&f.ids[0], 1_400).await.unwrap();
    let again = f
        .store
        .runs_claim(claim_params("child", Some("n"), 1_500, 60_000, 1))
        .await
        .unwrap()
        .remove(0);
    assert_eq!(again.id, f.ids[0]);
    f.complete(&again, 1_600, done()).await;
    // `b` ends: `c` is still running, so the caller still waits.
    f.complete(&f.kids[1], 1_700, done()).await;
    assert!(
        f.claim_parent(1_700).await.is_empty(),
        "the retried child's second end was counted again"
    );
    f.complete(&f.kids[2], 1_800, done()).await;
    assert_eq!(f.claim_parent(1_800).await.len(), 1, "due once `c` ended");
    // The caller's step keeps the end it counted, not the retry's.
    let a = f.step("a").await;
    assert_eq!(a.status, StepStatus::Failed, "{a:?}");
    assert_eq!(a.output.as_ref().unwrap()["status"], "failed", "{a:?}");
}

/// Retention prunes a child that ended while its caller still waits for another: the caller's
/// step keeps the child's outcome, and the caller resumes with it when the other child ends.
async fn a_pruned_child_keeps_its_outcome_for_its_waiting_caller(db: TestDb) {
    let f = FanOut::start(&db, &[("a", 3_600_000), ("b", 3_600_000)]).await;
    f.complete(&f.kids[0], 1_300, done()).await;
    // Everything that ended is older than the retention's cutoff.
    f.store.events_prune(10_000_000, 1_000).await.unwrap();
    let a = f.step("a").await;
    assert_eq!(a.status, StepStatus::Succeeded, "{a:?}");
    assert_eq!(
        a.output.as_ref().unwrap()["output"],
        json!({ "ok": 1 }),
        "{a:?}"
    );
    f.complete(&f.kids[1], 1_400, done()).await;
    assert_eq!(f.claim_parent(1_400).await.len(), 1, "due once `b` ended");
}

/// A fan-out of 2,500 children, which SQLite writes in parts of 1,000: every child is started
/// once, and the ids come back in the order of the keys (the engine pairs them with the keys),
/// each the run of its key's event.
async fn a_fan_out_written_in_parts_returns_its_children_in_key_order(db: TestDb) {
    let keys: Vec<String> = (0..2_500).map(|i| format!("all:{i}")).collect();
    let children: Vec<(&str, i64)> = keys.iter().map(|k| (k.as_str(), 3_600_000)).collect();
    let f = FanOut::start(&db, &children).await;
    assert_eq!(f.kids.len(), 2_500, "every child is queued once");
    for (key, id) in keys.iter().zip(&f.ids) {
        let child = f.store.run_detail(id).await.unwrap().unwrap();
        assert_eq!(
            child.run.event_id,
            invoke_event_id(&f.parent.id, key, None),
            "{key}"
        );
    }
    let pending = f.store.run_detail(&f.parent.id).await.unwrap().unwrap();
    assert_eq!(pending.steps.len(), 2_500);
}

backend_tests!(
    a_fan_out_written_in_parts_returns_its_children_in_key_order,
    the_last_child_s_completion_makes_its_parent_due_and_wakes_the_workers,
    a_child_ending_after_its_step_timed_out_leaves_its_caller_waiting,
    a_failed_child_retried_by_hand_is_not_counted_twice,
    a_pruned_child_keeps_its_outcome_for_its_waiting_caller,
);
