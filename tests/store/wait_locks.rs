//! PostgreSQL only: the per-name locks that order an event's insert against a wait being
//! registered for that name (`store/postgres/waits.rs`). The insert takes its names' shared
//! locks before it writes anything, so a transaction holding one exclusively (a run suspending
//! on a wait for that name) is never waited for by an insert that already holds rows others
//! need. A cancel takes its locks before it writes, too: the invoked runs' name lock (a parent
//! suspending on its children holds it exclusively, then writes the parent's queue row) and the
//! run's lock as a parent (a completion ending one of its children holds it, then writes the
//! parent's queue row); holding that row while waiting for either lock would deadlock. A cancel
//! that PostgreSQL still picks as a deadlock's victim runs again.

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
    let pg = db.pg().await;
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
    // A transaction gets its id at its first write: the insert has none yet.
    let wrote = writes_of_the_waiter(&db, "the insert to wait for the name's lock").await;
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

/// A cancel while a parent suspends on its children: the suspension holds the lock of
/// `flare/job.invoked` exclusively and then writes the parent's queue row; the cancel takes that
/// lock (shared) before it removes the row, so it waits having written nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_cancel_takes_the_invoke_lock_before_it_writes() {
    a_cancel_waits_before_writing_while(|_| {
        "SELECT pg_advisory_xact_lock(27, hashtext('flare/job.invoked'))".to_string()
    })
    .await;
}

/// A cancel while a child of the run ends: the completion holds the run's lock as a parent
/// (class 28, `LOCK_PARENTS_SQL`), ends the child's queue row and then writes the parent's (the
/// fan-in); the cancel takes that lock before it removes the parent's row, and so waits having
/// written nothing instead of holding the row the completion needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_cancel_takes_the_run_s_parent_lock_before_it_writes() {
    a_cancel_waits_before_writing_while(|run| {
        format!("SELECT pg_advisory_xact_lock(28, hashtext('{run}'))")
    })
    .await;
}

/// Cancels a queued run while another transaction holds the lock `lock(run id)` takes: the
/// cancel waits for it having written nothing, then cancels the run.
async fn a_cancel_waits_before_writing_while(lock: impl Fn(&str) -> String) {
    let Some(db) = TestDb::new_or_skip(Backend::Postgres).await else {
        return;
    };
    let store = crate::fixture::store_with_ship(&db.url).await;
    let run = store
        .event_insert(event("evt_1".into(), None, 1_000))
        .await
        .unwrap()
        .event
        .run_ids[0]
        .clone();
    let pg = db.pg().await;
    pg.batch_execute(&format!("BEGIN; {}", lock(&run)))
        .await
        .unwrap();
    let cancelling = tokio::spawn({
        let store = store.clone();
        let run = run.clone();
        async move { store.run_cancel(&run, 2_000).await }
    });
    let wrote = writes_of_the_waiter(&db, "the cancel to wait for the lock").await;
    assert_eq!(
        wrote, 0,
        "the cancel waits for the lock before writing anything"
    );
    pg.batch_execute("COMMIT").await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), cancelling)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let d = store.run_detail(&run).await.unwrap().unwrap();
    assert_eq!(d.run.status, flare::RunStatus::Cancelled);
}

/// Waits until a session of `db` waits for an advisory lock (`what`), and returns how many
/// transaction ids it holds: 0 while it has written nothing (a transaction gets its id at its
/// first write).
async fn writes_of_the_waiter(db: &TestDb, what: &str) -> i64 {
    let admin = pg_admin().await.unwrap();
    let name = db.url.rsplit('/').next().unwrap().to_string();
    let waiter: i32 = wait_for(what, || async {
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
    admin
        .query_one(
            "SELECT count(*) FROM pg_locks WHERE pid = $1 AND locktype = 'transactionid'",
            &[&waiter],
        )
        .await
        .unwrap()
        .get(0)
}

/// A cancel that PostgreSQL rolls back as a deadlock's victim runs again. Another transaction
/// holds the run's row and then asks for the run's lock as a parent (class 28), which the cancel
/// holds while it waits for that row: a cycle. The cancel waited first, so its deadlock check
/// (`deadlock_timeout` after its wait began) finds the cycle and rolls it back; run again, it
/// waits for the lock and cancels the run once the other transaction commits, instead of
/// answering the operator with the deadlock. Should the machine stall for longer than
/// `deadlock_timeout` before the cycle closes, the other transaction is the victim instead; the
/// scenario is then made again on another run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_cancel_chosen_as_a_deadlock_s_victim_runs_again() {
    let Some(db) = TestDb::new_or_skip(Backend::Postgres).await else {
        return;
    };
    let store = crate::fixture::store_with_ship(&db.url).await;
    let pg = db.pg().await;
    let admin = pg_admin().await.unwrap();
    let name = db.url.rsplit('/').next().unwrap().to_string();
    for attempt in 0..3 {
        let run = store
            .event_insert(event(format!("evt_{attempt}"), None, 1_000))
            .await
            .unwrap()
            .event
            .run_ids[0]
            .clone();
        pg.batch_execute(&format!(
            "BEGIN; SELECT 1 FROM runs WHERE id = '{run}' FOR UPDATE"
        ))
        .await
        .unwrap();
        let cancelling = tokio::spawn({
            let (store, run) = (store.clone(), run.clone());
            async move { store.run_cancel(&run, 2_000).await }
        });
        // The cancel holds the run's class-28 lock and waits for the row.
        wait_for("the cancel to wait for the run's row", || async {
            admin
                .query(
                    "SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
                     WHERE a.datname = $1 AND l.locktype = 'transactionid' AND NOT l.granted",
                    &[&name],
                )
                .await
                .unwrap()
                .first()
                .map(|_| ())
        })
        .await;
        // Closes the cycle; granted once PostgreSQL has rolled the cancel back.
        let closed = pg
            .batch_execute(&format!(
                "SELECT pg_advisory_xact_lock(28, hashtext('{run}'))"
            ))
            .await;
        let victim_was_the_cancel = closed.is_ok();
        pg.batch_execute(if victim_was_the_cancel {
            "COMMIT"
        } else {
            "ROLLBACK"
        })
        .await
        .unwrap();
        tokio::time::timeout(Duration::from_secs(10), cancelling)
            .await
            .unwrap()
            .unwrap()
            .expect("the cancel ran again after the deadlock");
        let d = store.run_detail(&run).await.unwrap().unwrap();
        assert_eq!(d.run.status, flare::RunStatus::Cancelled);
        if victim_was_the_cancel {
            return;
        }
    }
    panic!("the cancel was never the deadlock's victim in 3 tries");
}
