//! Group commit of event inserts: `PgStore::event_insert` hands the event to the writer tasks;
//! one takes every insert waiting (up to [`MAX_BATCH`]) and writes them with their runs and
//! per-minute counts in one `UNNEST` statement of one transaction, pipelined with `BEGIN`,
//! `NOTIFY` and `COMMIT`, then answers each caller. The insert statement is also used directly by
//! the writes that insert events in a transaction of their own (batches, webhooks, schedules,
//! delayed events delivered).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use deadpool_postgres::{GenericClient, Pool};
use tokio::sync::{mpsc, oneshot, Notify};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::cancel_on::{paths_with, PATHS_SQL};
use super::debounce::Taken;
use super::listen::CHANNEL;
use super::new_runs::NewRuns;
use super::rows::{event_from_row, rows, triggers_refresh, EVENT_SELECT};
use super::waits::{
    lookup_keys, on_events, on_events_with, padded, paths_and_waits, Delivered, KnownPaths,
    LOCK_SHARED_SQL, PATHS_AND_WAITS_SQL, PATHS_AS_WAITS_SQL,
};
use crate::log_throttle::storage_failure;
use crate::model::{EventFields, StoredEvent};
use crate::store::{Error, Inserted, NewEvent, Result, Triggers};

/// Most inserts grouped into one transaction.
pub const MAX_BATCH: usize = 2048;

/// Insert transactions in flight at once. PostgreSQL flushes the WAL of transactions that commit
/// together with one fsync, so several batches in flight cost about one flush.
pub(super) const WRITERS: usize = 4;

/// One caller's event waiting for the writer's next transaction.
pub(super) struct InsertOp {
    pub(super) event: NewEvent,
    pub(super) payload: String,
    pub(super) context: Option<String>,
    pub(super) reply: oneshot::Sender<Result<Inserted>>,
}

/// What the writer task shares with the store.
pub(super) struct Writer {
    pub(super) pool: Pool,
    pub(super) triggers: Arc<Triggers>,
    pub(super) work: Arc<Notify>,
    pub(super) read_only: Arc<AtomicBool>,
    /// The match paths of waits as the last batch of each event name read them: each batch
    /// looks the waits of its events up by these in its insert's pipeline.
    pub(super) wait_paths: KnownPaths,
}

/// Collects waiting inserts into one transaction (group commit) and answers each caller after
/// `COMMIT`. [`WRITERS`] of these share the queue: while one batch waits for its commit, the
/// next one is already being written.
pub(super) async fn writer_loop(
    writer: Arc<Writer>,
    rx: Arc<tokio::sync::Mutex<mpsc::Receiver<InsertOp>>>,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    loop {
        let n = rx.lock().await.recv_many(&mut batch, MAX_BATCH).await;
        if n == 0 {
            break;
        }
        // The slot rows of concurrency limits are locked by completions too (see
        // `0020_flow_concurrency.sql`).
        match again_on_deadlock(|| write_batch(&writer, &batch)).await {
            Ok(inserted) => {
                for (op, ins) in batch.drain(..).zip(inserted) {
                    let _ = op.reply.send(Ok(ins));
                }
            }
            Err(e) => {
                if let Some(suppressed) = storage_failure("postgres:insert") {
                    tracing::error!(error = %e, events = batch.len(), suppressed, "inserting a batch of events failed; every sender gets the error");
                }
                for op in batch.drain(..) {
                    let _ = op.reply.send(Err(e.clone()));
                }
            }
        }
    }
    tracing::debug!("PostgreSQL writer stopped");
}

/// True for PostgreSQL's `deadlock detected` (40P01): the transaction was rolled back whole.
/// (The server's code is in the message of the store's PostgreSQL error, which the backend's
/// facade defines.)
pub(super) fn is_deadlock(e: &Error) -> bool {
    matches!(e, Error::Database(cause) if cause.to_string().ends_with("(40P01)"))
}

/// Runs the transaction `write` again when PostgreSQL chose it as a deadlock's victim (it was
/// rolled back whole, so it wrote nothing): up to three more times.
pub(super) async fn again_on_deadlock<T, F, Fut>(mut write: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut written = write().await;
    for _ in 0..3 {
        if !matches!(&written, Err(e) if is_deadlock(e)) {
            break;
        }
        written = write().await;
    }
    written
}

/// Writes one batch in three round trips: the job table's revision (fan-out must know every
/// stored job); `BEGIN`, the names' locks, the insert and the match paths; `NOTIFY` and `COMMIT`.
pub(super) async fn write_batch(writer: &Writer, batch: &[InsertOp]) -> Result<Vec<Inserted>> {
    let client = writer.pool.get().await?;
    triggers_refresh(&client, &writer.triggers).await?;
    // All prepared first: one given as text is prepared when polled, after the insert is sent.
    let lock = client.prepare_cached(LOCK_SHARED_SQL).await?;
    let insert = client.prepare_cached(INSERT_EVENTS_SQL).await?;
    let notify = client.prepare_cached(NOTIFY_SQL).await?;
    let cancel_paths = client.prepare_cached(PATHS_SQL).await?;
    let paths_and_waits_st = client.prepare_cached(PATHS_AND_WAITS_SQL).await?;
    let paths_only = client.prepare_cached(PATHS_AS_WAITS_SQL).await?;
    let rows: Vec<EventRow<'_>> = batch
        .iter()
        .map(|op| EventRow {
            event: &op.event,
            payload: &op.payload,
            context: op.context.as_deref(),
        })
        .collect();
    let prepared = PreparedEvents::new(&writer.triggers, &rows);
    let begin = if writer.read_only.load(Ordering::SeqCst) {
        "BEGIN READ ONLY"
    } else {
        "BEGIN"
    };
    let params = prepared.params();
    let names = prepared.names();
    let lock_params: [&(dyn ToSql + Sync); 1] = [&names];
    // The waits of the events by the paths read last time (a superset of the keys of what the
    // insert will deliver: duplicates included), looked up in the same pipeline.
    let guessed = writer.wait_paths.guess(&names);
    let may_deliver = if guessed.is_empty() {
        Vec::new()
    } else {
        prepared.may_deliver()
    };
    let guess = lookup_keys(&may_deliver, &guessed).joined();
    // Sent in this order on the first poll; answers come back in order. The names' shared locks
    // come before the insert, for waits for events (see `waits.rs`); the match paths of cancel-on
    // keys and waits after them, so that events no key or wait can match cost no round trip. The
    // guessed waits come in the same statement as the latter's.
    let looking = !guess.is_empty();
    let guess = padded(guess);
    let waits_params: [&(dyn ToSql + Sync); 2] = [&names, &guess];
    let (waits, waits_params) = if looking {
        (&paths_and_waits_st, &waits_params[..])
    } else {
        (&paths_only, &waits_params[..1])
    };
    let (began, locked, inserted, paths, waiting) = futures::join!(
        client.batch_execute(begin),
        client.query(&lock, &lock_params),
        client.query(&insert, &params),
        client.query(&cancel_paths, &lock_params),
        client.query(waits, waits_params),
    );
    // Then the runs the new events cancel, and the waits they resume, in the same transaction.
    let looked = async {
        let inserted = began.and(locked).and(inserted)?;
        let paths = paths_with(&paths?, &prepared.runs.cancel_keys)?;
        let (waiting, found) = paths_and_waits(waiting?)?;
        // The rows found are every wait's if no path was missing from the guess.
        let found = writer
            .wait_paths
            .read(&names, &guessed, &waiting)
            .then_some(found);
        let (mut created, existing) = prepared.created(&inserted)?;
        created.debounced = prepared.debounce(&client, &created).await?;
        super::cancel_on::arm(&client, &prepared.runs.cancel_keys).await?;
        let delivered = prepared.delivered(&created.events);
        let positions = prepared.armed_positions(&delivered);
        let follow =
            super::cancel::cancel_delivered(&client, Some(paths), &delivered, &positions).await?;
        let resumed = on_events_with(&client, &delivered, &waiting, found).await?;
        let woken = insert_follow_ups(&client, &writer.triggers, follow).await?;
        Ok::<_, Error>((created, existing, resumed > 0 || woken))
    }
    .await;
    let (created, existing, resumed) = match looked {
        Ok(done) => done,
        Err(e) => {
            let _ = client.batch_execute("ROLLBACK").await;
            return Err(e);
        }
    };
    let wake = prepared.wake || resumed;
    // A failed statement aborts the transaction, and the COMMIT after it then rolls back.
    let (notified, committed) = futures::join!(
        async {
            if wake {
                client.execute(&notify, &[&CHANNEL]).await.map(|_| ())
            } else {
                Ok(())
            }
        },
        client.batch_execute("COMMIT"),
    );
    notified?;
    committed?;
    let stored = events_by_ids(&client, &existing).await?;
    let result = prepared.finish(&created, &stored)?;
    if wake {
        writer.work.notify_one();
    }
    Ok(result)
}

/// Inserts a batch of events and, in the same statement, the runs of those that were new, their
/// queue rows and their per-minute counts (`event_counts`, `0015_event_counts.sql`). Rows go in
/// id order: two transactions inserting overlapping ids (writers in flight at once, several
/// nodes) then wait for each other in one order instead of deadlocking on the unique index.
/// Creates or updates the `flow_slots` rows of new runs (the arrays slot, job, capacity, due),
/// in slot order so concurrent writers lock them in one order: the definition's capacity, the
/// earliest due time of the job's own slot (see `0020_flow_concurrency.sql`).
macro_rules! flow_slots_sql {
    ($slot:literal, $job:literal, $cap:literal, $due:literal, $interval:literal, $tolerance:literal) => {
        concat!(
            "INSERT INTO flow_slots (slot, job_id, cap, next_due, thr_interval, thr_tolerance) \
             SELECT slot, max(job), max(cap), min(due), max(thr_i), max(thr_t) FROM unnest(",
            $slot,
            "::text[], ",
            $job,
            "::text[], ",
            $cap,
            "::int4[], ",
            $due,
            "::int8[], ",
            $interval,
            "::float8[], ",
            $tolerance,
            "::float8[]) AS s(slot, job, cap, due, thr_i, thr_t) GROUP BY slot ORDER BY slot \
             ON CONFLICT (slot) DO UPDATE SET cap = excluded.cap, \
               job_id = coalesce(excluded.job_id, flow_slots.job_id), \
               next_due = LEAST(flow_slots.next_due, \
                 GREATEST(excluded.next_due, ceil(flow_slots.tat - flow_slots.thr_tolerance)::int8)), \
               thr_interval = coalesce(excluded.thr_interval, flow_slots.thr_interval), \
               thr_tolerance = coalesce(excluded.thr_tolerance, flow_slots.thr_tolerance)"
        )
    };
}

/// The condition under which a run `u` of a new event is created: its event was inserted (not
/// a duplicate) and, for a job with a rate limit, `flow_rate_take` allows it (it records the
/// creation, or the skip). `CASE` keeps that order: a duplicate event takes nothing.
macro_rules! rate_taken {
    () => {
        "CASE WHEN u.event_id IN (SELECT id FROM ev) THEN (u.rate_key IS NULL OR \
           flow_rate_take(u.event_id, u.job_id, u.rate_key, u.rate_limit, u.rate_period, u.at, u.rate_reason)) \
         ELSE false END"
    };
}

pub(super) const INSERT_EVENTS_SQL: &str = concat!("WITH ev AS ( \
       INSERT INTO events (id, name, payload, context, source, parent_run_id, timestamp, deliver_at, delivered_at) \
       SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], \
                            $7::int8[], $8::int8[], $9::int8[]) \
         AS u(id, name, payload, context, source, parent_run_id, ts, deliver_at, delivered_at) \
       ORDER BY u.id \
       ON CONFLICT (id) DO NOTHING RETURNING id, timestamp), \
     c AS ( \
       INSERT INTO event_counts (minute, shard, n) \
       SELECT timestamp / 60000, pg_backend_pid() % 16, count(*) FROM ev GROUP BY 1 ORDER BY 1 \
       ON CONFLICT (minute, shard) DO UPDATE SET n = event_counts.n + excluded.n), \
     r AS ( \
       INSERT INTO runs (id, event_id, job_id, job_version, status, attempt, max_attempts, run_at, created_at, slot_a, slot_b, priority_ms) \
       SELECT u.id, u.event_id, u.job_id, u.job_version, 'queued', 0, u.max_attempts, u.at, u.at, u.slot_a, u.slot_b, u.priority_ms \
       FROM unnest($10::text[], $11::text[], $12::text[], $13::text[], $14::int4[], $15::int8[], $16::text[], $17::text[], \
                   $22::text[], $23::int4[], $24::int8[], $25::text[], $29::int8[], $30::int8[]) \
            WITH ORDINALITY AS u(id, event_id, job_id, job_version, max_attempts, at, slot_a, slot_b, \
                                 rate_key, rate_limit, rate_period, rate_reason, expires_at, priority_ms, ord) \
       WHERE ", rate_taken!(), " ORDER BY u.ord \
       RETURNING id, seq, job_id, run_at, slot_a, slot_b, event_id, priority_ms), \
     q AS (INSERT INTO run_queue (seq, job_id, run_at, slot_a, slot_b, expires_at, priority_ms) \
       SELECT r.seq, r.job_id, r.run_at, r.slot_a, r.slot_b, u.expires_at, r.priority_ms FROM r \
       JOIN unnest($10::text[], $29::int8[]) AS u(id, expires_at) ON u.id = r.id), \
     s AS (", flow_slots_sql!("$18", "$19", "$20", "$21", "$27", "$28"), ") \
     SELECT id, true FROM ev UNION ALL SELECT id, false FROM r WHERE job_id = ANY($26::text[])");

/// Inserts runs (scheduled events being delivered), their queue rows and their slots' rows.
pub(super) const INSERT_RUNS_SQL: &str = concat!("WITH r AS ( \
       INSERT INTO runs (id, event_id, job_id, job_version, status, attempt, max_attempts, run_at, created_at, slot_a, slot_b, priority_ms) \
       SELECT u.id, u.event_id, u.job_id, u.job_version, 'queued', 0, u.max_attempts, u.at, u.at, u.slot_a, u.slot_b, u.priority_ms \
       FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int4[], $6::int8[], $7::text[], $8::text[], \
                   $13::text[], $14::int4[], $15::int8[], $16::text[], $19::int8[], $20::int8[]) \
            WITH ORDINALITY AS u(id, event_id, job_id, job_version, max_attempts, at, slot_a, slot_b, \
                                 rate_key, rate_limit, rate_period, rate_reason, expires_at, priority_ms, ord) \
       WHERE u.rate_key IS NULL OR \
         flow_rate_take(u.event_id, u.job_id, u.rate_key, u.rate_limit, u.rate_period, u.at, u.rate_reason) \
       ORDER BY u.ord \
       RETURNING id, seq, job_id, run_at, slot_a, slot_b, priority_ms), \
     q AS (INSERT INTO run_queue (seq, job_id, run_at, slot_a, slot_b, expires_at, priority_ms) \
       SELECT r.seq, r.job_id, r.run_at, r.slot_a, r.slot_b, u.expires_at, r.priority_ms FROM r \
       JOIN unnest($1::text[], $19::int8[]) AS u(id, expires_at) ON u.id = r.id) \
     ", flow_slots_sql!("$9", "$10", "$11", "$12", "$17", "$18"));

/// One event to insert, with its JSON already serialized.
pub(super) struct EventRow<'a> {
    pub(super) event: &'a NewEvent,
    pub(super) payload: &'a str,
    pub(super) context: Option<&'a str>,
}

/// What an insert created: events, runs of rate-limited jobs, and what the runs of debounced
/// jobs became.
#[derive(Default)]
pub(super) struct Created {
    events: HashSet<String>,
    rated_runs: HashSet<String>,
    debounced: Taken,
}

/// A batch of events ready to insert: the columns of the new ones (the first of each id) and of
/// the runs of the immediate ones, as arrays for [`INSERT_EVENTS_SQL`].
pub(super) struct PreparedEvents<'a> {
    batch: &'a [EventRow<'a>],
    ids: Vec<&'a str>,
    names: Vec<&'a str>,
    payloads: Vec<&'a str>,
    contexts: Vec<Option<&'a str>>,
    sources: Vec<&'a str>,
    parents: Vec<Option<&'a str>>,
    stamps: Vec<i64>,
    deliver: Vec<Option<i64>>,
    delivered: Vec<Option<i64>>,
    runs: NewRuns,
    run_ids: Vec<Vec<String>>,
    candidate: Vec<bool>,
    /// True when inserting would make work runnable or scheduled (workers should be woken).
    pub(super) wake: bool,
}

impl<'a> PreparedEvents<'a> {
    /// Fans each new event out to the jobs in `triggers` and lays the rows out as arrays.
    pub(super) fn new(triggers: &Triggers, batch: &'a [EventRow<'a>]) -> Self {
        let n = batch.len();
        let mut p = PreparedEvents {
            batch,
            ids: Vec::with_capacity(n),
            names: Vec::with_capacity(n),
            payloads: Vec::with_capacity(n),
            contexts: Vec::with_capacity(n),
            sources: Vec::with_capacity(n),
            parents: Vec::with_capacity(n),
            stamps: Vec::with_capacity(n),
            deliver: Vec::with_capacity(n),
            delivered: Vec::with_capacity(n),
            runs: NewRuns::default(),
            run_ids: vec![Vec::new(); n],
            candidate: vec![false; n],
            wake: false,
        };
        let mut first = HashSet::with_capacity(n);
        for (i, row) in batch.iter().enumerate() {
            let ev = row.event;
            if !first.insert(ev.id.as_str()) {
                continue;
            }
            p.candidate[i] = true;
            let immediate = ev.deliver_at.is_none_or(|t| t <= ev.now);
            p.ids.push(ev.id.as_str());
            p.names.push(ev.name.as_str());
            p.payloads.push(row.payload);
            p.contexts.push(row.context);
            p.sources.push(ev.source.as_str());
            p.parents.push(ev.parent_run_id.as_deref());
            p.stamps.push(ev.now);
            p.deliver.push(ev.deliver_at);
            p.delivered.push(immediate.then_some(ev.now));
            if immediate {
                let fields = EventFields {
                    id: &ev.id,
                    name: &ev.name,
                    payload: &ev.payload,
                    context: ev.context.as_ref(),
                    source: &ev.source,
                };
                p.run_ids[i] = p.runs.fan_out(triggers, &fields, ev.now);
                p.wake |= !p.run_ids[i].is_empty();
            } else {
                p.wake = true;
            }
        }
        p
    }

    /// The parameters of [`INSERT_EVENTS_SQL`].
    pub(super) fn params(&self) -> [&(dyn ToSql + Sync); 30] {
        [
            &self.ids,
            &self.names,
            &self.payloads,
            &self.contexts,
            &self.sources,
            &self.parents,
            &self.stamps,
            &self.deliver,
            &self.delivered,
            &self.runs.ids,
            &self.runs.event_ids,
            &self.runs.job_ids,
            &self.runs.versions,
            &self.runs.max_attempts,
            &self.runs.at,
            &self.runs.slot_a,
            &self.runs.slot_b,
            &self.runs.slots.slot,
            &self.runs.slots.job,
            &self.runs.slots.cap,
            &self.runs.slots.due,
            &self.runs.rate_key,
            &self.runs.rate_limit,
            &self.runs.rate_period,
            &self.runs.rate_reason,
            &self.runs.rated_jobs,
            &self.runs.slots.thr_interval,
            &self.runs.slots.thr_tolerance,
            &self.runs.expires,
            &self.runs.priority,
        ]
    }

    /// The names of the events to insert (for their locks, `LOCK_SHARED_SQL`).
    pub(super) fn names(&self) -> Vec<&'a str> {
        self.names.clone()
    }

    /// The new events delivered at once (not scheduled), for the waits they resume.
    pub(super) fn delivered(&self, created: &HashSet<String>) -> Vec<Delivered<'a>> {
        self.delivered_if(|id| created.contains(id))
    }

    /// The events [`Self::delivered`] may answer before the insert has: those not scheduled,
    /// whether or not their ids were new.
    pub(super) fn may_deliver(&self) -> Vec<Delivered<'a>> {
        self.delivered_if(|_| true)
    }

    fn delivered_if(&self, created: impl Fn(&str) -> bool) -> Vec<Delivered<'a>> {
        self.batch
            .iter()
            .enumerate()
            .filter(|(i, row)| {
                self.candidate[*i]
                    && created(&row.event.id)
                    && row.event.deliver_at.is_none_or(|t| t <= row.event.now)
            })
            .map(|(_, row)| Delivered {
                id: &row.event.id,
                name: &row.event.name,
                payload: &row.event.payload,
                at: row.event.now,
                now: row.event.now,
            })
            .collect()
    }

    /// The armed runs (a job's `cancel_on`) of this batch, each with the index in `delivered`
    /// of the event that started it (see `cancel_on::matched`).
    pub(super) fn armed_positions(&self, delivered: &[Delivered<'_>]) -> HashMap<String, usize> {
        let started = (self.batch.iter().zip(&self.run_ids).zip(&self.candidate))
            .filter(|(_, first)| **first)
            .map(|((row, runs), _)| (row.event.id.as_str(), runs.as_slice()));
        super::cancel_on::positions(&self.runs.cancel_keys, delivered, started)
    }

    /// What the insert created, from its rows (event ids, and the runs of rate-limited jobs),
    /// and the event ids that existed before (to look up).
    pub(super) fn created(&self, rows: &[Row]) -> Result<(Created, Vec<String>)> {
        let mut created = Created::default();
        for r in rows {
            let id: String = r.try_get(0)?;
            if r.try_get::<_, bool>(1)? {
                created.events.insert(id);
            } else {
                created.rated_runs.insert(id);
            }
        }
        let existing = self
            .batch
            .iter()
            .enumerate()
            .filter(|(i, row)| !(self.candidate[*i] && created.events.contains(&row.event.id)))
            .map(|(_, row)| row.event.id.clone())
            .collect();
        Ok((created, existing))
    }

    /// Takes the runs of debounced jobs of the new events (see `debounce.rs`).
    async fn debounce<C: GenericClient>(&self, c: &C, created: &Created) -> Result<Taken> {
        if self.runs.debounced.is_empty() {
            return Ok(Taken::new());
        }
        self.runs.debounced.take(c, Some(&created.events)).await
    }

    /// What each row did: the new events as inserted, the others as `stored` holds them.
    pub(super) fn finish(
        self,
        created: &Created,
        stored: &HashMap<String, StoredEvent>,
    ) -> Result<Vec<Inserted>> {
        let t = crate::model::ms_to_time;
        let mut run_ids = self.run_ids;
        // Runs over their job's rate limit were not created.
        if !self.runs.rated_runs.is_empty() {
            for ids in &mut run_ids {
                ids.retain(|id| {
                    !self.runs.rated_runs.contains(id) || created.rated_runs.contains(id)
                });
            }
        }
        // A debounced run is the window's run it was folded into, or none.
        if !created.debounced.is_empty() {
            for ids in &mut run_ids {
                *ids = std::mem::take(ids)
                    .into_iter()
                    .filter_map(|id| created.debounced.get(&id).cloned().unwrap_or(Some(id)))
                    .collect();
            }
        }
        let created = &created.events;
        self.batch
            .iter()
            .enumerate()
            .map(|(i, row)| {
                let ev = row.event;
                if self.candidate[i] && created.contains(&ev.id) {
                    let immediate = ev.deliver_at.is_none_or(|at| at <= ev.now);
                    return Ok(Inserted {
                        event: StoredEvent {
                            id: ev.id.clone(),
                            name: ev.name.clone(),
                            payload: ev.payload.clone(),
                            context: ev.context.clone(),
                            source: ev.source.clone(),
                            timestamp: t(ev.now),
                            deliver_at: ev.deliver_at.map(t),
                            delivered_at: immediate.then(|| t(ev.now)),
                            cancelled_at: None,
                            parent_run_id: ev.parent_run_id.clone(),
                            run_ids: std::mem::take(&mut run_ids[i]),
                        },
                        created: true,
                    });
                }
                stored
                    .get(&ev.id)
                    .cloned()
                    .map(|event| Inserted {
                        event,
                        created: false,
                    })
                    .ok_or_else(|| Error::NotFound {
                        what: "event",
                        id: ev.id.clone(),
                    })
            })
            .collect()
    }
}

/// Reads stored events by id.
pub(super) async fn events_by_ids<C: GenericClient>(
    c: &C,
    ids: &[String],
) -> Result<HashMap<String, StoredEvent>> {
    let mut stored = HashMap::new();
    if ids.is_empty() {
        return Ok(stored);
    }
    for r in rows(
        c,
        &format!("SELECT {EVENT_SELECT} FROM events WHERE id = ANY($1)"),
        &[&ids],
    )
    .await?
    {
        let e = event_from_row(&r)?;
        stored.insert(e.id.clone(), e);
    }
    Ok(stored)
}

/// Inserts events (the first of each id; an existing id is left as stored) and the runs of the
/// new immediate ones, in the caller's transaction, with what they lead to: the runs they cancel
/// (and those runs' `flare/run.cancelled`), the waits they resume. Returns what each row did,
/// and whether workers should be woken (a `NOTIFY` is then queued in the transaction).
pub(super) async fn insert_events<C: GenericClient>(
    c: &C,
    triggers: &Triggers,
    batch: &[EventRow<'_>],
) -> Result<(Vec<Inserted>, bool)> {
    let (inserted, wake, follow) = insert_once(c, triggers, batch).await?;
    let woken = insert_follow_ups(c, triggers, follow).await?;
    Ok((inserted, wake || woken))
}

/// [`insert_events`] without inserting the `flare/run.cancelled` of the runs the events
/// cancelled: those are returned, to insert next.
async fn insert_once<C: GenericClient>(
    c: &C,
    triggers: &Triggers,
    batch: &[EventRow<'_>],
) -> Result<(Vec<Inserted>, bool, Vec<NewEvent>)> {
    let prepared = PreparedEvents::new(triggers, batch);
    rows(c, LOCK_SHARED_SQL, &[&prepared.names()]).await?;
    let inserted = rows(c, INSERT_EVENTS_SQL, &prepared.params()).await?;
    let (mut created, existing) = prepared.created(&inserted)?;
    created.debounced = prepared.debounce(c, &created).await?;
    super::cancel_on::arm(c, &prepared.runs.cancel_keys).await?;
    let delivered = prepared.delivered(&created.events);
    let positions = prepared.armed_positions(&delivered);
    let follow = super::cancel::cancel_delivered(c, None, &delivered, &positions).await?;
    let resumed = on_events(c, &delivered).await?;
    let stored = events_by_ids(c, &existing).await?;
    let wake = prepared.wake || resumed > 0;
    Ok((prepared.finish(&created, &stored)?, wake, follow))
}

/// Inserts Flare's own `events` in the caller's transaction, then the events their inserts
/// lead to (runs cancelled on them), until none is left; whether workers should be woken.
pub(super) async fn insert_follow_ups<C: GenericClient>(
    c: &C,
    triggers: &Triggers,
    mut events: Vec<NewEvent>,
) -> Result<bool> {
    let mut wake = false;
    while !events.is_empty() {
        let texts: Vec<(String, Option<String>)> = events.iter().map(NewEvent::texts).collect();
        let batch: Vec<EventRow<'_>> = events
            .iter()
            .zip(&texts)
            .map(|(event, (payload, context))| EventRow {
                event,
                payload,
                context: context.as_deref(),
            })
            .collect();
        let (_, woken, more) = insert_once(c, triggers, &batch).await?;
        wake |= woken;
        drop(batch);
        events = more;
    }
    Ok(wake)
}

/// Sends the events of the runs `ended` (id, error), just made failed or `cancelled`, in the
/// caller's transaction (the triggers refreshed). Returns whether workers should be woken.
pub(super) async fn send_ended<C: GenericClient>(
    c: &C,
    triggers: &Triggers,
    ended: &[(String, Option<String>)],
    cancelled: bool,
    now: i64,
) -> Result<bool> {
    let events = super::ended::ended_events(c, ended, cancelled, now).await?;
    insert_follow_ups(c, triggers, events).await
}

/// The wake-up hint for other processes (`$1` = [`CHANNEL`]).
pub(super) const NOTIFY_SQL: &str = "SELECT pg_notify($1, '')";
