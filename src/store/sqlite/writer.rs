//! The writer thread: it owns the only writing connection, takes every operation waiting (up to
//! [`MAX_BATCH`]), runs each inside one `BEGIN IMMEDIATE` transaction (in its own savepoint, or
//! not: [`Guard`]), commits once and only then answers each caller (group commit). Also the
//! WAL's bound ([`WalBound`]) and the writer's load as the search indexer sees it
//! ([`LoadWindow`]). It knows no operation: callers hand it closures (`SqliteStore::write`).

use std::path::PathBuf;
use std::sync::Arc;

use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot, Notify};

use super::paths::Paths;
use super::rollups;
use super::rows::triggers_refresh;
use crate::log_throttle::storage_failure;
use crate::store::{Error, Result, Triggers};

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

/// What the writer thread receives.
pub(super) enum Msg {
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
    /// The match paths in use per event name, as the writer keeps them across batches.
    pub(crate) paths: &'a mut Paths,
}

pub(super) trait WriteOp: Send {
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

pub(super) struct TypedOp<T, F> {
    pub(super) f: Option<F>,
    pub(super) guard: Guard,
    pub(super) sync: Commit,
    pub(super) result: Option<Result<T>>,
    pub(super) reply: oneshot::Sender<Result<T>>,
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

pub(super) fn savepoint<T>(
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
            ctx.paths.forget();
            ctx.conn.execute_batch("ROLLBACK TO op; RELEASE op")?;
            Err(e)
        }
    }
}

/// The writer's load as the search indexer sees it: the share of wall time the writer spent on
/// batches other than the indexer's own, over windows of at least [`LoadWindow::SPAN`] (a pass of
/// chunks shares one decision).
pub(super) struct LoadWindow {
    at: std::time::Instant,
    writer: u64,
    own: u64,
    busy: bool,
}

impl LoadWindow {
    const SPAN: std::time::Duration = std::time::Duration::from_millis(50);

    /// A window that ends at the first look.
    pub(super) fn new() -> Self {
        let now = std::time::Instant::now();
        Self {
            at: now.checked_sub(Self::SPAN).unwrap_or(now),
            writer: 0,
            own: 0,
            busy: false,
        }
    }

    /// Whether the writer was more than half busy with others' work, given its counters now.
    pub(super) fn busy(&mut self, now: std::time::Instant, writer: u64, own: u64) -> bool {
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
pub(super) struct WalBound {
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
            Err(e) => {
                if let Some(suppressed) = storage_failure("sqlite:checkpoint") {
                    tracing::warn!(error = %e, wal_bytes = size, suppressed, "WAL checkpoint failed");
                }
            }
        }
    }
}

pub(super) fn writer_loop(
    conn: Connection,
    mut paths: Paths,
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
                    run_batch(&conn, &mut sync, &triggers, &work, &mut paths, &mut batch);
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
        run_batch(&conn, &mut sync, &triggers, &work, &mut paths, &mut batch);
        let spent = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        busy.fetch_add(spent, std::sync::atomic::Ordering::Relaxed);
        wal.tick(&conn);
    }
    tracing::debug!("SQLite writer stopped");
}

pub(super) fn run_batch(
    conn: &Connection,
    sync: &mut Commit,
    triggers: &Triggers,
    work: &Notify,
    paths: &mut Paths,
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
            if let Some(suppressed) = storage_failure("sqlite:sync") {
                tracing::warn!(error = %e, level, suppressed, "cannot change the commit's sync level");
            }
            let _ = conn.pragma_update(None, "synchronous", "FULL");
            *sync = Commit::Durable;
        } else {
            *sync = wanted;
        }
    }
    if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
        let err = Error::from(e);
        if let Some(suppressed) = storage_failure("sqlite:begin") {
            tracing::error!(error = %err, ops = batch.len(), suppressed, "cannot begin a write transaction");
        }
        for op in batch.drain(..) {
            op.finish(Err(err.clone()));
        }
        return;
    }
    if let Err(e) = triggers_refresh(conn, triggers) {
        if let Some(suppressed) = storage_failure("sqlite:triggers") {
            tracing::warn!(error = %e, suppressed, "could not reload job definitions");
        }
    }
    if paths.batch_begins(conn).is_err() {
        // Not knowing whether another process added paths, keep none: each event reads them.
        paths.forget();
    }
    let mut ctx = WriteCtx {
        conn,
        triggers,
        wake: false,
        tally: rollups::Tally::default(),
        paths,
    };
    let mut poisoned = None;
    for op in batch.iter_mut() {
        if let Err(e) = op.apply(&mut ctx) {
            poisoned = Some(e);
            break;
        }
    }
    if poisoned.is_none() {
        ctx.paths.swept.sweep(conn);
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
        ctx.paths.forget();
        if let Some(suppressed) = storage_failure("sqlite:batch") {
            tracing::error!(error = %e, ops = batch.len(), suppressed, "the batch failed (commit, or an operation without a savepoint after writing); it is rolled back and every operation answered with the error");
        }
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
        super::super::configure(&conn).expect("configure");
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
        let mut paths = Paths::default();
        run_batch(
            &conn,
            &mut Commit::Durable,
            &triggers,
            &work,
            &mut paths,
            &mut batch,
        );
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
            run_batch(
                &conn,
                &mut level,
                &triggers,
                &work,
                &mut Paths::default(),
                &mut batch,
            );
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
}
