//! PostgreSQL databases migrated from an earlier version while they hold work: the queue, the
//! counts and a running run's lease survive the upgrade.

use flare::store::query::{StatsQuery, StatsWindow};
use flare::store::{Completion, Finish, Store};
use flare::RunStatus;
use serde_json::json;

use crate::backend_tests;
use crate::fixture::claim_params;
use crate::support::{Backend, TestDb};

/// A connection to `db` migrated as a version before migration `version` left it.
async fn migrated_before(db: &TestDb, version: i64) -> tokio_postgres::Client {
    let pg = db.pg().await;
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

/// Records `version` in `db`'s `flare_migrations`, as a newer binary's migration would.
async fn record_migration(db: &TestDb, version: i64) {
    match db.backend {
        Backend::Sqlite => {
            let path = flare::store::sqlite::path_from_url(&db.url).unwrap();
            let conn = rusqlite::Connection::open(path).unwrap();
            conn.execute(
                "INSERT INTO flare_migrations (version, applied_at) VALUES (?1, 0)",
                [version],
            )
            .unwrap();
        }
        Backend::Postgres => {
            let pg = db.pg().await;
            pg.execute("INSERT INTO flare_migrations VALUES ($1, 0)", &[&version])
                .await
                .unwrap();
        }
    }
}

/// A database a newer Flare migrated (a version above this binary's last migration) is refused
/// at open with one line naming both versions, and nothing of it is used; the version this
/// binary knows itself (the highest, not the count: numbers have gaps) opens as before.
async fn a_database_migrated_by_a_newer_binary_is_refused(db: TestDb) {
    let known = match db.backend {
        Backend::Sqlite => flare::store::sqlite::last_migration(),
        Backend::Postgres => flare::store::postgres::last_migration(),
    };
    drop(Store::open(&db.url).await.unwrap());
    // Its own last version (and every gap below it) opens.
    Store::open(&db.url).await.unwrap();
    let newer = known + 1_000;
    record_migration(&db, newer).await;
    let err = Store::open(&db.url).await.unwrap_err();
    let message = err.to_string();
    assert!(
        matches!(err, flare::store::Error::SchemaTooNew { found, known: k } if found == newer && k == known),
        "{message}"
    );
    assert!(!message.contains('\n'), "one line: {message}");
    assert!(
        message.contains(&newer.to_string()) && message.contains(&known.to_string()),
        "{message}"
    );
}

backend_tests!(a_database_migrated_by_a_newer_binary_is_refused);
