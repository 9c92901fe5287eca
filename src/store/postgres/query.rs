//! The read side of the PostgreSQL backend: the list and statistics queries of
//! [`crate::store::query`], with the same rules as the SQLite ones (keyset pages on `seq`, newest
//! first, each filter on an index of the migrations). The payload search is a case-insensitive
//! `ILIKE` over the payload text. Queue depths read `run_queue`; success and failure rates read the
//! per-minute counters of `run_outcomes`, event rates those of `event_counts`.

use std::collections::HashMap;

use tokio_postgres::types::ToSql;

use super::rows::{
    count_of, event_from_row, json_text, run_from_row, EVENT_SELECT, EVENT_WIDTH, RUN_COLUMNS,
    RUN_WIDTH,
};
use super::{rows, PgStore};
use crate::model::{ms_to_time, RunStatus};
use crate::store::jobs;
use crate::store::query::{
    clamp_limit, EventQuery, EventStatus, EventSummary, JobDefinition, JobSummary, Outcomes, Page,
    QueueDepth, RunCounts, RunQuery, RunSummary, Stats, StatsQuery, StatsWindow,
};
use crate::store::sql::{like_pattern, page, status_condition};
use crate::store::stats::StatsRows;
use crate::store::Result;

/// The kind of a source, the part before the colon; indexed as `events_source_kind`, whose
/// expression must stay identical.
const SOURCE_KIND: &str = "split_part(source, ':', 1)";

type Param = Box<dyn ToSql + Sync + Send>;

/// Collects conditions with numbered parameters.
#[derive(Default)]
struct Where {
    conds: Vec<String>,
    params: Vec<Param>,
}

impl Where {
    /// Adds a parameter and returns its placeholder.
    fn param(&mut self, v: impl ToSql + Sync + Send + 'static) -> String {
        self.params.push(Box::new(v));
        format!("${}", self.params.len())
    }

    fn cond(&mut self, c: String) {
        self.conds.push(c);
    }

    fn sql(&self) -> String {
        if self.conds.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", self.conds.join(" AND "))
        }
    }
}

fn refs(params: &[Param]) -> Vec<&(dyn ToSql + Sync)> {
    params
        .iter()
        .map(|p| p.as_ref() as &(dyn ToSql + Sync))
        .collect()
}

/// The event list's SQL: columns of [`event_from_row`], then `seq`; one row more than a page.
fn events_sql(q: &EventQuery) -> (String, Vec<Param>) {
    let mut w = Where::default();
    if let Some(name) = &q.name {
        let p = w.param(name.clone());
        w.cond(format!("name = {p}"));
    }
    if let Some(source) = &q.source {
        let p = w.param(source.clone());
        if source.contains(':') {
            w.cond(format!("source = {p}"));
        } else {
            w.cond(format!("{SOURCE_KIND} = {p}"));
        }
    }
    if let Some(from) = q.from {
        let p = w.param(from.timestamp_millis());
        w.cond(format!("timestamp >= {p}"));
    }
    if let Some(to) = q.to {
        let p = w.param(to.timestamp_millis());
        w.cond(format!("timestamp < {p}"));
    }
    if let Some(text) = &q.q {
        let p = w.param(like_pattern(text));
        w.cond(format!("payload ILIKE {p}"));
    }
    if let Some(cursor) = q.cursor {
        let p = w.param(cursor.seq());
        w.cond(format!("seq < {p}"));
    }
    if let Some(status) = q.status {
        w.cond(status_condition(status));
    }
    let limit = clamp_limit(q.limit) + 1;
    let sql = format!(
        "SELECT {EVENT_SELECT}, seq FROM events {} ORDER BY seq DESC LIMIT {limit}",
        w.sql()
    );
    (sql, w.params)
}

/// The run list's SQL: columns of [`run_from_row`], then `seq` and the event's name.
fn runs_sql(q: &RunQuery) -> (String, Vec<Param>) {
    let mut w = Where::default();
    if let Some(job) = &q.job_id {
        let p = w.param(job.clone());
        w.cond(format!("job_id = {p}"));
    }
    if let Some(status) = q.status {
        // Queued and running runs are found through the queue, failed and cancelled ones through
        // the partial index of `unsuccessful` (a literal, not a parameter, so that the planner
        // can use it), succeeded ones (most runs) walking the primary key.
        let s = status.as_str();
        w.cond(match status {
            RunStatus::Queued => {
                "seq IN (SELECT seq FROM run_queue WHERE lease_until IS NULL)".to_string()
            }
            RunStatus::Running => {
                "seq IN (SELECT seq FROM run_queue WHERE lease_until IS NOT NULL)".to_string()
            }
            RunStatus::Failed | RunStatus::Cancelled => format!("unsuccessful = '{s}'"),
            RunStatus::Succeeded => format!("stored_status = '{s}'"),
        });
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
         FROM run_state runs {} ORDER BY seq DESC LIMIT {limit}",
        w.sql()
    );
    (sql, w.params)
}

/// Runs that finished in `[since, until)` (whole minutes), by job and state, from the per-minute
/// counts of `run_outcomes`.
async fn outcomes_by_job(
    c: &deadpool_postgres::Client,
    since: i64,
    until: Option<i64>,
) -> Result<HashMap<String, Outcomes>> {
    let until = until.unwrap_or(i64::MAX);
    let mut out: HashMap<String, Outcomes> = HashMap::new();
    for r in rows(
        c,
        "SELECT job_id, status, sum(n)::int8 FROM run_outcomes \
         WHERE minute >= $1::int8 / 60000 AND minute < $2::int8 / 60000 GROUP BY job_id, status",
        &[&since, &until],
    )
    .await?
    {
        let status: String = r.try_get(1)?;
        if let Some(s) = RunStatus::parse(&status) {
            out.entry(r.try_get(0)?)
                .or_default()
                .add(s, count_of(&r, 2)?);
        }
    }
    Ok(out)
}

async fn queue_depth_at(c: &deadpool_postgres::Client, now: i64) -> Result<QueueDepth> {
    let r = rows(
        c,
        "SELECT (SELECT count(*) FROM run_queue WHERE lease_until IS NULL AND run_at <= $1), \
                (SELECT count(*) FROM run_queue WHERE lease_until IS NULL AND run_at > $1), \
                (SELECT count(*) FROM run_queue WHERE lease_until IS NOT NULL), \
                (SELECT count(*) FROM events WHERE delivered_at IS NULL AND cancelled_at IS NULL)",
        &[&now],
    )
    .await?;
    let Some(r) = r.first() else {
        return Ok(QueueDepth::default());
    };
    Ok(QueueDepth {
        ready: count_of(r, 0)?,
        delayed: count_of(r, 1)?,
        running: count_of(r, 2)?,
        scheduled_events: count_of(r, 3)?,
    })
}

impl PgStore {
    /// See [`crate::store::Store::events_list`].
    pub async fn events_list(&self, q: EventQuery) -> Result<Page<EventSummary>> {
        let conn = self.conn().await?;
        let c = &conn;
        let (sql, args) = events_sql(&q);
        let mut events = Vec::new();
        for r in rows(c, &sql, &refs(&args)).await? {
            events.push((event_from_row(&r)?, r.try_get::<_, i64>(EVENT_WIDTH)?));
        }
        let ids: Vec<&str> = events.iter().map(|(e, _)| e.id.as_str()).collect();
        let mut counts: HashMap<String, RunCounts> = HashMap::new();
        for r in rows(
            c,
            "SELECT event_id, status, count(*) FROM run_state WHERE event_id = ANY($1) GROUP BY event_id, status",
            &[&ids],
        )
        .await?
        {
            let status: String = r.try_get(1)?;
            if let Some(s) = RunStatus::parse(&status) {
                counts
                    .entry(r.try_get(0)?)
                    .or_default()
                    .add(s, count_of(&r, 2)?);
            }
        }
        let rows = events
            .into_iter()
            .map(|(event, seq)| {
                let run_counts = counts.remove(&event.id).unwrap_or_default();
                let status = EventStatus::of(&event, &run_counts);
                (
                    EventSummary {
                        event,
                        status,
                        run_counts,
                    },
                    seq,
                )
            })
            .collect();
        Ok(page(rows, q.limit))
    }

    /// See [`crate::store::Store::runs_list`].
    pub async fn runs_list(&self, q: RunQuery) -> Result<Page<RunSummary>> {
        let conn = self.conn().await?;
        let c = &conn;
        let (sql, args) = runs_sql(&q);
        let mut runs = Vec::new();
        for r in rows(c, &sql, &refs(&args)).await? {
            let summary = RunSummary {
                run: run_from_row(&r)?,
                event_name: r
                    .try_get::<_, Option<String>>(RUN_WIDTH + 1)?
                    .unwrap_or_default(),
            };
            runs.push((summary, r.try_get::<_, i64>(RUN_WIDTH)?));
        }
        Ok(page(runs, q.limit))
    }

    /// See [`crate::store::Store::jobs_list`].
    pub async fn jobs_list(&self, now: i64) -> Result<Vec<JobSummary>> {
        let conn = self.conn().await?;
        let c = &conn;
        let mut defs = Vec::new();
        for r in rows(
            c,
            "SELECT id, name, version, event, filter, max_attempts, timeout_ms, concurrency, updated_at, paused, concurrency_limits, rate_limit, throttle, start_timeout_ms, debounce, priority \
             FROM jobs ORDER BY id",
            &[],
        )
        .await?
        {
            let filter: Option<String> = r.try_get(4)?;
            let concurrency: Option<i32> = r.try_get(7)?;
            defs.push(JobDefinition {
                id: r.try_get(0)?,
                name: r.try_get(1)?,
                version: r.try_get(2)?,
                event: r.try_get(3)?,
                filter: filter.as_deref().map(json_text).transpose()?,
                max_attempts: super::rows::u32_of(&r, 5)?,
                timeout_ms: u64::try_from(r.try_get::<_, i64>(6)?).unwrap_or(0),
                concurrency: concurrency.and_then(|c| u32::try_from(c).ok()),
                concurrency_limits: crate::store::jobs::limits_of(
                    r.try_get::<_, Option<String>>(10)?.as_deref(),
                ),
                rate_limit: r
                    .try_get::<_, Option<String>>(11)?
                    .and_then(|t| serde_json::from_str(&t).ok()),
                throttle: r
                    .try_get::<_, Option<String>>(12)?
                    .and_then(|t| serde_json::from_str(&t).ok()),
                start_timeout_ms: r
                    .try_get::<_, Option<i64>>(13)?
                    .and_then(|t| u64::try_from(t).ok()),
                debounce: r
                    .try_get::<_, Option<String>>(14)?
                    .and_then(|t| serde_json::from_str(&t).ok()),
                    priority: r
                        .try_get::<_, Option<String>>(15)?
                        .map(|run| serde_json::json!({ "run": run })),
                updated_at: ms_to_time(r.try_get(8)?),
                paused: r.try_get(9)?,
            });
        }
        let mut active: HashMap<String, RunCounts> = HashMap::new();
        for r in rows(
            c,
            "SELECT job_id, CASE WHEN lease_until IS NULL THEN 'queued' ELSE 'running' END, count(*) \
             FROM run_queue GROUP BY 1, 2",
            &[],
        )
        .await?
        {
            let status: String = r.try_get(1)?;
            if let Some(s) = RunStatus::parse(&status) {
                active
                    .entry(r.try_get(0)?)
                    .or_default()
                    .add(s, count_of(&r, 2)?);
            }
        }
        let hour = outcomes_by_job(c, StatsWindow::Hour.bounds(now).0, None).await?;
        let day = outcomes_by_job(c, StatsWindow::Day.bounds(now).0, None).await?;
        Ok(jobs::summaries(defs, active, hour, day))
    }

    /// See [`crate::store::Store::stats`].
    pub async fn stats(&self, q: StatsQuery) -> Result<Stats> {
        let conn = self.conn().await?;
        let c = &conn;
        let now = q.now.timestamp_millis();
        let (from, to) = q.window.bounds(now);
        let width = q.window.bucket_ms();
        let mut events = Vec::new();
        for r in rows(
            c,
            "SELECT (minute * 60000 - $1) / $3, sum(n)::int8 FROM event_counts \
             WHERE minute >= $1::int8 / 60000 AND minute < $2::int8 / 60000 GROUP BY 1",
            &[&from, &to, &width],
        )
        .await?
        {
            events.push((r.try_get(0)?, count_of(&r, 1)?));
        }
        let mut runs = Vec::new();
        for r in rows(
            c,
            "SELECT (minute * 60000 - $1) / $3, status, sum(n)::int8 FROM run_outcomes \
             WHERE minute >= $1::int8 / 60000 AND minute < $2::int8 / 60000 GROUP BY 1, 2",
            &[&from, &to, &width],
        )
        .await?
        {
            runs.push((r.try_get(0)?, r.try_get(1)?, count_of(&r, 2)?));
        }
        let read = StatsRows {
            events,
            runs,
            jobs: outcomes_by_job(c, from, Some(to)).await?,
            queue: queue_depth_at(c, now).await?,
        };
        Ok(Stats::assemble(&q, read))
    }

    /// See [`crate::store::Store::queue_depth`].
    pub async fn queue_depth(&self, now: i64) -> Result<QueueDepth> {
        let conn = self.conn().await?;
        let c = &conn;
        queue_depth_at(c, now).await
    }

    /// See [`crate::store::Store::runs_waiting`].
    pub async fn runs_waiting(&self, now: i64) -> Result<crate::store::stats::RunsWaiting> {
        let conn = self.conn().await?;
        let c = &conn;
        let depth = queue_depth_at(c, now).await?;
        let r = rows(
            c,
            "SELECT \
               (SELECT count(*) FROM run_queue WHERE lease_until IS NULL AND run_at <= $1 \
                  AND job_id IN (SELECT id FROM jobs WHERE paused)), \
               (SELECT count(*) FROM run_queue WHERE lease_until IS NULL AND run_at > $1 \
                  AND job_id IN (SELECT id FROM jobs WHERE paused)), \
               (SELECT count(*) FROM run_queue q JOIN runs r ON r.seq = q.seq \
                  WHERE q.lease_until IS NULL AND q.run_at > $1 \
                  AND q.job_id NOT IN (SELECT id FROM jobs WHERE paused) \
                  AND EXISTS (SELECT 1 FROM run_steps s WHERE s.run_id = r.id \
                              AND s.kind = 'wait' AND s.status = 'waiting'))",
            &[&now],
        )
        .await?;
        let Some(r) = r.first() else {
            return Ok(crate::store::stats::RunsWaiting::default());
        };
        Ok(crate::store::stats::RunsWaiting::assemble(
            &depth,
            count_of(r, 0)?,
            count_of(r, 1)?,
            count_of(r, 2)?,
        ))
    }
}

impl PgStore {
    /// See [`crate::store::Store::run_counts`].
    pub async fn run_counts(&self) -> Result<HashMap<RunStatus, u64>> {
        let conn = self.conn().await?;
        let c = &conn;
        let mut counts = HashMap::new();
        // From the stored states and the queue's leases (not the view, whose join a stale plan
        // can turn into a nested loop over every run): a running run is stored as queued.
        for r in rows(
            c,
            "SELECT status, count(*) FROM runs GROUP BY status \
             UNION ALL SELECT 'running', count(*) FROM run_queue WHERE lease_until IS NOT NULL",
            &[],
        )
        .await?
        {
            let s: String = r.try_get(0)?;
            if let Some(st) = RunStatus::parse(&s) {
                counts.insert(st, count_of(&r, 1)?);
            }
        }
        let running = counts.get(&RunStatus::Running).copied().unwrap_or(0);
        if let Some(queued) = counts.get_mut(&RunStatus::Queued) {
            *queued = queued.saturating_sub(running);
        }
        counts.retain(|_, n| *n > 0);
        Ok(counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_kinds_use_the_indexed_expression() {
        let q = EventQuery {
            source: Some("job".into()),
            ..EventQuery::default()
        };
        let (sql, args) = events_sql(&q);
        assert!(sql.contains("split_part(source, ':', 1) = $1"), "{sql}");
        assert_eq!(args.len(), 1);
        assert!(include_str!("0001_init.sql").contains(&format!("(({SOURCE_KIND}), seq)")));
    }
}
