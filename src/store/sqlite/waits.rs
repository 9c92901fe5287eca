//! Waits for an event on SQLite (`0030_event_waits.sql`): registering a wait with the run's
//! suspension, resuming waiters in the insert of an event, and ending a wait at its timeout.
//!
//! Every write goes through the one writer, so a wait's registration and an event's insert never
//! overlap; the registration still looks for a matching event sent since the run reached the
//! wait (`since`), which closes the gap between the job calling `wait_for_event` and its
//! completion being written.

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use rusqlite::{params, Connection, OptionalExtension};
use serde_json::Value;

use super::rows::{json_text, opt_json};
use super::steps::Outcome;
use super::writer::{Guard, WriteCtx};
use super::SqliteStore;
use crate::model::wait::{
    event_value, payload_key, CALLBACK_EVENT, CALLBACK_PATH, INVOKE_EVENT, INVOKE_PATH,
};
use crate::model::{ms_to_time, EventWait, StepKind, StepStatus, WaitedEvent};
use crate::store::links::Effect;
use crate::store::{Error, Lease, PendingWait, Result};

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
    if wait.is_invoke() && child_on_step(conn, run_id, key, &wait.match_value)? {
        // Its children are counted (`children.rs`): due now if none is left.
        let due =
            conn.prepare_cached(PARENT_DUE_SQL)?
                .execute(params![run_id, now, INVOKE_EVENT])?;
        return Ok(due > 0);
    }
    if wait.is_callback() && callback_answered(conn, run_id, key)? {
        // Posted to before the run got here: due now.
        conn.prepare_cached("UPDATE runs SET run_at = ?2 WHERE id = ?1 AND status = 'queued'")?
            .execute(params![run_id, now])?;
        return Ok(true);
    }
    conn.prepare_cached(
        "INSERT OR REPLACE INTO run_waits \
           (run_id, step_key, event_name, match_path, match_value, condition, run_event, since, until) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
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
        until
    ])?;
    if wait.is_callback() {
        return Ok(false);
    }
    if wait.is_invoke() {
        // A child that ended already resumes its parent now.
        return match child_outcome(conn, &wait.match_value)? {
            Some(o) => resolve(
                conn,
                run_id,
                key,
                &o.json.to_string(),
                o.failure.as_deref(),
                now,
            ),
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
            let resumed = resolve(conn, run_id, key, &waited(&event), None, now)?;
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
        let mut stmt = conn.prepare_cached(
            "SELECT run_id, step_key, condition, run_event FROM run_waits \
             WHERE event_name = ?1 AND match_path = ?2 AND match_value = ?3",
        )?;
        let mut rows = stmt.query(params![name, path, value])?;
        while let Some(r) = rows.next()? {
            let condition: Option<String> = r.get(2)?;
            let wait = EventWait {
                event: name.to_string(),
                match_path: path.clone(),
                match_value: value.clone(),
                condition,
                run_event: opt_json(r.get(3)?)?,
            };
            let incoming = incoming.get_or_insert_with(|| event_value(id, name, payload));
            if wait.accepts(incoming) {
                waiters.push((r.get::<_, String>(0)?, r.get::<_, String>(1)?));
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
    for (run_id, key) in waiters {
        if resolve(conn, &run_id, &key, &output, None, now)? {
            super::links::effect_put(conn, id, &run_id, Effect::Resumed, now)?;
            n += 1;
        }
    }
    Ok(n)
}

/// Whether the step `key` of `run_id` is an invoke step holding its child `child` (written by
/// `runs_invoke`; not a Trigger.dev v2 invoke task, nor a step stored before children were
/// counted), which waits without a `run_waits` row.
fn child_on_step(conn: &Connection, run_id: &str, key: &str, child: &str) -> Result<bool> {
    Ok(conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM run_steps WHERE run_id = ?1 AND key = ?2 AND child_run_id = ?3)",
        )?
        .query_row(params![run_id, key, child], |r| r.get(0))?)
}

/// Whether the callback step `key` of `run_id` was answered already.
fn callback_answered(conn: &Connection, run_id: &str, key: &str) -> Result<bool> {
    Ok(conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM run_steps WHERE run_id = ?1 AND key = ?2 AND status = 'succeeded')",
        )?
        .query_row(params![run_id, key], |r| r.get(0))?)
}

fn waited(event: &WaitedEvent) -> String {
    serde_json::to_string(event).unwrap_or_else(|_| "null".into())
}

/// How run `id` ended, or `None` while it has not.
pub(super) fn child_outcome(conn: &Connection, id: &str) -> Result<Option<Outcome>> {
    let row: Option<(String, Option<String>, Option<String>)> = conn
        .prepare_cached("SELECT status, output, error FROM runs WHERE id = ?1")?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    match row {
        Some((status, output, error))
            if matches!(status.as_str(), "succeeded" | "failed" | "cancelled") =>
        {
            Outcome::of(id, &status, output.as_deref(), error).map(Some)
        }
        _ => Ok(None),
    }
}

/// Resumes the parents waiting for run `id` (`io.invoke`), which just ended outside a completion
/// (cancelled, or failed when its lease expired); returns how many were made due (their last
/// child ended): the caller wakes the workers then.
pub(super) fn on_run_end(conn: &Connection, id: &str, now: i64) -> Result<usize> {
    let mut fan_in = FanIn::default();
    let caller: Option<String> = conn
        .prepare_cached("SELECT awaited_by FROM runs WHERE id = ?1")?
        .query_row([id], |r| r.get(0))
        .optional()?
        .flatten();
    if let Some(caller) = &caller {
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
/// its caller keeps the outcome it counted. The caller's step waiting for it is written with
/// that outcome, as a step whose child ended is on PostgreSQL (read from the child, it would
/// turn into the retry's, or back into waiting once the child is pruned, and the caller would
/// wait for it again), and the child no longer names its caller: counted again, a retried
/// child's next end resumed the caller before its other children ended.
pub(super) fn caller_keeps_outcome(conn: &Connection, id: &str) -> Result<()> {
    let caller: Option<String> = conn
        .prepare_cached("SELECT awaited_by FROM runs WHERE id = ?1")?
        .query_row([id], |r| r.get(0))
        .optional()?
        .flatten();
    let (Some(caller), Some(outcome)) = (caller, child_outcome(conn, id)?) else {
        return Ok(());
    };
    let ended: Option<i64> = conn
        .prepare_cached("SELECT finished_at FROM runs WHERE id = ?1")?
        .query_row([id], |r| r.get(0))?;
    // The caller's steps holding this child, by the caller's key range.
    let keys: Vec<String> = conn
        .prepare_cached(
            "SELECT key FROM run_steps WHERE run_id = ?1 AND child_run_id = ?2 AND status = 'waiting'",
        )?
        .query_map(params![caller, id], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let output = outcome.json.to_string();
    for key in &keys {
        step_done(
            conn,
            &caller,
            key,
            &output,
            outcome.failure.as_deref(),
            ended.unwrap_or_default(),
        )?;
    }
    conn.prepare_cached("UPDATE runs SET awaited_by = NULL WHERE id = ?1")?
        .execute([id])?;
    Ok(())
}

/// Makes queued run `?1` due at `?2` once none of its children is left: no count in
/// `children_waiting`, and no invoke wait (`?3`: [`INVOKE_EVENT`]) of the kind stored before
/// children were counted, or by a Trigger.dev v2 invoke task. Its own waits are read by the
/// primary key: `+event_name` keeps the planner off `run_waits_match`, whose walk of the name's
/// rows would pass every other parent's waits for its children.
const PARENT_DUE_SQL: &str = "UPDATE runs SET run_at = ?2 WHERE id = ?1 AND status = 'queued' \
     AND NOT EXISTS (SELECT 1 FROM children_waiting WHERE run_id = ?1) \
     AND NOT EXISTS (SELECT 1 FROM run_waits WHERE run_id = ?1 AND +event_name = ?3)";

/// Takes `n` children off run `parent`'s count (`children_waiting`), the row gone at 0.
fn children_taken(conn: &Connection, parent: &str, n: i64) -> Result<()> {
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
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM run_waits WHERE event_name = ?1 AND match_path = ?2)",
            )?
            .query_row(params![INVOKE_EVENT, INVOKE_PATH], |r| r.get(0))?)
    }

    /// The invoke waits stored as rows for the runs `ended` (each id with when it ended): one
    /// statement finds and removes them (the name's index, one probe per run), and their steps
    /// are written with the run's outcome (by the run's index in `ended`; computed only for
    /// those). See [`FanIn::child_waits_stored`].
    pub(super) fn child_waits_ended(
        &mut self,
        conn: &Connection,
        ended: &[(&str, i64)],
        outcome: impl Fn(usize) -> Result<Outcome>,
    ) -> Result<()> {
        if ended.is_empty() {
            return Ok(());
        }
        let ids = serde_json::to_string(&ended.iter().map(|e| e.0).collect::<Vec<_>>())
            .map_err(|e| Error::Corrupt(e.to_string()))?;
        let at: HashMap<&str, usize> = ended.iter().enumerate().map(|(i, e)| (e.0, i)).collect();
        let waits: Vec<(String, String, String)> = conn
            .prepare_cached(
                "DELETE FROM run_waits WHERE event_name = ?1 AND match_path = ?2 \
                 AND match_value IN (SELECT value FROM json_each(?3)) \
                 RETURNING run_id, step_key, match_value",
            )?
            .query_map(params![INVOKE_EVENT, INVOKE_PATH, ids], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?
            .collect::<rusqlite::Result<_>>()?;
        let mut outputs: HashMap<usize, Outcome> = HashMap::new();
        for (run_id, key, child) in &waits {
            let Some(&i) = at.get(child.as_str()) else {
                continue;
            };
            let output = match outputs.entry(i) {
                Entry::Occupied(o) => o.into_mut(),
                Entry::Vacant(v) => v.insert(outcome(i)?),
            };
            let now = ended[i].1;
            step_done(
                conn,
                run_id,
                key,
                &output.json.to_string(),
                output.failure.as_deref(),
                now,
            )?;
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

/// Resumes the wait `key` of `run_id` with `output` (JSON), unless it is gone (resumed or timed
/// out): the wait row deleted, the step succeeded with it (an invoke step whose child did not
/// succeed fails with its outcome), a queued run due now; a parent waiting for several
/// children only once none is left (fan-in).
fn resolve(
    conn: &Connection,
    run_id: &str,
    key: &str,
    output: &str,
    failure: Option<&str>,
    now: i64,
) -> Result<bool> {
    let gone: Option<String> = conn
        .prepare_cached(
            "DELETE FROM run_waits WHERE run_id = ?1 AND step_key = ?2 RETURNING event_name",
        )?
        .query_row(params![run_id, key], |r| r.get(0))
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

/// Writes the step `key` of `run_id` whose wait ended with `output` (JSON): succeeded with it,
/// or failed with `failure` (an invoke step whose child did not succeed).
fn step_done(
    conn: &Connection,
    run_id: &str,
    key: &str,
    output: &str,
    failure: Option<&str>,
    now: i64,
) -> Result<()> {
    conn.prepare_cached(
        "UPDATE run_steps SET status = ?5, finished_at = ?3, output = ?4, error = ?6 \
         WHERE run_id = ?1 AND key = ?2 AND status <> 'succeeded'",
    )?
    .execute(params![
        run_id,
        key,
        now,
        output,
        if failure.is_some() {
            "failed"
        } else {
            "succeeded"
        },
        failure
    ])?;
    Ok(())
}

/// The pending wait for an event of run `run_id`, if any: a stored wait, else the first of its
/// invoke steps (by timeout) whose child has not ended.
pub(super) fn pending(conn: &Connection, run_id: &str) -> Result<Option<PendingWait>> {
    let stored = conn
        .prepare_cached(
            "SELECT step_key, event_name, match_path, match_value, condition, since, until \
             FROM run_waits WHERE run_id = ?1 ORDER BY since LIMIT 1",
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
    Ok(conn
        .prepare_cached(
            "SELECT s.key, s.child_run_id, s.started_at, coalesce(s.wait_until, s.started_at) \
             FROM run_steps s JOIN runs c ON c.id = s.child_run_id \
             WHERE s.run_id = ?1 AND s.status = 'waiting' AND s.child_run_id IS NOT NULL \
               AND c.status IN ('queued', 'running') \
               AND EXISTS (SELECT 1 FROM children_waiting WHERE run_id = ?1) \
             ORDER BY s.wait_until, s.key LIMIT 1",
        )?
        .query_row([run_id], |r| {
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
    /// See [`crate::store::Store::callback_create`]: one operation of the writer.
    pub async fn callback_create(
        &self,
        lease: Lease,
        key: String,
        token: String,
        since: i64,
        until: i64,
    ) -> Result<bool> {
        self.write(move |ctx| {
            let held = ctx
                .conn
                .prepare_cached(
                    "SELECT EXISTS (SELECT 1 FROM runs WHERE id = ?1 AND lease_token = ?2 AND status = 'running')",
                )?
                .query_row(params![lease.run_id, lease.token], |r| r.get::<_, bool>(0))?;
            if !held {
                return Ok(false);
            }
            let attempt: u32 = ctx
                .conn
                .prepare_cached("SELECT attempt FROM runs WHERE id = ?1")?
                .query_row([&lease.run_id], |r| r.get(0))?;
            ctx.conn.prepare_cached(super::steps::STEP_UPSERT)?.execute(params![
                lease.run_id,
                key,
                StepKind::Callback.as_str(),
                StepStatus::Waiting.as_str(),
                attempt,
                since,
                None::<i64>,
                until,
                serde_json::json!({ "token": token }).to_string(),
                None::<String>
            ])?;
            ctx.conn
                .prepare_cached(
                    "INSERT OR REPLACE INTO run_waits \
                       (run_id, step_key, event_name, match_path, match_value, since, until) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )?
                .execute(params![lease.run_id, key, CALLBACK_EVENT, CALLBACK_PATH, token, since, until])?;
            Ok(true)
        })
        .await
    }

    /// See [`crate::store::Store::callback_resolve`]: one operation of the writer.
    pub async fn callback_resolve(&self, token: String, body: Value, now: i64) -> Result<bool> {
        let output = serde_json::json!({ "body": body, "token": token }).to_string();
        self.write(move |ctx| {
            let found: Option<(String, String)> = ctx
                .conn
                .prepare_cached(
                    "SELECT run_id, step_key FROM run_waits \
                     WHERE event_name = ?1 AND match_path = ?2 AND match_value = ?3 AND until > ?4",
                )?
                .query_row(params![CALLBACK_EVENT, CALLBACK_PATH, token, now], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .optional()?;
            let Some((run_id, key)) = found else {
                return Ok(false);
            };
            let done = resolve(ctx.conn, &run_id, &key, &output, None, now)?;
            ctx.wake |= done;
            Ok(done)
        })
        .await
    }

    /// See [`crate::store::Store::run_invoke`]: one operation of the writer.
    pub async fn run_invoke(
        &self,
        lease: Lease,
        key: String,
        job_id: String,
        payload: Value,
        now: i64,
    ) -> Result<Option<String>> {
        let job = self.triggers().get(&job_id).ok_or(Error::NotFound {
            what: "job",
            id: job_id,
        })?;
        let event_id = format!("{}-invoke-{key}", lease.run_id);
        let payload_value = payload;
        let payload = payload_value.to_string();
        self.write(move |ctx| {
            let held = ctx
                .conn
                .prepare_cached(
                    "SELECT EXISTS (SELECT 1 FROM runs WHERE id = ?1 AND lease_token = ?2 AND status = 'running')",
                )?
                .query_row(params![lease.run_id, lease.token], |r| r.get::<_, bool>(0))?;
            if !held {
                return Ok(None);
            }
            let created = ctx
                .conn
                .prepare_cached(
                    "INSERT INTO events (id, name, payload, source, parent_run_id, timestamp, delivered_at) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6) ON CONFLICT (id) DO NOTHING",
                )?
                .execute(params![
                    event_id,
                    INVOKE_EVENT,
                    payload,
                    format!("job:{}", lease.run_id),
                    lease.run_id,
                    now
                ])?;
            if created == 0 {
                let child: Option<String> = ctx
                    .conn
                    .prepare_cached("SELECT id FROM runs WHERE event_id = ?1 ORDER BY rowid LIMIT 1")?
                    .query_row([&event_id], |r| r.get(0))
                    .optional()?;
                return Ok(child);
            }
            ctx.tally.events(now, 1);
            // The child is queued like any run of its job: its flow control applies.
            let source = format!("job:{}", lease.run_id);
            let fields = crate::model::EventFields {
                id: &event_id,
                name: INVOKE_EVENT,
                payload: &payload_value,
                context: None,
                source: &source,
            };
            let child = super::flow::run_insert(ctx.conn, &job, &fields, now)?;
            ctx.wake = true;
            Ok(child)
        })
        .await
    }

    /// See [`crate::store::Store::wait_expire`]: one operation of the writer.
    pub async fn wait_expire(&self, lease: Lease, key: String, now: i64) -> Result<Option<Value>> {
        self.write_guarded(Guard::Batch, move |ctx| {
            let held = ctx
                .conn
                .prepare_cached(
                    "SELECT EXISTS (SELECT 1 FROM runs WHERE id = ?1 AND lease_token = ?2 AND status = 'running')",
                )?
                .query_row(params![lease.run_id, lease.token], |r| r.get::<_, bool>(0))?;
            if !held {
                return Ok(None);
            }
            ctx.conn
                .prepare_cached("DELETE FROM run_waits WHERE run_id = ?1 AND step_key = ?2")?
                .execute(params![lease.run_id, key])?;
            // Still waiting (else it ended meanwhile: its outcome stays; an invoke step's child
            // that ended is its outcome). An invoke step fails; one whose child was counted is
            // taken off the count.
            let expired: Option<Option<String>> = ctx
                .conn
                .prepare_cached(
                    "UPDATE run_steps SET status = CASE WHEN kind = 'invoke' THEN 'failed' ELSE 'succeeded' END, \
                       finished_at = ?3, output = 'null', \
                       error = CASE WHEN kind = 'invoke' THEN 'the invoked run did not end before the timeout' END \
                     WHERE run_id = ?1 AND key = ?2 AND status = 'waiting' \
                       AND NOT EXISTS (SELECT 1 FROM runs c WHERE c.id = run_steps.child_run_id \
                                       AND c.status IN ('succeeded', 'failed', 'cancelled')) \
                     RETURNING child_run_id",
                )?
                .query_row(params![lease.run_id, key, now], |r| r.get(0))
                .optional()?;
            if let Some(Some(child)) = expired {
                // The child no longer has a caller: its later end takes nothing off.
                let released = ctx
                    .conn
                    .prepare_cached("UPDATE runs SET awaited_by = NULL WHERE id = ?1 AND awaited_by = ?2")?
                    .execute(params![child, lease.run_id])?;
                if released > 0 {
                    children_taken(ctx.conn, &lease.run_id, 1)?;
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
    use super::*;

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

    /// A parent is made due by looking at its own waits only: through `run_waits_match` (the
    /// invoke waits of every parent) each child's end walked the other parents' waits.
    #[test]
    fn a_parent_is_looked_up_by_its_own_waits() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut conn = Connection::open(dir.path().join("plan.db")).expect("open");
        super::super::migrate(&mut conn).expect("migrate");
        let p = plan(&conn, PARENT_DUE_SQL);
        assert!(p.contains("run_waits USING PRIMARY KEY (run_id=?)"), "{p}");
        assert!(!p.contains("run_waits_match"), "{p}");
        assert!(
            p.contains("children_waiting USING PRIMARY KEY (run_id=?)"),
            "{p}"
        );
    }

    /// Children whose step still waits when `0052_children_by_run.sql` is applied get their
    /// caller from their step, those that ended too (a retry or a prune writes their caller's
    /// step first); a child whose step timed out names none (its end must take nothing off the
    /// count).
    #[test]
    fn children_waiting_across_the_migration_keep_their_caller() {
        let mut conn = Connection::open_in_memory().expect("open");
        conn.execute_batch(
            "CREATE TABLE flare_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)",
        )
        .expect("migrations table");
        for (version, sql) in super::super::MIGRATIONS.iter().filter(|(v, _)| *v < 52) {
            conn.execute_batch(sql).expect("migration");
            conn.execute(
                "INSERT INTO flare_migrations (version, applied_at) VALUES (?1, 0)",
                [version],
            )
            .expect("version");
        }
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
}
