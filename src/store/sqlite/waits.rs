//! Waits for an event on SQLite (`0030_event_waits.sql`): registering a wait with the run's
//! suspension, resuming waiters in the insert of an event, and ending a wait at its timeout.
//!
//! Every write goes through the one writer, so a wait's registration and an event's insert never
//! overlap; the registration still looks for a matching event sent since the run reached the
//! wait (`since`), which closes the gap between the job calling `wait_for_event` and its
//! completion being written.

use rusqlite::{params, Connection, OptionalExtension};
use serde_json::Value;

use super::children::{child_outcome, children_taken, PARENT_DUE_SQL};
use super::rows::{json_text, opt_json};
use super::steps::{step_done, step_store, INVOKE_TIMED_OUT};
#[cfg(test)]
use super::swept::SWEEP_MIN;
use super::wait_hash::match_hash;
use super::writer::{Guard, WriteCtx};
use super::SqliteStore;
use crate::model::wait::{
    event_value, payload_key, CALLBACK_EVENT, CALLBACK_PATH, INVOKE_EVENT, INVOKE_PATH,
};
use crate::model::{ms_to_time, EventWait, StepStatus, WaitedEvent};
use crate::store::links::Effect;
use crate::store::{Lease, PendingWait, Result};

/// Stores the wait of run `run_id`'s step `key` (suspended at `since`, timing out at `until`) and
/// resumes it at once with the first matching event delivered since `since`, if any. Returns
/// whether it was resumed.
pub(super) fn register(
    conn: &Connection,
    run_id: &str,
    key: &str,
    wait: &EventWait,
    since: i64,
    until: i64,
    now: i64,
) -> Result<bool> {
    if wait.is_callback() && super::steps::callback_answered(conn, run_id, key)? {
        // Posted to before the run got here: due now.
        conn.prepare_cached("UPDATE runs SET run_at = ?2 WHERE id = ?1 AND status = 'queued'")?
            .execute(params![run_id, now])?;
        return Ok(true);
    }
    conn.prepare_cached(
        "INSERT OR REPLACE INTO run_waits \
           (run_id, step_key, event_name, match_path, match_value, condition, run_event, since, \
            until, match_hash) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )?
    .execute(params![
        run_id,
        key,
        wait.event,
        wait.match_path,
        wait.match_value,
        wait.condition,
        wait.run_event.as_ref().map(Value::to_string),
        since,
        until,
        match_hash(&wait.event, &wait.match_path, &wait.match_value)
    ])?;
    if wait.is_callback() {
        return Ok(false);
    }
    if wait.is_invoke() {
        // A child that ended already resumes its parent now.
        return match child_outcome(conn, &wait.match_value)? {
            Some(o) => {
                let failure = o.failure();
                resolve(
                    conn,
                    run_id,
                    key,
                    &o.into_json().to_string(),
                    failure.as_deref(),
                    now,
                    Ended::Deleted,
                )
            }
            None => Ok(false),
        };
    }
    conn.prepare_cached(
        "INSERT OR IGNORE INTO wait_paths (event_name, match_path) VALUES (?1, ?2)",
    )?
    .execute(params![wait.event, wait.match_path])?;
    let mut stmt = conn.prepare_cached(
        "SELECT id, payload, timestamp FROM events \
         WHERE timestamp >= ?1 AND name = ?2 AND delivered_at IS NOT NULL ORDER BY timestamp, rowid",
    )?;
    let mut rows = stmt.query(params![since, wait.event])?;
    while let Some(r) = rows.next()? {
        let id: String = r.get(0)?;
        let payload = json_text(&r.get::<_, String>(1)?)?;
        if wait.accepts(&event_value(&id, &wait.event, &payload)) {
            let event = WaitedEvent {
                id,
                name: wait.event.clone(),
                payload,
                timestamp: ms_to_time(r.get(2)?),
            };
            let resumed = resolve(
                conn,
                run_id,
                key,
                &waited(&event),
                None,
                now,
                Ended::Deleted,
            )?;
            if resumed {
                super::links::effect_put(conn, &event.id, run_id, Effect::Resumed, now)?;
            }
            return Ok(resumed);
        }
    }
    Ok(false)
}

/// Resumes every wait the event just delivered matches (broadcast); returns how many.
pub(super) fn on_event(
    ctx: &mut WriteCtx<'_>,
    id: &str,
    name: &str,
    payload: &Value,
    at: i64,
    now: i64,
) -> Result<usize> {
    let conn = ctx.conn;
    let paths = ctx.paths.waits(conn, name)?;
    if paths.is_empty() {
        return Ok(0);
    }
    // Built for a condition's check only, once a wait is found.
    let mut incoming: Option<Value> = None;
    let mut waiters = Vec::new();
    for path in paths.iter() {
        let value = if path.is_empty() {
            String::new()
        } else {
            match payload_key(payload, path) {
                Some(v) => v,
                None => continue,
            }
        };
        if !ctx.paths.may_wait(name, path, &value) {
            continue;
        }
        let found = pending_for(conn, name, path, &value)?;
        if found.is_empty() {
            ctx.paths.found_none();
        }
        for f in found {
            let wait = EventWait {
                event: name.to_string(),
                match_path: path.clone(),
                match_value: value.clone(),
                condition: f.condition,
                run_event: opt_json(f.run_event)?,
            };
            let incoming = incoming.get_or_insert_with(|| event_value(id, name, payload));
            if wait.accepts(incoming) {
                waiters.push((f.run_id, f.key, f.row));
            }
        }
    }
    if waiters.is_empty() {
        return Ok(0);
    }
    let event = WaitedEvent {
        id: id.to_string(),
        name: name.to_string(),
        payload: payload.clone(),
        timestamp: ms_to_time(at),
    };
    let output = waited(&event);
    let mut n = 0;
    for (run_id, key, row) in waiters {
        if resolve(conn, &run_id, &key, &output, None, now, Ended::Marked(row))? {
            super::links::effect_put(conn, id, &run_id, Effect::Resumed, now)?;
            n += 1;
        }
    }
    ctx.paths.swept.marked(n);
    Ok(n)
}

/// A pending wait [`pending_for`] found.
struct Found {
    row: i64,
    run_id: String,
    key: String,
    condition: Option<String>,
    run_event: Option<String>,
    until: i64,
}

/// Finds a pending wait by its value: through `run_waits_match`, the hash of the three, and the
/// value. It does not compare the event name and the path in SQL, but here: a statement that
/// compares `event_name` with a parameter is prepared again at each call, because SQLite checks
/// the parameter against the condition of the partial index `run_waits_invoke`
/// (`event_name = 'flare/job.invoked'`) and ties the plan to its value.
const PENDING_FOR_SQL: &str =
    "SELECT id, run_id, step_key, condition, run_event, until, event_name, match_path \
     FROM run_waits WHERE match_hash = ?1 AND match_value = ?2 AND resumed IS NULL";

/// The pending waits for events `name` whose value at `path` is `value` ([`PENDING_FOR_SQL`]).
fn pending_for(conn: &Connection, name: &str, path: &str, value: &str) -> Result<Vec<Found>> {
    let mut stmt = conn.prepare_cached(PENDING_FOR_SQL)?;
    let mut rows = stmt.query(params![match_hash(name, path, value), value])?;
    let mut found = Vec::new();
    while let Some(r) = rows.next()? {
        let (event, at): (String, String) = (r.get(6)?, r.get(7)?);
        if event == name && at == path {
            found.push(Found {
                row: r.get(0)?,
                run_id: r.get(1)?,
                key: r.get(2)?,
                condition: r.get(3)?,
                run_event: r.get(4)?,
                until: r.get(5)?,
            });
        }
    }
    Ok(found)
}

/// Whether run `child` holds the invoke step `key` of `run_id` (written by `runs_invoke`; not a
/// Trigger.dev v2 invoke task), whose wait is its caller's count of children (`children.rs`)
/// rather than a `run_waits` row.
pub(super) fn child_holds_step(
    conn: &Connection,
    run_id: &str,
    key: &str,
    child: &str,
) -> Result<bool> {
    Ok(conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM runs WHERE id = ?3 AND awaited_by = ?1 AND awaited_key = ?2)",
        )?
        .query_row(params![run_id, key, child], |r| r.get(0))?)
}

/// Suspends run `run_id` on the invoke step `key` its child holds: due now if none of its
/// children is left (it ended while the run was on its way here). Returns whether it is.
pub(super) fn children_due(conn: &Connection, run_id: &str, now: i64) -> Result<bool> {
    Ok(conn
        .prepare_cached(PARENT_DUE_SQL)?
        .execute(params![run_id, now, INVOKE_EVENT])?
        > 0)
}

fn waited(event: &WaitedEvent) -> String {
    serde_json::to_string(event).unwrap_or_else(|_| "null".into())
}

/// How [`resolve`] ends a wait's row.
#[derive(Clone, Copy)]
enum Ended {
    /// Deleted at once.
    Deleted,
    /// Marked resumed, deleted by a later sweep ([`super::swept::Swept`]): an event's
    /// resumptions, whose index entries lie anywhere in `run_waits_match`. The row's id, which
    /// the event's lookup read.
    Marked(i64),
}

/// Deletes the pending wait of run `?1`'s step `?2`.
const DELETE_SQL: &str = "DELETE FROM run_waits WHERE run_id = ?1 AND step_key = ?2 \
     AND resumed IS NULL RETURNING event_name";

/// Marks the pending wait of row `?1` resumed at `?2`.
const MARK_SQL: &str =
    "UPDATE run_waits SET resumed = ?2 WHERE id = ?1 AND resumed IS NULL RETURNING event_name";

/// Resumes the wait `key` of `run_id` with `output` (JSON), unless it is gone (resumed or timed
/// out): the wait row deleted or marked resumed (`ended`), the step succeeded with it (an invoke
/// step whose child did not succeed fails with its outcome), a queued run due now; a parent
/// waiting for several children only once none is left (fan-in).
fn resolve(
    conn: &Connection,
    run_id: &str,
    key: &str,
    output: &str,
    failure: Option<&str>,
    now: i64,
    ended: Ended,
) -> Result<bool> {
    let gone: Option<String> = match ended {
        Ended::Deleted => conn
            .prepare_cached(DELETE_SQL)?
            .query_row(params![run_id, key], |r| r.get(0)),
        Ended::Marked(id) => conn
            .prepare_cached(MARK_SQL)?
            .query_row(params![id, now], |r| r.get(0)),
    }
    .optional()?;
    let Some(name) = gone else {
        return Ok(false);
    };
    let invoke = name == INVOKE_EVENT;
    step_done(conn, run_id, key, output, failure, now)?;
    if invoke {
        conn.prepare_cached(PARENT_DUE_SQL)?
            .execute(params![run_id, now, INVOKE_EVENT])?;
    } else {
        conn.prepare_cached("UPDATE runs SET run_at = ?2 WHERE id = ?1 AND status = 'queued'")?
            .execute(params![run_id, now])?;
    }
    Ok(true)
}

/// The pending wait for an event of run `run_id`, if any: a stored wait, else the first of its
/// invoke steps (by timeout) whose child has not ended.
pub(super) fn pending(conn: &Connection, run_id: &str) -> Result<Option<PendingWait>> {
    let stored = conn
        .prepare_cached(
            "SELECT step_key, event_name, match_path, match_value, condition, since, until \
             FROM run_waits WHERE run_id = ?1 AND resumed IS NULL ORDER BY since LIMIT 1",
        )?
        .query_row([run_id], |r| {
            Ok(PendingWait::from_row(
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
            ))
        })
        .optional()?;
    if stored.is_some() {
        return Ok(stored);
    }
    let (from, to) = super::steps::children_range(run_id);
    Ok(conn
        .prepare_cached(
            "SELECT awaited_key, id, created_at, coalesce(awaited_until, created_at) FROM runs \
             WHERE event_id >= ?2 AND event_id < ?3 AND awaited_by = ?1 \
               AND awaited_key IS NOT NULL AND status IN ('queued', 'running') \
               AND EXISTS (SELECT 1 FROM children_waiting WHERE run_id = ?1) \
             ORDER BY awaited_until, awaited_key LIMIT 1",
        )?
        .query_row(params![run_id, from, to], |r| {
            Ok(PendingWait::from_row(
                r.get(0)?,
                INVOKE_EVENT.to_string(),
                INVOKE_PATH.to_string(),
                r.get(1)?,
                None,
                r.get(2)?,
                r.get(3)?,
            ))
        })
        .optional()?)
}

impl SqliteStore {
    /// See [`crate::store::Store::waits_swept`]: one operation of the writer.
    pub async fn waits_swept(&self) -> Result<usize> {
        self.write(|ctx| ctx.paths.swept.sweep_now(ctx.conn)).await
    }

    /// See [`crate::store::Store::callback_resolve`]: one operation of the writer.
    pub async fn callback_resolve(&self, token: String, body: Value, now: i64) -> Result<bool> {
        let output = serde_json::json!({ "body": body, "token": token }).to_string();
        self.write(move |ctx| {
            let found = pending_for(ctx.conn, CALLBACK_EVENT, CALLBACK_PATH, &token)?
                .into_iter()
                .find(|f| f.until > now)
                .map(|f| (f.run_id, f.key));
            let Some((run_id, key)) = found else {
                return Ok(false);
            };
            let done = resolve(ctx.conn, &run_id, &key, &output, None, now, Ended::Deleted)?;
            ctx.wake |= done;
            Ok(done)
        })
        .await
    }

    /// See [`crate::store::Store::wait_expire`]: one operation of the writer.
    pub async fn wait_expire(&self, lease: Lease, key: String, now: i64) -> Result<Option<Value>> {
        self.write_guarded(Guard::Batch, move |ctx| {
            let held = super::steps::lease_held(ctx.conn, &lease)?;
            if !held {
                return Ok(None);
            }
            ctx.conn
                .prepare_cached("DELETE FROM run_waits WHERE run_id = ?1 AND step_key = ?2")?
                .execute(params![lease.run_id, key])?;
            // Still waiting (else it ended meanwhile: its outcome stays). A stored step: a wait,
            // a Trigger.dev v2 invoke task, or an invoke step stored before its child held it
            // (whose ended child is its outcome).
            ctx.conn
                .prepare_cached(
                    "UPDATE run_steps SET status = CASE WHEN kind = 'invoke' THEN 'failed' ELSE 'succeeded' END, \
                       finished_at = ?3, output = 'null', \
                       error = CASE WHEN kind = 'invoke' THEN ?4 END \
                     WHERE run_id = ?1 AND key = ?2 AND status = 'waiting' \
                       AND NOT EXISTS (SELECT 1 FROM runs c WHERE c.id = run_steps.child_run_id \
                                       AND c.status IN ('succeeded', 'failed', 'cancelled'))",
                )?
                .execute(params![lease.run_id, key, now, INVOKE_TIMED_OUT])?;
            // An invoke step its child holds, the child not ended: stored, failed, and the child
            // no longer names its caller (its later end takes nothing off the caller's count).
            if let Some((mut step, child)) = super::steps::child_step(ctx.conn, &lease.run_id, &key)? {
                if step.status == StepStatus::Waiting {
                    step.status = StepStatus::Failed;
                    step.finished_at = Some(ms_to_time(now));
                    step.output = Some(Value::Null);
                    step.error = Some(INVOKE_TIMED_OUT.to_string());
                    step_store(ctx.conn, &lease.run_id, &step)?;
                    ctx.conn
                        .prepare_cached("UPDATE runs SET awaited_by = NULL WHERE id = ?1 AND awaited_by = ?2")?
                        .execute(params![child, lease.run_id])?;
                    children_taken(ctx.conn, &lease.run_id, 1)?;
                    return Ok(Some(Value::Null));
                }
            }
            let step = super::steps::step(ctx.conn, &lease.run_id, &key)?;
            Ok(Some(step.and_then(|s| s.output).unwrap_or(Value::Null)))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::super::migrated;
    use super::super::paths::Paths;
    use super::*;
    use crate::store::Triggers;

    /// A migrated database and the writer's state, for its operations called directly.
    struct Writer {
        _dir: tempfile::TempDir,
        conn: Connection,
        paths: Paths,
        triggers: Triggers,
    }

    impl Writer {
        /// Runs `setup` on the database after the writer's triggers are installed, then
        /// begins a batch as the writer does.
        fn new(setup: impl FnOnce(&Connection)) -> Self {
            let dir = tempfile::tempdir().expect("tempdir");
            let conn = migrated(&dir.path().join("w.db"));
            Self::over(dir, conn, setup)
        }

        /// [`Writer::new`] on the database `conn` (in `dir`), migrated already.
        fn over(dir: tempfile::TempDir, conn: Connection, setup: impl FnOnce(&Connection)) -> Self {
            let mut paths = Paths::install(&conn).expect("install");
            setup(&conn);
            paths.batch_begins(&conn).expect("begin");
            Self {
                _dir: dir,
                conn,
                paths,
                triggers: Triggers::default(),
            }
        }

        fn ctx(&mut self) -> WriteCtx<'_> {
            WriteCtx {
                conn: &self.conn,
                triggers: &self.triggers,
                wake: false,
                tally: Default::default(),
                paths: &mut self.paths,
            }
        }
    }

    /// Event `id` of `invoice.paid` for invoice `invoice`: how many waits it resumed.
    fn paid(ctx: &mut WriteCtx<'_>, id: &str, invoice: &str) -> usize {
        let payload = serde_json::json!({ "id": invoice });
        on_event(ctx, id, "invoice.paid", &payload, 1, 1).expect("event")
    }

    /// An event insert skips the lookup of a value no run waits for, looks up one that is
    /// waited for, and counts a lookup that found no wait (its value no longer waited for),
    /// which is what builds the set again.
    #[test]
    fn an_event_looks_up_only_values_in_the_set_and_counts_lookups_in_vain() {
        let mut w = Writer::new(|conn| waiting(conn, 1, 1));
        let mut ctx = w.ctx();
        // Not in the set: no lookup, nothing counted.
        assert_eq!(paid(&mut ctx, "e1", "in_2"), 0);
        assert_eq!(ctx.paths.values().in_vain(), 0);
        // Waited for: found and resumed.
        assert_eq!(paid(&mut ctx, "e2", "in_1"), 1);
        assert_eq!(ctx.paths.values().in_vain(), 0);
        // Its value is still in the set, no longer waited for: a lookup in vain.
        assert_eq!(paid(&mut ctx, "e3", "in_1"), 0);
        assert_eq!(ctx.paths.values().in_vain(), 1);
    }

    /// `n` runs `r{from}`… waiting for `invoice.paid` of invoice `in_{i}`.
    fn waiting(conn: &Connection, from: usize, n: usize) {
        conn.execute(
            "WITH RECURSIVE i(x) AS (SELECT ?1 UNION ALL SELECT x + 1 FROM i WHERE x + 1 < ?2) \
             INSERT INTO run_waits \
               (run_id, step_key, event_name, match_path, match_value, since, until, match_hash) \
             SELECT 'r' || x, 'paid', 'invoice.paid', 'payload.id', 'in_' || x, 0, 10, \
                    flare_match_hash('invoice.paid', 'payload.id', 'in_' || x) FROM i",
            params![from as i64, (from + n) as i64],
        )
        .expect("waits");
        conn.execute(
            "INSERT OR IGNORE INTO wait_paths (event_name, match_path) VALUES ('invoice.paid', 'payload.id')",
            [],
        )
        .expect("paths");
    }

    fn count(conn: &Connection, filter: &str) -> i64 {
        conn.query_row(
            &format!("SELECT count(*) FROM run_waits WHERE {filter}"),
            [],
            |r| r.get(0),
        )
        .expect("count")
    }

    /// The events for invoices `in_{from}`… `in_{to - 1}`, each resuming its run.
    fn resume(ctx: &mut WriteCtx<'_>, from: usize, to: usize) {
        for i in from..to {
            let n = paid(ctx, &format!("e{i}"), &format!("in_{i}"));
            assert_eq!(n, 1, "the event for in_{i} resumes its run");
        }
    }

    /// The statements an event's resumption and a child's end run on `run_waits` keep their
    /// plan from one call to the next. SQLite prepares a statement again at each call when
    /// it compares a column with a parameter and a partial index's condition compares that
    /// column with a literal (`run_waits_invoke`): that cost a matching event ~15% of its rate.
    #[test]
    fn the_statements_on_waits_are_prepared_once() {
        use super::super::children::{
            INVOKE_ROWS_ENDED_SQL, INVOKE_ROWS_STORED_SQL, PARENT_DUE_SQL,
        };
        use rusqlite::types::Value as Sql;
        use rusqlite::StatementStatus;
        let w = Writer::new(|conn| waiting(conn, 1, 3));
        for sql in [
            PENDING_FOR_SQL,
            MARK_SQL,
            DELETE_SQL,
            PARENT_DUE_SQL,
            INVOKE_ROWS_STORED_SQL,
            INVOKE_ROWS_ENDED_SQL,
        ] {
            let mut stmt = w.conn.prepare(sql).expect("prepare");
            for call in 0..3 {
                let values: Vec<Sql> = (0..stmt.parameter_count())
                    .map(|i| Sql::Text(format!("[\"v{call}.{i}\"]")))
                    .collect();
                let mut rows = stmt.query(rusqlite::params_from_iter(values)).expect("run");
                while rows.next().expect("row").is_some() {}
            }
            assert_eq!(stmt.get_status(StatementStatus::RePrepare), 0, "{sql}");
        }
    }

    /// The match index holds a hash of the value (`0056_wait_match_hash.sql`): a lookup reads
    /// the rows of the hash and compares the event name, path and value, so a wait that shares
    /// its hash with another's is not resumed by the other's event.
    #[test]
    fn values_of_one_hash_are_told_apart() {
        let mut w = Writer::new(|conn| {
            waiting(conn, 1, 2);
            // Under in_1's hash, as if the hashes were equal: r2 waits for in_2, r3 for in_1 of
            // another event, r4 for in_1 at another path.
            conn.execute_batch(
                "INSERT INTO run_waits \
                   (run_id, step_key, event_name, match_path, match_value, since, until, match_hash) \
                 VALUES ('r3', 'paid', 'invoice.voided', 'payload.id', 'in_1', 0, 10, 0), \
                        ('r4', 'paid', 'invoice.paid', 'payload.ref', 'in_1', 0, 10, 0); \
                 UPDATE run_waits SET match_hash = \
                   (SELECT match_hash FROM run_waits WHERE run_id = 'r1') \
                 WHERE run_id IN ('r2', 'r3', 'r4');",
            )
            .expect("same hash");
        });
        let mut ctx = w.ctx();
        let conn = ctx.conn;
        assert_eq!(paid(&mut ctx, "e1", "in_1"), 1, "r1's alone");
        assert_eq!(count(conn, "run_id = 'r1' AND resumed IS NOT NULL"), 1);
        assert_eq!(count(conn, "run_id <> 'r1' AND resumed IS NULL"), 3);
        assert_eq!(paid(&mut ctx, "e2", "in_1"), 0, "no other wait for in_1");
    }

    /// Waits stored before `0056_wait_match_hash.sql` (one of them resumed, not yet swept) are
    /// hashed by it as the writer hashes: events find the one still waiting, the resumed one
    /// is not resumed again, and a new wait is still logged for other processes.
    #[test]
    fn waits_stored_before_the_hash_are_found_after_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut conn = super::super::migrated_before(&dir.path().join("w.db"), 56);
        conn.execute_batch(
            "INSERT INTO run_waits (run_id, step_key, event_name, match_path, match_value, since, until) \
             VALUES ('r1', 'paid', 'invoice.paid', 'payload.id', 'in_1', 0, 10), \
                    ('r2', 'paid', 'invoice.paid', 'payload.id', 'in_2', 0, 10); \
             UPDATE run_waits SET resumed = 5 WHERE run_id = 'r2'; \
             INSERT INTO wait_paths VALUES ('invoice.paid', 'payload.id');",
        )
        .expect("old waits");
        super::super::migrate(&mut conn).expect("migrate");
        let hashed: i64 = conn
            .query_row(
                "SELECT match_hash FROM run_waits WHERE run_id = 'r1'",
                [],
                |r| r.get(0),
            )
            .expect("r1");
        assert_eq!(hashed, match_hash("invoice.paid", "payload.id", "in_1"));
        let logged = || -> i64 {
            conn.query_row("SELECT count(*) FROM wait_log", [], |r| r.get(0))
                .expect("log")
        };
        let before = logged();
        waiting(&conn, 3, 1);
        assert_eq!(logged(), before + 1, "a new wait is logged");
        let mut w = Writer::over(dir, conn, |_| {});
        let mut ctx = w.ctx();
        let conn = ctx.conn;
        assert_eq!(paid(&mut ctx, "e1", "in_1"), 1);
        assert_eq!(
            paid(&mut ctx, "e2", "in_2"),
            0,
            "resumed before the migration"
        );
        assert_eq!(paid(&mut ctx, "e3", "in_3"), 1);
        assert_eq!(count(conn, "resumed IS NOT NULL"), 3);
    }

    /// An event's resumption marks its wait instead of deleting it: the wait is resumed once,
    /// no longer pending, and its row is deleted by a sweep only once the marked rows are a
    /// quarter of the rows (at least `SWEEP_MIN`), all at once.
    #[test]
    fn resumed_waits_are_marked_resumed_once_and_swept_together() {
        let mut w = Writer::new(|conn| waiting(conn, 0, 24_000));
        let mut ctx = w.ctx();
        let conn = ctx.conn;
        resume(&mut ctx, 0, 5_000);
        assert_eq!(
            count(conn, "resumed IS NOT NULL"),
            5_000,
            "marked, not deleted"
        );
        // Resumed once: the same value again finds nothing, and the run waits for nothing.
        assert_eq!(paid(&mut ctx, "again", "in_7"), 0);
        assert!(pending(conn, "r7").expect("pending").is_none());
        assert!(pending(conn, "r5000").expect("pending").is_some());
        // 5,000 of 24,000: less than a quarter, not swept.
        assert_eq!(ctx.paths.swept.sweep(conn), 0);
        assert_eq!(count(conn, "1"), 24_000);
        // 6,000 of 24,000: swept, all the marked and nothing else.
        resume(&mut ctx, 5_000, 6_000);
        assert_eq!(ctx.paths.swept.sweep(conn), 6_000);
        assert_eq!(count(conn, "1"), 18_000);
        assert_eq!(count(conn, "resumed IS NOT NULL"), 0);
        assert_eq!(count(conn, "run_id = 'r6000'"), 1);
        // The count starts again: the next few marks are not looked at.
        resume(&mut ctx, 6_000, 6_010);
        assert_eq!(ctx.paths.swept.sweep(conn), 0);
    }

    /// A resumption whose operation is rolled back (its savepoint) leaves its wait waiting, and
    /// no sweep deletes it: the mark is on the wait's own row, so it rolls back with the rest.
    #[test]
    fn a_resumption_rolled_back_leaves_its_wait_to_the_next_event() {
        let n = SWEEP_MIN as usize;
        let mut w = Writer::new(|conn| waiting(conn, 0, n + 1));
        let mut ctx = w.ctx();
        let conn = ctx.conn;
        resume(&mut ctx, 1, n + 1);
        conn.execute_batch("SAVEPOINT op").expect("savepoint");
        assert_eq!(paid(&mut ctx, "e0", "in_0"), 1);
        conn.execute_batch("ROLLBACK TO op; RELEASE op")
            .expect("rollback");
        assert_eq!(ctx.paths.swept.sweep(conn), n);
        assert_eq!(count(conn, "1"), 1, "r0's wait is left");
        assert!(pending(conn, "r0").expect("pending").is_some());
        assert_eq!(paid(&mut ctx, "e0", "in_0"), 1);
    }

    /// A sweep deletes at most its cap of rows, the oldest marks first, and the next batches
    /// go on until none is left, without waiting for more marks.
    #[test]
    fn a_sweep_stops_at_its_cap_and_the_next_batches_go_on() {
        let n = SWEEP_MIN as usize;
        let mut w = Writer::new(|conn| waiting(conn, 0, n + 1));
        w.paths.swept = super::super::swept::Swept::capped(1_000);
        let mut ctx = w.ctx();
        let conn = ctx.conn;
        resume(&mut ctx, 0, n);
        // Two marked earlier than the others: the first sweep takes them.
        conn.execute(
            "UPDATE run_waits SET resumed = 0 WHERE run_id IN ('r3000', 'r4000')",
            [],
        )
        .expect("older");
        assert_eq!(ctx.paths.swept.sweep(conn), 1_000);
        assert_eq!(count(conn, "resumed = 0"), 0, "the oldest marks go first");
        let swept: Vec<usize> = (0..5).map(|_| ctx.paths.swept.sweep(conn)).collect();
        assert_eq!(swept, [1_000, 1_000, 1_000, 96, 0]);
        assert_eq!(count(conn, "1"), 1, "the one not resumed is left");
    }

    /// The writer sweeps by itself: once an event's batch has marked enough resumed waits, they
    /// are gone when it commits, and the waits left are still found.
    #[tokio::test]
    async fn the_writer_sweeps_the_resumed_waits_when_they_are_due() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SqliteStore::open(dir.path().join("w.db"))
            .await
            .expect("open");
        let n = SWEEP_MIN as usize;
        store
            .write(move |ctx| {
                waiting(ctx.conn, 0, n + 10);
                Ok(())
            })
            .await
            .expect("waits");
        store
            .write(move |ctx| {
                resume(ctx, 0, n);
                Ok(())
            })
            .await
            .expect("events");
        let (rows, left) = store
            .write(move |ctx| {
                let left = paid(ctx, "last", &format!("in_{n}"));
                Ok((
                    (count(ctx.conn, "1"), count(ctx.conn, "resumed IS NULL")),
                    left,
                ))
            })
            .await
            .expect("count");
        // Swept when the events' batch committed: the ten left, one of them marked since.
        assert_eq!(
            (rows, left),
            ((10, 9), 1),
            "the resumed waits swept, the others found"
        );
    }
}
