//! What flow control holds back now, on SQLite (see `crate::store::held`): the busiest keys of
//! each job and the due runs held by each kind of limit, counted off the slots' queue indexes
//! (`runs_slot_queue`, `runs_slot_ranked_due`: index-only, grouped by slot as they are ordered)
//! and the slots' counters in `flow_slots`.

use rusqlite::params;

use super::SqliteStore;
use crate::store::held::{job_keys, key_rows_sql, JobKeys, KeyRow, RunsHeld};
use crate::store::Result;

/// Queued runs per slot (`slot`, `n`) in the slots' two queue indexes, with `{and}` on each.
macro_rules! queued_per_slot {
    ($and:literal) => {
        concat!(
            "SELECT slot_a AS slot, count(*) AS n FROM runs INDEXED BY runs_slot_queue \
               WHERE slot_a IS NOT NULL AND priority_ms IS NULL AND status = 'queued' ",
            $and,
            " GROUP BY slot_a \
             UNION ALL SELECT slot_a, count(*) FROM runs INDEXED BY runs_slot_ranked_due \
               WHERE slot_a IS NOT NULL AND priority_ms IS NOT NULL AND status = 'queued' ",
            $and,
            " GROUP BY slot_a"
        )
    };
}

/// The due runs held by a full slot (the first or the second of their slots), then by a
/// throttle's next start after `?1` (`runs_held`), in slots of jobs not paused; the due runs past
/// their start timeout; the runs of open debounce windows, not due yet. A slot's second
/// slot is read from one of its queued runs (every run of a slot has the same, but for runs
/// created under an older definition).
const HELD_SQL: &str = concat!(
    "WITH per AS (SELECT slot, sum(n) AS n FROM (",
    queued_per_slot!("AND run_at <= ?1"),
    ") GROUP BY slot), \
     s AS (SELECT per.n, a.cap, a.running, a.thr_interval, a.tat - a.thr_tolerance AS next_start, \
       (SELECT b.running >= b.cap FROM flow_slots b WHERE b.slot = coalesce( \
          (SELECT slot_b FROM runs INDEXED BY runs_slot_queue WHERE slot_a = per.slot AND slot_a IS NOT NULL \
             AND priority_ms IS NULL AND status = 'queued' LIMIT 1), \
          (SELECT slot_b FROM runs INDEXED BY runs_slot_ranked_due WHERE slot_a = per.slot AND slot_a IS NOT NULL \
             AND priority_ms IS NOT NULL AND status = 'queued' LIMIT 1))) AS b_full \
       FROM per JOIN flow_slots a ON a.slot = per.slot \
       WHERE a.job_id IS NULL OR a.job_id NOT IN (SELECT id FROM jobs WHERE paused = 1)) \
     SELECT coalesce(sum(CASE WHEN running >= cap OR b_full THEN n END), 0), \
       coalesce(sum(CASE WHEN NOT (running >= cap OR coalesce(b_full, 0)) AND next_start > ?1 THEN n END), 0), \
       (SELECT count(*) FROM runs INDEXED BY runs_expiring WHERE status = 'queued' \
          AND expires_at IS NOT NULL AND started_at IS NULL AND expires_at <= ?1), \
       (SELECT count(*) FROM flow_debounces d JOIN runs r ON r.id = d.run_id \
          WHERE r.status = 'queued' AND r.started_at IS NULL AND r.run_at > ?1) \
     FROM s"
);

impl SqliteStore {
    /// See [`crate::store::Store::jobs_list`]: each job's keys (`crate::store::held`).
    pub async fn flow_keys(
        &self,
        top: usize,
    ) -> Result<std::collections::HashMap<String, JobKeys>> {
        self.read(move |c| {
            let rows = c
                .prepare_cached(key_rows_sql!(queued_per_slot!(""), "?1"))?
                .query_map([i64::try_from(top).unwrap_or(i64::MAX)], |r| {
                    Ok(KeyRow {
                        job: r.get(0)?,
                        slot: r.get(1)?,
                        cap: r.get(2)?,
                        running: r.get(3)?,
                        queued: r.get(4)?,
                        at_limit: r.get(5)?,
                    })
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(job_keys(rows))
        })
        .await
    }

    /// See [`crate::store::Store::runs_held`].
    pub async fn runs_held(&self, now: i64) -> Result<RunsHeld> {
        self.read(move |c| {
            let (concurrency, throttle, start_timeout, debounce): (i64, i64, i64, i64) =
                c.prepare_cached(HELD_SQL)?.query_row(params![now], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                })?;
            let n = |v: i64| u64::try_from(v).unwrap_or(0);
            Ok(RunsHeld {
                concurrency: n(concurrency),
                throttle: n(throttle),
                start_timeout: n(start_timeout),
                debounce: n(debounce),
            })
        })
        .await
    }
}
