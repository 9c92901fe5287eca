//! Behaviour suite: priority (`model::priority`, issue 26): among due runs, a run with priority
//! `p` is claimed as if it had become due `p` seconds earlier, never before it is due; with a
//! concurrency limit too; a retried run keeps its offset; a debounced run takes its last
//! event's; a priority that does not compile refuses
//! the job and stores nothing. Time is given to the store (and a manual clock to the client).

use flare::model::{ConcurrencyLimit, Priority};
use flare::store::{
    ClaimGroup, ClaimParams, ClaimedRun, Completion, Finish, FlowGroup, NewEvent, Store,
};
use flare::{event_trigger, Clock, Io, Job};
use serde_json::{json, Value};

use crate::backend_tests;
use crate::fixture::spec;
use crate::support::TestDb;

/// A moment well after the epoch, ms.
const T: i64 = 1_000_000_000;

/// `sync` (on `plan.changed`, priority `event.payload.p`) and `audit` (on `audit.logged`, none).
async fn define(store: &Store) {
    let mut s = spec("sync", "plan.changed", 3);
    s.priority = Some(Priority::parse("event.payload.p").unwrap());
    store.job_define(s).await.unwrap();
    store
        .job_define(spec("audit", "audit.logged", 3))
        .await
        .unwrap();
}

async fn send(store: &Store, id: &str, name: &str, payload: Value, now: i64) {
    store
        .event_insert(NewEvent {
            id: id.into(),
            name: name.into(),
            payload,
            context: None,
            source: "api".into(),
            parent_run_id: None,
            deliver_at: None,
            now,
        })
        .await
        .unwrap();
}

fn claim_of(jobs: &[&str], flow: Option<FlowGroup>, now: i64, limit: usize) -> ClaimParams {
    ClaimParams {
        node: Some("n".into()),
        now,
        lease_until: now + 1_000_000,
        groups: vec![ClaimGroup {
            jobs: jobs.iter().map(|j| j.to_string()).collect(),
            limit,
            flow,
        }],
    }
}

/// The events of the runs claimed one at a time at `now` until none is left.
async fn one_by_one(store: &Store, jobs: &[&str], now: i64) -> Vec<String> {
    let mut order = Vec::new();
    loop {
        let runs = store
            .runs_claim(claim_of(jobs, None, now, 1))
            .await
            .unwrap();
        match runs.as_slice() {
            [] => return order,
            [run] => order.push(run.event_id.clone()),
            more => panic!("a claim of 1 took {}", more.len()),
        }
    }
}

async fn among_due_runs_the_higher_priority_is_taken_first(db: TestDb) {
    let store = Store::open(&db.url).await.unwrap();
    define(&store).await;
    for (id, p) in [("a", 0), ("b", 30), ("c", -30), ("d", 60)] {
        send(&store, id, "plan.changed", json!({"p": p}), T).await;
    }
    send(&store, "e", "audit.logged", json!({}), T).await;
    // Ranks: d T-60 s, b T-30 s, a and e T (in the order they were created), c T+30 s.
    assert_eq!(
        one_by_one(&store, &["sync", "audit"], T + 1).await,
        ["d", "b", "a", "e", "c"]
    );
}

async fn a_run_with_priority_120_due_60_s_later_is_taken_first(db: TestDb) {
    let store = Store::open(&db.url).await.unwrap();
    define(&store).await;
    send(&store, "plain", "audit.logged", json!({}), T).await;
    send(&store, "zero", "plan.changed", json!({"p": 0}), T).await;
    send(
        &store,
        "urgent",
        "plan.changed",
        json!({"p": 120}),
        T + 60_000,
    )
    .await;
    assert_eq!(
        one_by_one(&store, &["sync", "audit"], T + 60_000).await,
        ["urgent", "plain", "zero"]
    );
}

async fn a_high_priority_run_not_yet_due_is_not_taken_early(db: TestDb) {
    let store = Store::open(&db.url).await.unwrap();
    define(&store).await;
    send(&store, "top", "plan.changed", json!({"p": 600}), T).await;
    let run: ClaimedRun = store
        .runs_claim(claim_of(&["sync"], None, T, 10))
        .await
        .unwrap()
        .pop()
        .unwrap();
    // Its attempt fails: due again 100 s later, its rank 500 s before now.
    store
        .runs_complete(vec![Completion {
            run_id: run.id.clone(),
            job_id: run.job_id.clone(),
            token: run.token,
            attempt: run.attempt,
            started_at: T,
            finished_at: T + 1,
            finish: Finish::Retry {
                error: "try again".into(),
                at: T + 100_000,
            },
            logs: Vec::new(),
        }])
        .await
        .unwrap();
    send(&store, "later", "audit.logged", json!({}), T + 10_000).await;
    assert_eq!(
        one_by_one(&store, &["sync", "audit"], T + 99_999).await,
        ["later"]
    );
    // The worker sleeps until it is due, not until its rank.
    assert_eq!(
        store
            .runs_next_due(vec!["sync".into(), "audit".into()])
            .await
            .unwrap(),
        Some(T + 100_000)
    );
    // Once due, it keeps its offset: ahead of a run due 90 s before it.
    send(&store, "older", "audit.logged", json!({}), T + 10_000).await;
    assert_eq!(
        one_by_one(&store, &["sync", "audit"], T + 100_000).await,
        ["top", "older"]
    );
}

async fn priority_orders_the_queue_of_a_limited_job(db: TestDb) {
    let store = Store::open(&db.url).await.unwrap();
    let mut s = spec("limited", "plan.changed", 3);
    s.concurrency = flare::model::Concurrency::new(&[ConcurrencyLimit::job(1)]).unwrap();
    s.priority = Some(Priority::parse("event.payload.p").unwrap());
    let flow = Some(FlowGroup {
        second_slot: s.second_slot(),
    });
    store.job_define(s).await.unwrap();
    send(&store, "first", "plan.changed", json!({"p": 0}), T).await;
    send(&store, "low", "plan.changed", json!({"p": -600}), T).await;
    send(
        &store,
        "urgent",
        "plan.changed",
        json!({"p": 120}),
        T + 60_000,
    )
    .await;
    let mut order = Vec::new();
    for i in 0..3 {
        let now = T + 60_000 + i;
        let taken = store
            .runs_claim(claim_of(&["limited"], flow.clone(), now, 10))
            .await
            .unwrap();
        // One at a time: the limit holds, and the next goes when the run ends.
        assert_eq!(taken.len(), 1, "{taken:?}");
        let run = &taken[0];
        order.push(run.event_id.clone());
        store
            .runs_complete(vec![Completion {
                run_id: run.id.clone(),
                job_id: run.job_id.clone(),
                token: run.token,
                attempt: run.attempt,
                started_at: now,
                finished_at: now,
                finish: Finish::Succeeded(json!(null)),
                logs: Vec::new(),
            }])
            .await
            .unwrap();
    }
    assert_eq!(order, ["urgent", "first", "low"]);
}

async fn a_debounced_run_takes_the_priority_of_the_event_it_runs_with(db: TestDb) {
    let store = Store::open(&db.url).await.unwrap();
    define(&store).await;
    let mut s = spec("digest", "doc.edited", 3);
    s.priority = Some(Priority::parse("event.payload.p").unwrap());
    s.debounce = Some(
        flare::model::Debounce::new(std::time::Duration::from_secs(5))
            .key("event.payload.doc")
            .check()
            .unwrap(),
    );
    store.job_define(s).await.unwrap();
    send(
        &store,
        "edit-1",
        "doc.edited",
        json!({"doc": "d", "p": 0}),
        T,
    )
    .await;
    // Folded into the window's run: due at T + 6 s, priority 120 from now on.
    send(
        &store,
        "edit-2",
        "doc.edited",
        json!({"doc": "d", "p": 120}),
        T + 1_000,
    )
    .await;
    send(&store, "plain", "audit.logged", json!({}), T + 2_000).await;
    assert_eq!(
        one_by_one(&store, &["digest", "audit"], T + 6_000).await,
        ["edit-2", "plain"]
    );
}

async fn a_priority_from_the_job_builder_is_checked_and_orders_runs(db: TestDb) {
    let clock = flare::ManualClock::new(T);
    let client = db.sender(&clock).await;
    let job = |id: &str, priority: &str| {
        Job::new(id, id, "1.0.0")
            .trigger(event_trigger("plan.changed"))
            .run(|_p: Value, _io: Io| async move { Ok(()) })
            .priority(priority)
    };
    for (bad, why) in [
        ("event.payload.(", "priority.run: not a CEL expression"),
        ("plan == 'enterprise'", "priority.run: unknown variable"),
    ] {
        let err = client.register_job(job("bad", bad)).await.unwrap_err();
        assert!(err.to_string().contains(why), "{err}");
    }
    let plan = "event.payload.plan == 'enterprise' ? 120 : 0";
    client.register_job(job("billing", plan)).await.unwrap();
    let jobs = client
        .store()
        .jobs_list(flare::model::ms_to_time(clock.now_ms()))
        .await
        .unwrap();
    let ids: Vec<&str> = jobs.iter().map(|j| j.job.id.as_str()).collect();
    assert_eq!(ids, ["billing"], "nothing stored of a refused job");
    assert_eq!(jobs[0].job.priority, Some(json!({ "run": plan })));

    client
        .send_event("plan.changed", &json!({"plan": "free"}))
        .await
        .unwrap();
    clock.advance(std::time::Duration::from_secs(60));
    client
        .send_event("plan.changed", &json!({"plan": "enterprise"}))
        .await
        .unwrap();
    let first = client
        .store()
        .runs_claim(claim_of(&["billing"], None, clock.now_ms(), 1))
        .await
        .unwrap();
    assert_eq!(first[0].payload["plan"], "enterprise");
}

backend_tests!(
    among_due_runs_the_higher_priority_is_taken_first,
    a_run_with_priority_120_due_60_s_later_is_taken_first,
    a_high_priority_run_not_yet_due_is_not_taken_early,
    priority_orders_the_queue_of_a_limited_job,
    a_debounced_run_takes_the_priority_of_the_event_it_runs_with,
    a_priority_from_the_job_builder_is_checked_and_orders_runs,
);
