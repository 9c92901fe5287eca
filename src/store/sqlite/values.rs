//! The writer's set of the values waited for (`run_waits`' event name, match path and value),
//! so that an event no run waits for is told apart without a lookup of `run_waits_match`.
//!
//! With keys spread over the index (order or user ids), that one lookup of a non-matching event
//! read pages no cache held, and it cost a fifth of the event's insert beside 100,000 waits
//! (BENCHMARKS.md, issue 27's sixteenth sitting). The set holds a hash of each triple.
//!
//! **It never misses a value waited for; it may hold values no longer waited for** (then the
//! lookup runs and finds nothing, as it always did). So:
//! - a row inserted through the writer's connection is added at once (temporary triggers, which
//!   only that connection has, call [`INSERTED`] with the row's values): an event later in the
//!   same batch sees it; a rollback leaves it in the set, which is allowed;
//! - rows other processes committed are read from `wait_log` (`0054_wait_log.sql`), which a
//!   trigger of the schema appends to with each `run_waits` insert: when a batch begins and
//!   `PRAGMA data_version` says another connection committed, the writer reads the log past the
//!   last entry it had (`high`, always a committed entry). The log's `seq` are contiguous
//!   (SQLite gives the largest plus one, and the largest is never deleted), so a first entry
//!   past `high + 1` means the front it had not read was trimmed: the set is built again;
//! - the set is built from `run_waits` itself at the start of a batch (inside its write
//!   transaction: no other commit can come between the rows and the log's last entry), first,
//!   after such a gap, and when the values no longer waited for cost too much: once it has
//!   doubled since it was built (memory), or once the lookups it let through that found nothing
//!   reach half its size (time). Deletes are not counted: a resumed wait's value costs nothing
//!   until an event with it comes again. So each build after the first follows at least half
//!   as many inserts or vain lookups as the rows it reads (except after a gap);
//! - past [`MAX_VALUES`] rows waiting, no set is kept: every event looks up, as before.
//!
//! Every writer trims the log's front once it has appended [`LOG_KEEP`] entries, keeping the last
//! [`LOG_KEEP`]: a process more than that behind builds its set again.

use std::collections::hash_map::RandomState;
use std::collections::HashSet;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, MutexGuard};

use rusqlite::functions::{Context, FunctionFlags};
use rusqlite::types::ValueRef;
use rusqlite::Connection;

use crate::store::Result;

/// Most rows of `run_waits` a set is kept for (some 20 bytes each).
pub(super) const MAX_VALUES: usize = 1 << 21;

/// Entries of `wait_log` each writer keeps when it trims the log's front.
pub(super) const LOG_KEEP: i64 = 1 << 16;

/// A set smaller than this is not built again for its growth or its lookups in vain.
const MIN_BUILT: usize = 4096;

/// Called by the temporary trigger on each row inserted through the writer's connection.
const INSERTED: &str = "flare_wait_value_inserted";

/// What the writer thread and its connection's triggers share.
#[derive(Default)]
struct Shared {
    set: HashSet<u64>,
    /// The set holds every value waited for (else every event looks up).
    complete: bool,
    /// Rows inserted into `run_waits` through the writer's connection.
    inserted: u64,
}

/// See the module. `Default` is a writer without the triggers (tests of the writer alone): it
/// keeps no set, and every event looks up.
#[derive(Default)]
pub(crate) struct Values {
    shared: Arc<Mutex<Shared>>,
    /// The hash of the triples; its keys are random per process.
    state: RandomState,
    installed: bool,
    /// The last `wait_log` entry the set holds (committed, so never taken again).
    high: i64,
    /// The set's size when it was last built.
    built_len: usize,
    /// Lookups the set let through that found no wait, since it was built (or counted).
    in_vain: u64,
    /// The writer's inserts when `high` last moved, and when it last trimmed the log.
    seen_inserted: u64,
    trimmed_at: u64,
    /// Past the limit: the count of the writer's inserts and vain lookups at which a build is
    /// tried again.
    retry_at: Option<u64>,
    /// [`MAX_VALUES`], or a test's.
    limit: Option<usize>,
}

impl Values {
    /// The set of the writer's connection `conn`: installs its function and temporary trigger.
    /// The set itself is built when the first batch begins.
    pub(super) fn install(conn: &Connection) -> Result<Self> {
        let values = Self {
            installed: true,
            ..Self::default()
        };
        let (shared, state) = (Arc::clone(&values.shared), values.state.clone());
        conn.create_scalar_function(
            INSERTED,
            3,
            FunctionFlags::SQLITE_UTF8,
            move |ctx: &Context<'_>| {
                let key = match (text(ctx, 0), text(ctx, 1), text(ctx, 2)) {
                    (Some(name), Some(path), Some(value)) => Some(key(&state, name, path, value)),
                    _ => None,
                };
                let mut shared = lock(&shared);
                shared.inserted += 1;
                match key {
                    Some(k) => {
                        shared.set.insert(k);
                    }
                    // Not text (no such row is written): the set can no longer say.
                    None => shared.complete = false,
                }
                Ok(0_i64)
            },
        )?;
        conn.execute_batch(&format!(
            "CREATE TEMP TRIGGER IF NOT EXISTS flare_wait_value_inserted AFTER INSERT ON main.run_waits \
             BEGIN SELECT {INSERTED}(NEW.event_name, NEW.match_path, NEW.match_value); END;"
        ))?;
        Ok(values)
    }

    /// Whether a run may wait for events `name` whose value at `path` is `value`: false only if
    /// none does.
    pub(super) fn may_wait(&self, name: &str, path: &str, value: &str) -> bool {
        let shared = lock(&self.shared);
        !shared.complete
            || shared.set.contains(&key(
                &self.state,
                name.as_bytes(),
                path.as_bytes(),
                value.as_bytes(),
            ))
    }

    /// Counts a lookup [`Self::may_wait`] let through that found no wait: a value no longer
    /// waited for (or another's with the same hash), or any lookup while no set is kept.
    pub(super) fn found_none(&mut self) {
        self.in_vain += 1;
    }

    /// Brings the set up to date as a batch begins, inside its write transaction (no other
    /// connection can commit until it ends). `foreign`: another connection committed since the
    /// last batch began.
    pub(super) fn batch_begins(&mut self, conn: &Connection, foreign: bool) -> Result<()> {
        if !self.installed {
            return Ok(());
        }
        let (complete, len, inserted) = {
            let s = lock(&self.shared);
            (s.complete, s.set.len(), s.inserted)
        };
        let wanted = self.retry_at.is_none_or(|at| inserted + self.in_vain >= at);
        if !wanted {
            // Too many rows waiting: every event looks up until the retry.
        } else if !complete
            || len >= 2 * self.built_len.max(MIN_BUILT)
            || self.in_vain >= (len.max(MIN_BUILT) / 2) as u64
        {
            self.build(conn)?;
        } else if foreign {
            if !self.catch_up(conn)? {
                self.build(conn)?;
            }
        } else if inserted != self.seen_inserted {
            // Every committed entry is in the set: the writer's own, and others' read before.
            self.high = last_entry(conn)?;
        }
        self.seen_inserted = inserted;
        if inserted - self.trimmed_at >= LOG_KEEP as u64 {
            self.trimmed_at = inserted;
            // A log not trimmed is only longer: the set stays good (and a writer made read-only,
            // `health_fail_writes`, does not build it again at every batch).
            if let Err(e) = trim(conn) {
                tracing::debug!(error = %e, "could not trim wait_log");
            }
        }
        Ok(())
    }

    /// Stops using the set until the next batch builds it again (whether others committed is
    /// not known).
    pub(super) fn forget(&mut self) {
        lock(&self.shared).complete = false;
    }

    /// Adds the log's entries past `high`; false if the log was trimmed past it.
    fn catch_up(&mut self, conn: &Connection) -> Result<bool> {
        let mut stmt = conn.prepare_cached(
            "SELECT seq, event_name, match_path, match_value FROM wait_log WHERE seq > ?1 ORDER BY seq",
        )?;
        let mut rows = stmt.query([self.high])?;
        let mut keys = Vec::new();
        let mut next = self.high + 1;
        while let Some(r) = rows.next()? {
            let seq: i64 = r.get(0)?;
            if seq != next {
                return Ok(false);
            }
            next += 1;
            match (
                bytes(r.get_ref(1)?),
                bytes(r.get_ref(2)?),
                bytes(r.get_ref(3)?),
            ) {
                (Some(name), Some(path), Some(value)) => {
                    keys.push(key(&self.state, name, path, value));
                }
                _ => return Ok(false),
            }
        }
        lock(&self.shared).set.extend(keys);
        self.high = next - 1;
        Ok(true)
    }

    /// Builds the set from `run_waits`; keeps none past [`MAX_VALUES`] rows.
    fn build(&mut self, conn: &Connection) -> Result<()> {
        let high = last_entry(conn)?;
        let mut set = HashSet::new();
        let mut complete = true;
        let limit = self.limit.unwrap_or(MAX_VALUES);
        let mut stmt = conn.prepare_cached(
            "SELECT event_name, match_path, match_value FROM run_waits WHERE resumed IS NULL",
        )?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            match (
                bytes(r.get_ref(0)?),
                bytes(r.get_ref(1)?),
                bytes(r.get_ref(2)?),
            ) {
                (Some(name), Some(path), Some(value)) if set.len() < limit => {
                    set.insert(key(&self.state, name, path, value));
                }
                _ => {
                    complete = false;
                    break;
                }
            }
        }
        tracing::debug!(
            rows = set.len(),
            complete,
            "built the writer's set of the values waited for"
        );
        let mut shared = lock(&self.shared);
        self.high = high;
        self.built_len = set.len();
        self.retry_at = (!complete).then(|| shared.inserted + self.in_vain + 2 * limit as u64);
        if complete {
            self.in_vain = 0;
        }
        shared.set = if complete { set } else { HashSet::new() };
        shared.complete = complete;
        Ok(())
    }

    /// The lookups counted in vain since the set was built.
    #[cfg(test)]
    pub(super) fn in_vain(&self) -> u64 {
        self.in_vain
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.shared).set.len()
    }
}

fn key(state: &RandomState, name: &[u8], path: &[u8], value: &[u8]) -> u64 {
    state.hash_one((name, path, value))
}

fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    // A panic while it was held (none can: no code there panics) leaves counters only.
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn text<'a>(ctx: &'a Context<'_>, i: usize) -> Option<&'a [u8]> {
    bytes(ctx.get_raw(i))
}

fn bytes(v: ValueRef<'_>) -> Option<&[u8]> {
    match v {
        ValueRef::Text(t) => Some(t),
        _ => None,
    }
}

/// Deletes the log's entries but the last [`LOG_KEEP`].
fn trim(conn: &Connection) -> rusqlite::Result<usize> {
    conn.prepare_cached("DELETE FROM wait_log WHERE seq < (SELECT max(seq) FROM wait_log) - ?1")?
        .execute([LOG_KEEP])
}

/// The log's last entry (0 when empty).
fn last_entry(conn: &Connection) -> Result<i64> {
    Ok(conn
        .prepare_cached("SELECT coalesce(max(seq), 0) FROM wait_log")?
        .query_row([], |r| r.get(0))?)
}

#[cfg(test)]
mod tests {
    use super::super::migrated;
    use super::super::wait_hash::match_hash;
    use super::*;

    fn wait(conn: &Connection, run: &str, value: &str) {
        conn.execute(
            "INSERT OR REPLACE INTO run_waits \
               (run_id, step_key, event_name, match_path, match_value, since, until, match_hash) \
             VALUES (?1, 'paid', 'invoice.paid', 'payload.id', ?2, 0, 1, ?3)",
            rusqlite::params![run, value, match_hash("invoice.paid", "payload.id", value)],
        )
        .expect("insert");
    }

    /// `n` waits in one transaction: run `{run}{i}` on the value `{value}{i}`.
    fn many(conn: &Connection, run: &str, value: &str, n: usize) {
        conn.execute_batch("BEGIN").expect("begin");
        for i in 0..n {
            wait(conn, &format!("{run}{i}"), &format!("{value}{i}"));
        }
        conn.execute_batch("COMMIT").expect("commit");
    }

    fn waits(values: &Values, value: &str) -> bool {
        values.may_wait("invoice.paid", "payload.id", value)
    }

    /// Begins a batch on `conn` as the writer does, `foreign` as `PRAGMA data_version` says.
    fn begin(values: &mut Values, conn: &Connection, foreign: bool) {
        values.batch_begins(conn, foreign).expect("begin");
    }

    /// Rows there before the writer opened, and rows it inserts (at once, in the same batch).
    #[test]
    fn the_set_holds_the_rows_there_and_those_the_writer_inserts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let conn = migrated(&dir.path().join("v.db"));
        wait(&conn, "r1", "in_1");
        let mut values = Values::install(&conn).expect("install");
        assert!(
            waits(&values, "in_2"),
            "before the first batch, every event looks up"
        );
        begin(&mut values, &conn, true);
        assert!(waits(&values, "in_1"));
        assert!(!waits(&values, "in_2"));
        assert!(!values.may_wait("invoice.sent", "payload.id", "in_1"));
        assert!(!values.may_wait("invoice.paid", "payload.other", "in_1"));
        wait(&conn, "r2", "in_2");
        assert!(waits(&values, "in_2"), "seen before the next batch");
    }

    /// A wait another connection (another process) commits is read from the log when the next
    /// batch begins, and the set is built again if the log was trimmed past what it had read.
    #[test]
    fn waits_others_commit_are_read_from_the_log() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("v.db");
        let conn = migrated(&file);
        let other = Connection::open(&file).expect("open");
        let mut values = Values::install(&conn).expect("install");
        begin(&mut values, &conn, true);
        wait(&other, "r1", "in_1");
        wait(&conn, "r2", "in_2");
        wait(&other, "r3", "in_3");
        assert!(!waits(&values, "in_1"), "not read yet");
        begin(&mut values, &conn, true);
        for v in ["in_1", "in_2", "in_3"] {
            assert!(waits(&values, v), "{v}");
        }
        let high = values.high;
        assert!(high >= 3, "{high}");

        // Trimmed past it: the log no longer holds r4's entry, the build reads it from run_waits.
        wait(&other, "r4", "in_4");
        wait(&other, "r5", "in_5");
        other
            .execute(
                "DELETE FROM wait_log WHERE seq < (SELECT max(seq) FROM wait_log)",
                [],
            )
            .expect("trim");
        begin(&mut values, &conn, true);
        assert!(waits(&values, "in_4"));
        assert!(waits(&values, "in_5"));
    }

    /// A rolled-back insert may stay in the set; it never takes an entry of the log the set
    /// has not read (another connection's insert that reuses its `seq` is read).
    #[test]
    fn a_rollback_leaves_the_log_entries_to_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("v.db");
        let conn = migrated(&file);
        let other = Connection::open(&file).expect("open");
        let mut values = Values::install(&conn).expect("install");
        begin(&mut values, &conn, true);
        conn.execute_batch("BEGIN IMMEDIATE").expect("begin");
        begin(&mut values, &conn, false);
        wait(&conn, "r1", "in_1");
        conn.execute_batch("ROLLBACK").expect("rollback");
        assert!(waits(&values, "in_1"), "kept: a lookup that finds nothing");
        wait(&other, "r2", "in_2");
        conn.execute_batch("BEGIN IMMEDIATE").expect("begin");
        begin(&mut values, &conn, true);
        conn.execute_batch("COMMIT").expect("commit");
        assert!(waits(&values, "in_2"));
    }

    /// Lookups in vain and growth build the set again: values no longer waited for leave it.
    #[test]
    fn values_no_longer_waited_for_leave_the_set() {
        let dir = tempfile::tempdir().expect("tempdir");
        let conn = migrated(&dir.path().join("v.db"));
        let mut values = Values::install(&conn).expect("install");
        begin(&mut values, &conn, true);
        let n = MIN_BUILT * 2;
        many(&conn, "r", "in_", n);
        begin(&mut values, &conn, false);
        assert_eq!(values.len(), n);
        // Half of them resumed: their values stay until looking them up in vain costs enough.
        conn.execute(
            "DELETE FROM run_waits WHERE CAST(substr(run_id, 2) AS INTEGER) < ?1",
            [n / 2],
        )
        .expect("delete");
        begin(&mut values, &conn, false);
        assert_eq!(values.len(), n);
        assert!(waits(&values, "in_0"), "a lookup that finds nothing");
        for _ in 0..n / 2 - 1 {
            values.found_none();
        }
        begin(&mut values, &conn, false);
        assert_eq!(values.len(), n, "not yet");
        values.found_none();
        begin(&mut values, &conn, false);
        assert_eq!(values.len(), n / 2);
        assert!(!waits(&values, "in_0"));
        assert!(waits(&values, &format!("in_{}", n - 1)));

        // The rest resumed by another process (deletes the writer does not see), then as many
        // new waits as the set held when built: it doubled, and is built again.
        let other = Connection::open(dir.path().join("v.db")).expect("open");
        other.execute("DELETE FROM run_waits", []).expect("delete");
        many(&conn, "s", "new_", n / 2);
        begin(&mut values, &conn, true);
        assert_eq!(values.len(), n / 2);
        assert!(!waits(&values, &format!("in_{}", n - 1)));
        assert!(waits(&values, "new_0"));
    }

    /// The writer trims the log's front once it has appended [`LOG_KEEP`] entries.
    #[test]
    fn the_log_keeps_its_last_entries() {
        let dir = tempfile::tempdir().expect("tempdir");
        let conn = migrated(&dir.path().join("v.db"));
        let mut values = Values::install(&conn).expect("install");
        begin(&mut values, &conn, true);
        many(&conn, "r", "in_", (LOG_KEEP + 10) as usize);
        begin(&mut values, &conn, false);
        let (entries, last): (i64, i64) = conn
            .query_row("SELECT count(*), max(seq) FROM wait_log", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .expect("count");
        assert_eq!(last, LOG_KEEP + 10);
        assert_eq!(entries, LOG_KEEP + 1);
    }

    /// A trim that fails (a read-only writer) leaves the set in use.
    #[test]
    fn a_trim_that_fails_keeps_the_set() {
        let dir = tempfile::tempdir().expect("tempdir");
        let conn = migrated(&dir.path().join("v.db"));
        let mut values = Values::install(&conn).expect("install");
        begin(&mut values, &conn, true);
        many(&conn, "r", "in_", LOG_KEEP as usize);
        conn.pragma_update(None, "query_only", true)
            .expect("read-only");
        begin(&mut values, &conn, false);
        assert!(!waits(&values, "not_waited"), "the set is kept");
        assert!(waits(&values, "in_0"));
    }

    /// Past the limit ([`MAX_VALUES`]) of rows waiting no set is kept: every event looks up,
    /// until enough have gone to try again.
    #[test]
    fn past_the_limit_every_event_looks_up() {
        let dir = tempfile::tempdir().expect("tempdir");
        let conn = migrated(&dir.path().join("v.db"));
        for i in 0..=100 {
            wait(&conn, &format!("r{i}"), &format!("in_{i}"));
        }
        let mut values = Values::install(&conn).expect("install");
        values.limit = Some(100);
        begin(&mut values, &conn, true);
        assert!(waits(&values, "not_waited"));
        assert_eq!(values.len(), 0, "no set kept");
        conn.execute("DELETE FROM run_waits WHERE run_id > 'r5'", [])
            .expect("delete");
        // Tried again once the lookups (all in vain here) and inserts reach twice the limit.
        for _ in 0..199 {
            values.found_none();
        }
        begin(&mut values, &conn, false);
        assert!(waits(&values, "not_waited"), "not yet");
        values.found_none();
        begin(&mut values, &conn, false);
        assert!(!waits(&values, "not_waited"), "kept again");
        assert!(waits(&values, "in_1"));
    }
}
