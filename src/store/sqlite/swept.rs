//! The SQLite writer's sweep of the waits events resumed (`0055_wait_resumed.sql`): an event's
//! insert marks the rows of the waits it resumes (`waits::on_event`), and the writer deletes the
//! marked rows together at the end of a batch once they are due ([`Swept::sweep`]).

use rusqlite::Connection;

use crate::store::{Error, Result};

/// The fewest marked waits a sweep waits for.
pub(super) const SWEEP_MIN: u64 = 4096;

/// The writer's sweep of the waits events resumed (`0055_wait_resumed.sql`): their rows are
/// marked in the event's insert and deleted together once they are a quarter of the rows
/// (at least [`SWEEP_MIN`]), so that each leaf of `run_waits_match` is written about once per
/// sweep for all the resumptions it held, whatever the number of waits. The marked rows are
/// counted from the table itself; the writer's own count only spares the look before a
/// sweep can be due, and may be off after a rollback or by other processes' marks.
#[derive(Default)]
pub(crate) struct Swept {
    /// Waits this writer marked since it last looked.
    marked: u64,
    /// How many it marks before it looks again.
    next: u64,
}

impl Swept {
    pub(super) fn marked(&mut self, n: usize) {
        self.marked += n as u64;
    }

    /// Deletes the marked rows if they are due; returns how many. Inside the batch's
    /// transaction, in a savepoint of its own: a sweep that fails is undone and tried again
    /// later, and never fails the batch.
    pub(super) fn sweep(&mut self, conn: &Connection) -> usize {
        if self.marked < self.next.max(SWEEP_MIN) {
            return 0;
        }
        let due = match Self::due(conn) {
            Ok(due) => due,
            Err(e) => return self.failed(&e),
        };
        match due {
            Ok(()) => {
                let start = std::time::Instant::now();
                let n = self.sweep_now(conn).unwrap_or_else(|e| self.failed(&e));
                tracing::debug!(
                    rows = n,
                    ms = start.elapsed().as_millis() as u64,
                    "resumed waits swept"
                );
                n
            }
            Err(left) => {
                self.next = self.marked + left;
                0
            }
        }
    }

    /// Deletes the marked rows now, due or not; returns how many.
    pub(super) fn sweep_now(&mut self, conn: &Connection) -> Result<usize> {
        conn.prepare_cached("SAVEPOINT sweep")?.execute([])?;
        let deleted = conn
            .prepare_cached("DELETE FROM run_waits WHERE resumed IS NOT NULL")
            .and_then(|mut s| s.execute([]));
        match deleted {
            Ok(n) => {
                conn.prepare_cached("RELEASE sweep")?.execute([])?;
                *self = Self::default();
                Ok(n)
            }
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK TO sweep; RELEASE sweep");
                Err(e.into())
            }
        }
    }

    fn failed(&mut self, e: &Error) -> usize {
        if let Some(suppressed) = crate::log_throttle::storage_failure("sqlite:sweep") {
            tracing::warn!(error = %e, suppressed, "could not delete the resumed waits; tried again later");
        }
        self.next = self.marked + SWEEP_MIN;
        0
    }

    /// `Ok` if the marked rows are a quarter of the rows, else how many more marks would make them one.
    fn due(conn: &Connection) -> Result<std::result::Result<(), u64>> {
        let (rows, marked): (i64, i64) = conn
            .prepare_cached(
                "SELECT (SELECT count(*) FROM run_waits), \
                        (SELECT count(*) FROM run_waits WHERE resumed IS NOT NULL)",
            )?
            .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        let wanted = (rows / 4).max(SWEEP_MIN as i64);
        Ok(if marked >= wanted {
            Ok(())
        } else {
            Err((wanted - marked) as u64)
        })
    }
}
