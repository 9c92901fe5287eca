//! Durable steps on SQLite: recording one through the writer (fenced by the run's lease token)
//! and reading a run's steps; the steps that start something else: a callback (its wait found
//! by `waits.rs` when its URL is posted to) and a Trigger.dev v2 invoke task's run. A wait's
//! suspension is part of the completion batch (`runs.rs`).

use std::collections::hash_map::Entry;

use rusqlite::{params, Connection, OptionalExtension};
use serde_json::Value;

use super::rows::json_text;
use super::wait_hash::match_hash;
use super::writer::Guard;
use super::SqliteStore;
use crate::model::wait::{invoke_event_id, CALLBACK_EVENT, CALLBACK_PATH, INVOKE_EVENT};
use crate::model::{ms_to_time, Invoked, RunStatus, Step, StepKind, StepStatus, StepsByKey};
use crate::store::{Error, Lease, NewStep, Result};

/// Inserts a step, or replaces the one of the same key unless that one succeeded (a completed
/// step is final). Parameters: run id, key, kind, status, attempt, started, finished, due,
/// output, error.
pub(super) const STEP_UPSERT: &str = "INSERT INTO run_steps \
       (run_id, key, kind, status, attempt, started_at, finished_at, wait_until, output, error) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) \
     ON CONFLICT (run_id, key) DO UPDATE SET kind = excluded.kind, status = excluded.status, \
       attempt = excluded.attempt, started_at = excluded.started_at, finished_at = excluded.finished_at, \
       wait_until = excluded.wait_until, output = excluded.output, error = excluded.error \
     WHERE run_steps.status <> 'succeeded'";

/// Like [`STEP_UPSERT`] for a wait being suspended: the output a step holds (a callback's
/// token) is kept. Parameters: run id, key, kind, status, attempt, started, due.
pub(super) const STEP_WAIT_UPSERT: &str = "INSERT INTO run_steps \
       (run_id, key, kind, status, attempt, started_at, wait_until) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
     ON CONFLICT (run_id, key) DO UPDATE SET kind = excluded.kind, status = excluded.status, \
       attempt = excluded.attempt, started_at = excluded.started_at, wait_until = excluded.wait_until \
     WHERE run_steps.status <> 'succeeded'";

/// The columns of a step as read: the stored row, then its child run's end (`c.*`, NULL unless
/// the step is an invoke step stored as waiting whose child ended: one that
/// `0053_children_as_steps.sql` could not move onto its child; see `0051_children_on_steps.sql`),
/// then its child's id. Followed by the `WHERE` over `s`.
const STEP_SELECT: &str =
    "SELECT s.key, s.kind, s.status, s.attempt, s.started_at, s.finished_at, \
       s.wait_until, s.output, s.error, s.label, c.id, c.status, c.output, c.error, c.finished_at, \
       s.child_run_id \
     FROM run_steps s LEFT JOIN runs c ON s.status = 'waiting' AND c.id = s.child_run_id \
       AND c.status IN ('succeeded', 'failed', 'cancelled')";

/// The columns of an invoke step held by its child run (`0053_children_as_steps.sql`): its key,
/// the caller's attempt that invoked it, when, its timeout; the child's id, status, output, error
/// and end. Followed by a `WHERE` over the child's row.
macro_rules! child_step_select {
    () => {
        "SELECT awaited_key, awaited_attempt, created_at, awaited_until, id, status, output, \
           error, finished_at FROM runs"
    };
}

/// The invoke steps run `?3`'s children hold: its children's event ids from `?1` to `?2`
/// ([`children_range`]).
const CHILD_STEPS_SQL: &str = concat!(
    child_step_select!(),
    " WHERE event_id >= ?1 AND event_id < ?2 AND awaited_by = ?3 AND awaited_key IS NOT NULL"
);

/// The invoke step run `?1` holds for its caller, if it holds one.
const HELD_STEP_SQL: &str = concat!(
    child_step_select!(),
    " WHERE id = ?1 AND awaited_key IS NOT NULL"
);

/// The invoke step `?3` of run `?2` held by the child of event `?1`, if it is.
const CHILD_STEP_SQL: &str = concat!(
    child_step_select!(),
    " WHERE event_id = ?1 AND awaited_by = ?2 AND awaited_key = ?3"
);

/// The error of an invoke step whose child did not end before the step's timeout.
pub(super) const INVOKE_TIMED_OUT: &str = "the invoked run did not end before the timeout";

/// The event ids of run `run_id`'s children (`model::wait::invoke_event_id`) sort from
/// `<run>-invoke` up to, not including, `<run>-invokf`: one walk of the index of the runs'
/// events finds them.
pub(super) fn children_range(run_id: &str) -> (String, String) {
    (format!("{run_id}-invoke"), format!("{run_id}-invokf"))
}

/// A run's steps, in the order they started, as stored and shown: [`steps_by_key`], sorted.
pub(super) fn steps_of(c: &Connection, run_id: &str) -> Result<Vec<Step>> {
    // Sorted here: SQLite's sort would copy every row, its child's output too, into a temporary
    // tree (a fan-in's parent has thousands).
    let mut steps: Vec<Step> = steps_by_key(c, run_id)?
        .into_values()
        .map(Step::with_output)
        .collect();
    steps.sort_unstable_by(|a, b| (a.started_at, &a.key).cmp(&(b.started_at, &b.key)));
    Ok(steps)
}

/// A run's steps by key: the invoke steps its children hold and those stored (for a key both
/// have, the later attempt's; the stored one on a tie). What an execution replays from; unsorted,
/// since it looks each step up by its key, and an ended child's outcome typed
/// ([`Step::outcome`]).
pub(super) fn steps_by_key(c: &Connection, run_id: &str) -> Result<StepsByKey> {
    let mut steps = child_steps(c, run_id)?;
    let mut stmt = c.prepare_cached(&format!("{STEP_SELECT} WHERE s.run_id = ?1"))?;
    let mut rows = stmt.query([run_id])?;
    while let Some(r) = rows.next()? {
        let step = step_of(r)?;
        match steps.entry(step.key.clone()) {
            // Failed (or timed out), then invoked again in a later attempt.
            Entry::Occupied(child) if child.get().attempt > step.attempt => {}
            Entry::Occupied(mut child) => {
                child.insert(step);
            }
            Entry::Vacant(v) => {
                v.insert(step);
            }
        }
    }
    Ok(steps)
}

/// The invoke steps run `run_id`'s children hold, by key: for a key invoked again, the later
/// attempt's child.
fn child_steps(c: &Connection, run_id: &str) -> Result<StepsByKey> {
    let (from, to) = children_range(run_id);
    let mut stmt = c.prepare_cached(CHILD_STEPS_SQL)?;
    let mut rows = stmt.query(params![from, to, run_id])?;
    let mut found = Vec::new();
    while let Some(r) = rows.next()? {
        found.push(child_step_of(r)?);
    }
    // Sized once: growing a map of thousands moves every step again at each doubling.
    let mut steps = StepsByKey::with_capacity_and_hasher(found.len(), Default::default());
    for step in found {
        match steps.entry(step.key.clone()) {
            Entry::Occupied(mut o) => {
                if step.attempt > o.get().attempt {
                    o.insert(step);
                }
            }
            Entry::Vacant(v) => {
                v.insert(step);
            }
        }
    }
    Ok(steps)
}

/// The step `key` of run `run_id`, stored or held by a child (as [`steps_of`] picks), as stored.
pub(super) fn step(c: &Connection, run_id: &str, key: &str) -> Result<Option<Step>> {
    let mut stmt =
        c.prepare_cached(&format!("{STEP_SELECT} WHERE s.run_id = ?1 AND s.key = ?2"))?;
    let mut rows = stmt.query(params![run_id, key])?;
    let stored = rows.next()?.map(step_of).transpose()?;
    Ok(match (stored, child_step(c, run_id, key)?) {
        (Some(stored), Some((child, _))) if child.attempt > stored.attempt => Some(child),
        (Some(stored), _) => Some(stored),
        (None, child) => child.map(|(step, _)| step),
    })
}

/// The invoke step `key` of run `run_id` held by a child, as stored, with the child's id: looked
/// up by the event ids the run's attempts give their children (`invoke_event_id`), the latest
/// attempt's.
pub(super) fn child_step(
    c: &Connection,
    run_id: &str,
    key: &str,
) -> Result<Option<(Step, String)>> {
    let attempt: Option<u32> = c
        .prepare_cached("SELECT attempt FROM runs WHERE id = ?1")?
        .query_row([run_id], |r| r.get(0))
        .optional()?;
    let Some(attempt) = attempt else {
        return Ok(None);
    };
    let mut stmt = c.prepare_cached(CHILD_STEP_SQL)?;
    let mut found: Option<(Step, String)> = None;
    // A suspended run's attempt is one less than the attempt that resumes it.
    for again_in in std::iter::once(None).chain((1..=attempt + 1).map(Some)) {
        let event_id = invoke_event_id(run_id, key, again_in);
        let mut rows = stmt.query(params![event_id, run_id, key])?;
        if let Some(r) = rows.next()? {
            let step = child_step_of(r)?.with_output();
            if found.as_ref().is_none_or(|(f, _)| step.attempt > f.attempt) {
                found = Some((step, r.get(4)?));
            }
        }
    }
    Ok(found)
}

/// The invoke step run `child` holds for its caller (`awaited_by`), if any, as stored.
pub(super) fn step_held(c: &Connection, child: &str) -> Result<Option<Step>> {
    let mut stmt = c.prepare_cached(HELD_STEP_SQL)?;
    let mut rows = stmt.query([child])?;
    Ok(rows
        .next()?
        .map(child_step_of)
        .transpose()?
        .map(Step::with_output))
}

/// Stores `step` of run `run_id`, unless the stored one succeeded ([`STEP_UPSERT`]).
pub(super) fn step_store(c: &Connection, run_id: &str, step: &Step) -> Result<()> {
    let output = match &step.outcome {
        Some(outcome) => Some(outcome.clone().into_json()),
        None => step.output.clone(),
    };
    c.prepare_cached(STEP_UPSERT)?.execute(params![
        run_id,
        step.key,
        step.kind.as_str(),
        step.status.as_str(),
        step.attempt,
        step.started_at.timestamp_millis(),
        step.finished_at.map(|t| t.timestamp_millis()),
        step.wait_until.map(|t| t.timestamp_millis()),
        output.as_ref().map(Value::to_string),
        step.error,
    ])?;
    Ok(())
}

/// A row of [`CHILD_STEPS_SQL`], [`HELD_STEP_SQL`] or [`CHILD_STEP_SQL`]: waiting with
/// `{runId}` while the child has not ended, else its outcome typed ([`Step::outcome`], no
/// `output`: a fan-in's parent reads thousands; [`Step::with_output`] gives the stored shape).
fn child_step_of(r: &rusqlite::Row<'_>) -> Result<Step> {
    let text = |i: usize| -> Result<&str> {
        text_at(r, i)?.ok_or_else(|| Error::Corrupt(format!("child step column {i} is NULL")))
    };
    let child = text(4)?;
    let started_at: i64 = r.get(2)?;
    let (status, finished_at, output, outcome, error) = match text(5)? {
        status @ ("succeeded" | "failed" | "cancelled") => {
            let outcome = ended_child(child, status, text_at(r, 6)?, r.get(7)?)?;
            let (status, error) = step_end(&outcome);
            (
                status,
                r.get::<_, Option<i64>>(8)?,
                None,
                Some(outcome),
                error,
            )
        }
        _ => (
            StepStatus::Waiting,
            None,
            Some(serde_json::json!({ "runId": child })),
            None,
            None,
        ),
    };
    Ok(Step {
        key: r.get(0)?,
        kind: StepKind::Invoke,
        status,
        attempt: r.get(1)?,
        started_at: ms_to_time(started_at),
        finished_at: finished_at.map(ms_to_time),
        duration_ms: finished_at.map(|f| f - started_at),
        wait_until: r.get::<_, Option<i64>>(3)?.map(ms_to_time),
        output,
        error,
        label: None,
        outcome,
    })
}

/// How child run `child` ended with `status` (`succeeded`, `failed` or `cancelled`), its stored
/// output (JSON text) and error.
pub(super) fn ended_child(
    child: &str,
    status: &str,
    output: Option<&str>,
    error: Option<String>,
) -> Result<Invoked> {
    let status = RunStatus::parse(status)
        .filter(|s| s.is_terminal())
        .ok_or_else(|| Error::Corrupt(format!("run {child} has not ended: {status:?}")))?;
    Ok(Invoked {
        run_id: child.to_string(),
        status,
        output: output.map(json_text).transpose()?.unwrap_or(Value::Null),
        error,
    })
}

/// The invoke step's status and error once its child ended as `outcome`: it fails unless the
/// child succeeded.
fn step_end(outcome: &Invoked) -> (StepStatus, Option<String>) {
    match outcome.failure() {
        Some(failure) => (StepStatus::Failed, Some(failure)),
        None => (StepStatus::Succeeded, None),
    }
}

/// A row of [`STEP_SELECT`]: an invoke step stored waiting whose child ended holds the child's
/// outcome (`{runId, status, output, error}`), and fails unless the child succeeded; one whose
/// child has not ended holds `{runId}`. Text is read in place.
fn step_of(r: &rusqlite::Row<'_>) -> Result<Step> {
    let text = |i: usize| -> Result<&str> {
        text_at(r, i)?.ok_or_else(|| Error::Corrupt(format!("step column {i} is NULL")))
    };
    let kind = text(1)?;
    let kind = StepKind::parse(kind)
        .ok_or_else(|| Error::Corrupt(format!("unknown step kind {kind:?}")))?;
    let started_at: i64 = r.get(4)?;
    let (status, finished_at, output, error) = match text_at(r, 10)? {
        Some(child) => {
            let outcome = ended_child(child, text(11)?, text_at(r, 12)?, r.get(13)?)?;
            let (status, error) = step_end(&outcome);
            (status, r.get(14)?, Some(outcome.into_json()), error)
        }
        None => {
            let status = text(2)?;
            let status = StepStatus::parse(status)
                .ok_or_else(|| Error::Corrupt(format!("unknown step status {status:?}")))?;
            let output = match (text_at(r, 7)?, text_at(r, 15)?) {
                (Some(json), _) => Some(json_text(json)?),
                (None, Some(child)) if status == StepStatus::Waiting => {
                    Some(serde_json::json!({ "runId": child }))
                }
                (None, _) => None,
            };
            (status, r.get::<_, Option<i64>>(5)?, output, r.get(8)?)
        }
    };
    Ok(Step {
        key: r.get(0)?,
        kind,
        status,
        attempt: r.get(3)?,
        started_at: ms_to_time(started_at),
        finished_at: finished_at.map(ms_to_time),
        duration_ms: finished_at.map(|f| f - started_at),
        wait_until: r.get::<_, Option<i64>>(6)?.map(ms_to_time),
        output,
        error,
        label: r.get(9)?,
        outcome: None,
    })
}

/// Column `i` of `r` as text read in place (`None`: NULL).
fn text_at<'r>(r: &'r rusqlite::Row<'_>, i: usize) -> Result<Option<&'r str>> {
    r.get_ref(i)?
        .as_str_or_null()
        .map_err(|e| Error::Corrupt(format!("step column {i}: {e}")))
}

/// Writes the step `key` of `run_id` whose wait ended with `output` (JSON): succeeded with it,
/// or failed with `failure` (an invoke step whose child did not succeed).
pub(super) fn step_done(
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

impl SqliteStore {
    /// See [`crate::store::Store::step_record`]: one operation of the writer's next batch.
    pub async fn step_record(&self, step: NewStep) -> Result<bool> {
        let output = step.output.as_ref().map(Value::to_string);
        // No savepoint: the lease check writes nothing, and the upsert is one statement.
        self.write_guarded(Guard::Batch, move |ctx| {
            if !lease_held(ctx.conn, &step.lease)? {
                return Ok(false);
            }
            ctx.conn.prepare_cached(STEP_UPSERT)?.execute(params![
                step.lease.run_id,
                step.key,
                step.kind.as_str(),
                step.status.as_str(),
                step.attempt,
                step.started_at,
                step.finished_at,
                step.wait_until,
                output,
                step.error,
            ])?;
            if let Some(label) = &step.label {
                ctx.conn
                    .prepare_cached(
                        "UPDATE run_steps SET label = ?3 WHERE run_id = ?1 AND key = ?2",
                    )?
                    .execute(params![step.lease.run_id, step.key, label])?;
            }
            Ok(true)
        })
        .await
    }

    /// See [`crate::store::Store::run_steps`].
    pub async fn run_steps(&self, run_id: String) -> Result<Vec<Step>> {
        self.read(move |c| steps_of(c, &run_id)).await
    }

    /// See [`crate::store::Store::run_steps_by_key`].
    pub async fn run_steps_by_key(&self, run_id: String) -> Result<StepsByKey> {
        self.read(move |c| steps_by_key(c, &run_id)).await
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
            let held = lease_held(ctx.conn, &lease)?;
            if !held {
                return Ok(None);
            }
            let source = format!("job:{}", lease.run_id);
            if let ChildEvent::Before(child) =
                child_event(ctx.conn, &event_id, &payload, &source, &lease.run_id, now)?
            {
                return Ok(child);
            }
            ctx.tally.events(now, 1);
            // The child is queued like any run of its job: its flow control applies.
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
            let held = lease_held(ctx.conn, &lease)?;
            if !held {
                return Ok(false);
            }
            let attempt: u32 = ctx
                .conn
                .prepare_cached("SELECT attempt FROM runs WHERE id = ?1")?
                .query_row([&lease.run_id], |r| r.get(0))?;
            ctx.conn.prepare_cached(STEP_UPSERT)?.execute(params![
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
                       (run_id, step_key, event_name, match_path, match_value, since, until, \
                        match_hash) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                )?
                .execute(params![
                    lease.run_id,
                    key,
                    CALLBACK_EVENT,
                    CALLBACK_PATH,
                    token,
                    since,
                    until,
                    match_hash(CALLBACK_EVENT, CALLBACK_PATH, &token)
                ])?;
            Ok(true)
        })
        .await
    }
}

/// Whether [`child_event`] inserted the event of an invoked run.
pub(super) enum ChildEvent {
    New,
    /// Inserted before (an execution that stopped before it waited): the run started for it,
    /// if any.
    Before(Option<String>),
}

/// Inserts the event `id` of a run that run `caller` invokes (source `source`), once per id.
pub(super) fn child_event(
    conn: &Connection,
    id: &str,
    payload: &str,
    source: &str,
    caller: &str,
    now: i64,
) -> Result<ChildEvent> {
    let created = conn
        .prepare_cached(
            "INSERT INTO events (id, name, payload, source, parent_run_id, timestamp, delivered_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6) ON CONFLICT (id) DO NOTHING",
        )?
        .execute(params![id, INVOKE_EVENT, payload, source, caller, now])?;
    if created > 0 {
        return Ok(ChildEvent::New);
    }
    Ok(ChildEvent::Before(
        conn.prepare_cached("SELECT id FROM runs WHERE event_id = ?1 ORDER BY rowid LIMIT 1")?
            .query_row([id], |r| r.get(0))
            .optional()?,
    ))
}

/// Whether the run of `lease` still holds it (running, with its token): what fences a step's
/// write against an attempt whose lease was lost.
pub(super) fn lease_held(conn: &Connection, lease: &Lease) -> Result<bool> {
    Ok(conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM runs WHERE id = ?1 AND lease_token = ?2 AND status = 'running')",
        )?
        .query_row(params![lease.run_id, lease.token], |r| r.get(0))?)
}

/// Whether the callback step `key` of `run_id` was answered already.
pub(super) fn callback_answered(conn: &Connection, run_id: &str, key: &str) -> Result<bool> {
    Ok(conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM run_steps WHERE run_id = ?1 AND key = ?2 AND status = 'succeeded')",
        )?
        .query_row(params![run_id, key], |r| r.get(0))?)
}

#[cfg(test)]
mod tests {
    use rusqlite::types::Value as SqlValue;

    use super::super::query::tests::{db, plan};

    /// A parent's children (its invoke steps) are found by one walk of the index of the runs'
    /// events, and one child by a probe of it: never a walk of `runs`.
    #[test]
    fn a_run_s_children_are_found_by_their_event_ids() {
        let (_dir, conn) = db();
        let text = |s: &str| SqlValue::Text(s.into());
        let p = plan(
            &conn,
            super::CHILD_STEPS_SQL,
            &[text("run_1-invoke"), text("run_1-invokf"), text("run_1")],
        );
        assert!(p.contains("runs_event (event_id>? AND event_id<?)"), "{p}");
        let p = plan(
            &conn,
            super::CHILD_STEP_SQL,
            &[text("run_1-invoke-a"), text("run_1"), text("a")],
        );
        assert!(p.contains("runs_event (event_id=?)"), "{p}");
        assert!(!p.contains("SCAN runs"), "{p}");
    }

    /// The range holds every event id `invoke_event_id` gives a run's children, and no other
    /// run's.
    #[test]
    fn the_children_range_holds_every_child_event_id() {
        use crate::model::wait::invoke_event_id;
        let (from, to) = super::children_range("run_1");
        for again_in in [None, Some(1), Some(12)] {
            for key in ["a", "all:0", "-", "é"] {
                let id = invoke_event_id("run_1", key, again_in);
                assert!(*id >= *from && *id < *to, "{id}");
            }
        }
        for other in [
            "run_10-invoke-a",
            "run_1-invokf",
            "run_1-invok",
            "run_2-invoke-a",
        ] {
            assert!(!(*other >= *from && *other < *to), "{other}");
        }
    }
}
