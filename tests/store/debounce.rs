//! Behaviour suite: debounce (`model::debounce`, issue 26). A burst of events for one key is one
//! run, started a period after the last of them with its payload, never past the timeout after
//! the first; keys have windows of their own; a run that started is not changed (a later event
//! opens a new window); the earlier events link to the run; a new window takes the job's rate
//! limit and a fold does not; the run follows the slots of the event it runs with. Time is given
//! to the store. PostgreSQL: many senders of one key at once, on several nodes, make one run.

use flare::model::{Debounce, JobSpec, Run};
use flare::store::events::Debounced;
use flare::store::{ClaimGroup, ClaimParams, FlowGroup, NewEvent, RunQuery, Store};
use flare::ConcurrencyLimit;
use serde_json::json;

use crate::backend_tests;
use crate::fixture::{claim_params, nodes, spec};
use crate::support::{Backend, TestDb};

const JOB: &str = "rebuild";

fn debounced(timeout_ms: Option<u64>, key: Option<&str>) -> JobSpec {
    let mut s = spec(JOB, "doc.edited", 3);
    s.debounce = Some(
        Debounce {
            period_ms: 5_000,
            key: key.map(str::to_string),
            timeout_ms,
        }
        .check()
        .unwrap(),
    );
    s
}

/// Defines `job` and, on the same event, a job without a debounce that every event starts.
async fn define(store: &Store, job: JobSpec) {
    store.job_define(job).await.unwrap();
    store
        .job_define(spec("audit", "doc.edited", 3))
        .await
        .unwrap();
}

fn edit(id: &str, doc: &str, i: i64, now: i64) -> NewEvent {
    NewEvent {
        id: id.into(),
        name: "doc.edited".into(),
        payload: json!({"doc": doc, "i": i}),
        context: None,
        source: "api".into(),
        parent_run_id: None,
        deliver_at: None,
        now,
    }
}

/// The runs of the debounced job, oldest first.
async fn runs(store: &Store) -> Vec<Run> {
    let mut runs: Vec<Run> = store
        .runs_list(RunQuery {
            job_id: Some(JOB.into()),
            ..RunQuery::default()
        })
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|r| r.run)
        .collect();
    runs.reverse();
    runs
}

/// A claim at `now` of up to 10 runs of the debounced job, whose second slot is `second`.
fn claim_of(now: i64, second: Option<String>) -> ClaimParams {
    ClaimParams {
        node: Some("n".into()),
        now,
        lease_until: now + 60_000,
        groups: vec![ClaimGroup {
            jobs: vec![JOB.into()],
            limit: 10,
            flow: Some(FlowGroup {
                second_slot: second,
            }),
        }],
    }
}

/// The debounced job's run of event `id`, and what the event was folded into.
async fn of_event(store: &Store, id: &str) -> (Vec<String>, Vec<Debounced>) {
    let d = store.event_detail(id).await.unwrap().unwrap();
    let own = d
        .runs
        .iter()
        .filter(|r| r.job_id == JOB)
        .map(|r| r.id.clone())
        .collect();
    (own, d.debounced)
}

fn folded_into(run: &str) -> Vec<Debounced> {
    vec![Debounced {
        job_id: JOB.into(),
        run_id: run.into(),
    }]
}

async fn a_burst_of_events_is_one_run_with_the_last_payload(db: TestDb) {
    let store = Store::open(&db.url).await.unwrap();
    define(&store, debounced(Some(60_000), Some("event.payload.doc"))).await;
    let mut first = None;
    for i in 0..50 {
        let now = 1_000 + i * 1_000;
        let sent = store
            .event_insert(edit(&format!("e{i}"), "a", i, now))
            .await
            .unwrap();
        let runs = runs(&store).await;
        assert_eq!(runs.len(), 1, "one run after event {i}");
        let run = &runs[0];
        let first = first.get_or_insert_with(|| run.id.clone());
        assert_eq!(&run.id, first, "the same run");
        assert!(sent.event.run_ids.contains(first), "{:?}", sent.event);
        assert_eq!(
            run.event_id,
            format!("e{i}"),
            "the run takes the last event"
        );
        assert_eq!(
            run.run_at.timestamp_millis(),
            now + 5_000,
            "event {i} pushed the start back"
        );
    }
    let run = first.unwrap();
    let waiting = store.run_detail(&run).await.unwrap().unwrap().waiting_for;
    assert_eq!(
        waiting.as_deref(),
        Some("debounced: starts at 00:00:55 unless another event comes")
    );
    let claim = |now| claim_params(JOB, Some("n"), now, now + 60_000, 10);
    assert!(store.runs_claim(claim(54_999)).await.unwrap().is_empty());
    let claimed = store.runs_claim(claim(55_000)).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].id, run);
    assert_eq!(claimed[0].event_id, "e49");
    assert_eq!(claimed[0].payload, json!({"doc": "a", "i": 49}));
    // The earlier events link to the run; the last one is its event.
    for i in 0..49 {
        assert_eq!(
            of_event(&store, &format!("e{i}")).await,
            (vec![], folded_into(&run)),
            "e{i}"
        );
    }
    assert_eq!(of_event(&store, "e49").await, (vec![run.clone()], vec![]));
    // The other job ran once per event.
    let audit = store
        .runs_list(RunQuery {
            job_id: Some("audit".into()),
            limit: 100,
            ..RunQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(audit.items.len(), 50);
    // Started: not changed any more; the next event opens a new window.
    let detail = store.run_detail(&run).await.unwrap().unwrap();
    assert_eq!(detail.waiting_for, None);
    store
        .event_insert(edit("late", "a", 50, 56_000))
        .await
        .unwrap();
    let runs = runs(&store).await;
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0].id, run);
    assert_eq!(runs[0].event_id, "e49", "the started run keeps its event");
    assert_eq!(runs[0].run_at.timestamp_millis(), 55_000);
    assert_eq!(runs[1].event_id, "late");
    assert_eq!(runs[1].run_at.timestamp_millis(), 61_000);
    assert_eq!(
        of_event(&store, "late").await,
        (vec![runs[1].id.clone()], vec![])
    );
}

async fn the_start_is_never_past_the_timeout_after_the_first_event(db: TestDb) {
    let store = Store::open(&db.url).await.unwrap();
    define(&store, debounced(Some(12_000), Some("event.payload.doc"))).await;
    // Every 4 s: 6 s, 10 s, then 13 s (1 s + 12 s), however many more come.
    let mut due = Vec::new();
    for (i, now) in [1_000, 5_000, 9_000, 12_000].into_iter().enumerate() {
        let i = i64::try_from(i).unwrap();
        store
            .event_insert(edit(&format!("t{i}"), "a", i, now))
            .await
            .unwrap();
        due.push(runs(&store).await[0].run_at.timestamp_millis());
    }
    assert_eq!(due, [6_000, 10_000, 13_000, 13_000]);
    let claimed = store
        .runs_claim(claim_params(JOB, Some("n"), 13_000, 80_000, 10))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].payload, json!({"doc": "a", "i": 3}));
    // A new window has a new timeout.
    store
        .event_insert(edit("t4", "a", 4, 14_000))
        .await
        .unwrap();
    let runs = runs(&store).await;
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[1].run_at.timestamp_millis(), 19_000);
}

async fn each_key_has_a_window_of_its_own(db: TestDb) {
    let store = Store::open(&db.url).await.unwrap();
    define(&store, debounced(None, Some("event.payload.doc"))).await;
    for (i, doc) in ["a", "b", "a", "c", "b", "a"].into_iter().enumerate() {
        let i = i64::try_from(i).unwrap();
        store
            .event_insert(edit(&format!("k{i}"), doc, i, 1_000 + i * 100))
            .await
            .unwrap();
    }
    let runs = runs(&store).await;
    let events: Vec<&str> = runs.iter().map(|r| r.event_id.as_str()).collect();
    assert_eq!(events, ["k5", "k4", "k3"], "a, b, c: each its last event");
    // Several of a key in one batch are one run too, each event answered with it.
    let batch: Vec<NewEvent> = (0..5)
        .map(|i| edit(&format!("m{i}"), "m", i, 3_000))
        .collect();
    let inserted = store.event_insert_many(batch).await.unwrap();
    let run = &self::runs(&store).await[3];
    assert_eq!(run.event_id, "m4");
    for ins in &inserted {
        assert!(ins.event.run_ids.contains(&run.id), "{:?}", ins.event);
    }
    for i in 0..4 {
        assert_eq!(
            of_event(&store, &format!("m{i}")).await.1,
            folded_into(&run.id)
        );
    }
    // A duplicate takes nothing: the window does not move.
    let again = store.event_insert(edit("m0", "m", 0, 4_000)).await.unwrap();
    assert!(!again.created);
    assert_eq!(self::runs(&store).await[3].run_at.timestamp_millis(), 8_000);
    // A delayed event joins its key's window when it is delivered.
    let mut later = edit("m-later", "m", 9, 3_500);
    later.deliver_at = Some(6_000);
    store.event_insert(later).await.unwrap();
    assert_eq!(store.events_deliver_due(6_000, 10).await.unwrap(), 1);
    let runs = self::runs(&store).await;
    assert_eq!(runs.len(), 4);
    assert_eq!(runs[3].event_id, "m-later");
    assert_eq!(runs[3].run_at.timestamp_millis(), 11_000);
    assert_eq!(of_event(&store, "m4").await.1, folded_into(&run.id));
}

async fn a_new_window_takes_the_rate_limit_and_a_fold_does_not(db: TestDb) {
    let store = Store::open(&db.url).await.unwrap();
    let mut job = debounced(None, None);
    job.rate_limit = Some(
        flare::model::RateLimitSpec {
            limit: 1,
            period_ms: 3_600_000,
            key: None,
        }
        .check()
        .unwrap(),
    );
    define(&store, job).await;
    for i in 0..3 {
        store
            .event_insert(edit(&format!("r{i}"), "any", i, 1_000 + i))
            .await
            .unwrap();
    }
    assert_eq!(runs(&store).await.len(), 1, "folds are not runs created");
    assert!(store
        .event_detail("r2")
        .await
        .unwrap()
        .unwrap()
        .skipped
        .is_empty());
    let claimed = store
        .runs_claim(claim_params(JOB, Some("n"), 6_002, 80_000, 10))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    // The next window would create a second run within the hour.
    let sent = store
        .event_insert(edit("r3", "any", 3, 7_000))
        .await
        .unwrap();
    assert_eq!(sent.event.run_ids.len(), 1, "only audit's run");
    let skipped = store.event_detail("r3").await.unwrap().unwrap().skipped;
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0].job_id, JOB);
    assert_eq!(runs(&store).await.len(), 1);
}

async fn a_debounced_run_takes_the_slots_of_its_last_event(db: TestDb) {
    let store = Store::open(&db.url).await.unwrap();
    let mut job = debounced(None, Some("event.payload.doc"));
    job.concurrency =
        flare::model::Concurrency::new(&[ConcurrencyLimit::key(1, "event.payload.owner")]).unwrap();
    let second = job.second_slot();
    define(&store, job).await;
    let send = |id: &'static str, doc: &'static str, owner: &'static str, now: i64| {
        let store = &store;
        async move {
            let mut e = edit(id, doc, 0, now);
            e.payload = json!({"doc": doc, "owner": owner});
            store.event_insert(e).await.unwrap();
        }
    };
    let claim = |now: i64| claim_of(now, second.clone());
    send("s1", "a", "o1", 1_000).await;
    send("s2", "a", "o2", 2_000).await;
    assert!(store.runs_claim(claim(6_999)).await.unwrap().is_empty());
    let claimed = store.runs_claim(claim(7_000)).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].event_id, "s2");
    // It runs in o2's slot: another document of o2 waits for it, one of o1 does not.
    send("s3", "b", "o2", 8_000).await;
    send("s4", "c", "o1", 8_000).await;
    let claimed = store.runs_claim(claim(13_000)).await.unwrap();
    let events: Vec<&str> = claimed.iter().map(|r| r.event_id.as_str()).collect();
    assert_eq!(events, ["s4"]);
    let held = runs(&store).await;
    let s3 = held.iter().find(|r| r.event_id == "s3").unwrap();
    let waiting = store.run_detail(&s3.id).await.unwrap().unwrap().waiting_for;
    assert_eq!(
        waiting.as_deref(),
        Some("concurrency: 1 of 1 running for key o2"),
        "a full slot is shown before the window"
    );
}

async fn a_debounce_is_checked_when_the_job_is_defined(db: TestDb) {
    let store = Store::open(&db.url).await.unwrap();
    let bad = |period_ms, timeout_ms, key: Option<&str>| {
        Debounce {
            period_ms,
            key: key.map(str::to_string),
            timeout_ms,
        }
        .check()
        .expect_err("refused")
    };
    assert!(bad(500, None, None).starts_with("debounce.periodMs"));
    assert!(bad(8 * 86_400_000, None, None).starts_with("debounce.periodMs"));
    assert!(bad(5_000, Some(1_000), None).starts_with("debounce.timeoutMs"));
    assert!(bad(5_000, None, Some("payload.doc")).starts_with("debounce.key"));
    assert!(bad(5_000, None, Some("event.payload.(")).starts_with("debounce.key"));
    // What is stored reads back as defined.
    define(&store, debounced(Some(60_000), Some("event.payload.doc"))).await;
    let jobs = store.jobs_list(chrono::Utc::now()).await.unwrap();
    let job = jobs.iter().find(|j| j.job.id == JOB).unwrap();
    assert_eq!(
        job.job.debounce,
        Some(json!({"periodMs": 5000, "key": "event.payload.doc", "timeoutMs": 60000}))
    );
}

/// A keyed run pushed back by its window leaves its slot due too early (a slot's due time is a
/// lower bound); the claim that reads the slot then finds the run not yet due, takes nothing and
/// makes the slot due at the run's new start, where the next claim takes it.
async fn a_run_pushed_back_is_claimed_at_its_new_start_and_not_before(db: TestDb) {
    let store = Store::open(&db.url).await.unwrap();
    let mut job = debounced(None, Some("event.payload.doc"));
    job.concurrency =
        flare::model::Concurrency::new(&[ConcurrencyLimit::key(1, "event.payload.doc")]).unwrap();
    let second = job.second_slot();
    define(&store, job).await;
    let claim = |now: i64| claim_of(now, second.clone());
    store.event_insert(edit("p1", "a", 1, 1_000)).await.unwrap();
    store.event_insert(edit("p2", "a", 2, 3_000)).await.unwrap();
    let next = || store.runs_next_due(vec![JOB.into()]);
    let early = next().await.unwrap().expect("a due time");
    assert!(early <= 6_000, "a lower bound of the first start: {early}");
    assert!(store.runs_claim(claim(7_000)).await.unwrap().is_empty());
    assert_eq!(
        next().await.unwrap(),
        Some(8_000),
        "made exact by the claim"
    );
    assert!(store.runs_claim(claim(7_999)).await.unwrap().is_empty());
    let claimed = store.runs_claim(claim(8_000)).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].event_id, "p2");
    assert_eq!(next().await.unwrap(), None, "nothing else is queued");
}

backend_tests!(
    a_burst_of_events_is_one_run_with_the_last_payload,
    the_start_is_never_past_the_timeout_after_the_first_event,
    each_key_has_a_window_of_its_own,
    a_new_window_takes_the_rate_limit_and_a_fold_does_not,
    a_debounced_run_takes_the_slots_of_its_last_event,
    a_debounce_is_checked_when_the_job_is_defined,
    a_run_pushed_back_is_claimed_at_its_new_start_and_not_before,
);

/// Sends event `c<round>-<i>` for document `same` from `SENDERS` tasks at once, spread over
/// `stores`; returns the run ids they were answered with.
async fn send_at_once(stores: &[Store], round: i64) -> std::collections::HashSet<String> {
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(SENDERS));
    let mut tasks = Vec::new();
    for i in 0..SENDERS {
        let store = stores[i % stores.len()].clone();
        let start = std::sync::Arc::clone(&start);
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let i = i64::try_from(i).unwrap();
            let now = round * 100_000 + i;
            store
                .event_insert(edit(&format!("c{round}-{i}"), "same", i, now))
                .await
                .unwrap()
        }));
    }
    let mut answered = std::collections::HashSet::new();
    for t in tasks {
        answered.extend(t.await.unwrap().event.run_ids);
    }
    answered
}

const SENDERS: usize = 64;
const ROUNDS: i64 = 16;

/// Many senders of one key at once, through every writer of several nodes: one run, with one
/// of the events; every other event links to it. Again once that run has started: one new run
/// (the key's row lock orders senders that each find the window's run started; without it,
/// two new runs came within a few rounds).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_concurrent_senders_of_one_key_make_one_run() {
    let Some(db) = TestDb::new_or_skip(Backend::Postgres).await else {
        return;
    };
    let kept = db.keep();
    let stores = nodes(&db).await;
    define(&stores[0], debounced(None, Some("event.payload.doc"))).await;
    for round in 1..=ROUNDS {
        let answered = send_at_once(&stores, round).await;
        let runs = runs(&stores[0]).await;
        assert_eq!(runs.len(), usize::try_from(round).unwrap(), "{runs:?}");
        let run = runs.last().unwrap();
        assert!(answered.contains(&run.id));
        let mut linked = 0;
        for i in 0..SENDERS {
            let (own, folded) = of_event(&stores[0], &format!("c{round}-{i}")).await;
            if own.is_empty() {
                assert_eq!(folded, folded_into(&run.id), "c{round}-{i}");
                linked += 1;
            } else {
                assert_eq!(own, std::slice::from_ref(&run.id));
            }
        }
        assert_eq!(linked, SENDERS - 1);
        let now = round * 100_000 + 10_000;
        let claimed = stores[1]
            .runs_claim(claim_params(JOB, Some("n"), now, now + 60_000, 10))
            .await
            .unwrap();
        assert_eq!(claimed.len(), 1);
    }
    kept.assert_rollups_true().await;
}
