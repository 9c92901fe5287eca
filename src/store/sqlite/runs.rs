//! The run lifecycle on SQLite: claim (one `SELECT` of the due runs with their payloads, then an
//! update by rowid; a batch of claims alone commits without an fsync, `Commit::Lazy`), complete
//! (fenced by the lease token), heartbeat, release, rescue, cancel, retry, bulk actions; and the
//! reads of one run (its detail, the next due time, counts by state).

use std::collections::HashMap;

use rusqlite::{params, Connection, OptionalExtension};
use serde_json::Value;

use super::flow::{lowest_ranks, ranked_rows, take_runs, ClaimRow};
use super::rows::{json_text, opt_json, run_from_row, RUN_COLUMNS};
use super::writer::{Commit, Guard, WriteCtx};
use super::SqliteStore;
use crate::model::{ms_to_time, Attempt, Invoked, Level, LogLine, RunStatus, StepKind, StepStatus};
use crate::store::{
    ClaimParams, ClaimedRun, Completion, Error, Finish, FlowGroup, Lease, Result, RunDetail,
};

/// The runs a claim takes: runnable runs without a priority of the given jobs (`?2`, a JSON
/// array), oldest due first, with their due time (their rank). It walks the partial index of
/// queued runs in due order and the claim stops stepping it at its limit ([`ranked_rows`]), so
/// its cost does not grow with the depth of the queue. No `LIMIT ?n`: SQLite's planner reads a
/// bound limit's value, which makes every new binding re-prepare the statement (a third of the
/// keyed claim's time went to parsing it again, once per slot). Paused jobs are taken off the list of jobs (once per claim, not per run),
/// so their runs stay queued.
///
/// It reads each run with its event's name and payload in one pass; the claim then updates the
/// runs one by one by rowid. (`UPDATE … WHERE seq IN (…) RETURNING` gathers the keys and the
/// returned rows in two ephemeral tables, and the payloads needed a lookup per run after it.)
pub(super) const CLAIM_SELECT: &str =
    "SELECT r.seq, r.id, r.event_id, r.job_id, r.attempt + 1, r.max_attempts, e.name, e.payload, r.run_at \
     FROM runs r INDEXED BY runs_runnable JOIN events e ON e.id = r.event_id \
     WHERE r.status = 'queued' AND r.slot_a IS NULL AND r.priority_ms IS NULL AND r.run_at <= ?1 \
       AND (r.expires_at IS NULL OR r.expires_at > ?1 OR r.started_at IS NOT NULL) AND r.job_id IN (SELECT value FROM json_each(?2) \
       WHERE value NOT IN (SELECT id FROM jobs WHERE paused = 1)) \
     ORDER BY r.run_at, r.seq";

/// [`CLAIM_SELECT`] for the runs with a priority (`0025_flow_priority.sql`): the due ones in rank
/// order (due time less the priority's offset), walking their index from the lowest rank up to
/// `?1` + 600 s, the highest a due run can have.
pub(super) const CLAIM_RANKED: &str =
    "SELECT r.seq, r.id, r.event_id, r.job_id, r.attempt + 1, r.max_attempts, e.name, e.payload, r.run_at - r.priority_ms \
     FROM runs r INDEXED BY runs_ranked JOIN events e ON e.id = r.event_id \
     WHERE r.status = 'queued' AND r.slot_a IS NULL AND r.priority_ms IS NOT NULL \
       AND r.run_at - r.priority_ms <= ?1 + 600000 AND r.run_at <= ?1 \
       AND (r.expires_at IS NULL OR r.expires_at > ?1 OR r.started_at IS NOT NULL) AND r.job_id IN (SELECT value FROM json_each(?2) \
       WHERE value NOT IN (SELECT id FROM jobs WHERE paused = 1)) \
     ORDER BY r.run_at - r.priority_ms, r.seq";

/// The error of a run cancelled because it did not start within its job's start timeout.
pub(super) const EXPIRED: &str = "expired before it started";

/// A completion that ends the run, with the rows its fenced update wrote (1 while the lease
/// held): counted for `job` when written.
pub(super) fn final_outcome<'c, 'e>(
    outcome: &'static str,
    updated: usize,
    job: &'c str,
    error: Option<&'e str>,
) -> (&'static str, bool, Option<&'c str>, Option<&'e str>) {
    (outcome, updated == 1, (updated == 1).then_some(job), error)
}

pub(super) fn record_attempt(
    conn: &Connection,
    run_id: &str,
    attempt: u32,
    outcome: &str,
    started: Option<i64>,
    finished: i64,
    error: Option<&str>,
) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO run_attempts (run_id, attempt, outcome, started_at, finished_at, error) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![run_id, attempt, outcome, started, finished, error])?;
    Ok(())
}

/// Cancels one queued or running run inside the caller's write (and its unfinished invoked
/// runs, each with its `flare/run.cancelled`: see `events::cancel_runs`): final and counted, its
/// lease removed, so the completion of an attempt still executing no longer matches (fencing)
/// and is refused. A run in another state is an error, and nothing is written then.
pub(super) fn run_cancel_one(ctx: &mut WriteCtx<'_>, id: &str, now: i64) -> Result<()> {
    if super::events::cancel_runs(ctx, id, now, None, None)? > 0 {
        return Ok(());
    }
    run_state_error(
        ctx.conn,
        id,
        "cancelled",
        "only a queued or running run can be cancelled",
    )
}

/// Queues failed or cancelled run `id` again inside the caller's write (see `run_retry`); a run
/// in another state is a conflict, and nothing is written then. An invoked run leaves its
/// caller first (`children::caller_keeps_outcome`).
pub(super) fn run_retry_one(ctx: &mut WriteCtx<'_>, id: &str, now: i64) -> Result<()> {
    // What the run counted as in the per-minute counts, which it leaves.
    let finished: Option<(i64, String, String)> = ctx
        .conn
        .prepare_cached(
            "SELECT finished_at, job_id, status FROM runs \
             WHERE id = ?1 AND status IN ('failed', 'cancelled') AND finished_at IS NOT NULL",
        )?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    if finished.is_some() {
        super::children::caller_keeps_outcome(ctx.conn, id)?;
    }
    let n = ctx
        .conn
        .prepare_cached(
            "UPDATE runs SET status = 'queued', run_at = ?2, finished_at = NULL, expires_at = NULL, max_attempts = MAX(max_attempts, attempt + 1) \
             WHERE id = ?1 AND status IN ('failed', 'cancelled')",
        )?
        .execute(params![id, now])?;
    if n == 1 {
        if let Some((at, job, status)) = finished {
            ctx.tally.run(at, &job, &status, -1);
        }
        ctx.wake = true;
        return Ok(());
    }
    run_state_error(
        ctx.conn,
        id,
        "retried",
        "only a failed or cancelled run can be retried",
    )
}

pub(super) fn run_state_error<T>(conn: &Connection, id: &str, verb: &str, rule: &str) -> Result<T> {
    let status: Option<String> = conn
        .query_row("SELECT status FROM runs WHERE id = ?1", [id], |r| r.get(0))
        .optional()?;
    match status {
        None => Err(Error::NotFound {
            what: "run",
            id: id.to_string(),
        }),
        Some(s) => Err(Error::Conflict(format!(
            "run {id:?} cannot be {verb}: it is {s}; {rule}"
        ))),
    }
}

/// The earliest queued run of a job list (`?1`, JSON array), without and with a priority.
/// `INDEXED BY`: see [`CLAIM_SELECT`]; without it this walks every run the jobs ever had.
pub(super) const NEXT_RUN_SQL: &str =
    "SELECT min(coalesce(a, b), coalesce(b, a)) FROM \
     (SELECT (SELECT run_at FROM runs INDEXED BY runs_runnable WHERE status = 'queued' AND slot_a IS NULL \
       AND priority_ms IS NULL AND job_id IN (SELECT value FROM json_each(?1) \
         WHERE value NOT IN (SELECT id FROM jobs WHERE paused = 1)) ORDER BY run_at LIMIT 1) AS a, \
      (SELECT run_at FROM runs INDEXED BY runs_ranked_due WHERE status = 'queued' AND slot_a IS NULL \
       AND priority_ms IS NOT NULL AND job_id IN (SELECT value FROM json_each(?1) \
         WHERE value NOT IN (SELECT id FROM jobs WHERE paused = 1)) ORDER BY run_at LIMIT 1) AS b)";

/// Ends the runs of a completion batch that succeeded, in one statement: `?1` is a JSON object
/// from each run's id to `[token, finished_at, output]` ([`final_rows`]); each run is written only
/// while its lease holds (fenced by the token). Returns each written run's id and attempt,
/// whether it held slots, the run waiting for it (its caller, for the fan-in) and its end. [`FAIL_RUNS`]
/// is the same for runs that failed for good (`error`).
///
/// One statement, not one per run: the flow-control triggers on `runs` (`0020`) make every
/// statement that changes a run's status open a statement journal, which copies each page the
/// statement touches; per run, that copying and the `RETURNING` table were most of a completion's
/// cost. The id is the object's key and the status is fixed, since each `->>` parses the element
/// again. Runs are found by their id's index (plan test below).
pub(super) const SUCCEED_RUNS: &str =
    "UPDATE runs SET status = 'succeeded', finished_at = c.value ->> 1, output = c.value ->> 2, \
       error = NULL, lease_until = NULL, lease_token = NULL \
     FROM json_each(?1) AS c \
     WHERE runs.id = c.key AND runs.lease_token = c.value ->> 0 AND runs.status = 'running' \
     RETURNING runs.id, runs.attempt, runs.slot_a IS NOT NULL, runs.awaited_by, runs.finished_at";

/// [`SUCCEED_RUNS`] for runs that failed for good.
pub(super) const FAIL_RUNS: &str =
    "UPDATE runs SET status = 'failed', finished_at = c.value ->> 1, error = c.value ->> 2, \
       lease_until = NULL, lease_token = NULL \
     FROM json_each(?1) AS c \
     WHERE runs.id = c.key AND runs.lease_token = c.value ->> 0 AND runs.status = 'running' \
     RETURNING runs.id, runs.attempt, runs.slot_a IS NOT NULL, runs.awaited_by, runs.finished_at";

/// The parameters of [`SUCCEED_RUNS`] and [`FAIL_RUNS`] for a batch; `None` where no run ends
/// that way. Written as text: two attempts of one run in a batch (the first fenced off) are
/// two entries with the same key, which `json_each` reads both of.
fn final_rows(completions: &[Completion]) -> Result<[Option<String>; 2]> {
    let mut out: [Option<String>; 2] = [None, None];
    for c in completions {
        let (i, text) = match &c.finish {
            Finish::Succeeded(output) => (0, output.to_string()),
            Finish::Failed(error) => (1, error.clone()),
            Finish::Retry { .. } | Finish::Wait { .. } => continue,
        };
        let entry = serde_json::to_string(&(c.token, c.finished_at, text))
            .and_then(|v| serde_json::to_string(&c.run_id).map(|k| (k, v)))
            .map_err(|e| Error::Corrupt(e.to_string()))?;
        let obj = out[i].get_or_insert_with(|| String::from("{"));
        if obj.len() > 1 {
            obj.push(',');
        }
        obj.push_str(&entry.0);
        obj.push(':');
        obj.push_str(&entry.1);
    }
    for obj in out.iter_mut().flatten() {
        obj.push('}');
    }
    Ok(out)
}

/// How a run of a completion batch ended, as [`end_runs`] found it.
struct Ended {
    /// Whether it held slots (flow control): the workers are woken for the runs they free.
    held_slots: bool,
    /// The run waiting for it ([`SUCCEED_RUNS`]' `awaited_by`).
    caller: Option<String>,
    /// When it ended.
    finished_at: i64,
}

/// Runs [`SUCCEED_RUNS`] and [`FAIL_RUNS`]: the runs they ended (id and attempt: two attempts of
/// one run may end in one batch, the first fenced off). `n`: the batch's size, the most it can
/// end.
fn end_runs(
    conn: &Connection,
    rows: &[Option<String>; 2],
    n: usize,
) -> Result<HashMap<(String, u32), Ended>> {
    let mut ended = HashMap::with_capacity(n);
    for (sql, rows) in [SUCCEED_RUNS, FAIL_RUNS].into_iter().zip(rows) {
        let Some(rows) = rows else {
            continue;
        };
        let mut stmt = conn.prepare_cached(sql)?;
        let written = stmt.query_map([rows], |r| {
            let run = Ended {
                held_slots: r.get(2)?,
                caller: r.get(3)?,
                finished_at: r.get(4)?,
            };
            Ok(((r.get(0)?, r.get(1)?), run))
        })?;
        for w in written {
            let (k, v) = w?;
            ended.insert(k, v);
        }
    }
    Ok(ended)
}

impl SqliteStore {
    /// See [`crate::store::Store::runs_claim`].
    pub async fn runs_claim(&self, p: ClaimParams) -> Result<Vec<ClaimedRun>> {
        let token: i64 = rand::random::<i64>() & i64::MAX;
        let groups: Vec<(String, usize, Option<FlowGroup>)> = p
            .groups
            .iter()
            .filter(|g| g.limit > 0 && !g.jobs.is_empty())
            .map(|g| {
                let jobs = match &g.flow {
                    Some(_) => g.jobs[0].clone(),
                    None => serde_json::to_string(&g.jobs).unwrap_or_default(),
                };
                (jobs, g.limit, g.flow.clone())
            })
            .collect();
        if groups.is_empty() {
            return Ok(Vec::new());
        }
        let now = p.now;
        // Committed without waiting for the disk: see `Commit::Lazy`.
        let claimed: Vec<ClaimRow> = self
            .write_synced(Guard::Savepoint, Commit::Lazy, move |ctx| {
                let mut claimed = Vec::new();
                let all = groups.iter().map(|g| g.1).max().unwrap_or(0);
                for (jobs, limit, flow) in &groups {
                    let limit = (*limit).min(all - claimed.len());
                    if limit == 0 {
                        break;
                    }
                    if let Some(flow) = flow {
                        let take = super::flow::claim_flow(ctx.conn, jobs, flow, limit, &p, token)?;
                        claimed.extend(take);
                        continue;
                    }
                    let args = params![p.now, jobs];
                    let plain = ranked_rows(ctx.conn, CLAIM_SELECT, args, limit)?;
                    let ranked = ranked_rows(ctx.conn, CLAIM_RANKED, args, limit)?;
                    let rows = lowest_ranks(plain, ranked, limit);
                    take_runs(ctx.conn, &rows, &p, token)?;
                    claimed.extend(rows);
                }
                Ok(claimed)
            })
            .await?;
        // The payloads are parsed here, on the caller's task, not on the writer thread.
        claimed
            .into_iter()
            .map(
                |(_, id, event_id, job_id, attempt, max_attempts, event_name, payload)| {
                    Ok(ClaimedRun {
                        id,
                        event_id,
                        event_name,
                        job_id,
                        attempt,
                        max_attempts,
                        token,
                        payload: json_text(&payload)?,
                        started_at: now,
                    })
                },
            )
            .collect()
    }

    /// See [`crate::store::Store::runs_complete`].
    pub async fn runs_complete(&self, completions: Vec<Completion>) -> Result<Vec<bool>> {
        // The final outcomes' parameter is serialized here, on the caller's task.
        let finals = final_rows(&completions)?;
        // No savepoint: every failure here is a database error.
        self.write_guarded(Guard::Batch, move |ctx| {
            // The runs that ended (succeeded or failed) are written by one statement each: see
            // `SUCCEED_RUNS`. Each held one's slot flag, by id and attempt.
            let ended = end_runs(ctx.conn, &finals, completions.len())?;
            if ended.values().any(|e| e.held_slots) {
                ctx.wake = true;
            }
            let ended_now = |c: &Completion| ended.contains_key(&(c.run_id.clone(), c.attempt));
            let mut held = Vec::with_capacity(completions.len());
            for c in &completions {
                // Whether the lease still held (the run was written), and the job of a run that
                // reached a final state, for the per-minute counts.
                let (outcome, held_lease, finished, error): (_, bool, Option<&str>, _) = match &c.finish {
                    Finish::Succeeded(_) => final_outcome("succeeded", usize::from(ended_now(c)), &c.job_id, None),
                    Finish::Failed(error) => final_outcome("failed", usize::from(ended_now(c)), &c.job_id, Some(error.as_str())),
                    Finish::Retry { error, at } => {
                        ctx.wake = true;
                        let n = ctx.conn.prepare_cached(
                            "UPDATE runs SET status = 'queued', run_at = ?3, error = ?4, lease_until = NULL, lease_token = NULL \
                             WHERE id = ?1 AND lease_token = ?2 AND status = 'running'",
                        )?.execute(params![c.run_id, c.token, at, error])?;
                        ("retrying", n == 1, None, Some(error.as_str()))
                    }
                    Finish::Wait { key, until, since, event } => {
                        // Back to the queue, due when the wait is; the attempt does not count.
                        let n = ctx.conn.prepare_cached(
                            "UPDATE runs SET status = 'queued', attempt = attempt - 1, run_at = ?3, lease_until = NULL, lease_token = NULL \
                             WHERE id = ?1 AND lease_token = ?2 AND status = 'running'",
                        )?.execute(params![c.run_id, c.token, until])?;
                        if n == 1 {
                            ctx.wake = true;
                            let held_by_child = match event {
                                Some(wait) if wait.is_invoke() => super::waits::child_holds_step(ctx.conn, &c.run_id, key, &wait.match_value)?,
                                _ => false,
                            };
                            if held_by_child {
                                // Its children are counted (`children.rs`), and the step is theirs.
                                super::waits::children_due(ctx.conn, &c.run_id, c.finished_at)?;
                            } else {
                                let kind = event.as_ref().map_or(StepKind::Wait, crate::model::EventWait::step_kind);
                                ctx.conn.prepare_cached(super::steps::STEP_WAIT_UPSERT)?.execute(params![
                                    c.run_id, key, kind.as_str(), StepStatus::Waiting.as_str(),
                                    c.attempt, since, until
                                ])?;
                                if let Some(wait) = event {
                                    super::waits::register(ctx.conn, &c.run_id, key, wait, *since, *until, c.finished_at)?;
                                }
                            }
                        }
                        ("waiting", n == 1, None, None)
                    }
                };
                let ok = held_lease;
                if let Some(job) = finished {
                    ctx.tally.run(c.finished_at, job, outcome, 1);
                }
                if let (true, Finish::Failed(error)) = (ok, &c.finish) {
                    super::events::send_ended(ctx, &c.run_id, false, Some(error), c.finished_at)?;
                }
                if ok {
                    // A success's attempt is the run row itself (see `RunDetail::new`).
                    if !matches!(c.finish, Finish::Succeeded(_)) {
                        record_attempt(ctx.conn, &c.run_id, c.attempt, outcome, Some(c.started_at), c.finished_at, error)?;
                    }
                    let mut log = ctx.conn.prepare_cached(
                        "INSERT INTO run_logs (run_id, attempt, level, message, fields, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    )?;
                    for line in &c.logs {
                        log.execute(params![
                            c.run_id,
                            line.attempt,
                            line.level.as_str(),
                            line.message,
                            line.fields.as_ref().map(Value::to_string),
                            line.at.timestamp_millis()
                        ])?;
                    }
                }
                held.push(ok);
            }
            // The ended runs' parents (fan-in) and cancel-on keys, each one statement for all.
            let gone: Vec<&Completion> = completions
                .iter()
                .zip(&held)
                .filter(|(c, &ok)| ok && matches!(c.finish, Finish::Succeeded(_) | Finish::Failed(_)))
                .map(|(c, _)| c)
                .collect();
            let ids: Vec<(&str, i64)> = gone.iter().map(|c| (c.run_id.as_str(), c.finished_at)).collect();
            let conn = ctx.conn;
            let mut fan_in = super::children::FanIn::default();
            fan_in.callers_counted(conn, ended.values().filter_map(|e| Some((e.caller.as_deref()?, e.finished_at))))?;
            if super::children::FanIn::child_waits_stored(conn)? {
                fan_in.child_waits_ended(conn, &ids, |i| match &gone[i].finish {
                    // As `children::child_outcome` reads it back, without the read.
                    Finish::Succeeded(output) => Ok(Invoked {
                        run_id: gone[i].run_id.clone(),
                        status: RunStatus::Succeeded,
                        output: output.clone(),
                        error: None,
                    }),
                    _ => super::children::child_outcome(conn, &gone[i].run_id)?
                        .ok_or_else(|| Error::Corrupt(format!("run {} has not ended", gone[i].run_id))),
                })?;
            }
            super::cancel_on::disarm_all(conn, &ids)?;
            if fan_in.resume(conn)? > 0 {
                ctx.wake = true;
            }
            Ok(held)
        })
        .await
    }

    /// See [`crate::store::Store::runs_heartbeat`].
    pub async fn runs_heartbeat(
        &self,
        leases: Vec<Lease>,
        lease_until: i64,
    ) -> Result<Vec<String>> {
        self.write(move |ctx| {
            let mut stmt = ctx.conn.prepare_cached(
                "UPDATE runs SET lease_until = ?3 WHERE id = ?1 AND lease_token = ?2 AND status = 'running'",
            )?;
            let mut lost = Vec::new();
            for l in &leases {
                if stmt.execute(params![l.run_id, l.token, lease_until])? == 0 {
                    lost.push(l.run_id.clone());
                }
            }
            Ok(lost)
        })
        .await
    }

    /// See [`crate::store::Store::runs_release`].
    pub async fn runs_release(&self, leases: Vec<Lease>, now: i64) -> Result<usize> {
        self.write(move |ctx| {
            let mut n = 0;
            for l in &leases {
                let released: Option<(u32, Option<i64>)> = ctx
                    .conn
                    .prepare_cached(
                        "UPDATE runs SET status = 'queued', attempt = attempt - 1, run_at = ?3, lease_until = NULL, lease_token = NULL \
                         WHERE id = ?1 AND lease_token = ?2 AND status = 'running' RETURNING attempt + 1, started_at",
                    )?
                    .query_row(params![l.run_id, l.token, now], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()?;
                if let Some((attempt, started)) = released {
                    record_attempt(ctx.conn, &l.run_id, attempt, "released", started, now, Some("released at shutdown before it finished"))?;
                    n += 1;
                }
            }
            if n > 0 {
                ctx.wake = true;
            }
            Ok(n)
        })
        .await
    }

    /// See [`crate::store::Store::runs_rescue`].
    pub async fn runs_rescue(&self, now: i64) -> Result<usize> {
        self.write(move |ctx| {
            /// A rescued run: id, attempt, start, error, job, and when it failed (no attempt left).
            type Rescued = (String, u32, Option<i64>, String, String, Option<i64>);
            let rescued: Vec<Rescued> = ctx
                .conn
                .prepare_cached(
                    "UPDATE runs SET \
                       status = CASE WHEN attempt < max_attempts THEN 'queued' ELSE 'failed' END, \
                       finished_at = CASE WHEN attempt < max_attempts THEN NULL ELSE ?1 END, \
                       run_at = ?1, lease_until = NULL, lease_token = NULL, \
                       error = 'lease expired: the worker running attempt ' || attempt || ' stopped responding' \
                     WHERE seq IN (SELECT seq FROM runs WHERE status = 'running' AND lease_until < ?1 LIMIT 1000) \
                     RETURNING id, attempt, started_at, error, job_id, finished_at",
                )?
                .query_map([now], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?))
                })?
                .collect::<rusqlite::Result<_>>()?;
            for (id, attempt, started, error, job, finished) in &rescued {
                record_attempt(ctx.conn, id, *attempt, "lost", *started, now, Some(error))?;
                if let Some(at) = finished {
                    ctx.tally.run(*at, job, "failed", 1);
                    super::events::send_ended(ctx, id, false, Some(error), now)?;
                    ctx.wake |= super::children::on_run_end(ctx.conn, id, now)? > 0;
                    super::cancel_on::disarm(ctx.conn, id)?;
                }
            }
            if !rescued.is_empty() {
                ctx.wake = true;
            }
            Ok(rescued.len())
        })
        .await
    }

    /// See [`crate::store::Store::runs_expire`].
    pub async fn runs_expire(&self, now: i64) -> Result<usize> {
        self.write(move |ctx| {
            let expired: Vec<String> = ctx
                .conn
                .prepare_cached(
                    "SELECT id FROM runs INDEXED BY runs_expiring \
                     WHERE status = 'queued' AND expires_at IS NOT NULL AND started_at IS NULL \
                       AND expires_at <= ?1 ORDER BY expires_at LIMIT 1000",
                )?
                .query_map([now], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            // Cancelled as any cancel is: its `flare/run.cancelled` sent, its parent resumed.
            for id in &expired {
                super::events::cancel_runs(ctx, id, now, Some(EXPIRED), None)?;
            }
            Ok(expired.len())
        })
        .await
    }

    /// See [`crate::store::Store::run_cancel`].
    pub async fn run_cancel(&self, id: String, now: i64) -> Result<()> {
        self.write(move |ctx| run_cancel_one(ctx, &id, now)).await
    }

    /// See [`crate::store::Store::run_retry`].
    pub async fn run_retry(&self, id: String, now: i64) -> Result<()> {
        self.write(move |ctx| run_retry_one(ctx, &id, now)).await
    }

    /// See [`crate::store::Store::runs_bulk`].
    pub async fn runs_bulk(
        &self,
        action: crate::store::BulkRunAction,
        ids: Vec<String>,
        now: i64,
    ) -> Result<usize> {
        self.write(move |ctx| {
            let mut n = 0;
            for id in &ids {
                // A run in another state (or gone) is skipped; both checks write nothing then.
                let done = match action {
                    crate::store::BulkRunAction::Cancel => run_cancel_one(ctx, id, now),
                    crate::store::BulkRunAction::Retry => run_retry_one(ctx, id, now),
                };
                match done {
                    Ok(()) => n += 1,
                    Err(Error::Conflict(_) | Error::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(n)
        })
        .await
    }

    /// See [`crate::store::Store::runs_next_due`].
    pub async fn runs_next_due(&self, jobs: Vec<String>) -> Result<Option<i64>> {
        let jobs = serde_json::to_string(&jobs).unwrap_or_default();
        self.read(move |c| {
            let plain: Option<i64> = c
                .prepare_cached(NEXT_RUN_SQL)?
                .query_row([&jobs], |r| r.get(0))?;
            let run = match (plain, super::flow::next_due(c, &jobs)?) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let event: Option<i64> = c
                .prepare_cached(
                    "SELECT min(deliver_at) FROM events WHERE delivered_at IS NULL AND cancelled_at IS NULL",
                )?
                .query_row(params![], |r| r.get(0))?;
            Ok(match (run, event) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            })
        })
        .await
    }

    /// See [`crate::store::Store::run_detail`].
    pub async fn run_detail(&self, id: String) -> Result<Option<RunDetail>> {
        self.read(move |c| {
            // One snapshot for all its reads (each statement alone would take its own: a run
            // suspended between them showed `running` with its wait).
            let tx = c.unchecked_transaction()?;
            let detail = run_detail_in(&tx, &id)?;
            tx.commit()?;
            Ok(detail)
        })
        .await
    }
}

/// [`SqliteStore::run_detail`]'s reads, in the caller's transaction.
fn run_detail_in(c: &Connection, id: &str) -> Result<Option<RunDetail>> {
    let run = c
        .prepare_cached(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1"))?
        .query_row([id], |r| Ok(run_from_row(r)))
        .optional()?
        .transpose()?;
    let Some(run) = run else { return Ok(None) };
    let mut logs = Vec::new();
    let mut stmt = c.prepare_cached(
        "SELECT attempt, level, message, fields, at FROM run_logs WHERE run_id = ?1 ORDER BY seq",
    )?;
    let mut rows = stmt.query([id])?;
    while let Some(r) = rows.next()? {
        let level: String = r.get(1)?;
        logs.push(LogLine {
            attempt: r.get(0)?,
            level: Level::parse(&level).unwrap_or(Level::Info),
            message: r.get(2)?,
            fields: opt_json(r.get(3)?)?,
            at: ms_to_time(r.get(4)?),
        });
    }
    let attempts = c
        .prepare_cached(
            "SELECT attempt, outcome, started_at, finished_at, error FROM run_attempts WHERE run_id = ?1 ORDER BY rowid",
        )?
        .query_map([id], |r| {
            Ok(Attempt {
                attempt: r.get(0)?,
                outcome: r.get(1)?,
                started_at: r.get::<_, Option<i64>>(2)?.map(ms_to_time),
                finished_at: ms_to_time(r.get(3)?),
                error: r.get(4)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    let steps = super::steps::steps_of(c, id)?;
    let wait = super::waits::pending(c, id)?;
    let mut detail = RunDetail::new(run, logs, attempts, steps).with_wait(wait);
    detail.waiting_for = crate::store::runs::held_by(
        super::flow::waiting_for(c, &detail.run)?,
        super::debounce::waiting_for(c, &detail.run)?,
    );
    super::links::run_links(c, &mut detail)?;
    Ok(Some(detail))
}

#[cfg(test)]
mod tests {
    use rusqlite::types::Value as SqlValue;

    use super::super::query::tests::{db, plan};

    /// A completion batch finds each of its runs by the id's index, not by a walk of `runs`.
    #[test]
    fn ending_a_batch_looks_each_run_up_by_its_id() {
        let (_dir, conn) = db();
        for sql in [super::SUCCEED_RUNS, super::FAIL_RUNS] {
            let batch = SqlValue::Text(r#"{"run_1": [7, 1, "null"]}"#.into());
            let p = plan(&conn, sql, &[batch]);
            assert!(p.contains("sqlite_autoindex_runs_1 (id=?)"), "{p}");
            assert!(!p.contains("SCAN runs"), "{p}");
        }
    }
}
