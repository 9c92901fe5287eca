//! Concurrency limits on SQLite: the claim of a limited job's runs through its slots (see
//! `0020_flow_concurrency.sql` and `model::flow`). The counts of running runs per slot are kept
//! by that migration's triggers; this claim reads only slots with room and a due run, so a key
//! at its limit costs it nothing however many runs it holds back.

use rusqlite::{params, Connection, OptionalExtension};

use super::rows::new_run_id;
use crate::model::throttle::admit;
use crate::model::{EventFields, RateLimit, RunSlots};
use crate::store::runs::SlotState;
use crate::store::{ClaimParams, Error, FlowGroup, Result};

/// A claimed run as the claim reads it: seq, id, event, job, attempt, max attempts, event name,
/// payload text.
pub(super) type ClaimRow = (i64, String, String, String, u32, u32, String, String);

/// A [`ClaimRow`] after its rank: the due time less its priority's offset (`model::priority`).
pub(super) type Ranked = (i64, ClaimRow);

/// The queued runs without a priority of one slot in due order, due or not ([`slot_runs`] stops
/// at the first not yet due: its time is the slot's next due time), read with their events and
/// their rank. Runs past their start timeout are left out (the rescuer cancels them). No
/// `LIMIT ?n` in the claim's statements: see [`super::runs::CLAIM_SELECT`].
pub(super) const SLOT_RUNS: &str =
    "SELECT r.seq, r.id, r.event_id, r.job_id, r.attempt + 1, r.max_attempts, e.name, e.payload, r.run_at \
     FROM runs r INDEXED BY runs_slot_queue JOIN events e ON e.id = r.event_id \
     WHERE r.slot_a = ?1 AND r.status = 'queued' AND r.slot_a IS NOT NULL AND r.priority_ms IS NULL \
       AND (r.expires_at IS NULL OR r.expires_at > ?2 OR r.started_at IS NOT NULL) \
     ORDER BY r.run_at, r.seq";

/// [`SLOT_RUNS`] for the due runs with a priority: lowest rank first, up to `?2` + 600 s.
pub(super) const SLOT_RANKED: &str =
    "SELECT r.seq, r.id, r.event_id, r.job_id, r.attempt + 1, r.max_attempts, e.name, e.payload, r.run_at - r.priority_ms \
     FROM runs r INDEXED BY runs_slot_ranked JOIN events e ON e.id = r.event_id \
     WHERE r.slot_a = ?1 AND r.status = 'queued' AND r.slot_a IS NOT NULL AND r.priority_ms IS NOT NULL \
       AND r.run_at - r.priority_ms <= ?2 + 600000 AND r.run_at <= ?2 \
       AND (r.expires_at IS NULL OR r.expires_at > ?2 OR r.started_at IS NOT NULL) \
     ORDER BY r.run_at - r.priority_ms, r.seq";

/// Whether any run with slots and a priority is queued (the first entry of its index): without
/// one, the claim reads each slot's queue with one statement.
const ANY_SLOT_RANKED: &str = "SELECT EXISTS (SELECT 1 FROM runs INDEXED BY runs_slot_ranked_due \
     WHERE slot_a IS NOT NULL AND priority_ms IS NOT NULL AND status = 'queued')";

/// The earliest due time of slot `?1`'s queued runs, without and with a priority.
const SLOT_NEXT_DUE: &str = "SELECT min(coalesce(a, b), coalesce(b, a)) FROM \
     (SELECT (SELECT min(run_at) FROM runs INDEXED BY runs_slot_queue \
        WHERE slot_a = ?1 AND status = 'queued' AND slot_a IS NOT NULL AND priority_ms IS NULL) AS a, \
      (SELECT min(run_at) FROM runs INDEXED BY runs_slot_ranked_due \
        WHERE slot_a = ?1 AND status = 'queued' AND slot_a IS NOT NULL AND priority_ms IS NOT NULL) AS b)";

/// The first `max` rows of a claim's `sql` (the columns of [`ClaimRow`], then the rank). The
/// statements walk an index in the order they return, so stopping here costs what a `LIMIT`
/// would.
pub(super) fn ranked_rows(
    conn: &Connection,
    sql: &str,
    args: impl rusqlite::Params,
    max: usize,
) -> Result<Vec<Ranked>> {
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt.query_map(args, ranked)?;
    Ok(rows.take(max).collect::<rusqlite::Result<_>>()?)
}

/// One row of a claim's statement as a [`Ranked`].
fn ranked(r: &rusqlite::Row<'_>) -> rusqlite::Result<Ranked> {
    Ok((
        r.get(8)?,
        (
            r.get(0)?,
            r.get(1)?,
            r.get(2)?,
            r.get(3)?,
            r.get(4)?,
            r.get(5)?,
            r.get(6)?,
            r.get(7)?,
        ),
    ))
}

/// Slot `slot`'s due runs without a priority, oldest first, at most `n`, and the due time of
/// the first one left (`None`: none is queued).
fn slot_runs(
    conn: &Connection,
    slot: &str,
    now: i64,
    n: usize,
) -> Result<(Vec<Ranked>, Option<i64>)> {
    let mut stmt = conn.prepare_cached(SLOT_RUNS)?;
    let mut rows = stmt.query_map(params![slot, now], ranked)?;
    let mut due = Vec::new();
    for row in rows.by_ref() {
        let row = row?;
        if row.0 > now || due.len() >= n {
            return Ok((due, Some(row.0)));
        }
        due.push(row);
    }
    Ok((due, None))
}

/// The `n` lowest ranks (then sequence numbers) of two lists each in that order: the runs
/// without a priority and those with one. Without runs of the second kind, the first as it is.
pub(super) fn lowest_ranks(plain: Vec<Ranked>, ranked: Vec<Ranked>, n: usize) -> Vec<ClaimRow> {
    if ranked.is_empty() {
        return plain.into_iter().take(n).map(|(_, row)| row).collect();
    }
    let mut all = plain;
    all.extend(ranked);
    all.sort_by_key(|(rank, row)| (*rank, row.0));
    all.into_iter().take(n).map(|(_, row)| row).collect()
}

/// Slots of job `?1` with room and a due run, in due order.
pub(super) const FREE_SLOTS: &str = "SELECT slot, cap - running, thr_interval, thr_tolerance, tat \
     FROM flow_slots INDEXED BY flow_slots_free \
     WHERE job_id = ?1 AND next_due IS NOT NULL AND running < cap AND next_due <= ?2 \
     ORDER BY next_due";

/// Claims up to `limit` due runs of limited job `job` inside the caller's write: from each slot
/// with room (in due order) at most its room, and in all at most the second slot's room. The
/// claim counts the runs it takes in their slots (`0027_flow_take_counted.sql`; the triggers of
/// `0020` count every later change of their state); each slot read gets its exact next due time.
///
/// Per slot, while no run with slots has a priority (the usual case): one read of its queue in
/// due order, stopped at its room or at the first run not yet due (the next due time), and one
/// update of the slot; then one update of the runs taken and one of their second slots. With
/// such runs, their queue is read beside it and the next due time looked up.
pub(super) fn claim_flow(
    conn: &Connection,
    job: &str,
    flow: &FlowGroup,
    limit: usize,
    p: &ClaimParams,
    token: i64,
) -> Result<Vec<ClaimRow>> {
    let paused: bool = conn
        .prepare_cached("SELECT paused FROM jobs WHERE id = ?1")?
        .query_row([job], |r| r.get(0))
        .optional()?
        .unwrap_or(false);
    if paused {
        return Ok(Vec::new());
    }
    let mut budget = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut room_b = budget;
    if let Some(b) = &flow.second_slot {
        let room: Option<i64> = conn
            .prepare_cached("SELECT cap - running FROM flow_slots WHERE slot = ?1")?
            .query_row([b], |r| r.get(0))
            .optional()?;
        room_b = room.unwrap_or(0);
        if room_b <= 0 {
            return Ok(Vec::new());
        }
    }
    type Free = (String, i64, Option<f64>, Option<f64>, Option<f64>);
    let slots: Vec<Free> = conn
        .prepare_cached(FREE_SLOTS)?
        .query_map(params![job, p.now], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?
        .take(limit)
        .collect::<rusqlite::Result<_>>()?;
    let any_ranked: bool = conn
        .prepare_cached(ANY_SLOT_RANKED)?
        .query_row([], |r| r.get(0))?;
    let mut claimed = Vec::new();
    for (slot, room, interval, tolerance, tat) in slots {
        let mut n = room.min(budget).min(room_b);
        let now = p.now as f64;
        if let (Some(interval), Some(tolerance)) = (interval, tolerance) {
            n = admit(tat, now, interval, tolerance, n).0;
        }
        let n = usize::try_from(n).unwrap_or(0);
        let (plain, next_plain) = slot_runs(conn, &slot, p.now, n)?;
        let rows = if any_ranked {
            let ranked = ranked_rows(conn, SLOT_RANKED, params![slot, p.now], n)?;
            lowest_ranks(plain, ranked, n)
        } else {
            lowest_ranks(plain, Vec::new(), n)
        };
        let taken = i64::try_from(rows.len()).unwrap_or(i64::MAX);
        budget -= taken;
        room_b -= taken;
        claimed.extend(rows);
        // The throttle's next start: the slot is due again no earlier than that.
        let (tat, not_before) = match (interval, tolerance) {
            (Some(interval), Some(tolerance)) => {
                let tat = admit(tat, now, interval, tolerance, taken).1;
                (Some(tat), Some((tat - tolerance).ceil() as i64))
            }
            _ => (tat, None),
        };
        let due: Option<i64> = if any_ranked {
            conn.prepare_cached(SLOT_NEXT_DUE)?
                .query_row([&slot], |r| r.get(0))?
        } else {
            next_plain
        };
        // The runs taken count in this slot (their first): see `0027_flow_take_counted.sql`.
        conn.prepare_cached(
            "UPDATE flow_slots SET tat = ?2, next_due = max(?3, coalesce(?4, 0)), running = running + ?5 \
             WHERE slot = ?1",
        )?
        .execute(params![slot, tat, due, not_before, taken])?;
        if budget <= 0 || room_b <= 0 {
            break;
        }
    }
    take_runs(conn, &claimed, p, token)?;
    count_second_slots(conn, &claimed)?;
    Ok(claimed)
}

/// Counts the runs `rows` just taken in their second slots (each run's own, which an older
/// definition may have named differently), one statement per claim.
fn count_second_slots(conn: &Connection, rows: &[ClaimRow]) -> Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let seqs = serde_json::to_string(&rows.iter().map(|r| r.0).collect::<Vec<_>>())
        .map_err(|e| Error::Corrupt(e.to_string()))?;
    conn.prepare_cached(
        "UPDATE flow_slots SET running = running + c.n \
         FROM (SELECT slot_b AS s, count(*) AS n FROM runs \
               WHERE seq IN (SELECT value FROM json_each(?1)) AND slot_b IS NOT NULL GROUP BY slot_b) AS c \
         WHERE flow_slots.slot = c.s",
    )?
    .execute([seqs])?;
    Ok(())
}

/// Leases the claimed runs `rows` to the claim (`token`), in one statement: an `UPDATE` of
/// `runs` fires its triggers and so opens a statement journal, whose opening and release cost
/// more than the row's own write once the transaction has dirtied many pages (a keyed claim's
/// slots are spread over the table), so one per claim rather than one per run.
pub(super) fn take_runs(
    conn: &Connection,
    rows: &[ClaimRow],
    p: &ClaimParams,
    token: i64,
) -> Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let seqs = serde_json::to_string(&rows.iter().map(|r| r.0).collect::<Vec<_>>())
        .map_err(|e| Error::Corrupt(e.to_string()))?;
    conn.prepare_cached(
        "UPDATE runs SET status = 'running', attempt = attempt + 1, started_at = ?2, lease_until = ?3, lease_token = ?4, node = ?5 \
         WHERE seq IN (SELECT value FROM json_each(?1))",
    )?
    .execute(params![seqs, p.now, p.lease_until, token, p.node])?;
    Ok(())
}

/// What holds queued run `run` back, from its slots (see `crate::store::runs::waiting_for`).
pub(super) fn waiting_for(conn: &Connection, run: &crate::model::Run) -> Result<Option<String>> {
    if run.status != crate::model::RunStatus::Queued {
        return Ok(None);
    }
    let slots: Option<(Option<String>, Option<String>)> = conn
        .prepare_cached("SELECT slot_a, slot_b FROM runs WHERE id = ?1")?
        .query_row([&run.id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let Some((Some(a), b)) = slots else {
        return Ok(None);
    };
    let state = |slot: &str| -> Result<Option<SlotState>> {
        Ok(conn
            .prepare_cached(
                "SELECT cap, running, tat - thr_tolerance FROM flow_slots WHERE slot = ?1",
            )?
            .query_row([slot], |r| {
                Ok(SlotState {
                    slot: slot.to_string(),
                    cap: r.get(0)?,
                    running: r.get(1)?,
                    next_start: r.get::<_, Option<f64>>(2)?.map(|t| t.ceil() as i64),
                })
            })
            .optional()?)
    };
    let a = state(&a)?;
    let b = b.map(|b| state(&b)).transpose()?.flatten();
    Ok(crate::store::runs::waiting_for(run, a.as_ref(), b.as_ref()))
}

/// The earliest due time among the slots of `jobs` (a JSON array) with room, if any.
pub(super) fn next_due(conn: &Connection, jobs: &str) -> Result<Option<i64>> {
    Ok(conn
        .prepare_cached(
            "SELECT min(next_due) FROM flow_slots INDEXED BY flow_slots_free \
             WHERE job_id IN (SELECT value FROM json_each(?1)) AND next_due IS NOT NULL AND running < cap",
        )?
        .query_row([jobs], |r| r.get(0))?)
}

/// Queues one run of `job` for `event`, with the flow control its job sets (concurrency slots,
/// rate limit, start timeout, priority); `None` when the rate limit skips it. For a fan-out and for an
/// invoked child alike.
pub(super) fn run_insert(
    conn: &rusqlite::Connection,
    job: &crate::model::JobSpec,
    event: &EventFields<'_>,
    now: i64,
) -> Result<Option<String>> {
    run_insert_due(conn, job, event, now, now)
}

/// The invoke step of which a run is the child: its caller, the step's key, the caller's attempt
/// that invoked it and the step's timeout (see `0053_children_as_steps.sql`).
pub(super) struct Awaited<'a> {
    pub caller: &'a str,
    pub key: &'a str,
    pub attempt: u32,
    pub until: i64,
}

/// [`run_insert`] of a run that its caller waits for (an invoke step's child): the run holds
/// the step (`awaited_by`, `awaited_key`, …; see `0053_children_as_steps.sql`).
pub(super) fn run_insert_awaited(
    conn: &rusqlite::Connection,
    job: &crate::model::JobSpec,
    event: &EventFields<'_>,
    now: i64,
    awaited: &Awaited<'_>,
) -> Result<Option<String>> {
    run_insert_with(conn, job, event, now, now, Some(awaited))
}

/// [`run_insert`] of a run created at `now` and due at `due` (a debounced one).
pub(super) fn run_insert_due(
    conn: &rusqlite::Connection,
    job: &crate::model::JobSpec,
    event: &EventFields<'_>,
    now: i64,
    due: i64,
) -> Result<Option<String>> {
    run_insert_with(conn, job, event, now, due, None)
}

/// [`run_insert_due`] of a run that its caller waits for, if any.
fn run_insert_with(
    conn: &rusqlite::Connection,
    job: &crate::model::JobSpec,
    event: &EventFields<'_>,
    now: i64,
    due: i64,
    awaited: Option<&Awaited<'_>>,
) -> Result<Option<String>> {
    if let Some(rate) = &job.rate_limit {
        if !rate_take(conn, rate, &job.id, event, now)? {
            return Ok(None);
        }
    }
    let id = new_run_id();
    let slots = job.run_slots(event);
    conn.prepare_cached(
        "INSERT INTO runs (id, event_id, job_id, job_version, status, attempt, max_attempts, run_at, created_at, slot_a, slot_b, expires_at, priority_ms, \
           awaited_by, awaited_key, awaited_attempt, awaited_until) \
         VALUES (?1, ?2, ?3, ?4, 'queued', 0, ?5, ?6, ?10, ?7, ?8, ?9, ?11, ?12, ?13, ?14, ?15)",
    )?
    .execute(params![
        id,
        event.id,
        job.id,
        job.version,
        job.retry.max_attempts,
        due,
        slots.as_ref().map(|s| s.a.as_str()),
        slots
            .as_ref()
            .and_then(|s| s.b.as_ref())
            .map(|b| b.0.as_str()),
        job.start_timeout
            .map(|t| due.saturating_add(i64::try_from(t.as_millis()).unwrap_or(i64::MAX))),
        now,
        job.priority.as_ref().and_then(|p| p.offset_ms(event)),
        awaited.map(|a| a.caller),
        awaited.map(|a| a.key),
        awaited.map(|a| a.attempt),
        awaited.map(|a| a.until),
    ])?;
    if let Some(s) = &slots {
        flow_slots_put(conn, s, &job.id, due)?;
    }
    super::cancel_on::arm(conn, job, &id, event, now)?;
    Ok(Some(id))
}

/// Whether `event` may create a run of `job` under its rate limit at `now`: records the
/// creation in `flow_rates`, or the skip in `event_skips` (see `0021_flow_rate_limit.sql`).
fn rate_take(
    conn: &rusqlite::Connection,
    rate: &RateLimit,
    job: &str,
    event: &EventFields<'_>,
    now: i64,
) -> Result<bool> {
    let key = rate.key_of(event);
    let hits: Vec<i64> = conn
        .prepare_cached("SELECT hits FROM flow_rates WHERE job_id = ?1 AND key = ?2")?
        .query_row(params![job, key], |r| r.get::<_, String>(0))
        .optional()?
        .map(|t| serde_json::from_str(&t).map_err(|e| Error::Corrupt(e.to_string())))
        .transpose()?
        .unwrap_or_default();
    let (allowed, kept) = rate.take(&hits, now);
    let kept = serde_json::to_string(&kept).map_err(|e| Error::Corrupt(e.to_string()))?;
    conn.prepare_cached(
        "INSERT INTO flow_rates (job_id, key, hits) VALUES (?1, ?2, ?3) \
         ON CONFLICT (job_id, key) DO UPDATE SET hits = excluded.hits",
    )?
    .execute(params![job, key, kept])?;
    if !allowed {
        conn.prepare_cached(
            "INSERT INTO event_skips (event_id, job_id, reason) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
        )?
        .execute(params![event.id, job, rate.reason(&key)])?;
    }
    Ok(allowed)
}

/// Creates or updates the slot rows of a new run due at `now` (see `0020_flow_concurrency.sql`):
/// the first slot is due at `now`, or for a throttled one when its next start is allowed.
pub(super) fn flow_slots_put(
    conn: &rusqlite::Connection,
    s: &RunSlots,
    job: &str,
    now: i64,
) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO flow_slots (slot, job_id, cap, running, next_due, thr_interval, thr_tolerance) \
         VALUES (?1, ?2, ?3, 0, ?4, ?5, ?6) \
         ON CONFLICT (slot) DO UPDATE SET cap = excluded.cap, job_id = excluded.job_id, \
           next_due = min(coalesce(next_due, max(excluded.next_due, coalesce(CAST(tat - thr_tolerance AS INTEGER) + (tat - thr_tolerance > CAST(tat - thr_tolerance AS INTEGER)), 0))), \
             max(excluded.next_due, coalesce(CAST(tat - thr_tolerance AS INTEGER) + (tat - thr_tolerance > CAST(tat - thr_tolerance AS INTEGER)), 0))), \
           thr_interval = excluded.thr_interval, thr_tolerance = excluded.thr_tolerance",
    )?
    .execute(params![
        s.a,
        job,
        s.cap_a,
        now,
        s.throttle.map(|t| t.0),
        s.throttle.map(|t| t.1)
    ])?;
    if let Some((b, cap)) = &s.b {
        let owner = b.starts_with("job:").then_some(job);
        conn.prepare_cached(
            "INSERT INTO flow_slots (slot, job_id, cap, running) VALUES (?1, ?2, ?3, 0) \
             ON CONFLICT (slot) DO UPDATE SET cap = excluded.cap WHERE cap <> excluded.cap",
        )?
        .execute(params![b, owner, cap])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use rusqlite::params_from_iter;
    use rusqlite::types::Value as SqlValue;

    use super::super::query::tests::{db, plan};

    /// The claim's statements, with arguments of the right count.
    fn claim_statements() -> [(&'static str, &'static str, Vec<SqlValue>); 5] {
        let jobs = || vec![0.into(), SqlValue::Text("[\"a\"]".into())];
        let slot = || vec![SqlValue::Text("key:a:1".into()), 0.into()];
        [
            (super::super::runs::CLAIM_SELECT, "runs_runnable", jobs()),
            (super::super::runs::CLAIM_RANKED, "runs_ranked", jobs()),
            (super::SLOT_RUNS, "runs_slot_queue", slot()),
            (super::SLOT_RANKED, "runs_slot_ranked", slot()),
            (
                super::FREE_SLOTS,
                "flow_slots_free",
                vec![SqlValue::Text("a".into()), 0.into()],
            ),
        ]
    }

    #[test]
    fn the_claim_walks_the_queue_indexes_in_due_and_rank_order() {
        let (_dir, conn) = db();
        for (sql, index, args) in claim_statements() {
            let p = plan(&conn, sql, &args);
            assert!(p.contains(index), "{p}");
            assert!(!p.contains("TEMP B-TREE"), "no sort of the queue: {p}");
        }
    }

    /// A statement whose plan reads a bound value (a `LIMIT ?n`) is parsed and planned again at
    /// every new binding; the claim runs its statements once per slot.
    #[test]
    fn the_claim_statements_are_prepared_once() {
        let (_dir, conn) = db();
        for (sql, _, args) in claim_statements() {
            let mut stmt = conn.prepare(sql).expect("prepare");
            for i in 0..3i64 {
                let mut args = args.clone();
                args[1] = SqlValue::Integer(i);
                let mut rows = stmt.query(params_from_iter(args.iter())).expect("query");
                while rows.next().expect("step").is_some() {}
            }
            let again = stmt.get_status(rusqlite::StatementStatus::RePrepare);
            assert_eq!(again, 0, "prepared again {again} times: {sql}");
        }
    }
}
