//! The per-minute counts the rates and statistics read (`0008_rollups.sql`): runs finished per
//! minute, job and state (`run_outcomes`) and events received per minute (`event_counts`).
//!
//! Counting row by row (triggers) cost a fifth of the end-to-end throughput, so the writer counts
//! per batch instead: each operation notes its changes in the batch's [`Tally`] as it writes them
//! (a run finished, re-opened or deleted; an event received or deleted), an operation that fails
//! takes its notes back with its writes ([`Tally::mark`] / [`Tally::undo`]), and the batch adds
//! them up and writes one upsert per minute, job and state just before it commits
//! ([`Tally::flush`]). A failed flush fails the batch, so the counts commit with the rows they
//! count or not at all.

use std::collections::BTreeMap;

use rusqlite::{params, Connection};

use crate::store::Result;

/// A change to the counts noted by one operation of the batch.
#[derive(Debug)]
enum Note {
    /// `n` runs of `job` reached (or, negative, left) the final state `status` at `minute`.
    Run {
        minute: i64,
        job: String,
        status: String,
        n: i64,
    },
    /// `n` events received (or, negative, deleted) at `minute`.
    Event { minute: i64, n: i64 },
}

/// The minute a time in ms falls in, as the migration's `/ 60000` computes it.
fn minute(ms: i64) -> i64 {
    ms / 60_000
}

/// What the operations of one batch changed in the counts, not yet written.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    notes: Vec<Note>,
}

impl Tally {
    /// A run of `job` finished in `status` at `finished_at` (ms); `n = -1` when a finished run is
    /// re-opened or deleted.
    pub(crate) fn run(&mut self, finished_at: i64, job: &str, status: &str, n: i64) {
        self.notes.push(Note::Run {
            minute: minute(finished_at),
            job: job.to_owned(),
            status: status.to_owned(),
            n,
        });
    }

    /// `n` events received at `timestamp` (ms); negative when deleted.
    pub(crate) fn events(&mut self, timestamp: i64, n: i64) {
        self.notes.push(Note::Event {
            minute: minute(timestamp),
            n,
        });
    }

    /// Where the notes stand before an operation, for [`Tally::undo`].
    pub(crate) fn mark(&self) -> usize {
        self.notes.len()
    }

    /// Takes back the notes made since `mark`: their operation was rolled back.
    pub(crate) fn undo(&mut self, mark: usize) {
        self.notes.truncate(mark);
    }

    /// Writes the batch's notes, summed per key and in key order, and empties the tally.
    pub(crate) fn flush(&mut self, conn: &Connection) -> Result<()> {
        if self.notes.is_empty() {
            return Ok(());
        }
        let mut runs: BTreeMap<(i64, String, String), i64> = BTreeMap::new();
        let mut events: BTreeMap<i64, i64> = BTreeMap::new();
        for note in self.notes.drain(..) {
            match note {
                Note::Run {
                    minute,
                    job,
                    status,
                    n,
                } => *runs.entry((minute, job, status)).or_default() += n,
                Note::Event { minute, n } => *events.entry(minute).or_default() += n,
            }
        }
        let mut add = conn.prepare_cached(
            "INSERT INTO run_outcomes (minute, job_id, status, n) VALUES (?1, ?2, ?3, ?4) \
             ON CONFLICT (minute, job_id, status) DO UPDATE SET n = n + excluded.n",
        )?;
        let mut emptied = conn.prepare_cached(
            "DELETE FROM run_outcomes WHERE minute = ?1 AND job_id = ?2 AND status = ?3 AND n <= 0",
        )?;
        for ((minute, job, status), n) in runs.into_iter().filter(|(_, n)| *n != 0) {
            add.execute(params![minute, job, status, n])?;
            if n < 0 {
                emptied.execute(params![minute, job, status])?;
            }
        }
        let mut add = conn.prepare_cached(
            "INSERT INTO event_counts (minute, n) VALUES (?1, ?2) \
             ON CONFLICT (minute) DO UPDATE SET n = n + excluded.n",
        )?;
        let mut emptied =
            conn.prepare_cached("DELETE FROM event_counts WHERE minute = ?1 AND n <= 0")?;
        for (minute, n) in events.into_iter().filter(|(_, n)| *n != 0) {
            add.execute(params![minute, n])?;
            if n < 0 {
                emptied.execute([minute])?;
            }
        }
        Ok(())
    }
}

/// Where the stored counts differ from a count of the rows themselves, one line per key; empty
/// when they agree. For tests: every write path must keep the counts true.
pub(crate) fn drift(conn: &Connection) -> Result<Vec<String>> {
    let sql = "WITH counted AS ( \
                 SELECT finished_at / 60000 AS minute, job_id, status, count(*) AS n FROM runs \
                 WHERE finished_at IS NOT NULL GROUP BY 1, 2, 3), \
               keys AS (SELECT minute, job_id, status FROM counted \
                        UNION SELECT minute, job_id, status FROM run_outcomes) \
               SELECT 'runs ' || k.minute || ' ' || k.job_id || ' ' || k.status \
                      || ': stored ' || coalesce(o.n, 0) || ', counted ' || coalesce(c.n, 0) \
               FROM keys k \
               LEFT JOIN counted c USING (minute, job_id, status) \
               LEFT JOIN run_outcomes o USING (minute, job_id, status) \
               WHERE coalesce(o.n, 0) <> coalesce(c.n, 0) OR o.n = 0 \
               UNION ALL \
               SELECT 'events ' || k.minute || ': stored ' || coalesce(o.n, 0) \
                      || ', counted ' || coalesce(c.n, 0) \
               FROM (SELECT minute FROM event_counts \
                     UNION SELECT timestamp / 60000 FROM events) k \
               LEFT JOIN (SELECT timestamp / 60000 AS minute, count(*) AS n FROM events GROUP BY 1) c \
                 USING (minute) \
               LEFT JOIN event_counts o USING (minute) \
               WHERE coalesce(o.n, 0) <> coalesce(c.n, 0) OR o.n = 0";
    let mut stmt = conn.prepare(sql)?;
    let lines = stmt
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(lines)
}
