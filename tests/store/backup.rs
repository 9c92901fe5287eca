//! Backups (issue 25): `flare backup` (`Store::backup`) copies a SQLite database while it is
//! written, and the copy holds every event acknowledged before the backup started, the ones
//! still only in the WAL included (which a plain `cp flare.db` misses). PostgreSQL points at
//! `pg_dump`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use flare::store::Store;
use flare::ManualClock;
use serde_json::json;

use crate::support::{Backend, TestDb};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_backup_taken_under_load_holds_every_acknowledged_event() {
    let db = TestDb::new(Backend::Sqlite).await;
    let clock = ManualClock::new(chrono::Utc::now().timestamp_millis());
    let client = db.sender(&clock).await;
    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let senders: Vec<_> = (0..4)
        .map(|s| {
            let (client, acked, stop) = (client.clone(), Arc::clone(&acked), Arc::clone(&stop));
            tokio::spawn(async move {
                let mut i = 0;
                while !stop.load(Ordering::SeqCst) {
                    let sent = client
                        .send_event("load.tick", &json!({"sender": s, "i": i}))
                        .await
                        .expect("sent");
                    acked.lock().unwrap().push(sent.id);
                    i += 1;
                }
            })
        })
        .collect();
    while acked.lock().unwrap().len() < 400 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let before: Vec<String> = acked.lock().unwrap().clone();
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("backup.db");
    Store::backup(&db.url, &dest).await.unwrap();
    stop.store(true, Ordering::SeqCst);
    for s in senders {
        s.await.unwrap();
    }
    let total = acked.lock().unwrap().len();

    // A second backup to the same file is refused: a backup never overwrites.
    let err = Store::backup(&db.url, &dest).await.unwrap_err();
    assert!(err.to_string().contains("exists"), "{err}");

    let copy = Store::open(&format!("sqlite://{}", dest.display()))
        .await
        .unwrap();
    let mut missing = Vec::new();
    for id in &before {
        if copy.event_detail(id).await.unwrap().is_none() {
            missing.push(id.clone());
        }
    }
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged events are missing from the backup (e.g. {:?}); {total} sent in all",
        missing.len(),
        before.len(),
        missing.first()
    );
    client.shutdown().await;
}

#[tokio::test]
async fn a_postgres_backup_points_at_pg_dump() {
    let err = Store::backup(
        "postgres://u@127.0.0.1/db",
        std::path::Path::new("/tmp/x.db"),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("pg_dump"), "{err}");
}

/// `statistics_refresh` (the benchmarks' settling after a seed) checkpoints a SQLite database's
/// WAL into the file and truncates it, keeping every event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_statistics_refresh_checkpoints_and_resets_the_wal() {
    let db = TestDb::new(Backend::Sqlite).await;
    let clock = ManualClock::new(chrono::Utc::now().timestamp_millis());
    let client = db.sender(&clock).await;
    let mut ids = Vec::new();
    for i in 0..50 {
        ids.push(
            client
                .send_event("wal.fill", &json!({ "i": i }))
                .await
                .unwrap()
                .id,
        );
    }
    let file = db.url.trim_start_matches("sqlite://").to_string();
    let wal = std::path::PathBuf::from(format!("{file}-wal"));
    let size = || std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    assert!(size() > 0, "the sends are in the WAL first");

    client.store().statistics_refresh().await.unwrap();
    assert_eq!(size(), 0, "the WAL is truncated");
    for id in &ids {
        assert!(
            client.store().event_detail(id).await.unwrap().is_some(),
            "{id} kept"
        );
    }
    client.shutdown().await;
}
