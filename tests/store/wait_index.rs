//! PostgreSQL only: an event of a name with waits looks its waiters up through the hash index
//! `run_waits_key` (`0055_wait_key.sql`), one bucket per value, whether the event writer inserts
//! it or the store's batch insert does, not by the B-tree `run_waits_match` (three pages of text
//! comparisons per value: ~10% of the rate of events that match nothing with 100,000 runs
//! waiting; BENCHMARKS.md) nor by a scan of the table; and with its keys padded to ten, so that
//! PostgreSQL keeps one plan for batches of one event (`padded` in `postgres/waits.rs`).

use std::time::Duration;

use flare::store::{NewEvent, Store};
use serde_json::json;

use crate::fixture::event;
use crate::support::{Backend, TestDb};

/// 5,000 runs wait for `order.paid` of their own order; 20 events matching none are sent one by
/// one (each a batch of the event writer), then 5 in one insert.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_events_look_their_waiters_up_by_the_hash_of_their_keys() {
    let Some(db) = TestDb::new_or_skip(Backend::Postgres).await else {
        return;
    };
    let store = Store::open(&db.url).await.unwrap();
    let pg = db.pg().await;
    pg.batch_execute(
        "INSERT INTO wait_paths (event_name, match_path) VALUES ('order.paid', 'payload.orderId'); \
         INSERT INTO run_waits (run_id, step_key, event_name, match_path, match_value, since, until) \
           SELECT 'run_' || i, 'paid', 'order.paid', 'payload.orderId', 'o_' || i, 0, 1e15 \
           FROM generate_series(1, 5000) i; \
         ANALYZE run_waits;",
    )
    .await
    .unwrap();
    let before = lookups(&pg, 0).await;
    let paid = |i: usize| NewEvent {
        name: "order.paid".into(),
        payload: json!({ "orderId": format!("none_{i}") }),
        ..event(format!("evt_{i}"), None, 1_000 + i as i64)
    };
    for i in 0..20 {
        let ins = store.event_insert(paid(i)).await.unwrap();
        assert!(ins.created && ins.event.run_ids.is_empty());
    }
    store
        .event_insert_many((20..25).map(paid).collect())
        .await
        .unwrap();
    // One statement per batch looks the waits up (the writer's first one apart from its
    // insert's pipeline: it has not read the name's match paths yet), each with its keys padded
    // to ten (PostgreSQL keeps the generic plan then), and each key is one scan of the hash
    // index in the statistics: 21 statements, 210 scans. A statement that scanned the table, or
    // sent its keys unpadded, would leave the count short.
    let after = lookups(&pg, before.key + 210).await;
    assert_eq!(
        (after.btree, after.table_rows),
        (before.btree, before.table_rows),
        "21 lookups of 25 values among 5,000 waits: none by the B-tree, no row of the table read \
         by a scan"
    );
    let waiting: i64 = pg
        .query_one("SELECT count(*) FROM run_waits", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(waiting, 5_000, "events that match nothing resume nothing");
}

/// How `run_waits` was read so far: scans of `run_waits_match` and of `run_waits_key`, and rows
/// read by scans of the table (not its scans: the migrations' index builds scanned it, empty, and
/// their connection reports that whenever it next flushes its statistics).
#[derive(Debug, Clone, Copy)]
struct Lookups {
    btree: i64,
    key: i64,
    table_rows: i64,
}

/// [`Lookups`], once `run_waits_key` has been scanned at least `key` times in the statistics. A
/// backend that sent its statistics less than a second before holds the next ones until it has
/// been idle for 10 s (PostgreSQL's `PGSTAT_IDLE_INTERVAL`), hence the 30 s allowed.
async fn lookups(pg: &tokio_postgres::Client, key: i64) -> Lookups {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let r = pg
            .query_one(
                "SELECT (SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = 'run_waits_match'), \
                   (SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = 'run_waits_key'), \
                   (SELECT seq_tup_read FROM pg_stat_user_tables WHERE relname = 'run_waits')",
                &[],
            )
            .await
            .unwrap();
        let seen = Lookups {
            btree: r.get(0),
            key: r.get(1),
            table_rows: r.get(2),
        };
        if seen.key >= key {
            return seen;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "run_waits_key was not scanned {key} times: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
