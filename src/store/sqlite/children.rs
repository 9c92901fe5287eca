//! The runs a run invokes (`io.invoke`, `io.invoke_all`) on SQLite: started in one operation of
//! the writer per 1,000 children (`CHUNK`). The caller keeps no row per child: each child holds
//! its caller's step (`runs.awaited_by`, `awaited_key`, …: `0053_children_as_steps.sql`; read as
//! a step by `steps::steps_of`), and the caller's count of children it waits for
//! (`children_waiting`) grows by the children started; a child's end takes one off ([`FanIn`]),
//! and the caller resumes once, when none is left (fan-in). Nothing is written for the step at
//! its child's end. An ended child retried or pruned first stores its caller's step
//! ([`caller_keeps_outcome`]), as a timeout does (`waits.rs`). The one writer orders the
//! children's ends. Waits for one event are `waits.rs`.

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use rusqlite::{params, Connection, OptionalExtension};

use super::SqliteStore;
use crate::model::wait::{INVOKE_EVENT, INVOKE_PATH};
use crate::model::{Invoked, StepStatus};
use crate::store::{Error, Lease, NewChild, Result};

/// The most children written in one operation of the writer: a fan-out of thousands is
/// committed in parts, so the first children run while the next are written.
const CHUNK: usize = 1_000;

impl SqliteStore {
    /// See [`crate::store::Store::runs_invoke`]: one operation of the writer per [`CHUNK`]
    /// children (a rate-limited job's in one: a refusal leaves none of them).
    pub async fn runs_invoke(
        &self,
        lease: Lease,
        job_id: String,
        attempt: u32,
        children: Vec<NewChild>,
        now: i64,
    ) -> Result<Option<Vec<String>>> {
        let limited = self
            .triggers()
            .get(&job_id)
            .is_some_and(|job| job.rate_limit.is_some());
        let chunk = if limited {
            children.len().max(1)
        } else {
            CHUNK
        };
        // A child's step is found by its event id (`steps::steps_of`).
        let (from, to) = super::steps::children_range(&lease.run_id);
        if let Some(c) = children
            .iter()
            .find(|c| !(*c.event_id >= *from && *c.event_id < *to))
        {
            return Err(Error::Conflict(format!(
                "invoke step {:?}: event id {:?} is not one of run {}'s children",
                c.key, c.event_id, lease.run_id
            )));
        }
        let mut ids = Vec::with_capacity(children.len());
        let mut children = children.into_iter().peekable();
        while children.peek().is_some() {
            let part: Vec<NewChild> = children.by_ref().take(chunk).collect();
            match self
                .invoke_chunk(lease.clone(), job_id.clone(), attempt, part, now)
                .await?
            {
                Some(some) => ids.extend(some),
                None => return Ok(None),
            }
        }
        Ok(Some(ids))
    }

    /// One operation of [`Self::runs_invoke`].
    async fn invoke_chunk(
        &self,
        lease: Lease,
        job_id: String,
        attempt: u32,
        children: Vec<NewChild>,
        now: i64,
    ) -> Result<Option<Vec<String>>> {
        self.write(move |ctx| {
            // The definitions as this batch's writer knows them (reloaded when they changed).
            let job = ctx.triggers.get(&job_id).ok_or(Error::NotFound {
                what: "job",
                id: job_id.clone(),
            })?;
            let held = super::steps::lease_held(ctx.conn, &lease)?;
            if !held {
                return Ok(None);
            }
            let source = format!("job:{}", lease.run_id);
            let mut ids = Vec::with_capacity(children.len());
            // The children started, each holding its step: added to the parent's count.
            let mut waiting = 0;
            for c in &children {
                let made = super::steps::child_event(
                    ctx.conn,
                    &c.event_id,
                    c.payload.get(),
                    &source,
                    &lease.run_id,
                    now,
                )?;
                if let super::steps::ChildEvent::Before(child) = made {
                    ids.push(child.unwrap_or_default());
                    continue;
                }
                ctx.tally.events(now, 1);
                // Queued like any run of its job: its flow control applies.
                let payload = c.payload_for(&job)?;
                let fields = crate::model::EventFields {
                    id: &c.event_id,
                    name: INVOKE_EVENT,
                    payload: &payload,
                    context: None,
                    source: &source,
                };
                let awaited = super::flow::Awaited {
                    caller: &lease.run_id,
                    key: &c.key,
                    attempt,
                    until: c.until,
                };
                let Some(child) =
                    super::flow::run_insert_awaited(ctx.conn, &job, &fields, now, &awaited)?
                else {
                    // Rolled back with this operation's savepoint: nothing of the batch stays.
                    return Err(Error::Conflict(format!(
                        "the rate limit of job {:?} started no run for invoke step {:?}",
                        job.id, c.key
                    )));
                };
                waiting += 1;
                ctx.wake = true;
                ids.push(child);
            }
            if waiting > 0 {
                ctx.conn
                    .prepare_cached(
                        "INSERT INTO children_waiting (run_id, n) VALUES (?1, ?2) \
                         ON CONFLICT (run_id) DO UPDATE SET n = n + excluded.n",
                    )?
                    .execute(params![lease.run_id, waiting])?;
            }
            Ok(Some(ids))
        })
        .await
    }
}

/// The run waiting for run `id` (its caller, `runs.awaited_by`), if any.
fn caller_of(conn: &Connection, id: &str) -> Result<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT awaited_by FROM runs WHERE id = ?1")?
        .query_row([id], |r| r.get(0))
        .optional()?
        .flatten())
}

/// How run `id` ended, or `None` while it has not.
pub(super) fn child_outcome(conn: &Connection, id: &str) -> Result<Option<Invoked>> {
    let row: Option<(String, Option<String>, Option<String>)> = conn
        .prepare_cached("SELECT status, output, error FROM runs WHERE id = ?1")?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    match row {
        Some((status, output, error))
            if matches!(status.as_str(), "succeeded" | "failed" | "cancelled") =>
        {
            super::steps::ended_child(id, &status, output.as_deref(), error).map(Some)
        }
        _ => Ok(None),
    }
}

/// Resumes the parents waiting for run `id` (`io.invoke`), which just ended outside a completion
/// (cancelled, or failed when its lease expired); returns how many were made due (their last
/// child ended): the caller wakes the workers then.
pub(super) fn on_run_end(conn: &Connection, id: &str, now: i64) -> Result<usize> {
    let mut fan_in = FanIn::default();
    if let Some(caller) = &caller_of(conn, id)? {
        fan_in.callers_counted(conn, [(caller.as_str(), now)])?;
    }
    if FanIn::child_waits_stored(conn)? {
        if let Some(outcome) = child_outcome(conn, id)? {
            fan_in.child_waits_ended(conn, &[(id, now)], |_| Ok(outcome.clone()))?;
        }
    }
    fan_in.resume(conn)
}

/// Run `id`, an ended child, is about to change or go (an operator's retry, retention's prune):
/// its caller keeps the outcome it counted. The caller's step that the child holds is stored with
/// that outcome, as a step whose child ended is on PostgreSQL (read from the child, it would
/// turn into the retry's, or vanish once the child is pruned, and the caller would invoke it
/// again), and the child no longer names its caller: counted again, a retried child's next end
/// resumed the caller before its other children ended.
pub(super) fn caller_keeps_outcome(conn: &Connection, id: &str) -> Result<()> {
    let Some(caller) = caller_of(conn, id)? else {
        return Ok(());
    };
    match super::steps::step_held(conn, id)? {
        Some(step) if step.status != StepStatus::Waiting => {
            super::steps::step_store(conn, &caller, &step)?;
        }
        // Not ended: its end is still to count.
        _ => return Ok(()),
    }
    conn.prepare_cached("UPDATE runs SET awaited_by = NULL WHERE id = ?1")?
        .execute([id])?;
    Ok(())
}

/// Makes queued run `?1` due at `?2` once none of its children is left: no count in
/// `children_waiting`, and no invoke wait (`?3`: [`INVOKE_EVENT`]) of the kind stored before
/// children were counted, or by a Trigger.dev v2 invoke task. Its own waits are read by run
/// (the unique index on run and step): `+event_name` keeps the planner off an index of the
/// name's rows, whose walk would pass every other parent's waits for its children, and keeps
/// the parameter from being weighed against `run_waits_invoke`'s condition (which would prepare
/// the statement again at each call).
pub(super) const PARENT_DUE_SQL: &str =
    "UPDATE runs SET run_at = ?2 WHERE id = ?1 AND status = 'queued' \
     AND NOT EXISTS (SELECT 1 FROM children_waiting WHERE run_id = ?1) \
     AND NOT EXISTS (SELECT 1 FROM run_waits WHERE run_id = ?1 AND +event_name = ?3 AND resumed IS NULL)";

/// Whether any invoke wait (`?1`: [`INVOKE_PATH`]) is stored as a row. These statements name
/// [`INVOKE_EVENT`] as a literal: the condition of their partial index, `run_waits_invoke`
/// (`0056_wait_match_hash.sql`), which the planner takes only for the same literal.
pub(super) const INVOKE_ROWS_STORED_SQL: &str = "SELECT EXISTS (SELECT 1 FROM run_waits \
     WHERE event_name = 'flare/job.invoked' AND match_path = ?1 AND resumed IS NULL)";

/// Deletes the invoke waits stored as rows for the children whose ids are the JSON array `?2`.
pub(super) const INVOKE_ROWS_ENDED_SQL: &str =
    "DELETE FROM run_waits WHERE event_name = 'flare/job.invoked' AND match_path = ?1 \
     AND match_value IN (SELECT value FROM json_each(?2)) AND resumed IS NULL \
     RETURNING run_id, step_key, match_value";

/// Takes `n` children off run `parent`'s count (`children_waiting`), the row gone at 0.
pub(super) fn children_taken(conn: &Connection, parent: &str, n: i64) -> Result<()> {
    let left: Option<i64> = conn
        .prepare_cached("UPDATE children_waiting SET n = n - ?2 WHERE run_id = ?1 RETURNING n")?
        .query_row(params![parent, n], |r| r.get(0))
        .optional()?;
    if left.is_some_and(|left| left <= 0) {
        conn.prepare_cached("DELETE FROM children_waiting WHERE run_id = ?1")?
            .execute([parent])?;
    }
    Ok(())
}

/// The fan-in of the runs ended in one write: each ended child is taken off its caller's count
/// (its caller named in its row, `runs.awaited_by`: [`FanIn::callers_counted`]), the invoke
/// waits stored as rows end ([`FanIn::child_waits_ended`]), and each parent is looked at once,
/// after the last of them ([`FanIn::resume`]), instead of once per child.
#[derive(Default)]
pub(super) struct FanIn {
    /// The parents whose waits ended, with when (the latest end).
    parents: HashMap<String, i64>,
}

impl FanIn {
    /// Takes one child off the count of each caller in `ended` (a caller once per child of it
    /// that ended, with when): each count is written once.
    pub(super) fn callers_counted<'a>(
        &mut self,
        conn: &Connection,
        ended: impl IntoIterator<Item = (&'a str, i64)>,
    ) -> Result<()> {
        // Per caller: how many of its children ended, and when the last did.
        let mut callers: HashMap<&str, (i64, i64)> = HashMap::new();
        for (caller, now) in ended {
            let (n, when) = callers.entry(caller).or_insert((0, now));
            *n += 1;
            *when = (*when).max(now);
        }
        for (caller, (n, when)) in callers {
            children_taken(conn, caller, n)?;
            self.ended(caller.to_string(), when);
        }
        Ok(())
    }

    /// Whether any invoke wait is stored as a row (a Trigger.dev v2 invoke task's, or one stored
    /// before children were counted): one probe, so that nothing is built per run otherwise.
    pub(super) fn child_waits_stored(conn: &Connection) -> Result<bool> {
        Ok(conn
            .prepare_cached(INVOKE_ROWS_STORED_SQL)?
            .query_row(params![INVOKE_PATH], |r| r.get(0))?)
    }

    /// The invoke waits stored as rows for the runs `ended` (each id with when it ended): one
    /// statement finds and removes them (the name's index, one probe per run), and their steps
    /// are written with the run's outcome (by the run's index in `ended`; computed only for
    /// those). See [`FanIn::child_waits_stored`].
    pub(super) fn child_waits_ended(
        &mut self,
        conn: &Connection,
        ended: &[(&str, i64)],
        outcome: impl Fn(usize) -> Result<Invoked>,
    ) -> Result<()> {
        if ended.is_empty() {
            return Ok(());
        }
        let ids = serde_json::to_string(&ended.iter().map(|e| e.0).collect::<Vec<_>>())
            .map_err(|e| Error::Corrupt(e.to_string()))?;
        let at: HashMap<&str, usize> = ended.iter().enumerate().map(|(i, e)| (e.0, i)).collect();
        let waits: Vec<(String, String, String)> = conn
            .prepare_cached(INVOKE_ROWS_ENDED_SQL)?
            .query_map(params![INVOKE_PATH, ids], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?
            .collect::<rusqlite::Result<_>>()?;
        // Each outcome as stored (JSON text), with what its step fails with.
        let mut outputs: HashMap<usize, (String, Option<String>)> = HashMap::new();
        for (run_id, key, child) in &waits {
            let Some(&i) = at.get(child.as_str()) else {
                continue;
            };
            let output = match outputs.entry(i) {
                Entry::Occupied(o) => o.into_mut(),
                Entry::Vacant(v) => {
                    let outcome = outcome(i)?;
                    let failure = outcome.failure();
                    v.insert((outcome.into_json().to_string(), failure))
                }
            };
            let now = ended[i].1;
            super::steps::step_done(conn, run_id, key, &output.0, output.1.as_deref(), now)?;
            self.ended(run_id.clone(), now);
        }
        Ok(())
    }

    /// Notes that a child of `parent` ended at `at`.
    fn ended(&mut self, parent: String, at: i64) {
        let when = self.parents.entry(parent).or_insert(at);
        *when = (*when).max(at);
    }

    /// Makes each parent whose waits ended due, if none of its invoke waits is left (fan-in:
    /// `io.invoke_all` resumes once); returns how many were made due, for the caller to wake
    /// the workers (a parent left waiting for the poll would lose up to a poll interval).
    pub(super) fn resume(self, conn: &Connection) -> Result<usize> {
        let mut due = conn.prepare_cached(PARENT_DUE_SQL)?;
        let mut made_due = 0;
        for (run_id, at) in &self.parents {
            made_due += due.execute(params![run_id, at, INVOKE_EVENT])?;
        }
        Ok(made_due)
    }
}

/// The queued or running runs that run `id` invoked.
pub(super) fn children_unfinished(conn: &Connection, id: &str) -> Result<Vec<String>> {
    Ok(conn
        .prepare_cached(
            "SELECT r.id FROM events e JOIN runs r ON r.event_id = e.id \
             WHERE e.parent_run_id = ?1 AND e.name = ?2 AND r.status IN ('queued', 'running')",
        )?
        .query_map(params![id, INVOKE_EVENT], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::StepKind;

    /// The query plan of `sql`, one detail per line.
    fn plan(conn: &Connection, sql: &str) -> String {
        let mut stmt = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .expect("prepare plan");
        let params = params!["run_1", 1, INVOKE_EVENT];
        let rows: Vec<String> = stmt
            .query_map(&params[..stmt.parameter_count()], |r| r.get::<_, String>(3))
            .expect("plan")
            .collect::<rusqlite::Result<_>>()
            .expect("plan rows");
        rows.join("\n")
    }

    /// A parent is made due by looking at its own waits only: through an index of the invoke
    /// waits of every parent, each child's end walked the other parents' waits.
    #[test]
    fn a_parent_is_looked_up_by_its_own_waits() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut conn = Connection::open(dir.path().join("plan.db")).expect("open");
        super::super::migrate(&mut conn).expect("migrate");
        let p = plan(&conn, PARENT_DUE_SQL);
        assert!(
            p.contains("run_waits USING INDEX sqlite_autoindex_run_waits_1 (run_id=?)"),
            "{p}"
        );
        assert!(!p.contains("run_waits_match"), "{p}");
        assert!(
            p.contains("children_waiting USING PRIMARY KEY (run_id=?)"),
            "{p}"
        );
    }

    /// The invoke waits stored as rows are found through their partial index
    /// (`0056_wait_match_hash.sql`), whose condition names [`INVOKE_EVENT`] as a literal: the
    /// literal in the statements must be that name.
    #[test]
    fn invoke_rows_are_found_by_their_own_index() {
        assert_eq!(INVOKE_EVENT, "flare/job.invoked");
        let dir = tempfile::tempdir().expect("tempdir");
        let mut conn = Connection::open(dir.path().join("plan.db")).expect("open");
        super::super::migrate(&mut conn).expect("migrate");
        for sql in [INVOKE_ROWS_STORED_SQL, INVOKE_ROWS_ENDED_SQL] {
            let p = plan(&conn, sql);
            assert!(p.contains("USING INDEX run_waits_invoke"), "{p}");
        }
    }

    /// Children whose step still waits when `0052_children_by_run.sql` is applied get their
    /// caller from their step, those that ended too (a retry or a prune writes their caller's
    /// step first); a child whose step timed out names none (its end must take nothing off the
    /// count).
    #[test]
    fn children_waiting_across_the_migration_keep_their_caller() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut conn = super::super::migrated_before(&dir.path().join("c.db"), 52);
        let run = |id: &str, status: &str| {
            conn.execute(
                "INSERT INTO runs (id, event_id, job_id, job_version, status, max_attempts, run_at, created_at) \
                 VALUES (?1, ?1, 'job', '1', ?2, 1, 0, 0)",
                params![id, status],
            )
            .expect("run");
        };
        run("parent", "queued");
        run("waiting", "queued");
        run("ended", "succeeded");
        run("timed-out", "running");
        for (key, status, child) in [
            ("a", "waiting", "waiting"),
            ("b", "waiting", "ended"),
            ("c", "failed", "timed-out"),
        ] {
            conn.execute(
                "INSERT INTO run_steps (run_id, key, kind, status, attempt, started_at, child_run_id) \
                 VALUES ('parent', ?1, 'invoke', ?2, 1, 0, ?3)",
                params![key, status, child],
            )
            .expect("step");
        }
        super::super::migrate(&mut conn).expect("migrate");
        let caller = |id: &str| -> Option<String> {
            conn.query_row("SELECT awaited_by FROM runs WHERE id = ?1", [id], |r| {
                r.get(0)
            })
            .expect("caller")
        };
        assert_eq!(caller("waiting").as_deref(), Some("parent"));
        assert_eq!(caller("ended").as_deref(), Some("parent"));
        assert_eq!(caller("timed-out"), None);
        assert_eq!(caller("parent"), None);
    }

    /// Invoke steps still waiting when `0053_children_as_steps.sql` is applied move onto their
    /// children, and read the same: waiting with the child's id, or the ended child's outcome. A
    /// step whose child no longer names its caller (timed out) stays stored.
    #[test]
    fn invoke_steps_move_onto_their_children_across_the_migration() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut conn = super::super::migrated_before(&dir.path().join("c.db"), 53);
        let run = |id: &str, key: &str, status: &str, caller: Option<&str>| {
            conn.execute(
                "INSERT INTO runs (id, event_id, job_id, job_version, status, max_attempts, run_at, created_at, output, awaited_by) \
                 VALUES (?1, ?2, 'job', '1', ?3, 1, 0, 5, '{\"n\":1}', ?4)",
                params![id, format!("parent-invoke-{key}"), status, caller],
            )
            .expect("run");
        };
        conn.execute(
            "INSERT INTO runs (id, event_id, job_id, job_version, status, attempt, max_attempts, run_at, created_at) \
             VALUES ('parent', 'e', 'job', '1', 'queued', 1, 3, 0, 0)",
            [],
        )
        .expect("parent");
        run("waiting", "a", "running", Some("parent"));
        run("ended", "b", "succeeded", Some("parent"));
        run("timed-out", "c", "running", None);
        for (key, status, child) in [
            ("a", "waiting", "waiting"),
            ("b", "waiting", "ended"),
            ("c", "failed", "timed-out"),
        ] {
            conn.execute(
                "INSERT INTO run_steps (run_id, key, kind, status, attempt, started_at, wait_until, child_run_id) \
                 VALUES ('parent', ?1, 'invoke', ?2, 2, 5, 900, ?3)",
                params![key, status, child],
            )
            .expect("step");
        }
        super::super::migrate(&mut conn).expect("migrate");
        let stored: Vec<String> = conn
            .prepare("SELECT key FROM run_steps")
            .expect("prepare")
            .query_map([], |r| r.get(0))
            .expect("keys")
            .collect::<rusqlite::Result<_>>()
            .expect("keys");
        assert_eq!(stored, ["c"]);
        let steps = super::super::steps::steps_of(&conn, "parent").expect("steps");
        let seen: Vec<_> = steps
            .iter()
            .map(|s| {
                (
                    s.key.as_str(),
                    s.status,
                    s.attempt,
                    s.wait_until.map(|t| t.timestamp_millis()),
                    s.output.as_ref().map(|o| o["runId"].clone()),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                (
                    "a",
                    StepStatus::Waiting,
                    2,
                    Some(900),
                    Some("waiting".into())
                ),
                (
                    "b",
                    StepStatus::Succeeded,
                    2,
                    Some(900),
                    Some("ended".into())
                ),
                ("c", StepStatus::Failed, 2, Some(900), None),
            ]
        );
        assert_eq!(
            steps[1].output.as_ref().map(|o| o["output"]["n"].clone()),
            Some(1.into())
        );
        assert!(steps.iter().all(|s| s.kind == StepKind::Invoke));
    }
}
