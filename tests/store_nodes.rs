//! Behaviour suite: several nodes on one database. Each test opens the same database several times
//! (one `Store` per node) and races them on the chores that must happen exactly once: delivering
//! due events, rescuing expired leases, claiming runs, holding the leader lease. Runs on every
//! backend; the PostgreSQL-only checks (wake-ups through LISTEN/NOTIFY, a connection that is
//! gone) are at the end.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashSet;
use std::time::Duration;

use flare::job::JobSpec;
use flare::store::query::{EventQuery, RunQuery, StatsQuery, StatsWindow};
use flare::store::{ClaimGroup, ClaimParams, Completion, Finish, NewEvent, Store};
use flare::{Clock, ManualClock, RetryPolicy, RunStatus};
use futures::future::join_all;
use serde_json::json;
use support::{wait_for, Backend, TestDb};

const NODES: usize = 4;

fn spec(id: &str, event: &str, max_attempts: u32) -> JobSpec {
    JobSpec {
        id: id.into(),
        name: id.into(),
        version: "1.0.0".into(),
        event: event.into(),
        filter: None,
        schedule: None,
        retry: RetryPolicy::default().max_attempts(max_attempts),
        timeout: Duration::from_secs(30),
        concurrency: None,
    }
}

fn event(id: String, deliver_at: Option<i64>, now: i64) -> NewEvent {
    NewEvent {
        id,
        name: "order.placed".into(),
        payload: json!({"n": 1}),
        context: None,
        source: "api".into(),
        parent_run_id: None,
        deliver_at,
        now,
    }
}

/// A claim of up to `limit` runs of `job`.
fn claim_params(
    job: &str,
    node: Option<&str>,
    now: i64,
    lease_until: i64,
    limit: usize,
) -> ClaimParams {
    ClaimParams {
        node: node.map(str::to_string),
        now,
        lease_until,
        groups: vec![ClaimGroup {
            jobs: vec![job.to_string()],
            limit,
        }],
    }
}

/// A store on `url` with the job `ship` (on `order.placed`, 3 attempts) defined.
async fn store_with_ship(url: &str) -> Store {
    let store = Store::open(url).await.expect("open");
    store
        .job_define(spec("ship", "order.placed", 3))
        .await
        .expect("define ship");
    store
}

async fn nodes(db: &TestDb) -> Vec<Store> {
    let mut stores = Vec::new();
    for _ in 0..NODES {
        stores.push(Store::open(&db.url).await.expect("open"));
    }
    stores
}

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

backend_tests!(
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
    let (pg, conn) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
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

/// A connection to `db` migrated as a version before migration `version` left it.
async fn migrated_before(db: &TestDb, version: i64) -> tokio_postgres::Client {
    let (pg, conn) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    pg.batch_execute(
        "CREATE TABLE flare_migrations (version bigint PRIMARY KEY, applied_at bigint NOT NULL)",
    )
    .await
    .unwrap();
    for (v, sql) in flare::store::postgres::MIGRATIONS
        .iter()
        .filter(|(v, _)| *v < version)
    {
        pg.batch_execute(sql).await.unwrap();
        pg.execute("INSERT INTO flare_migrations VALUES ($1, 0)", &[v])
            .await
            .unwrap();
    }
    pg
}

/// A database created by an earlier version (migrations before `0004_run_queue.sql`) with runs in
/// every state is upgraded in place: its queued runs are claimable, its running ones are rescued
/// when their lease expires, and its finished ones count in the success and failure rates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_an_upgraded_database_keeps_its_queue_and_its_counts() {
    let Some(db) = TestDb::new_or_skip(Backend::Postgres).await else {
        return;
    };
    let pg = migrated_before(&db, 4).await;
    let now = chrono::Utc::now().timestamp_millis();
    pg.execute(
        "INSERT INTO events (id, name, payload, source, timestamp, delivered_at) \
         VALUES ('evt_old', 'old.thing', '{}', 'api', $1, $1)",
        &[&now],
    )
    .await
    .unwrap();
    for (id, status, attempt, lease, finished) in [
        ("run_q", "queued", 0, None, None),
        ("run_r", "running", 1, Some(now - 1), None),
        ("run_s", "succeeded", 1, None, Some(now)),
        ("run_f", "failed", 3, None, Some(now)),
    ] {
        pg.execute(
            "INSERT INTO runs (id, event_id, job_id, job_version, status, attempt, max_attempts, \
               run_at, lease_until, lease_token, started_at, finished_at, created_at) \
             VALUES ($1, 'evt_old', 'old-job', '1', $2, $3, 3, $4, $5, 7, $4, $6, $4)",
            &[&id, &status, &attempt, &now, &lease, &finished],
        )
        .await
        .unwrap();
    }

    let store = Store::open(&db.url).await.unwrap();
    let stats = store
        .stats(StatsQuery {
            window: StatsWindow::Hour,
            now: chrono::DateTime::from_timestamp_millis(now).unwrap(),
        })
        .await
        .unwrap();
    assert_eq!((stats.runs.succeeded, stats.runs.failed), (1, 1));
    assert_eq!((stats.queue.ready, stats.queue.running), (1, 1));
    let claimed = store
        .runs_claim(claim_params("old-job", None, now, now + 30_000, 10))
        .await
        .unwrap();
    let ids: Vec<&str> = claimed.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["run_q"], "the queued run, not the running one");
    assert_eq!(
        store.runs_rescue(now).await.unwrap(),
        1,
        "the expired lease"
    );
    let rescued = store.run_detail("run_r").await.unwrap().unwrap();
    assert_eq!(rescued.run.status, RunStatus::Queued);
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
    let (mut pg, conn) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
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

/// A run running when the database is upgraded to keep leases on the queue
/// (`0005_lease_on_queue.sql`) still reads as running, and its worker's completion, fenced by
/// the token it was claimed with, still lands; any other token is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_run_running_across_the_upgrade_keeps_its_lease() {
    let Some(db) = TestDb::new_or_skip(Backend::Postgres).await else {
        return;
    };
    let pg = migrated_before(&db, 5).await;
    let now = chrono::Utc::now().timestamp_millis();
    pg.batch_execute(&format!(
        "INSERT INTO events (id, name, payload, source, timestamp, delivered_at) \
           VALUES ('evt_up', 'order.placed', '{{}}', 'api', {now}, {now}); \
         INSERT INTO runs (id, event_id, job_id, job_version, status, attempt, max_attempts, \
           run_at, lease_until, lease_token, started_at, created_at, node) \
           VALUES ('run_up', 'evt_up', 'ship', '1', 'running', 2, 3, {now}, {lease}, 7, {now}, {now}, 'old-node'); \
         INSERT INTO run_queue (seq, job_id, run_at, lease_until) \
           SELECT seq, job_id, run_at, lease_until FROM runs WHERE id = 'run_up';",
        lease = now + 60_000
    ))
    .await
    .unwrap();

    let store = Store::open(&db.url).await.unwrap();
    let run = store.run_detail("run_up").await.unwrap().unwrap().run;
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!((run.attempt, run.node.as_deref()), (2, Some("old-node")));
    assert_eq!(store.runs_rescue(now).await.unwrap(), 0, "the lease holds");
    let completion = |token| Completion {
        run_id: "run_up".into(),
        job_id: "ship".into(),
        token,
        attempt: 2,
        started_at: now,
        finished_at: now + 1,
        finish: Finish::Succeeded(json!(null)),
        logs: Vec::new(),
    };
    assert_eq!(
        store.runs_complete(vec![completion(8)]).await.unwrap(),
        [false]
    );
    assert_eq!(
        store.runs_complete(vec![completion(7)]).await.unwrap(),
        [true]
    );
    let run = store.run_detail("run_up").await.unwrap().unwrap().run;
    assert_eq!((run.status, run.attempt), (RunStatus::Succeeded, 2));
}
