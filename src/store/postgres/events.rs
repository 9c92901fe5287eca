//! Events on PostgreSQL: the insert (through the writer's group commit), inserting a batch in one
//! transaction, cancelling a scheduled event, delivering due ones, pruning finished ones with
//! their runs, and reading an event with its runs and children.

use deadpool_postgres::GenericClient;
use tokio::sync::oneshot;

use super::new_runs::NewRuns;
use super::rows::{
    event_from_row, exec, json_text, rows, run_from_row, triggers_refresh, EVENT_SELECT,
    RUN_COLUMNS,
};
use super::writer::{insert_events, insert_follow_ups, EventRow, InsertOp, INSERT_RUNS_SQL};
use super::PgStore;
use crate::model::{EventFields, StoredEvent};
use crate::store::{Error, EventDetail, Inserted, NewEvent, Result};

impl PgStore {
    /// See [`crate::store::Store::event_insert`]: grouped with concurrent inserts into one transaction.
    pub async fn event_insert(&self, event: NewEvent) -> Result<Inserted> {
        let (payload, context) = event.texts();
        let (reply, rx) = oneshot::channel();
        let op = InsertOp {
            event,
            payload,
            context,
            reply,
        };
        self.inner
            .inserts
            .send(op)
            .await
            .map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)?
    }

    /// See [`crate::store::Store::event_insert_many`].
    pub async fn event_insert_many(&self, events: Vec<NewEvent>) -> Result<Vec<Inserted>> {
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
        let mut client = self.conn().await?;
        triggers_refresh(&client, self.triggers()).await?;
        let tx = self.begin(&mut client).await?;
        let (inserted, wake) = insert_events(&tx, self.triggers(), &batch).await?;
        tx.commit().await?;
        if wake {
            self.wake();
        }
        Ok(inserted)
    }

    /// See [`crate::store::Store::event_cancel`].
    pub async fn event_cancel(&self, id: String, now: i64) -> Result<StoredEvent> {
        let mut client = self.conn().await?;
        let tx = self.begin(&mut client).await?;
        let n = exec(
            &tx,
            "UPDATE events SET cancelled_at = $2 WHERE id = $1 AND delivered_at IS NULL AND cancelled_at IS NULL",
            &[&id, &now],
        )
        .await?;
        let event = rows(
            &tx,
            &format!("SELECT {EVENT_SELECT} FROM events WHERE id = $1"),
            &[&id],
        )
        .await?
        .first()
        .map(event_from_row)
        .transpose()?
        .ok_or_else(|| Error::NotFound {
            what: "event",
            id: id.clone(),
        })?;
        if n == 0 {
            let why = if event.cancelled_at.is_some() {
                "it was already cancelled"
            } else {
                "it was already delivered"
            };
            return Err(Error::Conflict(format!(
                "event {id:?} cannot be cancelled: {why}"
            )));
        }
        tx.commit().await?;
        Ok(event)
    }

    /// See [`crate::store::Store::events_deliver_due`]. Several nodes may call it at once: the
    /// due events are taken with `FOR UPDATE SKIP LOCKED` and marked delivered by the same
    /// statement, so each is delivered (its runs created) exactly once.
    pub async fn events_deliver_due(&self, now: i64, limit: usize) -> Result<usize> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut client = self.conn().await?;
        triggers_refresh(&client, self.triggers()).await?;
        let tx = self.begin(&mut client).await?;
        let due = rows(
            &tx,
            // The inner select locks each row in its latest version and checks the condition on
            // that version, so the rows it returns are due and nobody can deliver or cancel them
            // before this transaction ends: the update finds them by key alone. (Repeating the
            // condition there let the planner scan all of `events_due` to find the batch.)
            "UPDATE events e SET delivered_at = $1 \
             WHERE e.seq = ANY(ARRAY(SELECT seq FROM events WHERE delivered_at IS NULL AND cancelled_at IS NULL \
                 AND deliver_at <= $1 ORDER BY deliver_at LIMIT $2 FOR UPDATE SKIP LOCKED)) \
             RETURNING e.id, e.name, e.payload, e.context, e.source",
            &[&now, &limit],
        )
        .await?;
        let mut runs = NewRuns::default();
        let mut delivered = Vec::with_capacity(due.len());
        for r in &due {
            let id: String = r.try_get(0)?;
            let name: String = r.try_get(1)?;
            let payload = json_text(&r.try_get::<_, String>(2)?)?;
            let context = r
                .try_get::<_, Option<String>>(3)?
                .as_deref()
                .map(json_text)
                .transpose()?;
            let source: String = r.try_get(4)?;
            let fields = EventFields {
                id: &id,
                name: &name,
                payload: &payload,
                context: context.as_ref(),
                source: &source,
            };
            let started = runs.fan_out(self.triggers(), &fields, now);
            delivered.push((id, name, payload, started));
        }
        // Waits for these events: the names' shared locks first (see `waits.rs`).
        let names: Vec<&str> = delivered.iter().map(|d| d.1.as_str()).collect();
        if !runs.ids.is_empty() || !runs.slots.slot.is_empty() {
            exec(&tx, INSERT_RUNS_SQL, &runs.params()).await?;
        }
        runs.debounced.take(&tx, None).await?;
        super::cancel_on::arm(&tx, &runs.cancel_keys).await?;
        let resumed = if names.is_empty() {
            false
        } else {
            rows(&tx, super::waits::LOCK_SHARED_SQL, &[&names]).await?;
            let events: Vec<super::waits::Delivered<'_>> = delivered
                .iter()
                .map(|(id, name, payload, _)| super::waits::Delivered {
                    id,
                    name,
                    payload,
                    at: now,
                    now,
                })
                .collect();
            // The runs they cancel (not those they started), then the waits they resume.
            let started = super::cancel_on::positions(
                &runs.cancel_keys,
                &events,
                delivered.iter().map(|d| (d.0.as_str(), d.3.as_slice())),
            );
            let follow = super::cancel::cancel_delivered(&tx, None, &events, &started).await?;
            let resumed = super::waits::on_events(&tx, &events).await?;
            insert_follow_ups(&tx, self.triggers(), follow).await? || resumed > 0
        };
        tx.commit().await?;
        if !runs.ids.is_empty() || !runs.debounced.is_empty() || resumed {
            self.wake();
        }
        Ok(due.len())
    }

    /// See [`crate::store::Store::events_prune`]: one bounded batch, deleted in one statement.
    pub async fn events_prune(&self, before: i64, limit: usize) -> Result<usize> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut client = self.conn().await?;
        let tx = self.begin(&mut client).await?;
        // Its estimated cost (joins over the history tables) passes `jit_above_cost`, and the JIT
        // compilation took 340 ms of each 460 ms batch of 5,000 events (pg_stat_statements).
        tx.batch_execute("SET LOCAL jit = off").await?;
        let r = rows(
            &tx,
            "WITH doomed AS ( \
               SELECT e.id FROM events e WHERE e.timestamp < $1 \
                 AND (e.delivered_at IS NOT NULL OR e.cancelled_at IS NOT NULL) \
                 AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.event_id = e.id AND r.status IN ('queued', 'running')) \
               ORDER BY e.timestamp LIMIT $2 FOR UPDATE SKIP LOCKED), \
             druns AS (DELETE FROM runs r USING doomed WHERE r.event_id = doomed.id \
               RETURNING r.id, r.job_id, r.status, r.finished_at), \
             dlogs AS (DELETE FROM run_logs l USING druns WHERE l.run_id = druns.id), \
             datt AS (DELETE FROM run_attempts a USING druns WHERE a.run_id = druns.id), \
             dsteps AS (DELETE FROM run_steps s USING druns WHERE s.run_id = druns.id), \
             dwaits AS (DELETE FROM run_waits w USING druns WHERE w.run_id = druns.id), \
             dkeys AS (DELETE FROM run_cancel_keys k USING druns WHERE k.run_id = druns.id), \
             deffects AS (DELETE FROM event_effects f \
               WHERE f.run_id IN (SELECT id FROM druns) OR f.event_id IN (SELECT id FROM doomed)), \
             dout AS (UPDATE run_outcomes o SET n = o.n - d.k FROM ( \
                 SELECT finished_at / 60000 AS minute, job_id, status, count(*) AS k FROM druns \
                 WHERE finished_at IS NOT NULL GROUP BY 1, 2, 3) d \
               WHERE o.minute = d.minute AND o.job_id = d.job_id AND o.status = d.status), \
             dskips AS (DELETE FROM event_skips k USING doomed WHERE k.event_id = doomed.id), \
             dfolded AS (DELETE FROM event_debounces k USING doomed WHERE k.event_id = doomed.id), \
             dev AS (DELETE FROM events e USING doomed WHERE e.id = doomed.id RETURNING e.timestamp), \
             dcount AS (INSERT INTO event_counts (minute, shard, n) \
               SELECT timestamp / 60000, pg_backend_pid() % 16, -count(*) FROM dev GROUP BY 1 ORDER BY 1 \
               ON CONFLICT (minute, shard) DO UPDATE SET n = event_counts.n + excluded.n) \
             SELECT count(*) FROM dev",
            &[&before, &limit],
        )
        .await?;
        // Minutes whose runs are all pruned count nothing any more.
        exec(
            &tx,
            "DELETE FROM run_outcomes WHERE n <= 0 AND minute < $1::int8 / 60000",
            &[&before],
        )
        .await?;
        // Minutes whose events are all pruned: their shards add up to nothing.
        exec(
            &tx,
            "DELETE FROM event_counts WHERE minute IN ( \
               SELECT minute FROM event_counts WHERE minute < $1::int8 / 60000 \
               GROUP BY minute HAVING sum(n) = 0)",
            &[&before],
        )
        .await?;
        tx.commit().await?;
        let n: i64 = r.first().map(|r| r.try_get(0)).transpose()?.unwrap_or(0);
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// See [`crate::store::Store::event_get`].
    pub async fn event_get(&self, id: String) -> Result<Option<StoredEvent>> {
        let conn = self.conn().await?;
        let c = &conn;
        rows(
            c,
            &format!("SELECT {EVENT_SELECT} FROM events WHERE id = $1"),
            &[&id],
        )
        .await?
        .first()
        .map(event_from_row)
        .transpose()
    }

    /// See [`crate::store::Store::event_detail`].
    pub async fn event_detail(&self, id: String) -> Result<Option<EventDetail>> {
        let conn = self.conn().await?;
        let c = &conn;
        let Some(event) = rows(
            c,
            &format!("SELECT {EVENT_SELECT} FROM events WHERE id = $1"),
            &[&id],
        )
        .await?
        .first()
        .map(event_from_row)
        .transpose()?
        else {
            return Ok(None);
        };
        let runs = rows(
            c,
            &format!("SELECT {RUN_COLUMNS} FROM run_state runs WHERE event_id = $1 ORDER BY seq"),
            &[&id],
        )
        .await?
        .iter()
        .map(run_from_row)
        .collect::<Result<Vec<_>>>()?;
        let children = rows(
            c,
            &format!(
                "SELECT {EVENT_SELECT} FROM events WHERE parent_run_id IN \
                 (SELECT id FROM runs WHERE event_id = $1) ORDER BY seq"
            ),
            &[&id],
        )
        .await?
        .iter()
        .map(event_from_row)
        .collect::<Result<Vec<_>>>()?;
        let skipped = rows(
            c,
            "SELECT job_id, reason FROM event_skips WHERE event_id = $1 ORDER BY job_id",
            &[&id],
        )
        .await?
        .iter()
        .map(|r| {
            Ok(crate::store::events::Skipped {
                job_id: r.try_get(0)?,
                reason: r.try_get(1)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
        let debounced = super::debounce::folded(c, &id).await?;
        let (resumed_runs, cancelled_runs) = super::links::event_links(c, &id).await?;
        Ok(Some(EventDetail {
            event,
            runs,
            children,
            skipped,
            debounced,
            resumed_runs,
            cancelled_runs,
        }))
    }
}
