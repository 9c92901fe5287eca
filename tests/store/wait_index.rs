//! PostgreSQL only: an event of a name with waits looks its waiters up through the hash index
//! `run_waits_key` (`0055_wait_key.sql`), one bucket per value, whether the event writer inserts
//! it or the store's batch insert does, not by the B-tree `run_waits_match` (three pages of text
//! comparisons per value: ~10% of the rate of events that match nothing with 100,000 runs
//! waiting; BENCHMARKS.md) nor by a scan of the table; and with its keys padded to ten, so that
//! PostgreSQL keeps one plan for batches of one event (`padded` in `postgres/waits.rs`). An event
//! of a name with `cancel_on` keys looks the runs it cancels up the same way, through
//! `run_cancel_keys_key` (`0056_cancel_key.sql`).

use std::time::Duration;

use flare::store::{NewEvent, Store};
use serde_json::json;

use crate::fixture::event;
use crate::support::{Backend, TestDb};

/// A table of keys by (event name, match path, value), its B-tree on the three and its hash
/// index on them joined.
#[derive(Debug, Clone, Copy)]
struct Keyed {
    table: &'static str,
    btree: &'static str,
    hash: &'static str,
}

const WAITS: Keyed = Keyed {
    table: "run_waits",
    btree: "run_waits_match",
    hash: "run_waits_key",
};

const CANCEL_KEYS: Keyed = Keyed {
    table: "run_cancel_keys",
    btree: "run_cancel_keys_match",
    hash: "run_cancel_keys_key",
};

/// 5,000 runs wait for `order.paid` of their own order; 20 events matching none are sent one by
/// one (each a batch of the event writer), then 5 in one insert.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_events_look_their_waiters_up_by_the_hash_of_their_keys() {
    events_look_keys_up_by_hash(
        WAITS,
        "INSERT INTO wait_paths (event_name, match_path) VALUES ('order.paid', 'payload.orderId'); \
         INSERT INTO run_waits (run_id, step_key, event_name, match_path, match_value, since, until) \
           SELECT 'run_' || i, 'paid', 'order.paid', 'payload.orderId', 'o_' || i, 0, 1e15 \
           FROM generate_series(1, 5000) i;",
        "order.paid",
    )
    .await;
}

/// 5,000 runs are cancelled by `order.paid` of their own order (`cancel_on`); 20 events matching
/// none are sent one by one, then 5 in one insert. The runs exist (ended): with none, the planner
/// would start the lookup's join from the empty table of runs and never probe the keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_events_look_the_runs_they_cancel_up_by_the_hash_of_their_keys() {
    events_look_keys_up_by_hash(
        CANCEL_KEYS,
        "INSERT INTO cancel_paths (event_name, match_path) VALUES ('order.paid', 'payload.orderId'); \
         INSERT INTO runs (id, event_id, job_id, job_version, status, max_attempts, run_at, created_at) \
           SELECT 'run_' || i, 'evt_run_' || i, 'shipper', '1', 'succeeded', 1, 0, 0 \
           FROM generate_series(1, 5000) i; \
         ANALYZE runs; \
         INSERT INTO run_cancel_keys (run_id, n, event_name, match_path, match_value) \
           SELECT 'run_' || i, 0, 'order.paid', 'payload.orderId', 'o_' || i \
           FROM generate_series(1, 5000) i;",
        "order.paid",
    )
    .await;
}

/// Seeds `keyed` with `seed` (5,000 keys of `name` on `payload.orderId`), then sends 25 events of
/// `name` whose order no key holds, and checks the statistics: every lookup through the hash
/// index, none through the B-tree or a scan of the table, and the keys left as they were.
async fn events_look_keys_up_by_hash(keyed: Keyed, seed: &str, name: &'static str) {
    let Some(db) = TestDb::new_or_skip(Backend::Postgres).await else {
        return;
    };
    let store = Store::open(&db.url).await.unwrap();
    let pg = db.pg().await;
    pg.batch_execute(&format!("{seed} ANALYZE {};", keyed.table))
        .await
        .unwrap();
    let before = lookups(&pg, keyed, 0).await;
    let sent = |i: usize| NewEvent {
        name: name.into(),
        payload: json!({ "orderId": format!("none_{i}") }),
        ..event(format!("evt_{i}"), None, 1_000 + i as i64)
    };
    for i in 0..20 {
        let ins = store.event_insert(sent(i)).await.unwrap();
        assert!(ins.created && ins.event.run_ids.is_empty());
    }
    store
        .event_insert_many((20..25).map(sent).collect())
        .await
        .unwrap();
    // One statement per batch looks the keys up, each with its keys padded to ten (PostgreSQL
    // keeps the generic plan then), and each key is one scan of the hash index in the
    // statistics: 21 statements, 210 scans. A statement that scanned the table, or sent its keys
    // unpadded, would leave the count short.
    let after = lookups(&pg, keyed, before.hash + 210).await;
    assert_eq!(
        (after.btree, after.table_rows),
        (before.btree, before.table_rows),
        "21 lookups of 25 values among 5,000 keys of {}: none by the B-tree, no row of the table \
         read by a scan",
        keyed.table
    );
    let left: i64 = pg
        .query_one(&format!("SELECT count(*) FROM {}", keyed.table), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 5_000, "events that match nothing change nothing");
}

/// How a [`Keyed`] table was read so far: scans of its B-tree and of its hash index, and rows read
/// by scans of the table (not its scans: the migrations' index builds scanned it, empty, and their
/// connection reports that whenever it next flushes its statistics).
#[derive(Debug, Clone, Copy)]
struct Lookups {
    btree: i64,
    hash: i64,
    table_rows: i64,
}

/// [`Lookups`] of `keyed`, once its hash index has been scanned at least `hash` times in the
/// statistics. A backend that sent its statistics less than a second before holds the next ones
/// until it has been idle for 10 s (PostgreSQL's `PGSTAT_IDLE_INTERVAL`), hence the 30 s allowed.
async fn lookups(pg: &tokio_postgres::Client, keyed: Keyed, hash: i64) -> Lookups {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let r = pg
            .query_one(
                "SELECT (SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = $1), \
                   (SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = $2), \
                   (SELECT seq_tup_read FROM pg_stat_user_tables WHERE relname = $3)",
                &[&keyed.btree, &keyed.hash, &keyed.table],
            )
            .await
            .unwrap();
        let seen = Lookups {
            btree: r.get(0),
            hash: r.get(1),
            table_rows: r.get(2),
        };
        if seen.hash >= hash {
            return seen;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} was not scanned {hash} times: {seen:?}",
            keyed.hash
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
