//! PostgreSQL only: the per-name locks that order an event's insert against a wait being
//! registered for that name (`store/postgres/waits.rs`). The insert takes its names' shared
//! locks before it writes anything, so a transaction holding one exclusively (a run suspending
//! on a wait for that name) is never waited for by an insert that already holds rows others
//! need.

use std::time::Duration;

use flare::store::Store;

use crate::fixture::event;
use crate::support::{pg_admin, wait_for, Backend, TestDb};

/// An insert of `order.paid` while another transaction holds that name's lock exclusively: it
/// waits for the lock having written nothing (it has no transaction id yet), and goes on once the
/// lock is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_an_insert_takes_its_names_locks_before_it_writes() {
    let Some(db) = TestDb::new_or_skip(Backend::Postgres).await else {
        return;
    };
    let store = Store::open(&db.url).await.unwrap();
    let (pg, conn) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    pg.batch_execute("BEGIN; SELECT pg_advisory_xact_lock(27, hashtext('order.paid'))")
        .await
        .unwrap();
    let inserting = tokio::spawn({
        let store = store.clone();
        async move {
            let mut e = event("evt_paid".into(), None, 1_000);
            e.name = "order.paid".into();
            store.event_insert(e).await
        }
    });
    let admin = pg_admin().await.unwrap();
    let name = db.url.rsplit('/').next().unwrap().to_string();
    let waiter: i32 = wait_for("the insert to wait for the name's lock", || async {
        admin
            .query(
                "SELECT l.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
                 WHERE a.datname = $1 AND l.locktype = 'advisory' AND NOT l.granted",
                &[&name],
            )
            .await
            .unwrap()
            .first()
            .map(|r| r.get(0))
    })
    .await;
    // A transaction gets its id at its first write: the insert has none yet.
    let wrote: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_locks WHERE pid = $1 AND locktype = 'transactionid'",
            &[&waiter],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        wrote, 0,
        "the insert waits for the name's lock before writing anything"
    );
    pg.batch_execute("COMMIT").await.unwrap();
    let inserted = tokio::time::timeout(Duration::from_secs(10), inserting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(inserted.created);
}
