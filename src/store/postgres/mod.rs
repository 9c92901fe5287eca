//! The PostgreSQL backend: any number of processes share one database.
//!
//! - **Connections**: a `deadpool-postgres` pool of `tokio-postgres` connections; statements are
//!   prepared once per connection and cached.
//! - **Migrations** ([`MIGRATIONS`]) are embedded and applied at start under an advisory lock, so
//!   several processes starting at once migrate once.
//! - **Group commit**: [`PgStore::event_insert`] hands the event to the writer tasks; one takes
//!   every insert waiting (up to [`MAX_BATCH`]), writes them and their runs with one `UNNEST`
//!   statement in one transaction (pipelined with `BEGIN`, `NOTIFY` and `COMMIT`), and answers each
//!   caller only after `COMMIT`. A few writers overlap, so one batch fills while another commits.
//! - **The queue** is `run_queue`, one row per queued or running run (with the lease of a running
//!   one), next to the run history in `runs` (see `runs.rs`, `0004_run_queue.sql` and
//!   `0005_lease_on_queue.sql`); readers see both through the view `run_state`. **Claims** are one
//!   `UPDATE run_queue … WHERE seq = ANY(ARRAY(SELECT … FOR UPDATE SKIP LOCKED LIMIT n))` per
//!   group on its partial index of runnable rows; **completions** are one statement per batch
//!   (`UNNEST` arrays), fenced by the lease token on the queue row.
//! - **Wake-ups**: a transaction that makes runs runnable sends one `NOTIFY flare_work`; a listener
//!   connection turns it into the same [`Notify`] the workers wait on. Workers poll as well, so
//!   the hint may be lost. Behind a transaction-mode connection pooler, where `LISTEN` does not
//!   work, turn the listener off with `FLARE_PG_LISTEN=off` or `?flare_listen=off` on the URL.
//! - **Storage down** for tests ([`PgStore::set_read_only`]): every write transaction then starts
//!   `READ ONLY`, so PostgreSQL itself refuses the writes.

mod endpoints;
mod ops;
mod query;
mod read;
mod runs;
mod steps;
mod webhooks;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{GenericClient, Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio::sync::{mpsc, oneshot, Notify};
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row};

use super::{Error, Inserted, NewEvent, Result, Triggers};
use crate::log_throttle::storage_failure;

/// Most inserts grouped into one transaction.
pub const MAX_BATCH: usize = 2048;

/// Insert transactions in flight at once. PostgreSQL flushes the WAL of transactions that commit
/// together with one fsync, so several batches in flight cost about one flush.
const WRITERS: usize = 4;

/// Connections in the pool.
const POOL_SIZE: usize = 16;

/// The channel of the wake-up hint.
pub(crate) const CHANNEL: &str = "flare_work";

/// The advisory lock key held while migrating (any constant shared by every Flare process).
const MIGRATION_LOCK: i64 = 0x666c_6172_655f_6d67; // "flare_mg"

/// Embedded migrations, applied in order at start.
pub const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("0001_init.sql")),
    (2, include_str!("0002_run_node.sql")),
    (3, include_str!("0003_narrow_run_indexes.sql")),
    (4, include_str!("0004_run_queue.sql")),
    (5, include_str!("0005_lease_on_queue.sql")),
    (6, include_str!("0006_endpoints_nodes.sql")),
    (7, include_str!("0007_health.sql")),
    (8, include_str!("0008_steps.sql")),
    // Versions need not be consecutive: numbers were handed out to changes made side by side.
    (11, include_str!("0011_endpoint_protocol.sql")),
    (12, include_str!("0012_schedules.sql")),
    (13, include_str!("0013_job_paused.sql")),
    (14, include_str!("0014_search.sql")),
    (15, include_str!("0015_event_counts.sql")),
];

/// True for `postgres://…` and `postgresql://…` URLs.
pub fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// A PostgreSQL failure with the server's message (`tokio-postgres` prints only "db error").
#[derive(Debug)]
pub struct PgError {
    message: String,
    source: tokio_postgres::Error,
}

impl PgError {
    /// The SQLSTATE code, when the server answered with an error.
    pub fn code(&self) -> Option<&str> {
        self.source.as_db_error().map(|d| d.code().code())
    }
}

impl From<tokio_postgres::Error> for PgError {
    fn from(source: tokio_postgres::Error) -> Self {
        let message = match source.as_db_error() {
            Some(db) => format!("{} ({})", db.message(), db.code().code()),
            None => match std::error::Error::source(&source) {
                Some(cause) => format!("{source}: {cause}"),
                None => source.to_string(),
            },
        };
        Self { message, source }
    }
}

impl std::fmt::Display for PgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for PgError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Settings read from the URL and the environment.
#[derive(Debug, Clone)]
struct Settings {
    /// The connection settings, Flare's own parameters removed.
    config: tokio_postgres::Config,
    /// Whether to keep a `LISTEN` connection for wake-ups.
    listen: bool,
    /// Connections in the pool.
    pool_size: usize,
}

/// Reads `url`, removing Flare's own query parameters (the driver refuses parameters it does not
/// know): `flare_listen=on|off` (`FLARE_PG_LISTEN=off` in the environment also turns it off) and
/// `flare_pool_size=N` (connections per process, default [`POOL_SIZE`]).
fn settings(url: &str, env_listen: Option<&str>) -> Result<Settings> {
    let bad = || Error::Url(redact(url));
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let mut listen = !matches!(env_listen, Some(v) if is_off(v));
    let mut pool_size = POOL_SIZE;
    let mut kept = Vec::new();
    for pair in query.into_iter().flat_map(|q| q.split('&')) {
        match pair.split_once('=') {
            Some(("flare_listen", v)) => listen = !is_off(v),
            Some(("flare_pool_size", v)) => {
                pool_size = v.parse().ok().filter(|n| *n >= 2).ok_or_else(bad)?;
            }
            _ if pair.is_empty() => {}
            _ => kept.push(pair),
        }
    }
    let url = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    let mut config: tokio_postgres::Config = url.parse().map_err(|_| bad())?;
    // No JIT compilation: Flare's statements are short, and a statement whose estimated cost
    // passes `jit_above_cost` (large tables before their first ANALYZE, the pruner's joins)
    // spent 80-500 ms compiling to run in under a millisecond. First, so that the URL's own
    // `options` can turn it back on.
    let options = match config.get_options() {
        Some(own) if !own.trim().is_empty() => format!("-c jit=off {own}"),
        _ => "-c jit=off".to_string(),
    };
    config.options(options);
    Ok(Settings {
        config,
        listen,
        pool_size,
    })
}

fn is_off(v: &str) -> bool {
    matches!(
        v.to_ascii_lowercase().as_str(),
        "off" | "0" | "false" | "no"
    )
}

/// The URL with its password replaced by `***`, for messages and `Debug` output.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// Runs `sql` (prepared once per connection) and returns its rows.
pub(crate) async fn rows<C: GenericClient>(
    c: &C,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>> {
    let st = c.prepare_cached(sql).await?;
    Ok(c.query(&st, params).await?)
}

/// Runs `sql` (prepared once per connection) and returns how many rows it changed.
pub(crate) async fn exec<C: GenericClient>(
    c: &C,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<u64> {
    let st = c.prepare_cached(sql).await?;
    Ok(c.execute(&st, params).await?)
}

/// The PostgreSQL store. Cheap to clone.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("listen", &self.inner.listener.is_some())
            .finish()
    }
}

struct Inner {
    pool: Pool,
    triggers: Arc<Triggers>,
    work: Arc<Notify>,
    read_only: Arc<AtomicBool>,
    inserts: mpsc::Sender<InsertOp>,
    listener: Option<tokio::task::AbortHandle>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(l) = &self.listener {
            l.abort();
        }
    }
}

/// One caller's event waiting for the writer's next transaction.
struct InsertOp {
    event: NewEvent,
    payload: String,
    context: Option<String>,
    reply: oneshot::Sender<Result<Inserted>>,
}

/// What the writer task shares with the store.
struct Writer {
    pool: Pool,
    triggers: Arc<Triggers>,
    work: Arc<Notify>,
    read_only: Arc<AtomicBool>,
}

impl PgStore {
    /// Connects to the database at `url`, migrates it, loads the stored job definitions and
    /// starts the insert writer and (unless turned off) the wake-up listener.
    pub async fn open(url: &str) -> Result<Self> {
        let env = std::env::var("FLARE_PG_LISTEN").ok();
        let settings = settings(url, env.as_deref())?;
        let manager = Manager::from_config(
            settings.config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(settings.pool_size)
            .wait_timeout(Some(Duration::from_secs(30)))
            .create_timeout(Some(Duration::from_secs(10)))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|e| Error::Database(Arc::new(e)))?;

        migrate(&pool).await?;
        let triggers = Arc::new(Triggers::default());
        {
            let client = pool.get().await?;
            ops::triggers_refresh(&client, &triggers).await?;
        }
        let work = Arc::new(Notify::new());
        let read_only = Arc::new(AtomicBool::new(false));
        let listener = settings
            .listen
            .then(|| tokio::spawn(listen_loop(settings.config, Arc::clone(&work))).abort_handle());
        let (tx, rx) = mpsc::channel(MAX_BATCH * 4);
        let writer = Arc::new(Writer {
            pool: pool.clone(),
            triggers: Arc::clone(&triggers),
            work: Arc::clone(&work),
            read_only: Arc::clone(&read_only),
        });
        let rx = Arc::new(tokio::sync::Mutex::new(rx));
        for _ in 0..WRITERS {
            tokio::spawn(writer_loop(Arc::clone(&writer), Arc::clone(&rx)));
        }
        Ok(Self {
            inner: Arc::new(Inner {
                pool,
                triggers,
                work,
                read_only,
                inserts: tx,
                listener,
            }),
        })
    }

    /// The shared trigger registry.
    pub fn triggers(&self) -> &Arc<Triggers> {
        &self.inner.triggers
    }

    /// Notified after a commit that made runs runnable, here or (through `LISTEN`) elsewhere.
    pub fn work_notify(&self) -> &Arc<Notify> {
        &self.inner.work
    }

    /// A pooled connection.
    pub(crate) async fn conn(&self) -> Result<deadpool_postgres::Object> {
        Ok(self.inner.pool.get().await?)
    }

    /// Whether write transactions start `READ ONLY` (see [`Self::set_read_only`]).
    pub(crate) fn read_only(&self) -> bool {
        self.inner.read_only.load(Ordering::SeqCst)
    }

    /// Wakes this process's workers now (other processes get the `NOTIFY`).
    pub(crate) fn wake(&self) {
        self.inner.work.notify_one();
    }

    /// See [`super::Store::set_read_only`]: later write transactions start `READ ONLY`, so the
    /// database itself refuses them.
    pub async fn set_read_only(&self, on: bool) -> Result<()> {
        self.inner.read_only.store(on, Ordering::SeqCst);
        Ok(())
    }

    /// Checks that the database answers a query.
    pub async fn ping(&self) -> Result<()> {
        let conn = self.conn().await?;
        let c = &conn;
        rows(c, "SELECT 1", &[]).await.map(|_| ())
    }

    /// See [`super::Store::rollups_drift`]: `run_outcomes` against a count of the finished runs,
    /// `event_counts` (summed over its shards) against a count of the events.
    pub async fn rollups_drift(&self) -> Result<Vec<String>> {
        let conn = self.conn().await?;
        let found = rows(
            &conn,
            "WITH counted AS ( \
               SELECT finished_at / 60000 AS minute, job_id, status, count(*) AS n FROM runs \
               WHERE finished_at IS NOT NULL GROUP BY 1, 2, 3) \
             SELECT 'runs ' || minute || ' ' || job_id || ' ' || status || ': stored ' \
                    || coalesce(o.n, 0) || ', counted ' || coalesce(c.n, 0) \
             FROM counted c FULL JOIN run_outcomes o USING (minute, job_id, status) \
             WHERE coalesce(o.n, 0) <> coalesce(c.n, 0) \
             UNION ALL \
             SELECT 'events ' || minute || ': stored ' || coalesce(o.n, 0) || ', counted ' \
                    || coalesce(c.n, 0) \
             FROM (SELECT timestamp / 60000 AS minute, count(*) AS n FROM events GROUP BY 1) c \
             FULL JOIN (SELECT minute, sum(n) AS n FROM event_counts GROUP BY 1) o USING (minute) \
             WHERE coalesce(o.n, 0) <> coalesce(c.n, 0) OR o.n = 0",
            &[],
        )
        .await?;
        Ok(found.iter().map(|r| r.get::<_, String>(0)).collect())
    }

    /// See [`super::Store::statistics_refresh`]: `VACUUM ANALYZE` of the database.
    pub async fn statistics_refresh(&self) -> Result<()> {
        let conn = self.conn().await?;
        conn.batch_execute("VACUUM ANALYZE").await?;
        Ok(())
    }

    /// See [`super::Store::health_write`]: one upsert in its own transaction.
    pub async fn health_write(&self, now: i64) -> Result<()> {
        let conn = self.conn().await?;
        self.write_one(
            &conn,
            "INSERT INTO health (id, checked_at) VALUES (1, $1) \
             ON CONFLICT (id) DO UPDATE SET checked_at = excluded.checked_at",
            &[&now],
        )
        .await?;
        Ok(())
    }

    /// See [`super::Store::event_insert`]: grouped with concurrent inserts into one transaction.
    pub async fn event_insert(&self, event: NewEvent) -> Result<Inserted> {
        let payload = event.payload.to_string();
        let context = event.context.as_ref().map(serde_json::Value::to_string);
        let (reply, rx) = oneshot::channel();
        let op = InsertOp {
            event,
            payload,
            context,
            reply,
        };
        self.inner
            .inserts
            .send(op)
            .await
            .map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)?
    }
}

/// Applies the missing migrations under an advisory lock (held by one connection for the whole
/// run), each in its own transaction.
async fn migrate(pool: &Pool) -> Result<()> {
    let mut client = pool.get().await?;
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    let result = apply_migrations(&mut client).await;
    let unlock = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await;
    result?;
    unlock?;
    Ok(())
}

async fn apply_migrations(client: &mut deadpool_postgres::Object) -> Result<()> {
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS flare_migrations (version bigint PRIMARY KEY, applied_at bigint NOT NULL)",
        )
        .await?;
    for (version, sql) in MIGRATIONS {
        let done = client
            .query_opt(
                "SELECT 1 FROM flare_migrations WHERE version = $1",
                &[version],
            )
            .await?
            .is_some();
        if done {
            continue;
        }
        let tx = client.transaction().await?;
        tx.batch_execute(sql).await?;
        tx.execute(
            "INSERT INTO flare_migrations (version, applied_at) VALUES ($1, $2)",
            &[version, &chrono::Utc::now().timestamp_millis()],
        )
        .await?;
        tx.commit().await?;
        tracing::info!(version, "applied PostgreSQL migration");
    }
    Ok(())
}

/// Keeps a connection that `LISTEN`s on [`CHANNEL`] and wakes the workers on each notification;
/// reconnects with a backoff when it drops (workers poll meanwhile).
async fn listen_loop(config: tokio_postgres::Config, work: Arc<Notify>) {
    let mut failures = 0u32;
    loop {
        match listen_once(&config, &work).await {
            Ok(()) => failures = 0,
            Err(e) => {
                failures += 1;
                if let Some(suppressed) = storage_failure("postgres:listen") {
                    tracing::warn!(error = %e, suppressed, "the PostgreSQL wake-up listener stopped; workers poll until it reconnects");
                }
            }
        }
        // Something may have been queued while not listening.
        work.notify_one();
        tokio::time::sleep(Duration::from_millis(
            200 * u64::from(failures.clamp(1, 25)),
        ))
        .await;
    }
}

async fn listen_once(config: &tokio_postgres::Config, work: &Notify) -> Result<()> {
    let (client, mut connection) = config.connect(NoTls).await?;
    let (seen_tx, mut seen_rx) = mpsc::unbounded_channel::<()>();
    let driver = tokio::spawn(async move {
        loop {
            match futures::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(tokio_postgres::AsyncMessage::Notification(_))) => {
                    if seen_tx.send(()).is_err() {
                        return Ok(());
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                None => return Ok(()),
            }
        }
    });
    client.batch_execute(&format!("LISTEN {CHANNEL}")).await?;
    work.notify_one();
    while seen_rx.recv().await.is_some() {
        // Coalesce a burst of notifications into one wake-up.
        while seen_rx.try_recv().is_ok() {}
        work.notify_one();
    }
    drop(client);
    match driver.await {
        Ok(r) => Ok(r?),
        Err(_) => Err(Error::Closed),
    }
}

/// Collects waiting inserts into one transaction (group commit) and answers each caller after
/// `COMMIT`. [`WRITERS`] of these share the queue: while one batch waits for its commit, the
/// next one is already being written.
async fn writer_loop(writer: Arc<Writer>, rx: Arc<tokio::sync::Mutex<mpsc::Receiver<InsertOp>>>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    loop {
        let n = rx.lock().await.recv_many(&mut batch, MAX_BATCH).await;
        if n == 0 {
            break;
        }
        match write_batch(&writer, &batch).await {
            Ok(inserted) => {
                for (op, ins) in batch.drain(..).zip(inserted) {
                    let _ = op.reply.send(Ok(ins));
                }
            }
            Err(e) => {
                if let Some(suppressed) = storage_failure("postgres:insert") {
                    tracing::error!(error = %e, events = batch.len(), suppressed, "inserting a batch of events failed; every sender gets the error");
                }
                for op in batch.drain(..) {
                    let _ = op.reply.send(Err(e.clone()));
                }
            }
        }
    }
    tracing::debug!("PostgreSQL writer stopped");
}

/// Writes one batch in two round trips: the job table's revision (fan-out must know every stored
/// job), then `BEGIN`, the insert, the `NOTIFY` and `COMMIT` pipelined.
async fn write_batch(writer: &Writer, batch: &[InsertOp]) -> Result<Vec<Inserted>> {
    let client = writer.pool.get().await?;
    ops::triggers_refresh(&client, &writer.triggers).await?;
    let insert = client.prepare_cached(ops::INSERT_EVENTS_SQL).await?;
    let notify = client.prepare_cached(ops::NOTIFY_SQL).await?;
    let rows: Vec<ops::EventRow<'_>> = batch
        .iter()
        .map(|op| ops::EventRow {
            event: &op.event,
            payload: &op.payload,
            context: op.context.as_deref(),
        })
        .collect();
    let prepared = ops::PreparedEvents::new(&writer.triggers, &rows);
    let begin = if writer.read_only.load(Ordering::SeqCst) {
        "BEGIN READ ONLY"
    } else {
        "BEGIN"
    };
    let params = prepared.params();
    let wake = prepared.wake;
    // Sent in this order on the first poll; each answer comes back in order. A failed statement
    // aborts the transaction, and the COMMIT after it then rolls back.
    let (began, inserted, notified, committed) = futures::join!(
        client.batch_execute(begin),
        client.query(&insert, &params),
        async {
            if wake {
                client.execute(&notify, &[&CHANNEL]).await.map(|_| ())
            } else {
                Ok(())
            }
        },
        client.batch_execute("COMMIT"),
    );
    began?;
    let inserted = inserted?;
    notified?;
    committed?;
    let (created, existing) = prepared.created(&inserted)?;
    let stored = ops::events_by_ids(&client, &existing).await?;
    let result = prepared.finish(&created, &stored)?;
    if wake {
        writer.work.notify_one();
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_run_without_jit_unless_the_url_says_otherwise() {
        let s = settings("postgres://u@localhost/db", None).expect("parse");
        assert_eq!(s.config.get_options(), Some("-c jit=off"));
        let s = settings("postgres://u@localhost/db?options=-c%20jit%3Don", None).expect("parse");
        assert_eq!(s.config.get_options(), Some("-c jit=off -c jit=on"));
    }

    #[test]
    fn urls_are_recognized_and_flare_parameters_removed() {
        assert!(is_postgres_url("postgres://u@h/db"));
        assert!(is_postgres_url("postgresql://u@h/db"));
        assert!(!is_postgres_url("sqlite://x.db"));

        let s = settings("postgres://u@localhost/db", None).expect("parse");
        assert!(s.listen);
        let s = settings(
            "postgres://u@localhost/db?flare_listen=off&connect_timeout=5",
            None,
        )
        .expect("parse");
        assert!(!s.listen);
        assert_eq!(
            s.config.get_connect_timeout(),
            Some(&Duration::from_secs(5))
        );
        let s = settings("postgres://u@localhost/db", Some("off")).expect("parse");
        assert!(!s.listen);
        let s = settings("postgres://u@localhost/db?flare_listen=on", Some("off")).expect("parse");
        assert!(s.listen, "the URL wins over the environment");
        assert_eq!(s.pool_size, POOL_SIZE);
        let s = settings("postgres://u@localhost/db?flare_pool_size=4", None).expect("parse");
        assert_eq!(s.pool_size, 4);
        assert!(settings("postgres://u@localhost/db?flare_pool_size=1", None).is_err());
        assert!(settings("postgres://u@localhost/db?flare_pool_size=x", None).is_err());
    }

    #[test]
    fn bad_urls_are_refused_without_their_password() {
        let e = settings("postgres://u:secret@localhost/db?nonsense=1", None)
            .expect_err("unknown parameter");
        let text = e.to_string();
        assert!(!text.contains("secret"), "{text}");
        assert!(text.contains("u:***@localhost"), "{text}");
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact("sqlite://a@b.db"), "sqlite://a@b.db");
    }
}
