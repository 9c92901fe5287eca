//! The SQLite writer's sweep of the waits events resumed (`0055_wait_resumed.sql`): an event's
//! insert marks the rows of the waits it resumes (`waits::on_event`), and the writer deletes the
//! marked rows together at the end of a batch once they are due ([`Swept::sweep`]).

use rusqlite::Connection;

use crate::store::{Error, Result};

/// The fewest marked waits a sweep waits for.
pub(super) const SWEEP_MIN: u64 = 4096;

/// The most rows one batch's sweep deletes; the next batches go on. A sweep holds the writer
/// (since `0056_wait_match_hash.sql` ~1.2 µs a row beside 100,000 waits and ~2.5 µs beside
/// 400,000, against ~3 and ~8 µs before it, plus its commit): this bounds the wait of the sends
/// in its batch to about 0.2 s however many waits there are. The match index holds some 200 entries a leaf
/// (about 40 before the hash), so a sweep this large still writes each leaf once for two marks
/// or more in it up to ~6 million waits; past that it gains less, and a batch of resumptions
/// costs about what deleting each wait at once did.
const SWEEP_MAX: usize = 65_536;

/// The writer's sweep of the waits events resumed (`0055_wait_resumed.sql`): their rows are
/// marked in the event's insert and deleted together once they are a quarter of the rows
/// (at least [`SWEEP_MIN`]), so that each leaf of `run_waits_match` is written about once per
/// sweep for all the resumptions it held, whatever the number of waits. The marked rows are
/// counted from the table itself; the writer's own count only spares the look before a
/// sweep can be due, and may be off after a rollback or by other processes' marks.
pub(crate) struct Swept {
    /// Waits this writer marked since it last looked.
    marked: u64,
    /// How many it marks before it looks again.
    next: u64,
    /// Whether the last sweep stopped at [`Self::max`] rows: the next batch goes on.
    again: bool,
    /// [`SWEEP_MAX`], but in tests.
    max: usize,
}

impl Default for Swept {
    fn default() -> Self {
        Self {
            marked: 0,
            next: 0,
            again: false,
            max: SWEEP_MAX,
        }
    }
}

impl Swept {
    pub(super) fn marked(&mut self, n: usize) {
        self.marked += n as u64;
    }

    /// Deletes the marked rows if they are due (at most [`SWEEP_MAX`], the oldest first);
    /// returns how many. Inside the batch's transaction, in a savepoint of its own: a sweep
    /// that fails is undone and tried again later, and never fails the batch.
    pub(super) fn sweep(&mut self, conn: &Connection) -> usize {
        if !self.again && self.marked < self.next.max(SWEEP_MIN) {
            return 0;
        }
        let marked = match Self::counts(conn) {
            Ok((rows, marked)) => {
                let wanted = (rows / 4).max(SWEEP_MIN as i64);
                if !self.again && marked < wanted {
                    self.next = self.marked + (wanted - marked) as u64;
                    return 0;
                }
                marked
            }
            Err(e) => return self.failed(&e),
        };
        let start = std::time::Instant::now();
        let n = self
            .sweep_some(conn, marked)
            .unwrap_or_else(|e| self.failed(&e));
        tracing::debug!(
            rows = n,
            ms = start.elapsed().as_millis() as u64,
            more = self.again,
            "resumed waits swept"
        );
        n
    }

    /// Deletes every marked row now, due or not, [`SWEEP_MAX`] at a time; returns how many.
    pub(super) fn sweep_now(&mut self, conn: &Connection) -> Result<usize> {
        let mut n = 0;
        loop {
            let (_, marked) = Self::counts(conn)?;
            n += self.sweep_some(conn, marked)?;
            if !self.again {
                return Ok(n);
            }
        }
    }

    /// Deletes up to [`Self::max`] of the `marked` rows, the oldest first; returns how many.
    /// All of them in one statement if they are no more.
    fn sweep_some(&mut self, conn: &Connection, marked: i64) -> Result<usize> {
        conn.prepare_cached("SAVEPOINT sweep")?.execute([])?;
        let deleted = if marked <= self.max as i64 {
            conn.prepare_cached("DELETE FROM run_waits WHERE resumed IS NOT NULL")
                .and_then(|mut s| s.execute([]))
        } else {
            conn.prepare_cached(
                "DELETE FROM run_waits WHERE id IN \
                   (SELECT id FROM run_waits WHERE resumed IS NOT NULL ORDER BY resumed LIMIT ?1)",
            )
            .and_then(|mut s| s.execute([self.max as i64]))
        };
        match deleted {
            Ok(n) => {
                conn.prepare_cached("RELEASE sweep")?.execute([])?;
                *self = Self {
                    again: marked > self.max as i64,
                    max: self.max,
                    ..Self::default()
                };
                Ok(n)
            }
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK TO sweep; RELEASE sweep");
                Err(e.into())
            }
        }
    }

    /// At most `max` rows per sweep (tests).
    #[cfg(test)]
    pub(super) fn capped(max: usize) -> Self {
        Self {
            max,
            ..Self::default()
        }
    }

    fn failed(&mut self, e: &Error) -> usize {
        if let Some(suppressed) = crate::log_throttle::storage_failure("sqlite:sweep") {
            tracing::warn!(error = %e, suppressed, "could not delete the resumed waits; tried again later");
        }
        self.again = false;
        self.next = self.marked + SWEEP_MIN;
        0
    }

    /// The rows of `run_waits`, and how many of them are marked.
    fn counts(conn: &Connection) -> Result<(i64, i64)> {
        Ok(conn
            .prepare_cached(
                "SELECT (SELECT count(*) FROM run_waits), \
                        (SELECT count(*) FROM run_waits WHERE resumed IS NOT NULL)",
            )?
            .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))?)
    }
}
