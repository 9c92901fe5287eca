//! The writer's copy of the match paths in use per event name (`wait_paths`, `cancel_paths`).
//!
//! The insert of every event asks which match paths its name's waits and cancel keys use, so as
//! to compute the values to look up. The answer nearly never changes (most names: none), and
//! reading both tables cost about 6% of the writer's time for each event that starts a run. The
//! writer keeps the answers instead, and forgets them all when they may be stale:
//! - a row inserted into either table by the writer's own connection (temporary triggers, which
//!   only that connection has, call a function that counts them: [`Paths::install`]);
//! - a commit by any other connection (another process on the same file), which changes
//!   `PRAGMA data_version`: looked at when each batch begins ([`Paths::batch_begins`]);
//! - a rollback (of an operation's savepoint or of a batch), which may remove inserted rows.
//!
//! Rows are never deleted from either table otherwise, so between those moments the copy is the
//! table. At most [`MAX_NAMES`] names per table are kept (event names come from senders).
//!
//! It also holds the writer's set of the values waited for ([`Values`], `values.rs`), brought up
//! to date when each batch begins, and its count of the waits it marked resumed ([`Swept`],
//! `swept.rs`), which are deleted together at the end of a batch once they are due.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rusqlite::functions::FunctionFlags;
use rusqlite::Connection;

use super::swept::Swept;
use super::values::Values;
use crate::store::Result;

/// Most event names whose paths are kept per table; past it the copy starts again.
pub(super) const MAX_NAMES: usize = 4096;

/// See the module.
#[derive(Default)]
pub(crate) struct Paths {
    /// Rows inserted into either table through the writer's connection (its temporary triggers).
    inserted: Arc<AtomicU64>,
    /// [`Self::inserted`] when the copies were last known good.
    seen: u64,
    /// `PRAGMA data_version` when the last batch began (other connections' commits change it).
    version: Option<i64>,
    waits: HashMap<String, Arc<[String]>>,
    cancels: HashMap<String, Arc<[String]>>,
    /// The values waited for, kept the same way (its own module).
    values: Values,
    /// The writer's sweep of the waits events resumed.
    pub(super) swept: Swept,
}

impl Paths {
    /// The copy for the writer's connection `conn`: installs the function and the temporary
    /// triggers that tell it of rows inserted through `conn`.
    pub(super) fn install(conn: &Connection) -> Result<Self> {
        let paths = Self {
            values: Values::install(conn)?,
            ..Self::default()
        };
        let inserted = Arc::clone(&paths.inserted);
        conn.create_scalar_function(
            "flare_paths_inserted",
            0,
            FunctionFlags::SQLITE_UTF8,
            move |_| {
                inserted.fetch_add(1, Ordering::Relaxed);
                Ok(0_i64)
            },
        )?;
        conn.execute_batch(
            "CREATE TEMP TRIGGER IF NOT EXISTS flare_wait_paths_inserted AFTER INSERT ON main.wait_paths \
             BEGIN SELECT flare_paths_inserted(); END; \
             CREATE TEMP TRIGGER IF NOT EXISTS flare_cancel_paths_inserted AFTER INSERT ON main.cancel_paths \
             BEGIN SELECT flare_paths_inserted(); END;",
        )?;
        Ok(paths)
    }

    /// Forgets the copies if another connection committed since the last batch began, and
    /// brings the values waited for up to date. Called inside the batch's transaction, which
    /// holds the write lock: no other commit can follow.
    pub(super) fn batch_begins(&mut self, conn: &Connection) -> Result<()> {
        let begun = self.begin(conn);
        if begun.is_err() {
            self.values.forget();
        }
        begun
    }

    fn begin(&mut self, conn: &Connection) -> Result<()> {
        let version: i64 = conn
            .prepare_cached("PRAGMA data_version")?
            .query_row([], |r| r.get(0))?;
        let foreign = self.version != Some(version);
        if foreign {
            self.forget();
            self.version = Some(version);
        }
        self.values.batch_begins(conn, foreign)
    }

    /// Whether a run may wait for events `name` whose value at `path` is `value` (false only if
    /// none does: [`Values`]).
    pub(super) fn may_wait(&self, name: &str, path: &str, value: &str) -> bool {
        self.values.may_wait(name, path, value)
    }

    /// Counts a lookup [`Self::may_wait`] let through that found no wait.
    pub(super) fn found_none(&mut self) {
        self.values.found_none();
    }

    /// The values waited for (tests).
    #[cfg(test)]
    pub(super) fn values(&self) -> &Values {
        &self.values
    }

    /// Forgets the copies (a rollback may have removed rows they hold).
    pub(super) fn forget(&mut self) {
        self.waits.clear();
        self.cancels.clear();
    }

    /// The match paths of the waits for events `name` (`wait_paths`).
    pub(super) fn waits(&mut self, conn: &Connection, name: &str) -> Result<Arc<[String]>> {
        self.fresh();
        cached(
            &mut self.waits,
            conn,
            "SELECT match_path FROM wait_paths WHERE event_name = ?1",
            name,
        )
    }

    /// The match paths of the cancel keys on events `name` (`cancel_paths`).
    pub(super) fn cancels(&mut self, conn: &Connection, name: &str) -> Result<Arc<[String]>> {
        self.fresh();
        cached(
            &mut self.cancels,
            conn,
            "SELECT match_path FROM cancel_paths WHERE event_name = ?1",
            name,
        )
    }

    /// Forgets the copies if a row was inserted through the writer's connection since.
    fn fresh(&mut self) {
        let inserted = self.inserted.load(Ordering::Relaxed);
        if inserted != self.seen {
            self.forget();
            self.seen = inserted;
        }
    }
}

/// `name`'s entry of `copy`, read with `sql` when missing.
fn cached(
    copy: &mut HashMap<String, Arc<[String]>>,
    conn: &Connection,
    sql: &str,
    name: &str,
) -> Result<Arc<[String]>> {
    if let Some(paths) = copy.get(name) {
        return Ok(Arc::clone(paths));
    }
    let paths: Arc<[String]> = conn
        .prepare_cached(sql)?
        .query_map([name], |r| r.get(0))?
        .collect::<rusqlite::Result<Vec<String>>>()?
        .into();
    if copy.len() >= MAX_NAMES {
        copy.clear();
    }
    copy.insert(name.to_string(), Arc::clone(&paths));
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::super::migrated;
    use super::*;

    /// A path inserted through the writer's connection is seen at once, by either table.
    #[test]
    fn a_path_the_writer_inserts_is_seen_by_the_next_lookup() {
        let dir = tempfile::tempdir().expect("tempdir");
        let conn = migrated(&dir.path().join("paths.db"));
        let mut paths = Paths::install(&conn).expect("install");
        paths.batch_begins(&conn).expect("begin");
        assert!(paths.waits(&conn, "invoice.paid").expect("read").is_empty());
        assert!(paths
            .cancels(&conn, "order.cancelled")
            .expect("read")
            .is_empty());
        conn.execute(
            "INSERT OR IGNORE INTO wait_paths (event_name, match_path) VALUES ('invoice.paid', 'payload.id')",
            [],
        )
        .expect("insert");
        assert_eq!(
            &*paths.waits(&conn, "invoice.paid").expect("read"),
            ["payload.id".to_string()]
        );
        conn.execute(
            "INSERT OR IGNORE INTO cancel_paths (event_name, match_path) VALUES ('order.cancelled', '')",
            [],
        )
        .expect("insert");
        assert_eq!(
            &*paths.cancels(&conn, "order.cancelled").expect("read"),
            [String::new()]
        );
        // A row already there (ignored) changes nothing, and the copy is kept.
        let before = paths.inserted.load(Ordering::Relaxed);
        conn.execute(
            "INSERT OR IGNORE INTO wait_paths (event_name, match_path) VALUES ('invoice.paid', 'payload.id')",
            [],
        )
        .expect("insert");
        assert_eq!(paths.inserted.load(Ordering::Relaxed), before);
    }

    /// A path another connection (another process) committed is seen by the next batch.
    #[test]
    fn a_path_another_connection_commits_is_seen_by_the_next_batch() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("paths.db");
        let conn = migrated(&file);
        let other = Connection::open(&file).expect("open");
        let mut paths = Paths::install(&conn).expect("install");
        paths.batch_begins(&conn).expect("begin");
        assert!(paths.waits(&conn, "invoice.paid").expect("read").is_empty());
        other
            .execute(
                "INSERT INTO wait_paths (event_name, match_path) VALUES ('invoice.paid', 'payload.id')",
                [],
            )
            .expect("insert");
        paths.batch_begins(&conn).expect("begin");
        assert_eq!(
            &*paths.waits(&conn, "invoice.paid").expect("read"),
            ["payload.id".to_string()]
        );
    }

    /// The copy stays bounded however many names are sent.
    #[test]
    fn the_copy_keeps_at_most_max_names() {
        let dir = tempfile::tempdir().expect("tempdir");
        let conn = migrated(&dir.path().join("paths.db"));
        let mut paths = Paths::install(&conn).expect("install");
        for i in 0..MAX_NAMES * 2 + 1 {
            paths.waits(&conn, &format!("name.{i}")).expect("read");
        }
        assert!(paths.waits.len() <= MAX_NAMES);
    }
}
