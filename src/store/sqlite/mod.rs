//! The SQLite backend.
//!
//! One writer thread owns the only writing connection. Callers hand it operations over a channel;
//! it takes every operation waiting (up to [`MAX_BATCH`]), runs each inside its own savepoint of one
//! `BEGIN IMMEDIATE` transaction, commits once (WAL, `synchronous=FULL`: durable), and only then
//! answers each caller. That is group commit: 64 concurrent senders cost one fsync, not 64. Reads
//! use a small pool of read-only connections on the blocking thread pool and never wait for the
//! writer.

mod endpoints;
mod ops;
mod query;
mod read;
mod rollups;
mod search;
mod steps;
mod webhooks;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread;

use rusqlite::{Connection, OpenFlags};
use tokio::sync::{mpsc, oneshot, Notify};

use super::{Error, Result, Triggers};

/// Most operations grouped into one transaction.
pub const MAX_BATCH: usize = 4096;

/// WAL size past which the writer forces a checkpoint that resets the WAL (`TRUNCATE`), waiting
/// up to [`CHECKPOINT_WAIT`] for the readers of older snapshots. SQLite's automatic checkpoints
/// never wait, so under reads that overlap without a break the WAL could not be reset and grew
/// without bound (5.6 GB in 10 minutes of mixed load once).
pub const WAL_LIMIT_BYTES: u64 = 64 * 1024 * 1024;

/// Longest the writer waits for readers when it resets the WAL; writes wait meanwhile. A reset
/// that does not get them in time is tried again a second later.
pub const CHECKPOINT_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Events the payload search's indexer adds per write ([`SqliteStore::search_index`]).
pub const SEARCH_CHUNK: usize = search::CHUNK;

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

struct Inner {
    path: PathBuf,
    tx: mpsc::Sender<Msg>,
    /// Nanoseconds the writer has spent on batches since it started.
    busy: Arc<std::sync::atomic::AtomicU64>,
    /// Nanoseconds the search indexer's own writes took (measured by the caller).
    indexing: std::sync::atomic::AtomicU64,
    /// The search indexer's last look at the writer's load.
    busy_seen: Mutex<LoadWindow>,
    readers: Mutex<Vec<Connection>>,
    triggers: Arc<Triggers>,
    work: Arc<Notify>,
}

/// What the writer thread receives.
enum Msg {
    Op(Box<dyn WriteOp>),
    ReadOnly(bool, oneshot::Sender<Result<()>>),
}

/// The writer's view while it runs one operation inside the batch transaction.
pub(crate) struct WriteCtx<'a> {
    pub(crate) conn: &'a Connection,
    pub(crate) triggers: &'a Triggers,
    /// Set when the batch made work runnable, so the workers are woken after commit.
    pub(crate) wake: bool,
    /// The batch's changes to the per-minute counts, written just before the commit.
    pub(crate) tally: rollups::Tally,
}

trait WriteOp: Send {
    /// Runs the operation. `Err` means it failed after writing and could not be undone on its
    /// own: the whole transaction must be rolled back.
    fn apply(&mut self, ctx: &mut WriteCtx<'_>) -> Result<()>;
    fn finish(self: Box<Self>, commit: Result<()>);
    /// Whether the operation must survive power loss once answered. See [`Commit`].
    fn durable(&self) -> bool;
}

/// How a batch is committed.
///
/// Most writes are answered only once fsynced (`synchronous=FULL`). A claim is not: a claim lost
/// with the power is an attempt that never started, and the run is simply taken again after the
/// restart, which is what happens to a run whose worker died anyway (runs are at least once). A
/// batch of claims alone is therefore committed without waiting for the disk
/// (`synchronous=NORMAL`): its frames are written to the WAL but not synced. The next durable
/// commit syncs the WAL, and with it every frame before its own, so what is durable is always a
/// prefix of what was committed: a completion, a chained event or anything else that followed a
/// claim can never survive without it. It saves the claim an fsync on the way from a send to the
/// start of its run.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Commit {
    /// Answered after the fsync.
    Durable,
    /// May be lost with the power, not with a crash of the process (a claim).
    Lazy,
}

/// How an operation is isolated from the others of its batch when it fails.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Guard {
    /// Inside its own savepoint: a failure undoes only its own writes.
    Savepoint,
    /// No savepoint. For operations whose only failures after a write are database errors: a
    /// failure that wrote nothing fails the operation alone; one that wrote something fails the
    /// whole batch (rolled back, every caller answered with the error, as when `COMMIT` fails).
    /// A savepoint per operation copies every page it touches into the statement journal, which
    /// is most of the cost of a small insert.
    Batch,
}

struct TypedOp<T, F> {
    f: Option<F>,
    guard: Guard,
    sync: Commit,
    result: Option<Result<T>>,
    reply: oneshot::Sender<Result<T>>,
}

impl<T: Send, F: FnOnce(&mut WriteCtx<'_>) -> Result<T> + Send> WriteOp for TypedOp<T, F> {
    fn apply(&mut self, ctx: &mut WriteCtx<'_>) -> Result<()> {
        let Some(f) = self.f.take() else {
            return Ok(());
        };
        let result = match self.guard {
            Guard::Savepoint => savepoint(ctx, f),
            Guard::Batch => {
                let (changes_before, wake_before) = (ctx.conn.total_changes(), ctx.wake);
                let mark = ctx.tally.mark();
                let result = f(ctx);
                if let Err(e) = &result {
                    ctx.wake = wake_before;
                    ctx.tally.undo(mark);
                    if ctx.conn.total_changes() != changes_before {
                        let poison = e.clone();
                        self.result = Some(result);
                        return Err(poison);
                    }
                }
                result
            }
        };
        self.result = Some(result);
        Ok(())
    }

    fn finish(self: Box<Self>, commit: Result<()>) {
        let answer = match (self.result, commit) {
            (Some(Err(e)), _) => Err(e),
            (Some(Ok(_)), Err(e)) | (None, Err(e)) => Err(e),
            (Some(Ok(v)), Ok(())) => Ok(v),
            (None, Ok(())) => Err(Error::Closed),
        };
        let _ = self.reply.send(answer);
    }

    fn durable(&self) -> bool {
        self.sync == Commit::Durable
    }
}

fn savepoint<T>(
    ctx: &mut WriteCtx<'_>,
    f: impl FnOnce(&mut WriteCtx<'_>) -> Result<T>,
) -> Result<T> {
    ctx.conn.prepare_cached("SAVEPOINT op")?.execute([])?;
    let (wake_before, mark) = (ctx.wake, ctx.tally.mark());
    match f(ctx) {
        Ok(v) => {
            ctx.conn.prepare_cached("RELEASE op")?.execute([])?;
            Ok(v)
        }
        Err(e) => {
            ctx.wake = wake_before;
            ctx.tally.undo(mark);
            ctx.conn.execute_batch("ROLLBACK TO op; RELEASE op")?;
            Err(e)
        }
    }
}

fn configure(conn: &Connection) -> Result<()> {
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

/// The writer's load as the search indexer sees it: the share of wall time the writer spent on
/// batches other than the indexer's own, over windows of at least [`LoadWindow::SPAN`] (a pass of
/// chunks shares one decision).
struct LoadWindow {
    at: std::time::Instant,
    writer: u64,
    own: u64,
    busy: bool,
}

impl LoadWindow {
    const SPAN: std::time::Duration = std::time::Duration::from_millis(50);

    /// A window that ends at the first look.
    fn new() -> Self {
        let now = std::time::Instant::now();
        Self {
            at: now.checked_sub(Self::SPAN).unwrap_or(now),
            writer: 0,
            own: 0,
            busy: false,
        }
    }

    /// Whether the writer was more than half busy with others' work, given its counters now.
    fn busy(&mut self, now: std::time::Instant, writer: u64, own: u64) -> bool {
        let wall = now.duration_since(self.at);
        if wall < Self::SPAN {
            return self.busy;
        }
        let others = writer
            .saturating_sub(self.writer)
            .saturating_sub(own.saturating_sub(self.own));
        self.busy = u128::from(others) * 2 > wall.as_nanos();
        (self.at, self.writer, self.own) = (now, writer, own);
        self.busy
    }
}

/// Resets the WAL when it grew past [`WAL_LIMIT_BYTES`]; at most once a second. Runs on the
/// writer thread between batches.
struct WalBound {
    wal: Option<PathBuf>,
    limit: u64,
    next_check: std::time::Instant,
}

impl WalBound {
    fn new(conn: &Connection, limit: u64) -> Self {
        Self {
            limit,
            wal: conn
                .path()
                .filter(|p| !p.is_empty())
                .map(|p| PathBuf::from(format!("{p}-wal"))),
            next_check: std::time::Instant::now(),
        }
    }

    fn tick(&mut self, conn: &Connection) {
        let now = std::time::Instant::now();
        if now < self.next_check {
            return;
        }
        self.next_check = now + std::time::Duration::from_secs(1);
        let Some(wal) = &self.wal else { return };
        let size = std::fs::metadata(wal).map(|m| m.len()).unwrap_or(0);
        if size <= self.limit {
            return;
        }
        let _ = conn.busy_timeout(CHECKPOINT_WAIT);
        let result = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
            r.get::<_, i64>(0)
        });
        let _ = conn.busy_timeout(std::time::Duration::from_secs(5));
        match result {
            Ok(0) => tracing::debug!(wal_bytes = size, "WAL reset"),
            Ok(_) => tracing::debug!(
                wal_bytes = size,
                "WAL reset waits for readers; trying again"
            ),
            Err(e) => tracing::warn!(error = %e, wal_bytes = size, "WAL checkpoint failed"),
        }
    }
}

/// Opens, configures and migrates the database; returns the writer connection and the stored
/// job definitions.
fn open_migrated(path: &Path) -> Result<(Connection, Vec<crate::job::JobSpec>)> {
    let mut conn = Connection::open(path)?;
    configure(&conn)?;
    migrate(&mut conn)?;
    let specs = ops::jobs_load(&conn)?;
    Ok((conn, specs))
}

fn is_busy(e: &(dyn std::error::Error + Send + Sync + 'static)) -> bool {
    matches!(
        e.downcast_ref::<rusqlite::Error>(),
        Some(rusqlite::Error::SqliteFailure(f, _)) if f.code == rusqlite::ErrorCode::DatabaseBusy
    )
}

fn migrate(conn: &mut Connection) -> Result<()> {
    conn.execute_batch("CREATE TABLE IF NOT EXISTS flare_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)")?;
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

impl SqliteStore {
    /// Opens (creating if needed) the database at `path`, migrates it and starts the writer.
    pub async fn open(path: PathBuf) -> Result<Self> {
        let p = path.clone();
        let (conn, specs) = tokio::task::spawn_blocking(move || -> Result<_> {
            let mut attempt = 0;
            loop {
                match open_migrated(&p) {
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
            .spawn(move || writer_loop(conn, rx, t, w, b))
            .map_err(|e| Error::Corrupt(format!("cannot start the writer thread: {e}")))?;
        Ok(Self {
            inner: Arc::new(Inner {
                path,
                tx,
                busy,
                indexing: std::sync::atomic::AtomicU64::new(0),
                busy_seen: Mutex::new(LoadWindow::new()),
                readers: Mutex::new(Vec::new()),
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
        tokio::task::spawn_blocking(move || {
            let pooled = inner.readers.lock().ok().and_then(|mut pool| pool.pop());
            let conn = match pooled {
                Some(c) => c,
                None => open_reader(&inner.path)?,
            };
            let result = f(&conn);
            if let Ok(mut pool) = inner.readers.lock() {
                if pool.len() < 8 {
                    pool.push(conn);
                }
            }
            result
        })
        .await
        .map_err(|_| Error::Closed)?
    }

    /// See [`super::Store::set_read_only`].
    pub async fn set_read_only(&self, on: bool) -> Result<()> {
        let (reply, rx) = oneshot::channel();
        self.inner
            .tx
            .send(Msg::ReadOnly(on, reply))
            .await
            .map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)?
    }

    /// Checks that the database answers a query.
    pub async fn ping(&self) -> Result<()> {
        self.read(|c| {
            Ok(c.query_row("SELECT 1", [], |r| r.get::<_, i64>(0))
                .map(|_| ())?)
        })
        .await
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
    /// chunk is cut to [`search::BUSY_CHUNK`] events (fewer than asked: the indexer's pass ends).
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

    /// See [`super::Store::search_backlog`].
    pub async fn search_backlog(&self) -> Result<u64> {
        self.read(|c| Ok(search::backlog(c)?.1)).await
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
}

fn open_reader(path: &Path) -> Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI,
    )?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    Ok(conn)
}

fn writer_loop(
    conn: Connection,
    mut rx: mpsc::Receiver<Msg>,
    triggers: Arc<Triggers>,
    work: Arc<Notify>,
    busy: Arc<std::sync::atomic::AtomicU64>,
) {
    let mut batch: Vec<Box<dyn WriteOp>> = Vec::with_capacity(MAX_BATCH);
    let mut wal = WalBound::new(&conn, WAL_LIMIT_BYTES);
    let mut sync = Commit::Durable;
    while let Some(first) = rx.blocking_recv() {
        let mut pending = Some(first);
        loop {
            match pending.take() {
                Some(Msg::Op(op)) => batch.push(op),
                Some(Msg::ReadOnly(on, reply)) => {
                    // Control messages run between batches, outside any transaction.
                    run_batch(&conn, &mut sync, &triggers, &work, &mut batch);
                    let r = conn
                        .pragma_update(None, "query_only", on)
                        .map_err(Error::from);
                    let _ = reply.send(r);
                }
                None => {}
            }
            if batch.len() >= MAX_BATCH {
                break;
            }
            match rx.try_recv() {
                Ok(msg) => pending = Some(msg),
                Err(_) => break,
            }
        }
        let started = std::time::Instant::now();
        run_batch(&conn, &mut sync, &triggers, &work, &mut batch);
        let spent = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        busy.fetch_add(spent, std::sync::atomic::Ordering::Relaxed);
        wal.tick(&conn);
    }
    tracing::debug!("SQLite writer stopped");
}

fn run_batch(
    conn: &Connection,
    sync: &mut Commit,
    triggers: &Triggers,
    work: &Notify,
    batch: &mut Vec<Box<dyn WriteOp>>,
) {
    if batch.is_empty() {
        return;
    }
    let wanted = if batch.iter().any(|op| op.durable()) {
        Commit::Durable
    } else {
        Commit::Lazy
    };
    if wanted != *sync {
        let level = match wanted {
            Commit::Durable => "FULL",
            Commit::Lazy => "NORMAL",
        };
        if let Err(e) = conn.pragma_update(None, "synchronous", level) {
            // Stay durable: a claim committed with an fsync is only slower.
            tracing::warn!(error = %e, level, "cannot change the commit's sync level");
            let _ = conn.pragma_update(None, "synchronous", "FULL");
            *sync = Commit::Durable;
        } else {
            *sync = wanted;
        }
    }
    if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
        let err = Error::from(e);
        tracing::error!(error = %err, ops = batch.len(), "cannot begin a write transaction");
        for op in batch.drain(..) {
            op.finish(Err(err.clone()));
        }
        return;
    }
    if let Err(e) = ops::triggers_refresh(conn, triggers) {
        tracing::warn!(error = %e, "could not reload job definitions");
    }
    let mut ctx = WriteCtx {
        conn,
        triggers,
        wake: false,
        tally: rollups::Tally::default(),
    };
    let mut poisoned = None;
    for op in batch.iter_mut() {
        if let Err(e) = op.apply(&mut ctx) {
            poisoned = Some(e);
            break;
        }
    }
    if poisoned.is_none() {
        // The counts commit with the rows they count, or the batch fails.
        poisoned = ctx.tally.flush(conn).err();
    }
    let wake = ctx.wake;
    let commit = match poisoned {
        None => conn.execute_batch("COMMIT").map_err(Error::from),
        // An operation without a savepoint failed half-way: nothing of the batch may commit.
        Some(e) => Err(e),
    };
    if let Err(e) = &commit {
        tracing::error!(error = %e, ops = batch.len(), "the batch failed (commit, or an operation without a savepoint after writing); it is rolled back and every operation answered with the error");
        let _ = conn.execute_batch("ROLLBACK");
    }
    let committed = commit.is_ok();
    for op in batch.drain(..) {
        op.finish(commit.clone());
    }
    if committed && wake {
        work.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writer_resets_a_wal_grown_past_its_limit_once_old_readers_finish() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("wal.db");
        let conn = Connection::open(&path).expect("open");
        configure(&conn).expect("configure");
        // As under reads that never pause: SQLite's own checkpoints never get to reset the WAL.
        conn.pragma_update(None, "wal_autocheckpoint", 0)
            .expect("pragma");
        conn.execute_batch("CREATE TABLE t (x BLOB)")
            .expect("table");
        let reader = Connection::open(&path).expect("reader");
        let write = |n: usize| {
            for _ in 0..n {
                conn.execute("INSERT INTO t (x) VALUES (zeroblob(4096))", [])
                    .expect("insert");
            }
        };
        write(100);
        let wal_size =
            || std::fs::metadata(format!("{}-wal", path.display())).map_or(0, |m| m.len());
        // A reader holds an old snapshot while more is written.
        reader.execute_batch("BEGIN").expect("begin");
        let _: i64 = reader
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .expect("read");
        write(100);
        let grown = wal_size();
        assert!(grown > 400 * 1024, "{grown}");
        let mut bound = WalBound::new(&conn, 100 * 1024);
        // While the old reader is open the reset cannot complete.
        bound.tick(&conn);
        assert!(
            wal_size() >= grown,
            "reset under a reader of an older snapshot"
        );
        reader.execute_batch("COMMIT").expect("end the read");
        // A second later (the bound looks once a second) the WAL is reset and truncated.
        bound.next_check = std::time::Instant::now();
        bound.tick(&conn);
        assert_eq!(wal_size(), 0, "the WAL was reset");
        let n: i64 = conn
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .expect("count");
        assert_eq!(n, 200, "nothing lost");
    }

    type Reply = oneshot::Receiver<Result<()>>;

    /// An operation that inserts `x` into `t`, then fails with a conflict if `fail`.
    fn op(guard: Guard, x: i64, fail: bool, write: bool) -> (Box<dyn WriteOp>, Reply) {
        let (reply, rx) = oneshot::channel();
        let f = move |ctx: &mut WriteCtx<'_>| -> Result<()> {
            if write {
                ctx.conn.execute("INSERT INTO t (x) VALUES (?1)", [x])?;
            }
            if fail {
                return Err(Error::Conflict(format!("op {x} refused")));
            }
            Ok(())
        };
        let op = TypedOp {
            f: Some(f),
            guard,
            sync: Commit::Durable,
            result: None,
            reply,
        };
        (Box::new(op), rx)
    }

    /// Runs `ops` as one batch; returns each answer and the committed rows of `t`.
    fn batch_of(ops: Vec<(Box<dyn WriteOp>, Reply)>) -> (Vec<Result<()>>, Vec<i64>) {
        let conn = Connection::open_in_memory().expect("open");
        conn.execute_batch("CREATE TABLE t (x INTEGER)")
            .expect("table");
        let (triggers, work) = (Triggers::default(), Notify::new());
        let (mut batch, replies): (Vec<_>, Vec<_>) = ops.into_iter().unzip();
        run_batch(&conn, &mut Commit::Durable, &triggers, &work, &mut batch);
        let answers = replies
            .into_iter()
            .map(|mut rx| rx.try_recv().expect("answered"))
            .collect();
        let rows = conn
            .prepare("SELECT x FROM t ORDER BY x")
            .expect("prepare")
            .query_map([], |r| r.get(0))
            .expect("query")
            .collect::<rusqlite::Result<_>>()
            .expect("rows");
        (answers, rows)
    }

    /// An operation that answers the connection's `synchronous` level while it runs.
    fn sync_probe(sync: Commit) -> (Box<dyn WriteOp>, oneshot::Receiver<Result<i64>>) {
        let (reply, rx) = oneshot::channel();
        let f = |ctx: &mut WriteCtx<'_>| -> Result<i64> {
            Ok(ctx.conn.query_row("PRAGMA synchronous", [], |r| r.get(0))?)
        };
        let op = TypedOp {
            f: Some(f),
            guard: Guard::Batch,
            sync,
            result: None,
            reply,
        };
        (Box::new(op), rx)
    }

    #[test]
    fn only_a_batch_of_lazy_operations_commits_without_the_fsync() {
        const NORMAL: i64 = 1;
        const FULL: i64 = 2;
        let conn = Connection::open_in_memory().expect("open");
        conn.pragma_update(None, "synchronous", "FULL")
            .expect("full");
        let (triggers, work) = (Triggers::default(), Notify::new());
        let mut level = Commit::Durable;
        let mut run = |ops: &[Commit]| -> Vec<i64> {
            let (mut batch, replies): (Vec<_>, Vec<_>) = ops.iter().map(|s| sync_probe(*s)).unzip();
            run_batch(&conn, &mut level, &triggers, &work, &mut batch);
            replies
                .into_iter()
                .map(|mut rx| rx.try_recv().expect("answered").expect("ok"))
                .collect()
        };
        assert_eq!(run(&[Commit::Lazy, Commit::Lazy]), [NORMAL, NORMAL]);
        // One durable operation makes the whole batch durable, claims included.
        assert_eq!(run(&[Commit::Lazy, Commit::Durable]), [FULL, FULL]);
        assert_eq!(run(&[Commit::Lazy]), [NORMAL]);
        assert_eq!(run(&[Commit::Durable]), [FULL]);
    }

    #[test]
    fn the_search_indexer_backs_off_while_others_keep_the_writer_busy() {
        let ms = |n: u64| n * 1_000_000;
        let start = std::time::Instant::now();
        let at = |n: u64| start + std::time::Duration::from_millis(n);
        let mut w = LoadWindow {
            at: start,
            writer: 0,
            own: 0,
            busy: false,
        };
        // 100 ms in which others kept the writer busy for 80: busy.
        assert!(w.busy(at(100), ms(80), 0));
        // Within the window's span the decision stands.
        assert!(w.busy(at(120), ms(80), 0));
        // 100 ms in which the writer was busy 90 ms, 80 of them with the indexer's own chunks.
        assert!(!w.busy(at(200), ms(170), ms(80)));
        // Others at 40 %: not busy.
        assert!(!w.busy(at(300), ms(210), ms(80)));
    }

    #[test]
    fn a_failed_savepoint_op_undoes_only_itself() {
        let (answers, rows) = batch_of(vec![
            op(Guard::Savepoint, 1, false, true),
            op(Guard::Savepoint, 2, true, true),
            op(Guard::Savepoint, 3, false, true),
        ]);
        assert!(answers[0].is_ok() && answers[2].is_ok());
        assert!(matches!(answers[1], Err(Error::Conflict(_))));
        assert_eq!(rows, vec![1, 3]);
    }

    #[test]
    fn a_batch_op_failing_before_any_write_fails_alone() {
        let (answers, rows) = batch_of(vec![
            op(Guard::Batch, 1, false, true),
            op(Guard::Batch, 2, true, false),
            op(Guard::Batch, 3, false, true),
        ]);
        assert!(answers[0].is_ok() && answers[2].is_ok());
        assert!(matches!(answers[1], Err(Error::Conflict(_))));
        assert_eq!(rows, vec![1, 3]);
    }

    #[test]
    fn a_batch_op_failing_after_a_write_rolls_the_whole_batch_back() {
        let (answers, rows) = batch_of(vec![
            op(Guard::Savepoint, 1, false, true),
            op(Guard::Batch, 2, true, true),
            op(Guard::Batch, 3, false, true),
        ]);
        assert!(answers.iter().all(|a| matches!(a, Err(Error::Conflict(_)))));
        assert_eq!(rows, Vec::<i64>::new());
    }

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
}
