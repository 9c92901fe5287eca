//! The PostgreSQL backend: any number of processes share one database.
//!
//! Mirrors `store/sqlite/` file for file: `mod` (the store's handle, opening, migrations, health,
//! transaction helpers), `writer` (group commit of event inserts), `rows` (decoding rows into the
//! model), `events`, `runs`, `steps`, `jobs` (definitions and schedules), `webhooks`,
//! `endpoints`, `nodes` (node beats and leader leases) and `query` (lists and statistics). Only
//! PostgreSQL has `listen` (the `LISTEN` connection that wakes the workers).
//!
//! - **Connections**: a `deadpool-postgres` pool of `tokio-postgres` connections; statements are
//!   prepared once per connection and cached.
//! - **Migrations** ([`MIGRATIONS`]) are embedded and applied at start under an advisory lock, so
//!   several processes starting at once migrate once.
//! - **Group commit** (`writer`): [`PgStore::event_insert`] hands the event to the writer tasks;
//!   one takes every insert waiting (up to [`MAX_BATCH`]), writes them and their runs with one
//!   `UNNEST` statement in one transaction (pipelined with `BEGIN`, `NOTIFY` and `COMMIT`), and
//!   answers each caller only after `COMMIT`. A few writers overlap, so one batch fills while
//!   another commits.
//! - **The queue** is `run_queue`, one row per queued or running run (with the lease of a running
//!   one), next to the run history in `runs` (see `runs.rs`, `0004_run_queue.sql` and
//!   `0005_lease_on_queue.sql`); readers see both through the view `run_state`. **Claims** are one
//!   `UPDATE run_queue … WHERE seq = ANY(ARRAY(SELECT … FOR UPDATE SKIP LOCKED LIMIT n))` per
//!   group on its partial index of runnable rows; **completions** are one statement per batch
//!   (`UNNEST` arrays), fenced by the lease token on the queue row.
//! - **Wake-ups** (`listen`): a transaction that makes runs runnable sends one `NOTIFY
//!   flare_work`; a listener connection turns it into the same [`Notify`] the workers wait on.
//!   Workers poll as well, so the hint may be lost. Behind a transaction-mode connection pooler,
//!   where `LISTEN` does not work, turn the listener off with `FLARE_PG_LISTEN=off` or
//!   `?flare_listen=off` on the URL.
//! - **Storage down** for tests ([`PgStore::health_fail_writes`]): every write transaction then
//!   starts `READ ONLY`, so PostgreSQL itself refuses the writes.

mod cancel;
mod cancel_on;
mod children;
mod control;
mod debounce;
mod ended;
mod endpoints;
mod events;
mod flow;
mod held;
mod invoke;
mod jobs;
mod links;
mod listen;
mod new_runs;
mod nodes;
mod query;
mod rows;
mod runs;
mod steps;
mod waits;
mod webhooks;
mod writer;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{
    GenericClient, Manager, ManagerConfig, Object, Pool, RecyclingMethod, Transaction,
};
use tokio::sync::{mpsc, Notify};
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row};

use super::{Error, Result, Triggers};
use listen::listen_loop;
use rows::{rows, triggers_refresh};
pub use writer::MAX_BATCH;
use writer::{writer_loop, InsertOp, Writer, WRITERS};

impl From<tokio_postgres::Error> for Error {
    fn from(e: tokio_postgres::Error) -> Self {
        Error::Database(Arc::new(PgError::from(e)))
    }
}

impl From<deadpool_postgres::PoolError> for Error {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(e) => e.into(),
            other => Error::Database(Arc::new(other)),
        }
    }
}

/// Connections in the pool.
pub(super) const POOL_SIZE: usize = 16;

/// The advisory lock key held while migrating (any constant shared by every Flare process).
pub(super) const MIGRATION_LOCK: i64 = 0x666c_6172_655f_6d67; // "flare_mg"

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
    (20, include_str!("0020_flow_concurrency.sql")),
    (21, include_str!("0021_flow_rate_limit.sql")),
    (22, include_str!("0022_flow_throttle.sql")),
    (23, include_str!("0023_flow_start_timeout.sql")),
    (24, include_str!("0024_flow_debounce.sql")),
    (25, include_str!("0025_flow_priority.sql")),
    (26, include_str!("0026_flow_claim_set.sql")),
    (30, include_str!("0030_event_waits.sql")),
    (31, include_str!("0031_cancel_on.sql")),
    (40, include_str!("0040_job_owner_note.sql")),
    (41, include_str!("0041_node_details.sql")),
    (42, include_str!("0042_step_label.sql")),
    (50, include_str!("0050_webhook_sources.sql")),
    (55, include_str!("0055_wait_key.sql")),
    (56, include_str!("0056_cancel_key.sql")),
];

/// The highest migration this binary knows (versions have gaps; a newer binary adds higher ones).
pub fn last_migration() -> i64 {
    MIGRATIONS.iter().map(|(v, _)| *v).max().unwrap_or(0)
}

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
pub(super) struct Settings {
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
pub(super) fn settings(url: &str, env_listen: Option<&str>) -> Result<Settings> {
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

pub(super) fn is_off(v: &str) -> bool {
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

pub(super) struct Inner {
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

/// Applies the missing migrations under an advisory lock (held by one connection for the whole
/// run), each in its own transaction.
pub(super) async fn migrate(pool: &Pool) -> Result<()> {
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

pub(super) async fn apply_migrations(client: &mut deadpool_postgres::Object) -> Result<()> {
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS flare_migrations (version bigint PRIMARY KEY, applied_at bigint NOT NULL)",
        )
        .await?;
    // A database a newer binary migrated is refused before anything is applied or used.
    let found: Option<i64> = client
        .query_one("SELECT max(version) FROM flare_migrations", &[])
        .await?
        .get(0);
    super::error::schema_guard(found, last_migration())?;
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

/// Settings of a [`PgStore::with_settings`] transaction whose commit waits for the WAL flush.
pub(super) const GENERIC_PLAN: &str = "SET LOCAL plan_cache_mode = force_generic_plan";

/// Settings of a [`PgStore::with_settings`] transaction for a write whose loss in a server crash
/// costs nothing but a re-run, a lease extension: its commit does not wait for the WAL flush. If
/// the server crashes before the flush, the lease is simply shorter; the fencing token keeps
/// at-least-once. Every other write (events, runs, outcomes) stays synchronous.
pub(super) const GENERIC_PLAN_NO_WAIT: &str =
    "SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL synchronous_commit = off";

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

        // A server that cannot be reached is named (host:port) in the one-line start error.
        drop(
            pool.get()
                .await
                .map_err(|e| unreachable(&settings.config, e))?,
        );
        migrate(&pool).await?;
        let triggers = Arc::new(Triggers::default());
        {
            let client = pool.get().await?;
            triggers_refresh(&client, &triggers).await?;
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
            wait_paths: Default::default(),
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

    /// Checks that the database answers a query.
    pub async fn health_read(&self) -> Result<()> {
        let conn = self.conn().await?;
        let c = &conn;
        rows(c, "SELECT 1", &[]).await.map(|_| ())
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

    /// See [`crate::store::Store::health_fail_writes`]: later write transactions start `READ ONLY`, so the
    /// database itself refuses them.
    pub async fn health_fail_writes(&self, on: bool) -> Result<()> {
        self.inner.read_only.store(on, Ordering::SeqCst);
        Ok(())
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

    /// Starts a write transaction on `client` (`READ ONLY` while the store is switched so).
    pub(super) async fn begin<'a>(&self, client: &'a mut Object) -> Result<Transaction<'a>> {
        Ok(client
            .build_transaction()
            .read_only(self.read_only())
            .start()
            .await?)
    }

    /// Runs one statement as its own transaction: in autocommit (one round trip) or, while the
    /// store is read-only, pipelined inside `BEGIN READ ONLY` … `COMMIT` so the server refuses it.
    pub(super) async fn write_one(
        &self,
        c: &Object,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        let st = c.prepare_cached(sql).await?;
        if !self.read_only() {
            return Ok(c.query(&st, params).await?);
        }
        self.pipelined(c, "BEGIN READ ONLY", &st, params).await
    }

    /// Runs one statement of the run lifecycle (claim, heartbeat, completion, the look at the
    /// next due run) as its own transaction (`READ ONLY` while the store is switched so), after the
    /// `SET LOCAL`s in `settings`, in one round trip. Each sets
    /// `plan_cache_mode = force_generic_plan` (see [`GENERIC_PLAN`]): these statements look every
    /// run up by its key, and the generic plan, made for any batch, does that; a custom plan
    /// (what PostgreSQL uses for a connection's first five executions) is estimated from the
    /// batch's values and the tables' statistics, which are stale right after a burst of work,
    /// and costs a planning on every call.
    pub(super) async fn with_settings(
        &self,
        c: &Object,
        settings: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        let st = c.prepare_cached(sql).await?;
        let mode = if self.read_only() { " READ ONLY" } else { "" };
        self.pipelined(c, &format!("BEGIN{mode}; {settings}"), &st, params)
            .await
    }

    /// [`PgStore::with_settings`] with a statement `first` (and its parameters) before `sql`,
    /// whose result is not read (a lock), in the same round trip.
    pub(super) async fn with_settings_after(
        &self,
        c: &Object,
        settings: &str,
        first: (&str, &[&(dyn ToSql + Sync)]),
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        let before = c.prepare_cached(first.0).await?;
        let st = c.prepare_cached(sql).await?;
        let mode = if self.read_only() { " READ ONLY" } else { "" };
        let begin = format!("BEGIN{mode}; {settings}");
        let (began, done, result, ended) = futures::join!(
            c.batch_execute(&begin),
            c.query(&before, first.1),
            c.query(&st, params),
            c.batch_execute("COMMIT"),
        );
        began?;
        done?;
        let result = result?;
        ended?;
        Ok(result)
    }

    /// Sends `begin`, the statement and `COMMIT` in one round trip. A failed statement aborts the
    /// transaction, and the `COMMIT` after it then rolls back.
    async fn pipelined(
        &self,
        c: &Object,
        begin: &str,
        st: &tokio_postgres::Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        let (began, result, ended) = futures::join!(
            c.batch_execute(begin),
            c.query(st, params),
            c.batch_execute("COMMIT"),
        );
        began?;
        let result = result?;
        ended?;
        Ok(result)
    }
}

/// Creates the database `name` on the server of `url` and returns the URL naming it (a fresh
/// database per benchmark repetition or test). `name` must be a plain identifier.
pub async fn database_create(url: &str, name: &str) -> Result<String> {
    let (admin, conn) = tokio_postgres::connect(url, NoTls).await?;
    let task = tokio::spawn(conn);
    let created = admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await;
    drop(admin);
    let _ = task.await;
    created?;
    Ok(with_database(url, name))
}

/// Drops the database `name` on the server of `url`, closing its connections.
pub async fn database_drop(url: &str, name: &str) -> Result<()> {
    let (admin, conn) = tokio_postgres::connect(url, NoTls).await?;
    let task = tokio::spawn(conn);
    let dropped = admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await;
    drop(admin);
    let _ = task.await;
    Ok(dropped?)
}

/// `url` with its database name replaced by `db` (query parameters kept).
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (url, String::new()),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let host = match base[scheme_end..].find('/') {
        Some(i) => &base[..scheme_end + i],
        None => base,
    };
    format!("{host}/{db}{query}")
}

/// Where `config` connects: `host:port` for each host (a socket directory as its path).
pub(super) fn addresses(config: &tokio_postgres::Config) -> String {
    let ports = config.get_ports();
    config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            match host {
                tokio_postgres::config::Host::Tcp(h) => format!("{h}:{port}"),
                #[cfg(unix)]
                tokio_postgres::config::Host::Unix(path) => format!("{}:{port}", path.display()),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A first connection that failed, with where it was tried.
#[derive(Debug, thiserror::Error)]
#[error("cannot connect to PostgreSQL at {at}: {reason}")]
struct Unreachable {
    at: String,
    reason: String,
}

/// The error of a first connection that failed, naming the server's address.
fn unreachable(config: &tokio_postgres::Config, e: deadpool_postgres::PoolError) -> Error {
    let reason = match Error::from(e) {
        Error::Database(cause) => cause.to_string(),
        other => other.to_string(),
    };
    Error::Database(Arc::new(Unreachable {
        at: addresses(config),
        reason,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_server_that_refuses_the_connection_is_named_by_host_and_port() {
        // Nothing listens on port 1.
        let e = PgStore::open("postgres://u@127.0.0.1:1/db?flare_listen=off")
            .await
            .expect_err("refused");
        let text = e.to_string();
        assert!(
            text.contains("cannot connect to PostgreSQL at 127.0.0.1:1"),
            "{text}"
        );
        let s = settings("postgres://u@db.internal/x", None).expect("parse");
        assert_eq!(addresses(&s.config), "db.internal:5432");
    }

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
