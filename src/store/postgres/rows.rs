//! Rows of the PostgreSQL tables turned into the model: events, runs, job definitions (and the
//! fan-out's triggers reloaded from them), schedules, endpoints; the JSON text columns; and the
//! two query helpers every file uses (`rows`, `exec`); the attempts a completion wrote. No
//! `impl PgStore`.

use std::collections::HashSet;

use deadpool_postgres::GenericClient;
use serde_json::Value;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use crate::model::{ms_to_time, JobSpec, Run, RunStatus, StoredEvent};
use crate::store::endpoints::EndpointRow;
use crate::store::jobs::{JobRow, JOB_COLUMNS};
use crate::store::{Error, Result, Triggers};

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

/// Parses stored JSON text.
pub(crate) fn json_text(text: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| Error::Corrupt(format!("invalid stored JSON: {e}")))
}

pub(super) fn opt_json(text: Option<String>) -> Result<Option<Value>> {
    text.as_deref().map(json_text).transpose()
}

/// The columns [`event_from_row`] reads, the event's run ids (oldest first) last.
pub(super) const EVENT_SELECT: &str =
    "events.id, events.name, events.payload, events.context, events.source, events.parent_run_id, \
     events.timestamp, events.deliver_at, events.delivered_at, events.cancelled_at, \
     ARRAY(SELECT r.id FROM runs r WHERE r.event_id = events.id ORDER BY r.seq)";

/// Number of columns of [`EVENT_SELECT`].
pub(super) const EVENT_WIDTH: usize = 11;

pub(super) fn event_from_row(r: &Row) -> Result<StoredEvent> {
    Ok(StoredEvent {
        id: r.try_get(0)?,
        name: r.try_get(1)?,
        payload: json_text(&r.try_get::<_, String>(2)?)?,
        context: opt_json(r.try_get(3)?)?,
        source: r.try_get(4)?,
        parent_run_id: r.try_get(5)?,
        timestamp: ms_to_time(r.try_get(6)?),
        deliver_at: r.try_get::<_, Option<i64>>(7)?.map(ms_to_time),
        delivered_at: r.try_get::<_, Option<i64>>(8)?.map(ms_to_time),
        cancelled_at: r.try_get::<_, Option<i64>>(9)?.map(ms_to_time),
        run_ids: r.try_get(10)?,
    })
}

/// The columns [`run_from_row`] reads, from the view `run_state` named `runs` (a run as readers
/// see it: running while its queue row holds a lease).
pub(super) const RUN_COLUMNS: &str =
    "runs.id, runs.event_id, runs.job_id, runs.job_version, runs.status, runs.attempt, \
     runs.max_attempts, runs.run_at, runs.started_at, runs.finished_at, runs.output, runs.error, \
     runs.created_at, runs.node";

/// Number of columns of [`RUN_COLUMNS`].
pub(super) const RUN_WIDTH: usize = 14;

pub(super) fn run_from_row(r: &Row) -> Result<Run> {
    let status: String = r.try_get(4)?;
    Ok(Run {
        id: r.try_get(0)?,
        event_id: r.try_get(1)?,
        job_id: r.try_get(2)?,
        job_version: r.try_get(3)?,
        status: RunStatus::parse(&status)
            .ok_or_else(|| Error::Corrupt(format!("unknown run status {status:?}")))?,
        attempt: u32_of(r, 5)?,
        max_attempts: u32_of(r, 6)?,
        run_at: ms_to_time(r.try_get(7)?),
        started_at: r.try_get::<_, Option<i64>>(8)?.map(ms_to_time),
        finished_at: r.try_get::<_, Option<i64>>(9)?.map(ms_to_time),
        output: opt_json(r.try_get(10)?)?,
        error: r.try_get(11)?,
        created_at: ms_to_time(r.try_get(12)?),
        node: r.try_get(13)?,
    })
}

/// Reads a `count(*)`.
pub(super) fn count_of(r: &Row, i: usize) -> Result<u64> {
    Ok(u64::try_from(r.try_get::<_, i64>(i)?).unwrap_or(0))
}

/// Reads an `integer` column as a count.
pub(super) fn u32_of(row: &tokio_postgres::Row, i: usize) -> Result<u32> {
    let v: i32 = row.try_get(i)?;
    u32::try_from(v).map_err(|_| Error::Corrupt(format!("negative count {v}")))
}

/// Loads stored job definitions (so fan-out knows jobs defined by other processes).
pub(super) async fn jobs_load<C: GenericClient>(c: &C) -> Result<Vec<JobSpec>> {
    rows(c, &format!("SELECT {JOB_COLUMNS} FROM jobs"), &[])
        .await?
        .iter()
        .map(|r| {
            JobRow {
                id: r.try_get(0)?,
                name: r.try_get(1)?,
                version: r.try_get(2)?,
                event: r.try_get(3)?,
                filter: r.try_get(4)?,
                max_attempts: u32_of(r, 5)?,
                timeout_ms: r.try_get(6)?,
                concurrency_limits: r.try_get(7)?,
                rate_limit: r.try_get(8)?,
                throttle: r.try_get(9)?,
                start_timeout_ms: r.try_get(10)?,
                debounce: r.try_get(11)?,
                priority: r.try_get(12)?,
                cancel_on: r.try_get(13)?,
            }
            .into_spec()
        })
        .collect()
}

/// Reads a row of `schedules` (`job_id, spec, timezone, next_tick, last_tick`).
pub(super) fn schedule_row(r: &Row) -> Result<crate::store::schedules::ScheduleRow> {
    Ok((
        r.try_get(0)?,
        r.try_get(1)?,
        r.try_get(2)?,
        r.try_get(3)?,
        r.try_get(4)?,
    ))
}

/// Reloads stored job definitions when the job table changed (another process defined a job);
/// a writer that finds it changed while another writer reloads waits for that reload.
pub(super) async fn triggers_refresh<C: GenericClient>(c: &C, triggers: &Triggers) -> Result<()> {
    let r = rows(
        c,
        "SELECT count(*), coalesce(sum(updated_at), 0)::int8 FROM jobs",
        &[],
    )
    .await?;
    let revision = match r.first() {
        Some(r) => (r.try_get::<_, i64>(0)?, r.try_get::<_, i64>(1)?),
        None => (0, 0),
    };
    if triggers.loaded_at(revision) {
        return Ok(());
    }
    // One reload at a time: another insert transaction of this process may be reloading this
    // revision now, and its batch must not fan out before the definitions are in place.
    let _reloading = triggers.reloading().await;
    if !triggers.loaded_at(revision) {
        triggers.replace_stored_at(revision, jobs_load(c).await?);
    }
    Ok(())
}

pub(super) fn endpoint_row(r: &Row) -> Result<EndpointRow> {
    Ok(EndpointRow {
        id: r.try_get(0)?,
        url: r.try_get(1)?,
        secret: r.try_get(2)?,
        created_at: r.try_get(3)?,
        updated_at: r.try_get(4)?,
        indexed_at: r.try_get(5)?,
        jobs: r.try_get(6)?,
        last_ok_at: r.try_get(7)?,
        last_error_at: r.try_get(8)?,
        errors: r.try_get(9)?,
        protocol: r.try_get(10)?,
        client_id: r.try_get(11)?,
        skipped: r.try_get(12)?,
    })
}

/// Log lines as the columns of an `UNNEST` insert (`$run, $attempt, $level, $message, $fields,
/// $at`), for the statements that end an attempt.
#[derive(Default)]
pub(super) struct LogColumns<'a> {
    pub(super) run: Vec<&'a str>,
    pub(super) attempt: Vec<i32>,
    pub(super) level: Vec<&'a str>,
    pub(super) message: Vec<&'a str>,
    pub(super) fields: Vec<Option<String>>,
    pub(super) at: Vec<i64>,
}

impl<'a> LogColumns<'a> {
    /// Adds the lines `run_id` wrote.
    pub(super) fn add(&mut self, run_id: &'a str, lines: &'a [crate::model::LogLine]) {
        for line in lines {
            self.run.push(run_id);
            self.attempt
                .push(i32::try_from(line.attempt).unwrap_or(i32::MAX));
            self.level.push(line.level.as_str());
            self.message.push(line.message.as_str());
            self.fields.push(line.fields.as_ref().map(Value::to_string));
            self.at.push(line.at.timestamp_millis());
        }
    }
}

/// The attempts `runs::COMPLETE_SQL` wrote (its rows name their position in `ids` and `tokens`, from
/// 1), as run id and token; `freed` is set when one of them held slots, `resumed` when the batch
/// made a parent due (its last invoked child ended).
pub(super) fn held_attempts(
    written: &[Row],
    ids: &[&str],
    tokens: &[i64],
    freed: &mut bool,
    resumed: &mut bool,
) -> Result<HashSet<(String, i64)>> {
    let mut held = HashSet::with_capacity(written.len());
    for r in written {
        *freed |= r.try_get::<_, bool>(1)?;
        *resumed |= r.try_get::<_, bool>(2)?;
        let i = usize::try_from(r.try_get::<_, i64>(0)? - 1)
            .map_err(|e| Error::Corrupt(e.to_string()))?;
        let (Some(id), Some(token)) = (ids.get(i), tokens.get(i)) else {
            return Err(Error::Corrupt(format!(
                "completion {i} is not in the batch"
            )));
        };
        held.insert(((*id).to_string(), *token));
    }
    Ok(held)
}
