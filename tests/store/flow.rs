//! Behaviour suite: concurrency limits across nodes (`model::flow`, issue 26). Several `Store`s
//! on one database claim runs of limited jobs through their slots: no key, job or group is ever
//! over its limit, a slot freed (a completion, a wait, a lease that expired and was rescued) is
//! used by the next claim, and a key holding a backlog does not hold back the other keys. On
//! PostgreSQL only (at the end): a run suspending on a wait wakes the other nodes' workers.

use std::collections::HashMap;

use flare::model::flow::Concurrency;
use flare::model::EventWait;
use flare::store::{ClaimGroup, ClaimParams, ClaimedRun, Completion, Finish, NewEvent, Store};
use flare::{ConcurrencyLimit, RunStatus};
use futures::future::join_all;
use serde_json::json;

use crate::backend_tests;
use crate::fixture::{completion, nodes, spec};
use crate::support::TestDb;

/// A job `send` on `msg.sent` limited by `limits`.
async fn define(store: &Store, limits: &[ConcurrencyLimit]) -> Concurrency {
    let mut s = spec("send", "msg.sent", 3);
    s.concurrency = Concurrency::new(limits).unwrap();
    let c = s.concurrency.clone();
    store.job_define(s).await.unwrap();
    c
}

fn claim(c: &Concurrency, now: i64, limit: usize, node: &str) -> ClaimParams {
    ClaimParams {
        node: Some(node.into()),
        now,
        lease_until: now + 30_000,
        groups: vec![ClaimGroup {
            jobs: vec!["send".into()],
            limit,
            flow: Some(flare::store::FlowGroup {
                second_slot: c.second_slot("send").map(|(s, _)| s),
            }),
        }],
    }
}

async fn send(store: &Store, n: usize, customer: &str, now: i64) {
    for i in 0..n {
        let payload = json!({"customer": customer, "i": i});
        insert(
            store,
            format!("evt_{customer}_{i}_{now}"),
            "msg.sent",
            payload,
            now,
        )
        .await;
    }
}

/// Inserts event `id` named `name` with `payload` at `now`.
async fn insert(store: &Store, id: String, name: &str, payload: serde_json::Value, now: i64) {
    store
        .event_insert(NewEvent {
            id,
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

fn customers(runs: &[ClaimedRun]) -> HashMap<String, usize> {
    let mut by = HashMap::new();
    for r in runs {
        *by.entry(r.payload["customer"].as_str().unwrap_or("?").to_string())
            .or_default() += 1;
    }
    by
}

async fn per_key_and_group_limits_hold_across_nodes_racing_to_claim(db: TestDb) {
    let stores = nodes(&db).await;
    let c = define(
        &stores[0],
        &[
            ConcurrencyLimit::key(1, "event.payload.customer"),
            ConcurrencyLimit::group(3, "mail-api"),
        ],
    )
    .await;
    for who in ["a", "b", "c", "d", "e"] {
        send(&stores[0], 4, who, 1_000).await;
    }
    // Every node claims as much as it may, at once: 3 in all (the group), each another key.
    let got: Vec<ClaimedRun> = join_all(
        stores
            .iter()
            .enumerate()
            .map(|(i, s)| s.runs_claim(claim(&c, 2_000, 10, &format!("n{i}")))),
    )
    .await
    .into_iter()
    .flat_map(Result::unwrap)
    .collect();
    assert_eq!(got.len(), 3, "the group's limit: {:?}", customers(&got));
    assert!(
        customers(&got).values().all(|n| *n == 1),
        "{:?}",
        customers(&got)
    );
    // Full: nothing more, from any node.
    for s in &stores {
        assert!(s
            .runs_claim(claim(&c, 2_001, 10, "x"))
            .await
            .unwrap()
            .is_empty());
    }
    // One finishes: its slot is taken by the next claim, by a key not running.
    stores[1]
        .runs_complete(vec![completion(
            &got[0],
            2_100,
            Finish::Succeeded(json!(1)),
        )])
        .await
        .unwrap();
    let next = stores[2]
        .runs_claim(claim(&c, 2_200, 10, "n2"))
        .await
        .unwrap();
    assert_eq!(next.len(), 1);
    let running: Vec<&str> = got[1..]
        .iter()
        .map(|r| r.payload["customer"].as_str().unwrap())
        .collect();
    let key = next[0].payload["customer"].as_str().unwrap();
    assert!(
        !running.contains(&key),
        "{key} was already running: {running:?}"
    );
    // Runs of one key start in the order they were created.
    let mut order: HashMap<String, Vec<u64>> = HashMap::new();
    let mut note = |runs: &[ClaimedRun]| {
        for r in runs {
            order
                .entry(r.payload["customer"].as_str().unwrap().to_string())
                .or_default()
                .push(r.payload["i"].as_u64().unwrap());
        }
    };
    note(&got);
    note(&next);
    let mut current = vec![got[1].clone(), got[2].clone(), next[0].clone()];
    for step in 0..40 {
        let at = 3_000 + step * 100;
        let finished: Vec<Completion> = current
            .iter()
            .map(|r| completion(r, at, Finish::Succeeded(json!(1))))
            .collect();
        stores[0].runs_complete(finished).await.unwrap();
        current = stores[step as usize % 4]
            .runs_claim(claim(&c, at + 1, 10, "n"))
            .await
            .unwrap();
        assert!(current.len() <= 3);
        assert!(customers(&current).values().all(|n| *n == 1));
        note(&current);
        if current.is_empty() {
            break;
        }
    }
    assert_eq!(order.len(), 5);
    for (key, seen) in order {
        assert_eq!(
            seen,
            [0, 1, 2, 3],
            "key {key}: every run once, in creation order"
        );
    }
}

async fn a_key_at_its_limit_does_not_hold_back_other_keys(db: TestDb) {
    let store = Store::open(&db.url).await.unwrap();
    let c = define(
        &store,
        &[ConcurrencyLimit::key(1, "event.payload.customer")],
    )
    .await;
    send(&store, 300, "busy", 1_000).await;
    send(&store, 1, "quiet", 1_001).await;
    let queued = store
        .runs_list(flare::store::RunQuery {
            status: Some(flare::RunStatus::Queued),
            limit: 500,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        queued.items.len(),
        301,
        "queued runs in slots' queues are listed"
    );
    let first = store.runs_claim(claim(&c, 2_000, 1, "n")).await.unwrap();
    assert_eq!(customers(&first), HashMap::from([("busy".to_string(), 1)]));
    // `busy` is at its limit with 299 behind it; a claim of one still finds `quiet` at once.
    let second = store.runs_claim(claim(&c, 2_001, 1, "n")).await.unwrap();
    assert_eq!(
        customers(&second),
        HashMap::from([("quiet".to_string(), 1)])
    );
    assert!(store
        .runs_claim(claim(&c, 2_002, 10, "n"))
        .await
        .unwrap()
        .is_empty());
    // A queued run of `busy` says what holds it; the running one says nothing.
    let held = queued
        .items
        .iter()
        .find(|r| r.run.id != first[0].id && r.run.id != second[0].id)
        .unwrap();
    let d = store.run_detail(&held.run.id).await.unwrap().unwrap();
    assert_eq!(
        d.waiting_for.as_deref(),
        Some("concurrency: 1 of 1 running for key busy")
    );
    let running = store.run_detail(&first[0].id).await.unwrap().unwrap();
    assert_eq!(running.waiting_for, None);
    let jobs = store
        .jobs_list(chrono::DateTime::from_timestamp_millis(3_000).unwrap())
        .await
        .unwrap();
    let send_job = jobs.iter().find(|j| j.job.id == "send").unwrap();
    assert_eq!((send_job.queued, send_job.running), (299, 2));
}

async fn a_waiting_run_holds_no_slot_and_a_whole_job_limit_counts_every_key(db: TestDb) {
    let store = Store::open(&db.url).await.unwrap();
    let c = define(
        &store,
        &[
            ConcurrencyLimit::key(2, "event.payload.customer"),
            ConcurrencyLimit::job(2),
        ],
    )
    .await;
    send(&store, 3, "a", 1_000).await;
    send(&store, 1, "b", 1_500).await;
    let got = store.runs_claim(claim(&c, 2_000, 10, "n")).await.unwrap();
    assert_eq!(got.len(), 2, "the job's limit of 2");
    assert_eq!(customers(&got), HashMap::from([("a".to_string(), 2)]));
    // One suspends on a wait until 10 s: it frees its slots, and another run takes them.
    let waiting = &got[0];
    store
        .runs_complete(vec![completion(
            waiting,
            2_100,
            Finish::Wait {
                key: "pause".into(),
                until: 10_000,
                since: 2_100,
                event: None,
            },
        )])
        .await
        .unwrap();
    let next = store.runs_claim(claim(&c, 2_200, 10, "n")).await.unwrap();
    assert_eq!(next.len(), 1);
    assert_ne!(next[0].id, waiting.id);
    // At 10 s the waiting run is due, but the job is at its limit: it waits for a slot.
    assert!(store
        .runs_claim(claim(&c, 10_000, 10, "n"))
        .await
        .unwrap()
        .is_empty());
    store
        .runs_complete(vec![completion(
            &next[0],
            10_100,
            Finish::Succeeded(json!(1)),
        )])
        .await
        .unwrap();
    // The freed slot goes to the run due first: `b`'s, due since 1.5 s, before the wait's 10 s.
    let b = store.runs_claim(claim(&c, 10_200, 1, "n")).await.unwrap();
    assert_eq!(customers(&b), HashMap::from([("b".to_string(), 1)]));
    store
        .runs_complete(vec![completion(&b[0], 10_300, Finish::Succeeded(json!(1)))])
        .await
        .unwrap();
    let resumed = store.runs_claim(claim(&c, 10_400, 1, "n")).await.unwrap();
    assert_eq!(resumed.len(), 1);
    assert_eq!(resumed[0].id, waiting.id);
}

async fn a_lost_lease_holds_its_slot_until_the_rescuer_returns_it(db: TestDb) {
    let store = Store::open(&db.url).await.unwrap();
    let c = define(
        &store,
        &[ConcurrencyLimit::key(1, "event.payload.customer")],
    )
    .await;
    send(&store, 2, "a", 1_000).await;
    // Its worker dies holding the run (lease until 32 s).
    let got = store
        .runs_claim(claim(&c, 2_000, 10, "dead"))
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert!(store
        .runs_claim(claim(&c, 20_000, 10, "n"))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        store.runs_rescue(20_000).await.unwrap(),
        0,
        "lease still valid"
    );
    assert!(store
        .runs_claim(claim(&c, 31_000, 10, "n"))
        .await
        .unwrap()
        .is_empty());
    // Past the lease the rescuer queues it again (due now) and the slot is free: the run due
    // first (the second, due since 1 s) takes it, then the rescued one.
    assert_eq!(store.runs_rescue(33_000).await.unwrap(), 1);
    let second = store.runs_claim(claim(&c, 33_001, 10, "n")).await.unwrap();
    assert_eq!(second.len(), 1);
    assert_ne!(second[0].id, got[0].id);
    store
        .runs_complete(vec![completion(
            &second[0],
            33_100,
            Finish::Succeeded(json!(1)),
        )])
        .await
        .unwrap();
    let again = store.runs_claim(claim(&c, 33_200, 10, "n")).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].id, got[0].id);
    assert_eq!(again[0].attempt, 2);
}

async fn a_key_that_does_not_evaluate_is_the_key_null(db: TestDb) {
    let store = Store::open(&db.url).await.unwrap();
    let c = define(
        &store,
        &[ConcurrencyLimit::key(1, "event.payload.customer")],
    )
    .await;
    for i in 0..2 {
        insert(
            &store,
            format!("evt_nokey_{i}"),
            "msg.sent",
            json!({"other": i}),
            1_000,
        )
        .await;
    }
    // Both runs share the key `null`: one at a time.
    assert_eq!(
        store
            .runs_claim(claim(&c, 2_000, 10, "n"))
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(store
        .runs_claim(claim(&c, 2_001, 10, "n"))
        .await
        .unwrap()
        .is_empty());
}

/// Runs inserted while another node claims: every run a claim leases is returned to that claim
/// (on PostgreSQL the claim's function saw runs committed after its statement began, and the
/// statement's read of them did not: such a run stayed leased and never ran).
async fn every_run_a_claim_leases_is_returned_to_it_while_runs_are_inserted(db: TestDb) {
    let stores = nodes(&db).await;
    let c = define(&stores[0], &[ConcurrencyLimit::job(1_000)]).await;
    const N: usize = 300;
    let inserter = stores[1].clone();
    let inserting = tokio::spawn(async move {
        for i in 0..N {
            send(&inserter, 1, &format!("c{i}"), 1_000).await;
        }
    });
    let mut returned = std::collections::HashSet::new();
    loop {
        let finished = inserting.is_finished();
        let got = stores[0]
            .runs_claim(claim(&c, 1_000, 50, "n"))
            .await
            .unwrap();
        // Every run is inserted and none is left to claim: a run leased but not returned is
        // lost.
        let done = finished && got.is_empty();
        returned.extend(got.into_iter().map(|r| r.id));
        if done {
            break;
        }
    }
    inserting.await.unwrap();
    assert_eq!(
        returned.len(),
        N,
        "every run inserted was returned by a claim"
    );
}

/// A claim of several groups (a limited job's, the plain runs of the others) takes at most the
/// largest group's limit in all: the claiming process's free room, which the groups share, so a
/// process never runs more than its `--concurrency` however many limited jobs it has.
async fn the_groups_of_a_claim_share_the_free_room(db: TestDb) {
    let store = Store::open(&db.url).await.unwrap();
    let c = define(
        &store,
        &[ConcurrencyLimit::key(10, "event.payload.customer")],
    )
    .await;
    store
        .job_define(spec("other", "msg.other", 3))
        .await
        .unwrap();
    send(&store, 5, "a", 1_000).await;
    for i in 0..5 {
        insert(
            &store,
            format!("evt_other_{i}"),
            "msg.other",
            json!({ "i": i }),
            1_000,
        )
        .await;
    }
    let mut p = claim(&c, 2_000, 3, "n");
    p.groups.push(ClaimGroup {
        jobs: vec!["other".into()],
        limit: 3,
        flow: None,
    });
    let first = store.runs_claim(p.clone()).await.unwrap();
    let jobs: Vec<&str> = first.iter().map(|r| r.job_id.as_str()).collect();
    assert_eq!(jobs, ["send"; 3], "the first group's runs, three in all");
    p.groups.reverse();
    let second = store.runs_claim(p).await.unwrap();
    let jobs: Vec<&str> = second.iter().map(|r| r.job_id.as_str()).collect();
    assert_eq!(jobs, ["other"; 3], "in the other order, the other group's");
}

/// A batch of completions is fenced attempt by attempt: two attempts of one run ending in the
/// same batch (the first worker's lease expired and the run was claimed again) write only the
/// current one, for successes and failures alike, and the slots the runs held are freed.
async fn a_batch_of_completions_is_fenced_attempt_by_attempt(db: TestDb) {
    let store = Store::open(&db.url).await.unwrap();
    let c = define(
        &store,
        &[ConcurrencyLimit::key(1, "event.payload.customer")],
    )
    .await;
    send(&store, 1, "a", 1_000).await;
    send(&store, 1, "b", 1_000).await;
    let dead = store
        .runs_claim(claim(&c, 2_000, 10, "dead"))
        .await
        .unwrap();
    assert_eq!(dead.len(), 2);
    assert_eq!(store.runs_rescue(33_000).await.unwrap(), 2);
    let live = store.runs_claim(claim(&c, 33_001, 10, "n")).await.unwrap();
    assert_eq!(live.len(), 2);
    let by_id = |runs: &[ClaimedRun], id: &str| runs.iter().find(|r| r.id == id).cloned().unwrap();
    let (a, b) = (dead[0].id.clone(), dead[1].id.clone());
    let held = store
        .runs_complete(vec![
            completion(&by_id(&dead, &a), 33_100, Finish::Succeeded(json!("dead"))),
            completion(&by_id(&live, &a), 33_100, Finish::Succeeded(json!("live"))),
            completion(&by_id(&dead, &b), 33_100, Finish::Failed("dead".into())),
            completion(&by_id(&live, &b), 33_100, Finish::Failed("boom".into())),
        ])
        .await
        .unwrap();
    assert_eq!(held, vec![false, true, false, true]);
    let a = store.run_detail(&a).await.unwrap().unwrap().run;
    assert_eq!(
        (a.status, a.output),
        (RunStatus::Succeeded, Some(json!("live")))
    );
    let b = store.run_detail(&b).await.unwrap().unwrap().run;
    assert_eq!(
        (b.status, b.error.as_deref()),
        (RunStatus::Failed, Some("boom"))
    );
    // Both keys' slots are free again.
    send(&store, 1, "a", 34_000).await;
    send(&store, 1, "b", 34_000).await;
    let next = store.runs_claim(claim(&c, 34_001, 10, "n")).await.unwrap();
    assert_eq!(next.len(), 2);
}

backend_tests!(
    per_key_and_group_limits_hold_across_nodes_racing_to_claim,
    a_key_at_its_limit_does_not_hold_back_other_keys,
    a_waiting_run_holds_no_slot_and_a_whole_job_limit_counts_every_key,
    a_lost_lease_holds_its_slot_until_the_rescuer_returns_it,
    a_key_that_does_not_evaluate_is_the_key_null,
    every_run_a_claim_leases_is_returned_to_it_while_runs_are_inserted,
    the_groups_of_a_claim_share_the_free_room,
    a_batch_of_completions_is_fenced_attempt_by_attempt,
);

// ---------------------------------------------------------------------------------------------
// PostgreSQL only.
// ---------------------------------------------------------------------------------------------

/// A run of a limited job that suspends on a wait (`event`: for an event, else a sleep) frees its
/// slot for every node: the other nodes' workers are told (`NOTIFY`), as by a completion, instead
/// of finding the slot free at their next poll while the run queued behind it waits.
async fn a_run_suspending_wakes_the_workers_of_other_nodes(event: Option<EventWait>) {
    use std::time::Duration;
    let Some(db) = crate::support::TestDb::new_or_skip(crate::support::Backend::Postgres).await
    else {
        return;
    };
    let (a, b) = (
        Store::open(&db.url).await.unwrap(),
        Store::open(&db.url).await.unwrap(),
    );
    let c = define(&a, &[ConcurrencyLimit::key(1, "event.payload.customer")]).await;
    send(&a, 2, "a", 1_000).await;
    let got = a.runs_claim(claim(&c, 2_000, 10, "a")).await.unwrap();
    assert_eq!(got.len(), 1, "the key's limit of 1");
    // The wake-ups so far (the listener's start, the inserts) are taken until none comes.
    let wake = std::sync::Arc::clone(b.work_notify());
    tokio::time::timeout(Duration::from_secs(10), wake.notified())
        .await
        .expect("the listener started");
    while tokio::time::timeout(Duration::from_millis(300), wake.notified())
        .await
        .is_ok()
    {}
    let woken = tokio::spawn(async move {
        tokio::time::timeout(Duration::from_secs(10), wake.notified())
            .await
            .is_ok()
    });
    a.runs_complete(vec![completion(
        &got[0],
        2_100,
        Finish::Wait {
            key: "pause".into(),
            until: 60_000,
            since: 2_100,
            event,
        },
    )])
    .await
    .unwrap();
    assert!(
        woken.await.unwrap(),
        "the freed slot's NOTIFY reached the other node's workers"
    );
    let next = b.runs_claim(claim(&c, 2_200, 10, "b")).await.unwrap();
    assert_eq!(next.len(), 1, "the other node takes the freed slot");
    assert_ne!(next[0].id, got[0].id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_run_sleeping_wakes_the_workers_of_other_nodes() {
    a_run_suspending_wakes_the_workers_of_other_nodes(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_run_waiting_for_an_event_wakes_the_workers_of_other_nodes() {
    let wait = EventWait::new(
        "msg.read",
        Some("payload.customer"),
        None,
        json!({"id": "evt_a_0_1000", "name": "msg.sent", "payload": {"customer": "a"}}),
    )
    .unwrap();
    a_run_suspending_wakes_the_workers_of_other_nodes(Some(wait)).await;
}
