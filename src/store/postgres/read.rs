//! Read queries of the PostgreSQL backend: single records and the scheduling lookups. They run
//! outside any transaction on a pooled connection and see the last committed state.

use std::collections::HashMap;

use serde_json::Value;
use tokio_postgres::Row;

use super::ops::u32_of;
use super::{rows, PgStore};
use crate::model::{ms_to_time, Attempt, Level, LogLine, Run, RunStatus, StoredEvent};
use crate::store::{Error, EventDetail, Result, RunDetail};

/// Parses stored JSON text.
pub(crate) fn json_text(text: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| Error::Corrupt(format!("invalid stored JSON: {e}")))
}

fn opt_json(text: Option<String>) -> Result<Option<Value>> {
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

impl PgStore {
    /// See [`crate::store::Store::event_get`].
    pub async fn event_get(&self, id: String) -> Result<Option<StoredEvent>> {
        let conn = self.conn().await?;
        let c = &conn;
        rows(
            c,
            &format!("SELECT {EVENT_SELECT} FROM events WHERE id = $1"),
            &[&id],
        )
        .await?
        .first()
        .map(event_from_row)
        .transpose()
    }

    /// See [`crate::store::Store::event_detail`].
    pub async fn event_detail(&self, id: String) -> Result<Option<EventDetail>> {
        let conn = self.conn().await?;
        let c = &conn;
        let Some(event) = rows(
            c,
            &format!("SELECT {EVENT_SELECT} FROM events WHERE id = $1"),
            &[&id],
        )
        .await?
        .first()
        .map(event_from_row)
        .transpose()?
        else {
            return Ok(None);
        };
        let runs = rows(
            c,
            &format!("SELECT {RUN_COLUMNS} FROM run_state runs WHERE event_id = $1 ORDER BY seq"),
            &[&id],
        )
        .await?
        .iter()
        .map(run_from_row)
        .collect::<Result<Vec<_>>>()?;
        let children = rows(
            c,
            &format!(
                "SELECT {EVENT_SELECT} FROM events WHERE parent_run_id IN \
                 (SELECT id FROM runs WHERE event_id = $1) ORDER BY seq"
            ),
            &[&id],
        )
        .await?
        .iter()
        .map(event_from_row)
        .collect::<Result<Vec<_>>>()?;
        Ok(Some(EventDetail {
            event,
            runs,
            children,
        }))
    }

    /// See [`crate::store::Store::run_detail`].
    pub async fn run_detail(&self, id: String) -> Result<Option<RunDetail>> {
        let conn = self.conn().await?;
        let c = &conn;
        let Some(run) = rows(
            c,
            &format!("SELECT {RUN_COLUMNS} FROM run_state runs WHERE id = $1"),
            &[&id],
        )
        .await?
        .first()
        .map(run_from_row)
        .transpose()?
        else {
            return Ok(None);
        };
        let mut logs = Vec::new();
        for r in rows(
            c,
            "SELECT attempt, level, message, fields, at FROM run_logs WHERE run_id = $1 ORDER BY seq",
            &[&id],
        )
        .await?
        {
            let level: String = r.try_get(1)?;
            logs.push(LogLine {
                attempt: u32_of(&r, 0)?,
                level: Level::parse(&level).unwrap_or(Level::Info),
                message: r.try_get(2)?,
                fields: opt_json(r.try_get(3)?)?,
                at: ms_to_time(r.try_get(4)?),
            });
        }
        let mut attempts = Vec::new();
        for r in rows(
            c,
            "SELECT attempt, outcome, started_at, finished_at, error FROM run_attempts \
             WHERE run_id = $1 ORDER BY seq",
            &[&id],
        )
        .await?
        {
            attempts.push(Attempt {
                attempt: u32_of(&r, 0)?,
                outcome: r.try_get(1)?,
                started_at: r.try_get::<_, Option<i64>>(2)?.map(ms_to_time),
                finished_at: ms_to_time(r.try_get(3)?),
                error: r.try_get(4)?,
            });
        }
        let steps = super::steps::steps_of(c, &id).await?;
        Ok(Some(RunDetail::new(run, logs, attempts, steps)))
    }

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

    /// See [`crate::store::Store::next_due`]: both lookups walk a partial index in due order.
    pub async fn runs_next_due(&self, jobs: Vec<String>) -> Result<Option<i64>> {
        let conn = self.conn().await?;
        let r = self
            .with_settings(
                &conn,
                super::runs::WALK_DUE,
                "SELECT (SELECT run_at FROM run_queue WHERE lease_until IS NULL \
                         AND job_id = ANY(ARRAY(SELECT unnest($1::text[]) EXCEPT SELECT id FROM jobs WHERE paused)) \
                         ORDER BY run_at LIMIT 1), \
                        (SELECT deliver_at FROM events WHERE delivered_at IS NULL AND cancelled_at IS NULL \
                         AND deliver_at IS NOT NULL ORDER BY deliver_at LIMIT 1)",
                &[&jobs],
            )
            .await?;
        let Some(r) = r.first() else {
            return Ok(None);
        };
        let run: Option<i64> = r.try_get(0)?;
        let event: Option<i64> = r.try_get(1)?;
        Ok(match (run, event) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        })
    }
}
