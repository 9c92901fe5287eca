//! The read side of the SQLite backend: the list and statistics queries of
//! [`crate::store::query`]. Lists are keyset-paginated on `seq` (newest first) and each filter
//! has an index (`0001_init.sql`, `0002_read_indexes.sql`); the tests below check the query plans.
//!
//! The payload search (`q`) is a `LIKE` over the payload text. Terms of three characters or more
//! go through the trigram index of `search.rs` (with the same results); shorter ones walk events
//! newest first and stop at a page, reading the whole table when nothing matches.

use std::collections::HashMap;

use rusqlite::types::Value as SqlValue;
use rusqlite::{params, params_from_iter, Connection};

use super::rows::{event_from_row, json_text, run_from_row, EVENT_COLUMNS, RUN_COLUMNS};
use super::search;
use super::SqliteStore;
use crate::model::{ms_to_time, RunStatus};
use crate::store::jobs;
use crate::store::query::{
    clamp_limit, EventQuery, EventStatus, EventSummary, JobDefinition, JobSummary, Outcomes, Page,
    QueueDepth, RunCounts, RunQuery, RunSummary, Stats, StatsQuery, StatsWindow,
};
use crate::store::sql::{like_pattern, page, status_condition};
use crate::store::stats::StatsRows;
use crate::store::{Error, Result};

/// The kind of a source, the part before the colon; indexed as `events_source_kind` (0002), whose
/// expression must stay identical.
const SOURCE_KIND: &str =
    "(CASE WHEN instr(source, ':') > 0 THEN substr(source, 1, instr(source, ':') - 1) ELSE source END)";

/// Collects conditions with numbered parameters.
#[derive(Default)]
pub(super) struct Where {
    pub(super) conds: Vec<String>,
    pub(super) params: Vec<SqlValue>,
}

impl Where {
    /// Adds a parameter and returns its placeholder.
    pub(super) fn param(&mut self, v: impl Into<SqlValue>) -> String {
        self.params.push(v.into());
        format!("?{}", self.params.len())
    }

    pub(super) fn cond(&mut self, c: String) {
        self.conds.push(c);
    }

    pub(super) fn sql(&self) -> String {
        if self.conds.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", self.conds.join(" AND "))
        }
    }
}

/// Rows an event list fetches: one more than a page, to know whether another page follows.
pub(super) fn fetch_limit(q: &EventQuery) -> usize {
    clamp_limit(q.limit) + 1
}

/// The event list's SQL: columns of [`event_from_row`], then `seq`.
fn events_sql(q: &EventQuery) -> (String, Vec<SqlValue>) {
    let w = events_where(q, Walk::Table);
    let limit = fetch_limit(q);
    let sql = format!(
        "SELECT {EVENT_COLUMNS}, seq FROM events {} ORDER BY seq DESC LIMIT {limit}",
        w.sql()
    );
    (sql, w.params)
}

/// What reads the events of a list, for [`events_where`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Walk {
    /// The primary key, newest first, possibly far (a filter few rows match): a time bound also
    /// bounds `seq`, so the walk stops at the window's edge.
    Table,
    /// Something that bounds the walk already (the search index, or the unindexed tail): the
    /// `seq` bound would only cost its own lookup, a read of every index entry in the window
    /// (0.3 s for a day holding a million events).
    Bounded,
}

/// The event list's conditions, on the unaliased `events` table.
pub(super) fn events_where(q: &EventQuery, walk: Walk) -> Where {
    let mut w = Where::default();
    if let Some(name) = &q.name {
        let p = w.param(name.clone());
        w.cond(format!("name = {p}"));
    }
    if let Some(source) = &q.source {
        if source.contains(':') {
            let p = w.param(source.clone());
            w.cond(format!("source = {p}"));
        } else {
            // The kind before the colon (`job` matches `job:run_…`, and `api` itself).
            let p = w.param(source.clone());
            w.cond(format!("{SOURCE_KIND} = {p}"));
        }
    }
    if let Some(from) = q.from {
        let p = w.param(from.timestamp_millis());
        w.cond(format!("timestamp >= {p}"));
    }
    if let (Some(from), Walk::Table) = (q.from, walk) {
        let p = w.param(from.timestamp_millis());
        // The same rows, said so the newest-first walk on the primary key can stop: no row at or
        // after `from` has a smaller seq than the smallest such row, read off events_timestamp
        // (named, or the planner walks the table from its oldest row to find the minimum).
        // Without it a time-bounded payload search read the whole table (~0.3 s at 1M events).
        w.cond(format!(
            "seq >= (SELECT coalesce(min(seq), 9223372036854775807) FROM events \
             INDEXED BY events_timestamp WHERE timestamp >= {p})"
        ));
    }
    if let Some(to) = q.to {
        let p = w.param(to.timestamp_millis());
        w.cond(format!("timestamp < {p}"));
    }
    if let Some(text) = &q.q {
        let p = w.param(like_pattern(text));
        w.cond(format!("payload LIKE {p} ESCAPE '\\'"));
    }
    if let Some(cursor) = q.cursor {
        let p = w.param(cursor.seq());
        w.cond(format!("seq < {p}"));
    }
    if let Some(status) = q.status {
        w.cond(status_condition(status));
    }
    w
}

/// One page of [`EventQuery`] with a payload search (`q` set and [`search::indexable`]): the rows
/// of the event list (columns of `event_from_row`, then `seq`), newest first, at
/// most one more than the page. Runs in the caller's read transaction.
pub(super) fn events_page<T>(
    conn: &Connection,
    q: &EventQuery,
    text: &str,
    mut row: impl FnMut(&rusqlite::Row<'_>) -> Result<T>,
) -> Result<Vec<T>> {
    let limit = fetch_limit(q);
    let indexed = search::watermark(conn)?;
    let mut out = Vec::new();

    // The tail: events not indexed yet, the newest ones, walked by the primary key.
    let mut w = events_where(q, Walk::Bounded);
    let p = w.param(indexed);
    w.cond(format!("seq > {p}"));
    let sql = format!(
        "SELECT {EVENT_COLUMNS}, seq FROM events {} ORDER BY seq DESC LIMIT {limit}",
        w.sql()
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows = stmt.query(params_from_iter(w.params))?;
    while let Some(r) = rows.next()? {
        out.push(row(r)?);
    }
    if out.len() >= limit || indexed == 0 {
        return Ok(out);
    }

    // The indexed part: the FTS table drives (CROSS JOIN keeps it outer), newest first, and each
    // candidate is looked up by seq and checked by the list's conditions, `LIKE` included.
    let mut w = events_where(q, Walk::Bounded);
    let m = w.param(search::trigrams(text));
    let p = w.param(indexed);
    let conds = std::iter::once(format!(
        "event_search MATCH {m} AND event_search.rowid <= {p}"
    ))
    .chain(w.conds.iter().cloned())
    .collect::<Vec<_>>()
    .join(" AND ");
    let sql = format!(
        "SELECT {EVENT_COLUMNS}, events.seq FROM event_search CROSS JOIN events \
           ON events.seq = event_search.rowid \
         WHERE {conds} ORDER BY event_search.rowid DESC LIMIT {}",
        limit - out.len()
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows = stmt.query(params_from_iter(w.params))?;
    while let Some(r) = rows.next()? {
        out.push(row(r)?);
    }
    Ok(out)
}

/// The run list's SQL: columns of [`run_from_row`], then `seq` and the event's name.
fn runs_sql(q: &RunQuery) -> (String, Vec<SqlValue>) {
    let mut w = Where::default();
    if let Some(job) = &q.job_id {
        let p = w.param(job.clone());
        w.cond(format!("job_id = {p}"));
    }
    // The state is written as a literal (it is one of five words), so the planner can use the
    // partial indexes whose condition it implies (`0016_lean_run_indexes.sql`).
    let mut index = "";
    if let Some(status) = q.status {
        w.cond(format!("status = '{}'", status.as_str()));
        // Queued and running runs are as many as the queue holds: read them off the queue and
        // lease indexes and sort them, rather than walk the whole history newest first.
        index = match status {
            // Queued runs are in two queues: without slots, and in their slots' queues.
            RunStatus::Queued if q.event_id.is_none() => QUEUED_RUNS,
            RunStatus::Running if q.event_id.is_none() => "INDEXED BY runs_leased",
            _ => "",
        };
    }
    if let Some(event) = &q.event_id {
        let p = w.param(event.clone());
        w.cond(format!("event_id = {p}"));
    }
    if let Some(cursor) = q.cursor {
        let p = w.param(cursor.seq());
        w.cond(format!("seq < {p}"));
    }
    let limit = clamp_limit(q.limit) + 1;
    let sql = format!(
        "SELECT {RUN_COLUMNS}, seq, (SELECT e.name FROM events e WHERE e.id = runs.event_id) \
         FROM runs {index} {} ORDER BY seq DESC LIMIT {limit}",
        w.sql()
    );
    (sql, w.params)
}

/// Runs per state of each listed event.
fn run_counts_of(conn: &Connection, ids: &[String]) -> Result<HashMap<String, RunCounts>> {
    let list = serde_json::to_string(ids).map_err(|e| Error::Corrupt(e.to_string()))?;
    let mut stmt = conn.prepare_cached(
        "SELECT event_id, status, count(*) FROM runs \
         WHERE event_id IN (SELECT value FROM json_each(?1)) GROUP BY event_id, status",
    )?;
    let mut rows = stmt.query([list])?;
    let mut counts: HashMap<String, RunCounts> = HashMap::new();
    while let Some(r) = rows.next()? {
        let status: String = r.get(1)?;
        if let Some(s) = RunStatus::parse(&status) {
            counts
                .entry(r.get(0)?)
                .or_default()
                .add(s, r.get::<_, u64>(2)?);
        }
    }
    Ok(counts)
}

/// `SELECT {what} FROM runs INDEXED BY <queue> WHERE status = 'queued' AND <its condition>
/// {and} {tail}` over every queue index, joined by `UNION ALL`: the indexes of runs without and
/// with a priority (`0025_flow_priority.sql`), without and with slots
/// (`0020_flow_concurrency.sql`). Every queued run is in exactly one, and each carries the job
/// and the due time.
macro_rules! each_queue {
    ($what:literal, $and:literal, $tail:literal) => {
        concat!(
            "SELECT ", $what, " FROM runs INDEXED BY runs_runnable WHERE status = 'queued' AND slot_a IS NULL AND priority_ms IS NULL ", $and, " ", $tail,
            " UNION ALL SELECT ", $what, " FROM runs INDEXED BY runs_slot_queue WHERE status = 'queued' AND slot_a IS NOT NULL AND priority_ms IS NULL ", $and, " ", $tail,
            " UNION ALL SELECT ", $what, " FROM runs INDEXED BY runs_ranked_due WHERE status = 'queued' AND slot_a IS NULL AND priority_ms IS NOT NULL ", $and, " ", $tail,
            " UNION ALL SELECT ", $what, " FROM runs INDEXED BY runs_slot_ranked_due WHERE status = 'queued' AND slot_a IS NOT NULL AND priority_ms IS NOT NULL ", $and, " ", $tail
        )
    };
}

/// Queued runs per job, counted on the queue indexes (which carry the job): no row is read.
const QUEUED_BY_JOB: &str = concat!(
    "SELECT job_id, sum(n) FROM (",
    each_queue!("job_id, count(*) AS n", "", "GROUP BY job_id"),
    ") GROUP BY job_id"
);

/// The runs of a list of queued runs, read off the queue indexes.
const QUEUED_RUNS: &str = concat!(
    "AS runs JOIN (",
    each_queue!("seq AS queued_seq", "", ""),
    ") ON queued_seq = runs.seq"
);

/// Running runs per job, counted on the lease index.
const RUNNING_BY_JOB: &str =
    "SELECT job_id, count(*) FROM runs INDEXED BY runs_leased WHERE status = 'running' GROUP BY job_id";

/// Finished runs of the minutes in `[?1, ?2)` (ms) by job and state, from the per-minute counts
/// (`rollups.rs`).
const OUTCOMES_BY_JOB: &str = "SELECT job_id, status, max(sum(n), 0) FROM run_outcomes \
     WHERE minute >= ?1 / 60000 AND minute < ?2 / 60000 GROUP BY job_id, status";

/// Events received in `[?1, ?2)` by bucket of `?3` ms (a whole number of minutes).
const EVENT_BUCKETS: &str = "SELECT (minute * 60000 - ?1) / ?3, max(sum(n), 0) FROM event_counts \
     WHERE minute >= ?1 / 60000 AND minute < ?2 / 60000 GROUP BY 1";

/// Runs finished in `[?1, ?2)` by bucket of `?3` ms and state.
const RUN_BUCKETS: &str =
    "SELECT (minute * 60000 - ?1) / ?3, status, max(sum(n), 0) FROM run_outcomes \
     WHERE minute >= ?1 / 60000 AND minute < ?2 / 60000 GROUP BY 1, 2";

/// Runs that finished at or after `since` (and before `until`, when given), by job and state.
/// Both bounds are whole minutes, as the counts are.
fn outcomes_by_job(
    conn: &Connection,
    since: i64,
    until: Option<i64>,
) -> Result<HashMap<String, Outcomes>> {
    let mut stmt = conn.prepare_cached(OUTCOMES_BY_JOB)?;
    let mut rows = stmt.query(params![since, until.unwrap_or(i64::MAX)])?;
    let mut out: HashMap<String, Outcomes> = HashMap::new();
    while let Some(r) = rows.next()? {
        let status: String = r.get(1)?;
        if let Some(s) = RunStatus::parse(&status) {
            out.entry(r.get(0)?)
                .or_default()
                .add(s, r.get::<_, u64>(2)?);
        }
    }
    Ok(out)
}

fn queue_depth_at(conn: &Connection, now: i64) -> Result<QueueDepth> {
    let count = |sql: &str, p: &[&dyn rusqlite::ToSql]| -> Result<u64> {
        Ok(conn.prepare_cached(sql)?.query_row(p, |r| r.get(0))?)
    };
    Ok(QueueDepth {
        ready: count(
            concat!(
                "SELECT sum(n) FROM (",
                each_queue!("count(*) AS n", "AND run_at <= ?1", ""),
                ")"
            ),
            &[&now],
        )?,
        delayed: count(
            concat!(
                "SELECT sum(n) FROM (",
                each_queue!("count(*) AS n", "AND run_at > ?1", ""),
                ")"
            ),
            &[&now],
        )?,
        running: count("SELECT count(*) FROM runs WHERE status = 'running'", &[])?,
        scheduled_events: count(
            "SELECT count(*) FROM events WHERE delivered_at IS NULL AND cancelled_at IS NULL",
            &[],
        )?,
    })
}

impl SqliteStore {
    /// See [`crate::store::Store::events_list`].
    pub async fn events_list(&self, q: EventQuery) -> Result<Page<EventSummary>> {
        self.read(move |c| {
            // One snapshot for the search's two parts and the run counts.
            let _snapshot = c.unchecked_transaction()?;
            let row = |r: &rusqlite::Row<'_>| Ok((event_from_row(c, r)?, r.get::<_, i64>(10)?));
            let events = match q.q.as_deref().filter(|t| search::indexable(t)) {
                Some(text) => events_page(c, &q, text, row)?,
                None => {
                    let (sql, args) = events_sql(&q);
                    let mut stmt = c.prepare_cached(&sql)?;
                    let mut rows = stmt.query(params_from_iter(args))?;
                    let mut events = Vec::new();
                    while let Some(r) = rows.next()? {
                        events.push(row(r)?);
                    }
                    events
                }
            };
            let ids: Vec<String> = events.iter().map(|(e, _)| e.id.clone()).collect();
            let mut counts = run_counts_of(c, &ids)?;
            let rows = events
                .into_iter()
                .map(|(event, seq)| {
                    let run_counts = counts.remove(&event.id).unwrap_or_default();
                    let status = EventStatus::of(&event, &run_counts);
                    let summary = EventSummary {
                        event,
                        status,
                        run_counts,
                    };
                    (summary, seq)
                })
                .collect();
            Ok(page(rows, q.limit))
        })
        .await
    }

    /// See [`crate::store::Store::runs_list`].
    pub async fn runs_list(&self, q: RunQuery) -> Result<Page<RunSummary>> {
        self.read(move |c| {
            let (sql, args) = runs_sql(&q);
            let mut stmt = c.prepare_cached(&sql)?;
            let mut rows = stmt.query(params_from_iter(args))?;
            let mut runs = Vec::new();
            while let Some(r) = rows.next()? {
                let summary = RunSummary {
                    run: run_from_row(r)?,
                    event_name: r.get::<_, Option<String>>(15)?.unwrap_or_default(),
                };
                runs.push((summary, r.get::<_, i64>(14)?));
            }
            Ok(page(runs, q.limit))
        })
        .await
    }

    /// See [`crate::store::Store::jobs_list`].
    pub async fn jobs_list(&self, now: i64) -> Result<Vec<JobSummary>> {
        self.read(move |c| {
            let mut stmt = c.prepare_cached(
                "SELECT id, name, version, event, filter, max_attempts, timeout_ms, concurrency, updated_at, paused, concurrency_limits, rate_limit, throttle, start_timeout_ms, debounce, priority \
                 FROM jobs ORDER BY id",
            )?;
            let mut rows = stmt.query([])?;
            let mut defs = Vec::new();
            while let Some(r) = rows.next()? {
                let filter: Option<String> = r.get(4)?;
                defs.push(JobDefinition {
                    id: r.get(0)?,
                    name: r.get(1)?,
                    version: r.get(2)?,
                    event: r.get(3)?,
                    filter: filter.as_deref().map(json_text).transpose()?,
                    max_attempts: r.get(5)?,
                    timeout_ms: u64::try_from(r.get::<_, i64>(6)?).unwrap_or(0),
                    concurrency: r.get(7)?,
                    concurrency_limits: crate::store::jobs::limits_of(
                        r.get::<_, Option<String>>(10)?.as_deref(),
                    ),
                    rate_limit: r
                        .get::<_, Option<String>>(11)?
                        .and_then(|t| serde_json::from_str(&t).ok()),
                    throttle: r
                        .get::<_, Option<String>>(12)?
                        .and_then(|t| serde_json::from_str(&t).ok()),
                    start_timeout_ms: r
                        .get::<_, Option<i64>>(13)?
                        .and_then(|t| u64::try_from(t).ok()),
                    debounce: r
                        .get::<_, Option<String>>(14)?
                        .and_then(|t| serde_json::from_str(&t).ok()),
                    priority: r
                        .get::<_, Option<String>>(15)?
                        .map(|run| serde_json::json!({ "run": run })),
                    updated_at: ms_to_time(r.get(8)?),
                    paused: r.get(9)?,
                });
            }
            let mut active: HashMap<String, RunCounts> = HashMap::new();
            for (sql, status) in [(QUEUED_BY_JOB, RunStatus::Queued), (RUNNING_BY_JOB, RunStatus::Running)] {
                let mut stmt = c.prepare_cached(sql)?;
                let mut rows = stmt.query([])?;
                while let Some(r) = rows.next()? {
                    active
                        .entry(r.get(0)?)
                        .or_default()
                        .add(status, r.get::<_, u64>(1)?);
                }
            }
            let hour = outcomes_by_job(c, StatsWindow::Hour.bounds(now).0, None)?;
            let day = outcomes_by_job(c, StatsWindow::Day.bounds(now).0, None)?;
            Ok(jobs::summaries(defs, active, hour, day))
        })
        .await
    }

    /// See [`crate::store::Store::stats`].
    pub async fn stats(&self, q: StatsQuery) -> Result<Stats> {
        self.read(move |c| {
            let now = q.now.timestamp_millis();
            let (from, to) = q.window.bounds(now);
            let width = q.window.bucket_ms();
            let events = c
                .prepare_cached(EVENT_BUCKETS)?
                .query_map(params![from, to, width], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?;
            let runs = c
                .prepare_cached(RUN_BUCKETS)?
                .query_map(params![from, to, width], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })?
                .collect::<rusqlite::Result<_>>()?;
            let read = StatsRows {
                events,
                runs,
                jobs: outcomes_by_job(c, from, Some(to))?,
                queue: queue_depth_at(c, now)?,
            };
            Ok(Stats::assemble(&q, read))
        })
        .await
    }

    /// See [`crate::store::Store::queue_depth`].
    pub async fn queue_depth(&self, now: i64) -> Result<QueueDepth> {
        self.read(move |c| queue_depth_at(c, now)).await
    }

    /// See [`crate::store::Store::runs_waiting`]: one snapshot.
    pub async fn runs_waiting(&self, now: i64) -> Result<crate::store::stats::RunsWaiting> {
        self.read(move |c| {
            let _snapshot = c.unchecked_transaction()?;
            let depth = queue_depth_at(c, now)?;
            let (paused_due, paused_later, waits): (i64, i64, i64) = c
                .prepare_cached(
                    "SELECT \
                       (SELECT count(*) FROM runs WHERE status = 'queued' AND run_at <= ?1 \
                          AND job_id IN (SELECT id FROM jobs WHERE paused = 1)), \
                       (SELECT count(*) FROM runs WHERE status = 'queued' AND run_at > ?1 \
                          AND job_id IN (SELECT id FROM jobs WHERE paused = 1)), \
                       (SELECT count(*) FROM runs r WHERE r.status = 'queued' AND r.run_at > ?1 \
                          AND r.job_id NOT IN (SELECT id FROM jobs WHERE paused = 1) \
                          AND EXISTS (SELECT 1 FROM run_steps s WHERE s.run_id = r.id \
                                      AND s.kind = 'wait' AND s.status = 'waiting'))",
                )?
                .query_row([now], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
            let n = |v: i64| u64::try_from(v).unwrap_or(0);
            Ok(crate::store::stats::RunsWaiting::assemble(
                &depth,
                n(paused_due),
                n(paused_later),
                n(waits),
            ))
        })
        .await
    }
}

impl SqliteStore {
    /// See [`crate::store::Store::run_counts`].
    pub async fn run_counts(&self) -> Result<HashMap<RunStatus, u64>> {
        self.read(|c| {
            let mut counts = HashMap::new();
            let mut stmt = c.prepare_cached("SELECT status, count(*) FROM runs GROUP BY status")?;
            let mut rows = stmt.query([])?;
            while let Some(r) = rows.next()? {
                let s: String = r.get(0)?;
                if let Some(st) = RunStatus::parse(&s) {
                    counts.insert(st, r.get::<_, u64>(1)?);
                }
            }
            Ok(counts)
        })
        .await
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::store::query::Cursor;

    /// The query plan of `sql`, one detail per line.
    pub(in crate::store::sqlite) fn plan(
        conn: &Connection,
        sql: &str,
        args: &[SqlValue],
    ) -> String {
        let mut stmt = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .expect("prepare plan");
        let rows: Vec<String> = stmt
            .query_map(params_from_iter(args.iter()), |r| r.get::<_, String>(3))
            .expect("plan")
            .collect::<rusqlite::Result<_>>()
            .expect("plan rows");
        rows.join("\n")
    }

    pub(in crate::store::sqlite) fn db() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut conn = Connection::open(dir.path().join("plan.db")).expect("open");
        super::super::migrate(&mut conn).expect("migrate");
        (dir, conn)
    }

    #[test]
    fn event_filters_walk_an_index_newest_first() {
        let (_dir, conn) = db();
        let cursor = Some(Cursor::after(100));
        let by_name = EventQuery {
            name: Some("user.created".into()),
            cursor,
            ..EventQuery::default()
        };
        let (sql, args) = events_sql(&by_name);
        let p = plan(&conn, &sql, &args);
        assert!(p.contains("events_name"), "{p}");
        assert!(!p.contains("TEMP B-TREE"), "{p}");

        for (source, index) in [
            ("webhook:payments", "events_source "),
            ("job", "events_source_kind"),
        ] {
            let q = EventQuery {
                source: Some(source.into()),
                cursor,
                ..EventQuery::default()
            };
            let (sql, args) = events_sql(&q);
            let p = plan(&conn, &sql, &args);
            assert!(p.contains(index), "{source}: {p}");
            assert!(!p.contains("TEMP B-TREE"), "{source}: {p}");
        }

        // Unfiltered, status-only and search pages walk the primary key from the cursor down.
        for status in EventStatus::ALL {
            let q = EventQuery {
                status: Some(status),
                q: Some("ada".into()),
                cursor,
                ..EventQuery::default()
            };
            let (sql, args) = events_sql(&q);
            let p = plan(&conn, &sql, &args);
            assert!(p.contains("INTEGER PRIMARY KEY (rowid<?)"), "{status}: {p}");
            assert!(!p.contains("TEMP B-TREE"), "{status}: {p}");
            if p.contains("SCAN r") || p.contains("SCAN runs") {
                panic!("{status}: run lookups must use an index: {p}");
            }
        }
    }

    #[test]
    fn a_time_bounded_search_walks_only_the_window() {
        let (_dir, conn) = db();
        let q = EventQuery {
            q: Some("ada".into()),
            from: Some(crate::model::ms_to_time(1_000)),
            ..EventQuery::default()
        };
        let (sql, args) = events_sql(&q);
        let p = plan(&conn, &sql, &args);
        assert!(p.contains("INTEGER PRIMARY KEY (rowid>?)"), "{p}");
        assert!(p.contains("events_timestamp"), "{p}");
        assert!(!p.contains("TEMP B-TREE"), "{p}");
    }

    #[test]
    fn run_filters_walk_an_index_newest_first() {
        let (_dir, conn) = db();
        let job = || Some("send-welcome-email".to_string());
        let cases = [
            (
                RunQuery {
                    job_id: job(),
                    ..RunQuery::default()
                },
                "runs_job ",
            ),
            (
                RunQuery {
                    status: Some(RunStatus::Failed),
                    ..RunQuery::default()
                },
                "runs_unsuccessful",
            ),
            (
                RunQuery {
                    status: Some(RunStatus::Cancelled),
                    ..RunQuery::default()
                },
                "runs_unsuccessful",
            ),
            (
                RunQuery {
                    job_id: job(),
                    status: Some(RunStatus::Failed),
                    ..RunQuery::default()
                },
                "runs_job_unsuccessful",
            ),
            (
                RunQuery {
                    job_id: job(),
                    status: Some(RunStatus::Succeeded),
                    ..RunQuery::default()
                },
                "runs_job ",
            ),
            (
                RunQuery {
                    status: Some(RunStatus::Succeeded),
                    cursor: Some(Cursor::after(100)),
                    ..RunQuery::default()
                },
                "INTEGER PRIMARY KEY (rowid<?)",
            ),
            (
                RunQuery {
                    event_id: Some("evt_1".into()),
                    ..RunQuery::default()
                },
                "runs_event ",
            ),
        ];
        for (q, index) in cases {
            let (sql, args) = runs_sql(&q);
            let p = plan(&conn, &format!("{sql} "), &args);
            assert!(p.contains(index), "{q:?} should use {index}: {p}");
            if q.event_id.is_none() {
                assert!(!p.contains("TEMP B-TREE"), "{q:?}: {p}");
            }
        }
        // Queued and running runs come off the queue and lease indexes (sorted: they are as
        // many as the queue holds), never from a walk of the history.
        for (status, index) in [
            (RunStatus::Queued, "runs_runnable"),
            (RunStatus::Running, "runs_leased"),
        ] {
            for job_id in [None, job()] {
                let q = RunQuery {
                    status: Some(status),
                    job_id,
                    ..RunQuery::default()
                };
                let (sql, args) = runs_sql(&q);
                let p = plan(&conn, &sql, &args);
                assert!(p.contains(index), "{q:?} should use {index}: {p}");
            }
        }
    }

    #[test]
    fn per_job_queue_counts_read_only_the_queue_and_lease_indexes() {
        let (_dir, conn) = db();
        for (sql, index) in [
            (QUEUED_BY_JOB, "runs_runnable"),
            (QUEUED_BY_JOB, "runs_slot_queue"),
            (QUEUED_BY_JOB, "runs_ranked_due"),
            (QUEUED_BY_JOB, "runs_slot_ranked_due"),
            (RUNNING_BY_JOB, "runs_leased"),
        ] {
            let p = plan(&conn, sql, &[]);
            assert!(p.contains(&format!("COVERING INDEX {index}")), "{p}");
        }
    }

    #[test]
    fn windowed_counts_read_the_minute_counts_of_their_window_only() {
        let (_dir, conn) = db();
        let args = [0, 1, 60_000].map(SqlValue::Integer);
        for (sql, params, search) in [
            (
                OUTCOMES_BY_JOB,
                2,
                "SEARCH run_outcomes USING PRIMARY KEY (minute>? AND minute<?)",
            ),
            (
                RUN_BUCKETS,
                3,
                "SEARCH run_outcomes USING PRIMARY KEY (minute>? AND minute<?)",
            ),
            (
                EVENT_BUCKETS,
                3,
                "SEARCH event_counts USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)",
            ),
        ] {
            let p = plan(&conn, sql, &args[..params]);
            assert!(p.contains(search), "{p}");
        }
    }

    #[test]
    fn next_due_walks_the_queue_index_in_due_order() {
        let (_dir, conn) = db();
        let p = plan(
            &conn,
            super::super::runs::NEXT_RUN_SQL,
            &[SqlValue::Text("[\"a\"]".into())],
        );
        assert!(
            p.contains("runs_runnable") && p.contains("runs_ranked_due"),
            "{p}"
        );
        assert!(!p.contains("TEMP B-TREE"), "no sort of every run: {p}");
    }
}
