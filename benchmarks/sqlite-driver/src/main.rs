//! rusqlite behind one writer thread vs sqlx (one connection driven by a writer task), on the same
//! group-commit workload as flare's write path: N concurrent senders, each inserting one event row
//! and one run row and waiting until that transaction is durable (WAL, `synchronous=FULL`). The
//! writer takes everything waiting (up to 4,096 sends) into one transaction.
//!
//! Prints one line per (driver, senders, repetition) and the medians.

use std::time::{Duration, Instant};

use sqlx::{Connection as _, SqliteConnection};
use tokio::sync::{mpsc, oneshot};

const SCHEMA: &str = "
CREATE TABLE events (seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, name TEXT NOT NULL,
  payload TEXT NOT NULL, timestamp INTEGER NOT NULL);
CREATE INDEX events_name ON events (name, seq);
CREATE TABLE runs (seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, event_id TEXT NOT NULL,
  job_id TEXT NOT NULL, status TEXT NOT NULL, run_at INTEGER NOT NULL);
CREATE INDEX runs_runnable ON runs (run_at, seq) WHERE status = 'queued';
CREATE INDEX runs_event ON runs (event_id);";
const INSERT_EVENT: &str =
    "INSERT INTO events (id, name, payload, timestamp) VALUES (?1, 'user.created', ?2, ?3)";
const INSERT_RUN: &str =
    "INSERT INTO runs (id, event_id, job_id, status, run_at) VALUES (?1, ?2, 'noop', 'queued', ?3)";
const PAYLOAD: &str = r#"{"userId":"u_1","email":"ada@example.com","name":"Ada"}"#;
const MAX_BATCH: usize = 4096;

struct Send {
    n: u64,
    done: oneshot::Sender<()>,
}

fn drain(rx: &mut mpsc::Receiver<Send>, first: Send) -> Vec<Send> {
    let mut batch = vec![first];
    while batch.len() < MAX_BATCH {
        match rx.try_recv() {
            Ok(s) => batch.push(s),
            Err(_) => break,
        }
    }
    batch
}

fn rusqlite_writer(path: std::path::PathBuf) -> mpsc::Sender<Send> {
    let (tx, mut rx) = mpsc::channel::<Send>(65_536);
    std::thread::spawn(move || {
        let conn = rusqlite::Connection::open(path).expect("open");
        conn.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;")
            .expect("pragmas");
        conn.execute_batch(SCHEMA).expect("schema");
        while let Some(first) = rx.blocking_recv() {
            let batch = drain(&mut rx, first);
            conn.execute_batch("BEGIN IMMEDIATE").expect("begin");
            {
                let mut ev = conn.prepare_cached(INSERT_EVENT).expect("prepare");
                let mut run = conn.prepare_cached(INSERT_RUN).expect("prepare");
                for s in &batch {
                    let id = format!("evt_{}", s.n);
                    ev.execute(rusqlite::params![id, PAYLOAD, s.n as i64])
                        .expect("insert");
                    run.execute(rusqlite::params![format!("run_{}", s.n), id, s.n as i64])
                        .expect("insert");
                }
            }
            conn.execute_batch("COMMIT").expect("commit");
            for s in batch {
                let _ = s.done.send(());
            }
        }
    });
    tx
}

async fn sqlx_writer(path: std::path::PathBuf) -> mpsc::Sender<Send> {
    let opts = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .synchronous(sqlx::sqlite::SqliteSynchronous::Full);
    let mut conn = SqliteConnection::connect_with(&opts).await.expect("open");
    sqlx::raw_sql(SCHEMA)
        .execute(&mut conn)
        .await
        .expect("schema");
    let (tx, mut rx) = mpsc::channel::<Send>(65_536);
    tokio::spawn(async move {
        while let Some(first) = rx.recv().await {
            let batch = drain(&mut rx, first);
            let mut t = conn.begin_with("BEGIN IMMEDIATE").await.expect("begin");
            for s in &batch {
                let id = format!("evt_{}", s.n);
                sqlx::query(INSERT_EVENT)
                    .bind(&id)
                    .bind(PAYLOAD)
                    .bind(s.n as i64)
                    .execute(&mut *t)
                    .await
                    .expect("insert");
                sqlx::query(INSERT_RUN)
                    .bind(format!("run_{}", s.n))
                    .bind(&id)
                    .bind(s.n as i64)
                    .execute(&mut *t)
                    .await
                    .expect("insert");
            }
            t.commit().await.expect("commit");
            for s in batch {
                let _ = s.done.send(());
            }
        }
    });
    tx
}

/// Sends for `secs` from `senders` tasks, one send in flight each; returns sends/s.
async fn drive(tx: mpsc::Sender<Send>, senders: u64, secs: f64) -> f64 {
    let stop = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for s in 0..senders {
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            let mut count = 0u64;
            while Instant::now() < stop {
                let (done, wait) = oneshot::channel();
                let n = s * 1_000_000_000 + count;
                tx.send(Send { n, done }).await.expect("writer alive");
                wait.await.expect("answered");
                count += 1;
            }
            count
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("sender");
    }
    total as f64 / start.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    let reps = 3;
    let secs = 5.0;
    for senders in [1u64, 64] {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for rep in 1..=reps {
            let dir = tempfile::tempdir().expect("tmp");
            let r = drive(rusqlite_writer(dir.path().join("r.db")), senders, secs).await;
            let dir2 = tempfile::tempdir().expect("tmp");
            let s = drive(sqlx_writer(dir2.path().join("s.db")).await, senders, secs).await;
            println!("senders {senders:>2} rep {rep}: rusqlite {r:>9.0}/s  sqlx {s:>9.0}/s");
            a.push(r);
            b.push(s);
        }
        let (r, s) = (median(a), median(b));
        println!(
            "senders {senders:>2} median: rusqlite {r:.0}/s, sqlx {s:.0}/s, rusqlite/sqlx = {:.2}x",
            r / s
        );
    }
}
