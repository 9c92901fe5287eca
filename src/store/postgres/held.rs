//! What flow control holds back now, on PostgreSQL (see `crate::store::held`): the busiest keys
//! of each job and the due runs held by each kind of limit, counted off the queue (`run_queue`,
//! as large as the queue, not the history) and the slots' counters in `flow_slots`.

use std::collections::HashMap;

use super::rows::rows;
use super::PgStore;
use crate::store::held::{job_keys, key_rows_sql, JobKeys, KeyRow, RunsHeld};
use crate::store::Result;

/// Queued runs per slot (`slot`, `n`).
macro_rules! queued_per_slot {
    () => {
        "SELECT slot_a AS slot, count(*) AS n FROM run_queue \
         WHERE lease_until IS NULL AND slot_a IS NOT NULL GROUP BY slot_a"
    };
}

/// The due runs held by a full slot (the first or the second of their slots), then by a
/// throttle's next start after `$1` (`runs_held`), in slots of jobs not paused; the due runs past
/// their start timeout; the runs of open debounce windows, not due yet. A slot's second
/// slot is read from one of its queued runs (every run of a slot has the same, but for runs
/// created under an older definition), through the slot queues' indexes.
const HELD_SQL: &str = "WITH per AS (SELECT slot_a AS slot, count(*) AS n FROM run_queue \
       WHERE lease_until IS NULL AND slot_a IS NOT NULL AND run_at <= $1 GROUP BY slot_a), \
     s AS (SELECT per.n, a.cap, a.running, a.tat - a.thr_tolerance AS next_start, \
       (SELECT b.running >= b.cap FROM flow_slots b WHERE b.slot = coalesce( \
          (SELECT slot_b FROM run_queue WHERE slot_a = per.slot AND lease_until IS NULL \
             AND priority_ms IS NULL LIMIT 1), \
          (SELECT slot_b FROM run_queue WHERE slot_a = per.slot AND lease_until IS NULL \
             AND priority_ms IS NOT NULL LIMIT 1))) AS b_full \
       FROM per JOIN flow_slots a ON a.slot = per.slot \
       WHERE a.job_id IS NULL OR a.job_id NOT IN (SELECT id FROM jobs WHERE paused)) \
     SELECT coalesce(sum(n) FILTER (WHERE running >= cap OR b_full), 0)::int8, \
       coalesce(sum(n) FILTER (WHERE NOT (running >= cap OR coalesce(b_full, false)) AND next_start > $1), 0)::int8, \
       (SELECT count(*) FROM run_queue WHERE expires_at <= $1 AND lease_until IS NULL AND started_at IS NULL), \
       (SELECT count(*) FROM flow_debounces d JOIN runs r ON r.id = d.run_id JOIN run_queue q ON q.seq = r.seq \
          WHERE q.lease_until IS NULL AND q.started_at IS NULL AND q.run_at > $1) \
     FROM s";

impl PgStore {
    /// See [`crate::store::Store::jobs_list`]: each job's keys (`crate::store::held`).
    pub async fn flow_keys(&self, top: usize) -> Result<HashMap<String, JobKeys>> {
        let conn = self.conn().await?;
        let top = i64::try_from(top).unwrap_or(i64::MAX);
        let mut out = Vec::new();
        for r in rows(&conn, key_rows_sql!(queued_per_slot!(), "$1"), &[&top]).await? {
            out.push(KeyRow {
                job: r.try_get(0)?,
                slot: r.try_get(1)?,
                cap: i64::from(r.try_get::<_, i32>(2)?),
                running: i64::from(r.try_get::<_, i32>(3)?),
                queued: r.try_get(4)?,
                at_limit: r.try_get(5)?,
            });
        }
        Ok(job_keys(out))
    }

    /// See [`crate::store::Store::runs_held`].
    pub async fn runs_held(&self, now: i64) -> Result<RunsHeld> {
        let conn = self.conn().await?;
        let r = rows(&conn, HELD_SQL, &[&now]).await?;
        let n = |v: i64| u64::try_from(v).unwrap_or(0);
        let Some(r) = r.first() else {
            return Ok(RunsHeld::default());
        };
        Ok(RunsHeld {
            concurrency: n(r.try_get(0)?),
            throttle: n(r.try_get(1)?),
            start_timeout: n(r.try_get(2)?),
            debounce: n(r.try_get(3)?),
        })
    }
}
