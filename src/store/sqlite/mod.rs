//! The SQLite backend: embedded, one file, one writer thread.
//!
//! One writer thread owns the only writing connection. Callers hand it operations over a channel;
//! it takes every operation waiting (up to [`MAX_BATCH`]), runs each inside its own savepoint of one
//! `BEGIN IMMEDIATE` transaction, commits once (WAL, `synchronous=FULL`: durable), and only then
//! answers each caller. That is group commit: 64 concurrent senders cost one fsync, not 64. Reads
//! use a small pool of read-only connections on the blocking thread pool and never wait for the
//! writer.
//!
//! Mirrors `store/postgres/` file for file: `mod` (the store's handle, opening, migrations, health),
//! `writer` (the writer thread: every write as an operation in a batch, one commit per batch),
//! `rows` (decoding rows into the model), `events`, `runs`, `steps`, `jobs` (definitions and
//! schedules), `webhooks`, `endpoints`, `nodes` (node beats and leader leases) and `query` (lists
//! and statistics). Only SQLite has `rollups` (the per-minute counts each batch keeps) and
//! `search` (the payload search's FTS5 index, filled behind a watermark).

mod cancel;
mod cancel_on;
mod children;
mod debounce;
mod ended;
mod endpoints;
mod events;
mod flow;
mod held;
mod invoke;
mod jobs;
mod links;
mod nodes;
mod paths;
mod query;
mod rollups;
mod rows;
mod runs;
mod search;
mod steps;
mod swept;
mod values;
mod wait_hash;
mod waits;
mod webhooks;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread;

use rusqlite::{Connection, OpenFlags};
use tokio::sync::{mpsc, oneshot, Notify};

use super::{Error, Result, Triggers};
use rows::jobs_load;
pub use writer::{CHECKPOINT_WAIT, MAX_BATCH, WAL_LIMIT_BYTES};

/// Events the payload search indexes per write (see `search`).
pub const SEARCH_CHUNK: usize = search::CHUNK;
use writer::{writer_loop, Commit, Guard, LoadWindow, Msg, TypedOp, WriteCtx};

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        Error::Database(Arc::new(e))
    }
}

const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("0001_init.sql")),
    (2, include_str!("0002_read_indexes.sql")),
    (3, include_str!("0003_webhook_deliveries.sql")),
    (4, include_str!("0004_leaders.sql")),
    (5, include_str!("0005_run_node.sql")),
    (6, include_str!("0006_endpoints_nodes.sql")),
    (7, include_str!("0007_health.sql")),
    (8, include_str!("0008_rollups.sql")),
    (9, include_str!("0009_steps.sql")),
    // Versions need not be consecutive: numbers were handed out to changes made side by side.
    (11, include_str!("0011_endpoint_protocol.sql")),
    (12, include_str!("0012_schedules.sql")),
    (13, include_str!("0013_job_paused.sql")),
    (14, include_str!("0014_search.sql")),
    (16, include_str!("0016_lean_run_indexes.sql")),
    (20, include_str!("0020_flow_concurrency.sql")),
    (21, include_str!("0021_flow_rate_limit.sql")),
    (22, include_str!("0022_flow_throttle.sql")),
    (23, include_str!("0023_flow_start_timeout.sql")),
    (24, include_str!("0024_flow_debounce.sql")),
    (25, include_str!("0025_flow_priority.sql")),
    (27, include_str!("0027_flow_take_counted.sql")),
    (28, include_str!("0028_flow_free_by_key.sql")),
    (30, include_str!("0030_event_waits.sql")),
    (31, include_str!("0031_cancel_on.sql")),
    (40, include_str!("0040_job_owner_note.sql")),
    (41, include_str!("0041_node_details.sql")),
    (42, include_str!("0042_step_label.sql")),
    (50, include_str!("0050_webhook_sources.sql")),
    (51, include_str!("0051_children_on_steps.sql")),
    (52, include_str!("0052_children_by_run.sql")),
    (53, include_str!("0053_children_as_steps.sql")),
    (54, include_str!("0054_wait_log.sql")),
    (55, include_str!("0055_wait_resumed.sql")),
    (56, include_str!("0056_wait_match_hash.sql")),
];

/// Reads the file path out of a `sqlite://` URL (or accepts a plain path).
pub fn path_from_url(url: &str) -> Option<PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .unwrap_or(url);
    if rest.is_empty() || rest.contains("://") {
        return None;
    }
    Some(PathBuf::from(rest))
}

/// The SQLite store. Cheap to clone.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.path)
            .finish()
    }
}

/// The read-only connections a store keeps, and the reads it runs at once.
const READERS: usize = 8;

pub(super) struct Inner {
    path: PathBuf,
    tx: mpsc::Sender<Msg>,
    /// Nanoseconds the writer has spent on batches since it started.
    busy: Arc<std::sync::atomic::AtomicU64>,
    /// Nanoseconds the search indexer's own writes took (measured by the caller).
    indexing: std::sync::atomic::AtomicU64,
    /// The search indexer's last look at the writer's load.
    busy_seen: Mutex<LoadWindow>,
    /// Read-only connections kept for reuse, at most [`READERS`].
    readers: Mutex<Vec<Connection>>,
    /// One permit per reader: a read waits for a kept connection instead of opening one.
    read_permits: tokio::sync::Semaphore,
    triggers: Arc<Triggers>,
    work: Arc<Notify>,
}

/// Prepared statements a connection keeps (`prepare_cached`). rusqlite's default, 16, is fewer
/// than the writer's hot path uses (an event's insert, a claim, a completion and the commit's
/// bookkeeping run more distinct statements than that): the least recently used were dropped,
/// and every cycle parsed and planned them again, a fifth of the writer's time in `flare bench
/// e2e`.
pub(super) const STATEMENTS: usize = 256;

pub(super) fn configure(conn: &Connection) -> Result<()> {
    conn.set_prepared_statement_cache_capacity(STATEMENTS);
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    // 8 MiB of pages per connection. The hot path touches the right-hand edges of a few tables
    // and indexes; a larger cache only made each commit slower (SQLite walks the cache's hash
    // table when a transaction ends): 64 MiB gave 33.0k e2e runs/s, 8 MiB 35.1k (means of 4,
    // alternated, same binary). Other pages come from the OS's page cache.
    conn.pragma_update(None, "cache_size", -8192)?;
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    // After a checkpoint resets the WAL, its file is truncated to this size.
    conn.pragma_update(None, "journal_size_limit", WAL_LIMIT_BYTES as i64)?;
    Ok(())
}

/// Opens, configures and migrates the database; returns the writer connection and the stored
/// job definitions.
pub(super) fn open_migrated(path: &Path) -> Result<(Connection, Vec<crate::model::JobSpec>)> {
    let mut conn = Connection::open(path)?;
    configure(&conn)?;
    migrate(&mut conn)?;
    let specs = jobs_load(&conn)?;
    Ok((conn, specs))
}

pub(super) fn is_busy(e: &(dyn std::error::Error + Send + Sync + 'static)) -> bool {
    matches!(
        e.downcast_ref::<rusqlite::Error>(),
        Some(rusqlite::Error::SqliteFailure(f, _)) if f.code == rusqlite::ErrorCode::DatabaseBusy
    )
}

/// The highest migration this binary knows (versions have gaps; a newer binary adds higher ones).
pub fn last_migration() -> i64 {
    MIGRATIONS.iter().map(|(v, _)| *v).max().unwrap_or(0)
}

/// A connection to a new database at `path`, configured and migrated (the unit tests' store).
#[cfg(test)]
fn migrated(path: &Path) -> Connection {
    let mut conn = Connection::open(path).expect("open");
    configure(&conn).expect("configure");
    migrate(&mut conn).expect("migrate");
    conn
}

/// A connection to a new database at `path`, configured and migrated as a version before
/// migration `version` left it (`migrate` then applies the rest).
#[cfg(test)]
fn migrated_before(path: &Path, version: i64) -> Connection {
    let conn = Connection::open(path).expect("open");
    configure(&conn).expect("configure");
    conn.execute_batch(
        "CREATE TABLE flare_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)",
    )
    .expect("migrations table");
    for (v, sql) in MIGRATIONS.iter().filter(|(v, _)| *v < version) {
        conn.execute_batch(sql).expect("migration");
        conn.execute(
            "INSERT INTO flare_migrations (version, applied_at) VALUES (?1, 0)",
            [v],
        )
        .expect("version");
    }
    conn
}

pub(super) fn migrate(conn: &mut Connection) -> Result<()> {
    conn.execute_batch("CREATE TABLE IF NOT EXISTS flare_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)")?;
    // Migration 56 hashes the values waited for as the writer does.
    wait_hash::install(conn)?;
    // A database a newer binary migrated is refused before anything is applied or used.
    let found: Option<i64> =
        conn.query_row("SELECT max(version) FROM flare_migrations", [], |r| {
            r.get(0)
        })?;
    super::error::schema_guard(found, last_migration())?;
    for (version, sql) in MIGRATIONS {
        // IMMEDIATE takes the write lock before the check, so processes starting at once on a
        // new file apply each migration once (the others wait, then see it done).
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let done: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM flare_migrations WHERE version = ?1)",
            [version],
            |r| r.get(0),
        )?;
        if done {
            continue;
        }
        tx.execute_batch(sql)?;
        tx.execute(
            "INSERT INTO flare_migrations (version, applied_at) VALUES (?1, ?2)",
            rusqlite::params![version, chrono::Utc::now().timestamp_millis()],
        )?;
        tx.commit()?;
        tracing::info!(version, "applied SQLite migration");
    }
    Ok(())
}

pub(super) fn open_reader(path: &Path) -> Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI,
    )?;
    conn.set_prepared_statement_cache_capacity(STATEMENTS);
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    Ok(conn)
}

/// Writes a consistent copy of the database at `path` to the new file `dest` while other
/// processes go on writing: `VACUUM INTO` on a read-only connection of its own reads one
/// snapshot (the WAL's committed pages included, which a plain file copy misses) and writes it
/// compacted. Refuses a `dest` that exists.
pub fn backup(path: &Path, dest: &Path) -> Result<()> {
    if !path.exists() {
        return Err(Error::Invalid(format!(
            "there is no database at {}",
            path.display()
        )));
    }
    if dest.exists() {
        return Err(Error::Invalid(format!(
            "{} exists: give a new file, a backup never overwrites",
            dest.display()
        )));
    }
    let dest = dest
        .to_str()
        .ok_or_else(|| Error::Invalid(format!("{} is not UTF-8", dest.display())))?;
    let conn = open_reader(path)?;
    conn.execute("VACUUM INTO ?1", [dest])?;
    Ok(())
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path`, migrates it and starts the writer.
    pub async fn open(path: PathBuf) -> Result<Self> {
        let p = path.clone();
        let (conn, specs, paths) = tokio::task::spawn_blocking(move || -> Result<_> {
            let mut attempt = 0;
            loop {
                match open_migrated(&p).and_then(|(conn, specs)| {
                    let paths = paths::Paths::install(&conn)?;
                    Ok((conn, specs, paths))
                }) {
                    // A new file opened by several processes at once: switching it to WAL can
                    // fail with "locked" without waiting (SQLite's deadlock avoidance). Retry.
                    Err(Error::Database(e)) if attempt < 50 && is_busy(e.as_ref()) => {
                        attempt += 1;
                        thread::sleep(std::time::Duration::from_millis(20));
                    }
                    other => return other,
                }
            }
        })
        .await
        .map_err(|_| Error::Closed)??;

        let triggers = Arc::new(Triggers::default());
        for spec in specs {
            triggers.upsert_stored(spec);
        }
        let work = Arc::new(Notify::new());
        let (tx, rx) = mpsc::channel(MAX_BATCH * 4);
        let busy = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (t, w, b) = (Arc::clone(&triggers), Arc::clone(&work), Arc::clone(&busy));
        thread::Builder::new()
            .name("flare-sqlite-writer".into())
            .spawn(move || writer_loop(conn, paths, rx, t, w, b))
            .map_err(|e| Error::Corrupt(format!("cannot start the writer thread: {e}")))?;
        Ok(Self {
            inner: Arc::new(Inner {
                path,
                tx,
                busy,
                indexing: std::sync::atomic::AtomicU64::new(0),
                busy_seen: Mutex::new(LoadWindow::new()),
                readers: Mutex::new(Vec::new()),
                read_permits: tokio::sync::Semaphore::new(READERS),
                triggers,
                work,
            }),
        })
    }

    /// The shared trigger registry.
    pub fn triggers(&self) -> &Arc<Triggers> {
        &self.inner.triggers
    }

    /// Notified after a commit that made runs runnable.
    pub fn work_notify(&self) -> &Arc<Notify> {
        &self.inner.work
    }

    /// Runs `f` in the writer's next transaction, inside its own savepoint, and answers after it
    /// committed.
    pub(crate) async fn write<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut WriteCtx<'_>) -> Result<T> + Send + 'static,
    {
        self.write_guarded(Guard::Savepoint, f).await
    }

    /// Like [`Self::write`], isolated from the batch's other operations as `guard` says.
    pub(crate) async fn write_guarded<T, F>(&self, guard: Guard, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut WriteCtx<'_>) -> Result<T> + Send + 'static,
    {
        self.write_synced(guard, Commit::Durable, f).await
    }

    /// Like [`Self::write_guarded`], committed as `sync` says.
    pub(crate) async fn write_synced<T, F>(&self, guard: Guard, sync: Commit, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut WriteCtx<'_>) -> Result<T> + Send + 'static,
    {
        let (reply, rx) = oneshot::channel();
        let op = TypedOp {
            f: Some(f),
            guard,
            sync,
            result: None,
            reply,
        };
        self.inner
            .tx
            .send(Msg::Op(Box::new(op)))
            .await
            .map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)?
    }

    /// Runs `f` on a read-only connection on the blocking pool.
    pub(crate) async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        // At most `READERS` reads at once: without the bound, a thousand executions reading their
        // steps at once each opened (and closed) a connection of its own on a blocking thread,
        // and 100,000 runs reached their waits at a few hundred a second.
        let _permit = self
            .inner
            .read_permits
            .acquire()
            .await
            .map_err(|_| Error::Closed)?;
        tokio::task::spawn_blocking(move || {
            let pooled = inner.readers.lock().ok().and_then(|mut pool| pool.pop());
            let conn = match pooled {
                Some(c) => c,
                None => open_reader(&inner.path)?,
            };
            let result = f(&conn);
            if let Ok(mut pool) = inner.readers.lock() {
                if pool.len() < READERS {
                    pool.push(conn);
                }
            }
            result
        })
        .await
        .map_err(|_| Error::Closed)?
    }

    /// Checks that the database answers a query.
    pub async fn health_read(&self) -> Result<()> {
        self.read(|c| {
            Ok(c.query_row("SELECT 1", [], |r| r.get::<_, i64>(0))
                .map(|_| ())?)
        })
        .await
    }

    /// See [`super::Store::health_write`]: one upsert through the writer, in its next batch.
    pub async fn health_write(&self, now: i64) -> Result<()> {
        self.write_guarded(Guard::Batch, move |ctx| {
            ctx.conn.execute(
                "INSERT INTO health (id, checked_at) VALUES (1, ?1) \
                 ON CONFLICT (id) DO UPDATE SET checked_at = excluded.checked_at",
                [now],
            )?;
            Ok(())
        })
        .await
    }

    /// See [`crate::store::Store::health_fail_writes`].
    pub async fn health_fail_writes(&self, on: bool) -> Result<()> {
        let (reply, rx) = oneshot::channel();
        self.inner
            .tx
            .send(Msg::ReadOnly(on, reply))
            .await
            .map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)?
    }

    /// See [`super::Store::rollups_drift`].
    pub async fn rollups_drift(&self) -> Result<Vec<String>> {
        self.read(|c| {
            let mut lines = rollups::drift(c)?;
            lines.extend(search::drift(c)?);
            Ok(lines)
        })
        .await
    }

    /// See [`super::Store::search_index`]: one chunk through the writer, in its own savepoint.
    /// While the writer spent more than half of its time on batches since the last chunk, the
    /// chunk is cut to `search::BUSY_CHUNK` events (fewer than asked: the indexer's pass ends).
    /// Every send that arrives while a chunk is written waits for it, and FTS5 now and then merges
    /// its segments inside such a write: at full ingest the index would be paid for in the sends'
    /// tail latency (`POST /trigger` p99 19 ms against 3.5 ms). It catches up when the load
    /// drops; searches meanwhile read the not-yet-indexed events with a scan.
    pub async fn search_index(&self, limit: usize) -> Result<usize> {
        use std::sync::atomic::Ordering::Relaxed;
        let busy = {
            let (writer, own) = (
                self.inner.busy.load(Relaxed),
                self.inner.indexing.load(Relaxed),
            );
            match self.inner.busy_seen.lock() {
                Ok(mut window) => window.busy(std::time::Instant::now(), writer, own),
                Err(_) => false,
            }
        };
        let limit = if busy {
            limit.min(search::BUSY_CHUNK)
        } else {
            limit
        };
        let started = std::time::Instant::now();
        let indexed = self
            .write(move |ctx| search::index_chunk(ctx.conn, limit))
            .await;
        let spent = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.inner.indexing.fetch_add(spent, Relaxed);
        indexed
    }

    /// See [`super::Store::statistics_refresh`]: the WAL checkpointed into the database and
    /// truncated, on a connection of its own (a checkpoint cannot run inside the writer's batch
    /// transaction), waiting up to [`CHECKPOINT_WAIT`] for readers of older snapshots.
    pub async fn wal_reset(&self) -> Result<()> {
        let path = self.inner.path.clone();
        tokio::task::spawn_blocking(move || {
            let conn = Connection::open(&path)?;
            conn.busy_timeout(CHECKPOINT_WAIT)?;
            conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
            Ok(())
        })
        .await
        .map_err(|_| Error::Closed)?
    }

    /// See [`super::Store::search_backlog`].
    pub async fn search_backlog(&self) -> Result<u64> {
        self.read(|c| Ok(search::backlog(c)?.1)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_a_file() {
        assert_eq!(
            path_from_url("sqlite://flare.db"),
            Some(PathBuf::from("flare.db"))
        );
        assert_eq!(
            path_from_url("sqlite:///tmp/x.db"),
            Some(PathBuf::from("/tmp/x.db"))
        );
        assert_eq!(path_from_url("sqlite:x.db"), Some(PathBuf::from("x.db")));
        assert_eq!(path_from_url("data/x.db"), Some(PathBuf::from("data/x.db")));
        assert_eq!(path_from_url("postgres://localhost/db"), None);
        assert_eq!(path_from_url("sqlite://"), None);
    }

    /// A connection keeps the statements it prepared: one used in every cycle is not parsed
    /// again because more than rusqlite's default 16 others ran in between. A statement's run
    /// counter lives as long as the prepared statement, so it counts both cycles only if the
    /// connection kept it.
    #[test]
    fn connections_keep_more_statements_than_a_cycle_uses() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("cache.db");
        let writer = Connection::open(&path).expect("open");
        configure(&writer).expect("configure");
        let reader = open_reader(&path).expect("reader");
        let statements: Vec<String> = (0..100).map(|i| format!("SELECT {i}")).collect();
        for conn in [&writer, &reader] {
            for _cycle in 0..2 {
                for sql in &statements {
                    let mut stmt = conn.prepare_cached(sql).expect("prepare");
                    stmt.query_row([], |r| r.get::<_, i64>(0)).expect("run");
                }
            }
            for sql in &statements {
                let stmt = conn.prepare_cached(sql).expect("prepare");
                let runs = stmt.get_status(rusqlite::StatementStatus::Run);
                assert_eq!(runs, 2, "{sql} was prepared again");
            }
        }
    }

    /// The bundled SQLite is built without the global mutexes `.cargo/config.toml` removes
    /// (`LIBSQLITE3_FLAGS`): the page caches are not one group, and allocations keep no
    /// statistics. Lost (a build without that file, or another `LIBSQLITE3_FLAGS`), every
    /// write pays both again.
    #[test]
    fn the_bundled_sqlite_has_no_global_page_cache_or_memory_statistics() {
        let conn = Connection::open_in_memory().expect("open");
        let options: Vec<String> = conn
            .prepare("PRAGMA compile_options")
            .expect("prepare")
            .query_map([], |r| r.get(0))
            .expect("query")
            .collect::<rusqlite::Result<_>>()
            .expect("options");
        assert!(
            !options.iter().any(|o| o == "ENABLE_MEMORY_MANAGEMENT"),
            "{options:?}"
        );
        assert!(
            options.iter().any(|o| o == "DEFAULT_MEMSTATUS=0"),
            "{options:?}"
        );
    }
}
