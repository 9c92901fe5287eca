//! Behaviour suite: several nodes on one database. Each test opens the same database several times
//! (one `Store` per node) and races them on the chores that must happen exactly once: delivering
//! due events, rescuing expired leases, claiming runs, holding the leader lease. Runs on every
//! backend; the PostgreSQL-only checks (wake-ups through LISTEN/NOTIFY, the claim's plan under
//! stale statistics, a connection that is gone, a rescue racing a late completion) are at the end.

use std::collections::HashSet;
use std::time::Duration;

use flare::store::endpoints::{NewEndpoint, Protocol};
use flare::store::query::{EventQuery, RunQuery};
use flare::store::{Completion, Finish, NewEvent, Store};
use flare::{Clock, ManualClock, RunStatus};
use futures::future::join_all;
use serde_json::json;

use crate::backend_tests;
use crate::fixture::{claim_params, event, nodes, spec, store_with_ship, NODES};
use crate::support::{self, wait_for, Backend, TestDb};

async fn processes_starting_at_once_on_a_new_database_migrate_it_once(db: TestDb) {
    let opened = join_all((0..NODES).map(|_| Store::open(&db.url))).await;
    for o in &opened {
        assert!(o.is_ok(), "{:?}", o.as_ref().err());
    }
    let store = opened.into_iter().next().unwrap().unwrap();
    store
        .job_define(spec("ship", "order.placed", 3))
        .await
        .unwrap();
    let ins = store
        .event_insert(event("evt_1".into(), None, 1_000))
        .await
        .unwrap();
    assert_eq!(ins.event.run_ids.len(), 1);
}

async fn the_leader_lease_is_taken_over_only_after_it_expires(db: TestDb) {
    let clock = ManualClock::new(1_000_000);
    let (a, b) = (
        Store::open(&db.url).await.unwrap(),
        Store::open(&db.url).await.unwrap(),
    );
    let ttl = 10_000;
    assert!(a
        .leader_acquire("maintenance", "node-a", clock.now_ms(), ttl)
        .await
        .unwrap());
    assert!(!b
        .leader_acquire("maintenance", "node-b", clock.now_ms(), ttl)
        .await
        .unwrap());
    // The holder renews; the other still cannot take it just before the renewed expiry.
    clock.advance(Duration::from_millis(9_000));
    assert!(a
        .leader_acquire("maintenance", "node-a", clock.now_ms(), ttl)
        .await
        .unwrap());
    clock.advance(Duration::from_millis(9_999));
    assert!(!b
        .leader_acquire("maintenance", "node-b", clock.now_ms(), ttl)
        .await
        .unwrap());
    // Another lease name is independent.
    assert!(b
        .leader_acquire("other", "node-b", clock.now_ms(), ttl)
        .await
        .unwrap());
    // The holder stopped renewing: at expiry the other node takes over, and the old one is out.
    clock.advance(Duration::from_millis(1));
    assert!(b
        .leader_acquire("maintenance", "node-b", clock.now_ms(), ttl)
        .await
        .unwrap());
    assert!(!a
        .leader_acquire("maintenance", "node-a", clock.now_ms(), ttl)
        .await
        .unwrap());
    // Releasing by a non-holder does nothing; by the holder frees it at once.
    a.leader_release("maintenance", "node-a").await.unwrap();
    assert!(!a
        .leader_acquire("maintenance", "node-a", clock.now_ms(), ttl)
        .await
        .unwrap());
    b.leader_release("maintenance", "node-b").await.unwrap();
    assert!(a
        .leader_acquire("maintenance", "node-a", clock.now_ms(), ttl)
        .await
        .unwrap());
}

async fn racing_nodes_all_acquire_a_free_lease_but_one_wins(db: TestDb) {
    let stores = nodes(&db).await;
    let won = join_all(stores.iter().enumerate().map(|(i, s)| async move {
        s.leader_acquire("maintenance", &format!("node-{i}"), 5_000, 1_000)
            .await
            .unwrap()
    }))
    .await;
    assert_eq!(won.iter().filter(|w| **w).count(), 1, "{won:?}");
}

async fn due_events_are_delivered_exactly_once_by_racing_nodes(db: TestDb) {
    let stores = nodes(&db).await;
    stores[0]
        .job_define(spec("ship", "order.placed", 3))
        .await
        .unwrap();
    let now = 1_000_000;
    let n = 300;
    for i in 0..n {
        let ev = event(format!("evt_{i}"), Some(now + 1_000), now);
        stores[i % NODES].event_insert(ev).await.unwrap();
    }
    // Not due yet.
    assert_eq!(stores[1].events_deliver_due(now, 50).await.unwrap(), 0);
    let delivered = join_all(stores.iter().map(|s| async move {
        let mut total = 0;
        loop {
            let k = s.events_deliver_due(now + 2_000, 25).await.unwrap();
            if k == 0 {
                return total;
            }
            total += k;
        }
    }))
    .await;
    assert_eq!(delivered.iter().sum::<usize>(), n, "{delivered:?}");
    let counts = stores[0].run_counts().await.unwrap();
    assert_eq!(counts.get(&RunStatus::Queued).copied(), Some(n as u64));
    for i in [0, n / 2, n - 1] {
        let e = stores[2]
            .event_get(&format!("evt_{i}"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(e.run_ids.len(), 1, "one run per job and event");
        assert!(e.delivered_at.is_some());
    }
}

async fn racing_claims_never_hand_out_a_run_twice(db: TestDb) {
    let stores = nodes(&db).await;
    stores[0]
        .job_define(spec("ship", "order.placed", 3))
        .await
        .unwrap();
    let now = 1_000_000;
    let n = 400;
    let events: Vec<NewEvent> = (0..n)
        .map(|i| event(format!("evt_{i}"), None, now))
        .collect();
    stores[0].event_insert_many(events).await.unwrap();
    let claimed = join_all(stores.iter().map(|s| async move {
        let mut mine = Vec::new();
        loop {
            let params = claim_params("ship", None, now, now + 30_000, 16);
            let runs = s.runs_claim(params).await.unwrap();
            if runs.is_empty() {
                return mine;
            }
            assert!(runs
                .iter()
                .all(|r| r.attempt == 1 && r.payload == json!({"n": 1})));
            mine.extend(runs.into_iter().map(|r| r.id));
        }
    }))
    .await;
    let all: Vec<&String> = claimed.iter().flatten().collect();
    let unique: HashSet<&String> = all.iter().copied().collect();
    assert_eq!(all.len(), n, "every run claimed");
    assert_eq!(unique.len(), n, "no run claimed twice");
}

async fn expired_leases_are_rescued_exactly_once_by_racing_nodes(db: TestDb) {
    let stores = nodes(&db).await;
    stores[0]
        .job_define(spec("ship", "order.placed", 3))
        .await
        .unwrap();
    let now = 1_000_000;
    let n = 120;
    let events: Vec<NewEvent> = (0..n)
        .map(|i| event(format!("evt_{i}"), None, now))
        .collect();
    stores[0].event_insert_many(events).await.unwrap();
    let claimed = stores[0]
        .runs_claim(claim_params("ship", None, now, now + 1_000, n))
        .await
        .unwrap();
    assert_eq!(claimed.len(), n);
    // Leases still valid: nothing to rescue.
    assert_eq!(stores[1].runs_rescue(now + 999).await.unwrap(), 0);
    let rescued = join_all(stores.iter().map(|s| async move {
        let mut total = 0;
        loop {
            let k = s.runs_rescue(now + 5_000).await.unwrap();
            if k == 0 {
                return total;
            }
            total += k;
        }
    }))
    .await;
    assert_eq!(rescued.iter().sum::<usize>(), n, "{rescued:?}");
    let detail = stores[3].run_detail(&claimed[0].id).await.unwrap().unwrap();
    assert_eq!(detail.run.status, RunStatus::Queued);
    assert_eq!(detail.attempts.len(), 1, "one lost attempt recorded");
    assert_eq!(detail.attempts[0].outcome, "lost");
}

async fn with_storage_down_claims_and_chores_fail_and_change_nothing(db: TestDb) {
    let store = store_with_ship(&db.url).await;
    let now = 1_000_000;
    let events: Vec<NewEvent> = (0..5)
        .map(|i| event(format!("evt_{i}"), None, now))
        .collect();
    store.event_insert_many(events).await.unwrap();
    let claim = || claim_params("ship", None, now, now + 1_000, 10);
    store.health_fail_writes(true).await.unwrap();
    let e = store.runs_claim(claim()).await.expect_err("claim refused");
    assert!(e.is_unavailable(), "{e}");
    let e = store
        .leader_acquire("maintenance", "node-a", now, 1_000)
        .await
        .expect_err("lease refused");
    assert!(e.is_unavailable(), "{e}");
    assert!(store.runs_rescue(now + 5_000).await.is_err());
    store.health_fail_writes(false).await.unwrap();
    let counts = store.run_counts().await.unwrap();
    assert_eq!(
        counts.get(&RunStatus::Queued).copied(),
        Some(5),
        "nothing was claimed"
    );
    assert_eq!(store.runs_claim(claim()).await.unwrap().len(), 5);
    assert!(store
        .leader_acquire("maintenance", "node-a", now, 1_000)
        .await
        .unwrap());
}

async fn racing_inserts_of_the_same_ids_in_any_order_never_fail(db: TestDb) {
    let stores = nodes(&db).await;
    stores[0]
        .job_define(spec("ship", "order.placed", 3))
        .await
        .unwrap();
    let n = 200;
    for round in 0..3 {
        let results = join_all(stores.iter().enumerate().map(|(k, s)| async move {
            // Each node sends the same ids in another order (reversed, rotated).
            let mut ids: Vec<usize> = (0..n).collect();
            if k % 2 == 1 {
                ids.reverse();
            }
            ids.rotate_left(k * 37 % n);
            let events = ids
                .into_iter()
                .map(|i| event(format!("evt_{round}_{i}"), None, 1_000))
                .collect();
            s.event_insert_many(events).await
        }))
        .await;
        let mut created = 0;
        for r in results {
            let inserted = r.expect("no deadlock, no conflict error");
            assert_eq!(inserted.len(), n);
            created += inserted.iter().filter(|i| i.created).count();
        }
        assert_eq!(created, n, "each id created once");
    }
    let counts = stores[0].run_counts().await.unwrap();
    assert_eq!(counts.get(&RunStatus::Queued).copied(), Some(3 * n as u64));
}

/// The ids of the runs listed with `status`.
async fn listed(store: &Store, status: RunStatus) -> Vec<String> {
    let q = RunQuery {
        status: Some(status),
        ..RunQuery::default()
    };
    let page = store.runs_list(q).await.unwrap();
    page.items.into_iter().map(|r| r.run.id).collect()
}

/// A claimed run reads as running, with its attempt, start and node, in every read (detail, the
/// run list and its filters, counts, the event's runs) until it finishes, and keeps them after.
async fn a_claimed_run_reads_as_running_everywhere_until_it_finishes(db: TestDb) {
    let store = store_with_ship(&db.url).await;
    let now = 1_000_000;
    store
        .event_insert_many(vec![event("evt_run".into(), None, now)])
        .await
        .unwrap();
    let claimed = store
        .runs_claim(claim_params(
            "ship",
            Some("node-a"),
            now + 5,
            now + 30_000,
            1,
        ))
        .await
        .unwrap();
    let run = &claimed[0];
    assert_eq!(run.attempt, 1);

    let detail = store.run_detail(&run.id).await.unwrap().unwrap().run;
    assert_eq!(detail.status, RunStatus::Running);
    assert_eq!(detail.attempt, 1);
    assert_eq!(detail.node.as_deref(), Some("node-a"));
    assert_eq!(
        detail.started_at.map(|t| t.timestamp_millis()),
        Some(now + 5)
    );
    assert_eq!(listed(&store, RunStatus::Running).await, [run.id.as_str()]);
    assert!(listed(&store, RunStatus::Queued).await.is_empty());
    let counts = store.run_counts().await.unwrap();
    assert_eq!(counts.get(&RunStatus::Running), Some(&1));
    assert_eq!(counts.get(&RunStatus::Queued), None);
    let events = store.events_list(EventQuery::default()).await.unwrap();
    assert_eq!(events.items[0].run_counts.running, 1);
    let event = store.event_detail("evt_run").await.unwrap().unwrap();
    assert_eq!(event.runs[0].status, RunStatus::Running);
    // (A running run can be cancelled now: `engine::control` covers it.)

    let held = store
        .runs_complete(vec![Completion {
            run_id: run.id.clone(),
            job_id: run.job_id.clone(),
            token: run.token,
            attempt: run.attempt,
            started_at: run.started_at,
            finished_at: now + 20,
            finish: Finish::Succeeded(json!({"ok": true})),
            logs: Vec::new(),
        }])
        .await
        .unwrap();
    assert_eq!(held, [true]);
    let detail = store.run_detail(&run.id).await.unwrap().unwrap().run;
    assert_eq!(detail.status, RunStatus::Succeeded);
    assert_eq!(detail.attempt, 1);
    assert_eq!(detail.node.as_deref(), Some("node-a"));
    assert_eq!(
        detail.started_at.map(|t| t.timestamp_millis()),
        Some(now + 5)
    );
    assert_eq!(
        listed(&store, RunStatus::Succeeded).await,
        [run.id.as_str()]
    );
    assert!(listed(&store, RunStatus::Running).await.is_empty());
    let counts = store.run_counts().await.unwrap();
    assert_eq!(counts.get(&RunStatus::Running), None);
    assert_eq!(counts.get(&RunStatus::Succeeded), Some(&1));
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL only.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_an_insert_on_one_node_wakes_the_workers_of_another() {
    let Some(db) = TestDb::new_or_skip(Backend::Postgres).await else {
        return;
    };
    let (sender, worker) = (
        store_with_ship(&db.url).await,
        Store::open(&db.url).await.unwrap(),
    );
    let wake = std::sync::Arc::clone(worker.work_notify());
    // Let the listener connect (it signals once when it starts listening), then drain that.
    tokio::time::timeout(Duration::from_secs(10), wake.notified())
        .await
        .expect("the listener started");
    let woken = tokio::spawn(async move {
        tokio::time::timeout(Duration::from_secs(10), wake.notified())
            .await
            .is_ok()
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    sender
        .event_insert(event("evt_1".into(), None, 1_000))
        .await
        .unwrap();
    assert!(
        woken.await.unwrap(),
        "NOTIFY reached the other node's workers"
    );
}

/// Entries read so far (`idx_tup_read`) of the queue's and the schedule's partial indexes
/// (`run_queue_due`, `events_due`), once each has been scanned at least `scans` times in the
/// statistics. A backend that sent its statistics less than a second before holds the next ones
/// until it has been idle for 10 s (PostgreSQL's `PGSTAT_IDLE_INTERVAL`), hence the 30 s allowed.
async fn due_index_reads(pg: &tokio_postgres::Client, scans: [i64; 2]) -> ([i64; 2], [i64; 2]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let rows = pg
            .query(
                "SELECT idx_scan, idx_tup_read FROM pg_stat_user_indexes \
                 WHERE indexrelname IN ('run_queue_due', 'events_due') ORDER BY indexrelname DESC",
                &[],
            )
            .await
            .unwrap();
        let seen = [rows[0].get::<_, i64>(0), rows[1].get::<_, i64>(0)];
        if seen[0] >= scans[0] && seen[1] >= scans[1] {
            return (seen, [rows[0].get(1), rows[1].get(1)]);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the index scans never reached pg_stat_user_indexes: {seen:?}, waiting for {scans:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A burst of work queued and scheduled while the statistics still say the queue and the
/// schedule are empty (autovacuum has not analysed them yet): a new node's first claim takes the
/// oldest due runs by walking the queue's index and stopping at its batch, its delivery of due
/// events does the same on the schedule's, and its look at the next due run or event stops at the
/// first. Left to the statistics, PostgreSQL's plans read every queued run (or scheduled event)
/// through the index and sorted them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_claim_reads_its_batch_not_the_queue_when_statistics_are_stale() {
    let Some(db) = TestDb::new_or_skip(Backend::Postgres).await else {
        return;
    };
    let sender = store_with_ship(&db.url).await;
    let pg = db.pg().await;
    pg.batch_execute(
        "ALTER TABLE run_queue SET (autovacuum_enabled = false); \
         ALTER TABLE events SET (autovacuum_enabled = false); ANALYZE run_queue, events;",
    )
    .await
    .unwrap();
    let n = 3_000;
    let now = 1_000_000;
    let later = now + n;
    let events: Vec<NewEvent> = (0..n)
        .map(|i| event(format!("evt_{i:05}"), None, now + i))
        .chain((0..n).map(|i| event(format!("sched_{i:05}"), Some(later + 1 + i), now)))
        .collect();
    for chunk in events.chunks(500) {
        sender.event_insert_many(chunk.to_vec()).await.unwrap();
    }
    let (scans, before) = due_index_reads(&pg, [0, 0]).await;

    let node = Store::open(&db.url).await.unwrap();
    let runs = node
        .runs_claim(claim_params("ship", Some("n1"), later, later + 30_000, 10))
        .await
        .unwrap();
    let events_of: Vec<&str> = runs.iter().map(|r| r.event_id.as_str()).collect();
    let oldest: Vec<String> = (0..10).map(|i| format!("evt_{i:05}")).collect();
    assert_eq!(events_of, oldest, "the oldest due runs, in due order");
    // An idle worker's look at when the next run or event is due.
    assert_eq!(
        node.runs_next_due(vec!["ship".into()]).await.unwrap(),
        Some(now + 10),
        "the next due run is the oldest one not claimed"
    );
    let far = later + 2 * n;
    assert_eq!(node.events_deliver_due(far, 10).await.unwrap(), 10);
    let delivered: Vec<String> = pg
        .query(
            "SELECT id FROM events WHERE id LIKE 'sched_%' AND delivered_at IS NOT NULL ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let first: Vec<String> = (0..10).map(|i| format!("sched_{i:05}")).collect();
    assert_eq!(delivered, first, "the events due first are delivered first");

    let (_, after) = due_index_reads(&pg, [scans[0] + 2, scans[1] + 2]).await;
    let read = [after[0] - before[0], after[1] - before[1]];
    assert!(
        read[0] < 100 && read[1] < 100,
        "a claim of 10 runs, a look at the next due run and event and a delivery of 10 due events \
         read {} entries of the queue's index ({n} runs queued) and {} of the schedule's ({n} \
         events scheduled)",
        read[0],
        read[1]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_without_listen_the_store_still_works_by_polling() {
    let Some(db) = TestDb::new_or_skip(Backend::Postgres).await else {
        return;
    };
    let url = format!("{}?flare_listen=off", db.url);
    let store = store_with_ship(&url).await;
    assert!(format!("{store:?}").contains("listen: false"), "{store:?}");
    let ins = store
        .event_insert(event("evt_1".into(), None, 1_000))
        .await
        .unwrap();
    assert_eq!(ins.event.run_ids.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_connection_that_is_gone_is_an_unavailable_error_and_the_pool_recovers() {
    let Some(db) = TestDb::new_or_skip(Backend::Postgres).await else {
        return;
    };
    // Nothing listens on port 1: opening fails as "unavailable", with the cause kept.
    let err = Store::open("postgres://postgres@127.0.0.1:1/flare")
        .await
        .expect_err("no server");
    assert!(err.is_unavailable(), "{err}");
    assert!(std::error::Error::source(&err).is_some());

    let store = Store::open(&db.url).await.unwrap();
    store.health_read().await.unwrap();
    let name = db.url.rsplit('/').next().unwrap().to_string();
    let (client, conn) = tokio_postgres::connect(&support::pg_admin_url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
            &[&name],
        )
        .await
        .unwrap();
    // The first use may meet a dead connection: then it is an "unavailable" error, never a panic
    // or a request error. The pool then replaces the connections.
    if let Err(e) = store.run_counts().await {
        assert!(e.is_unavailable(), "{e}");
    }
    wait_for("the pool to reconnect", || async {
        store.health_read().await.ok()
    })
    .await;
}

/// The rescuer skips an expired run whose queue row a late completion holds (every writer locks
/// queue rows before run rows), instead of waiting for it or deadlocking with it; once that
/// transaction is over, the run is rescued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_rescue_racing_a_late_completion_skips_that_run() {
    let Some(db) = TestDb::new_or_skip(Backend::Postgres).await else {
        return;
    };
    let store = store_with_ship(&db.url).await;
    let now = 1_000_000;
    store
        .event_insert_many(vec![event("evt_late".into(), None, now)])
        .await
        .unwrap();
    let claimed = store
        .runs_claim(claim_params("ship", None, now, now + 1_000, 1))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    let mut pg = db.pg().await;
    let late = pg.transaction().await.unwrap();
    late.execute(
        "DELETE FROM run_queue WHERE seq = (SELECT seq FROM runs WHERE id = $1)",
        &[&claimed[0].id],
    )
    .await
    .unwrap();
    let rescue = tokio::time::timeout(Duration::from_secs(5), store.runs_rescue(now + 5_000))
        .await
        .expect("the rescuer does not wait for the locked run");
    assert_eq!(rescue.unwrap(), 0);
    late.rollback().await.unwrap();
    assert_eq!(store.runs_rescue(now + 5_000).await.unwrap(), 1);
    let detail = store.run_detail(&claimed[0].id).await.unwrap().unwrap();
    assert_eq!(detail.run.status, RunStatus::Queued);
}

/// Whether the event `id` named `name`, inserted through `store` at `now`, started a run.
async fn starts(store: &Store, id: &str, name: &str, now: i64) -> bool {
    let mut e = event(id.into(), None, now);
    e.name = name.into();
    !store
        .event_insert(e)
        .await
        .unwrap()
        .event
        .run_ids
        .is_empty()
}

/// A job moved to another event by a node whose clock is behind another node's is noticed by
/// every node: the nodes reload the stored definitions when the job table's revision changes,
/// and the latest stamp of the table (the other job's, an hour ahead) did not change with it.
async fn a_job_redefined_by_a_node_whose_clock_is_behind_is_noticed_by_the_others(db: TestDb) {
    let t = 1_000_000;
    let (ahead, behind, third) = (
        Store::open(&db.url).await.unwrap(),
        Store::open(&db.url).await.unwrap(),
        Store::open(&db.url).await.unwrap(),
    );
    ahead
        .job_define_at(spec("audit", "order.placed", 3), t + 3_600_000)
        .await
        .unwrap();
    behind
        .job_define_at(spec("ship", "order.placed", 3), t)
        .await
        .unwrap();
    // The third node has loaded both.
    let ins = third
        .event_insert(event("evt_1".into(), None, t))
        .await
        .unwrap();
    assert_eq!(ins.event.run_ids.len(), 2);
    behind
        .job_define_at(spec("ship", "order.paid", 3), t + 1)
        .await
        .unwrap();
    assert!(
        starts(&third, "evt_2", "order.paid", t + 2).await,
        "the third node still fans out the old definition of ship"
    );
    let ins = third
        .event_insert(event("evt_3".into(), None, t + 3))
        .await
        .unwrap();
    assert_eq!(
        ins.event.run_ids.len(),
        1,
        "only audit is on order.placed now"
    );
}

/// Events sent at once through one node, just after another node defined their job, all start
/// it: each of the node's insert transactions checks the job table's revision, and one that
/// finds it changed while another is still reloading waits for that reload instead of fanning
/// out with the definitions from before (on PostgreSQL, four insert transactions of a node run at
/// once; one found the revision already marked seen and started nothing).
async fn events_sent_at_once_after_another_node_defined_their_job_all_start_it(db: TestDb) {
    let (definer, sender) = (
        Store::open(&db.url).await.unwrap(),
        Store::open(&db.url).await.unwrap(),
    );
    const SENDS: usize = 32;
    for round in 0..20 {
        let name = format!("round{round}.sent");
        definer
            .job_define(spec(&format!("job{round}"), &name, 1))
            .await
            .unwrap();
        let start = std::sync::Arc::new(tokio::sync::Barrier::new(SENDS));
        let sends = (0..SENDS).map(|i| {
            let (sender, start, name) =
                (sender.clone(), std::sync::Arc::clone(&start), name.clone());
            tokio::spawn(async move {
                start.wait().await;
                let id = format!("r{round}-{i}");
                let started = starts(&sender, &id, &name, 1_000).await;
                (id, started)
            })
        });
        for sent in join_all(sends).await {
            let (id, started) = sent.unwrap();
            assert!(
                started,
                "event {id} started no run of the job defined before it"
            );
        }
    }
}

/// An endpoint changed by a node whose clock is behind another endpoint's stamp changes the
/// endpoints' revision, by which every node decides to reload them (the latest stamp did not
/// change).
async fn an_endpoint_changed_by_a_node_whose_clock_is_behind_changes_the_revision(db: TestDb) {
    let store = Store::open(&db.url).await.unwrap();
    let endpoint = |id: &str, secret: &str, now: i64| NewEndpoint {
        id: id.into(),
        url: format!("http://127.0.0.1:9/{id}"),
        secret: secret.into(),
        protocol: Protocol::Flare,
        client_id: None,
        now,
    };
    let t = 1_000_000;
    store
        .endpoint_upsert(endpoint(
            "ep_ahead",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            t + 3_600_000,
        ))
        .await
        .unwrap();
    store
        .endpoint_upsert(endpoint(
            "ep_1",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            t,
        ))
        .await
        .unwrap();
    let before = store.endpoints_revision().await.unwrap();
    // Its secret rotated: every node must sign with the new one.
    store
        .endpoint_upsert(endpoint(
            "ep_1",
            "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
            t + 1,
        ))
        .await
        .unwrap();
    assert_ne!(store.endpoints_revision().await.unwrap(), before);
}

backend_tests!(
    events_sent_at_once_after_another_node_defined_their_job_all_start_it,
    a_job_redefined_by_a_node_whose_clock_is_behind_is_noticed_by_the_others,
    an_endpoint_changed_by_a_node_whose_clock_is_behind_changes_the_revision,
    racing_inserts_of_the_same_ids_in_any_order_never_fail,
    a_claimed_run_reads_as_running_everywhere_until_it_finishes,
    with_storage_down_claims_and_chores_fail_and_change_nothing,
    processes_starting_at_once_on_a_new_database_migrate_it_once,
    the_leader_lease_is_taken_over_only_after_it_expires,
    racing_nodes_all_acquire_a_free_lease_but_one_wins,
    due_events_are_delivered_exactly_once_by_racing_nodes,
    racing_claims_never_hand_out_a_run_twice,
    expired_leases_are_rescued_exactly_once_by_racing_nodes,
);
