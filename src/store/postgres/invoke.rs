//! A run of one job for an event inserted without fan-out (Trigger.dev v2's `invokeJob`, which
//! has no calling run: see [`crate::store::Store::job_invoke`]). A run invoked by another run
//! (`io.invoke`) is `Store::runs_invoke`, in `children.rs`.

use super::rows::{exec, rows};
use super::PgStore;
use crate::store::events::NewEvent;
use crate::store::{Error, Result};

impl PgStore {
    /// See [`crate::store::Store::job_invoke`]: one transaction (the event without fan-out, its
    /// count, the run and its queue row).
    pub async fn job_invoke(&self, job_id: String, event: NewEvent) -> Result<Option<String>> {
        let mut client = self.conn().await?;
        super::rows::triggers_refresh(&client, self.triggers()).await?;
        let job = self.triggers().get(&job_id).ok_or(Error::NotFound {
            what: "job",
            id: job_id,
        })?;
        let (payload, context) = event.texts();
        let tx = self.begin(&mut client).await?;
        let created = rows(
            &tx,
            "INSERT INTO events (id, name, payload, context, source, parent_run_id, timestamp, delivered_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $7) ON CONFLICT (id) DO NOTHING RETURNING id",
            &[
                &event.id,
                &event.name,
                &payload,
                &context,
                &event.source,
                &event.parent_run_id,
                &event.now,
            ],
        )
        .await?;
        if created.is_empty() {
            let run = rows(
                &tx,
                "SELECT id FROM runs WHERE event_id = $1 ORDER BY seq LIMIT 1",
                &[&event.id],
            )
            .await?
            .first()
            .map(|r| r.try_get::<_, String>(0))
            .transpose()?;
            tx.commit().await?;
            return Ok(run);
        }
        exec(
            &tx,
            "INSERT INTO event_counts (minute, shard, n) VALUES ($1::int8 / 60000, pg_backend_pid() % 16, 1) \
             ON CONFLICT (minute, shard) DO UPDATE SET n = event_counts.n + 1",
            &[&event.now],
        )
        .await?;
        let fields = crate::model::EventFields {
            id: &event.id,
            name: &event.name,
            payload: &event.payload,
            context: event.context.as_ref(),
            source: &event.source,
        };
        let mut runs = super::new_runs::NewRuns::default();
        let run = runs.add(&job, &fields, event.now);
        exec(&tx, super::writer::INSERT_RUNS_SQL, &runs.params()).await?;
        super::cancel_on::arm(&tx, &runs.cancel_keys).await?;
        tx.commit().await?;
        self.wake();
        if job.rate_limit.is_none() {
            return Ok(Some(run));
        }
        // A run the job's rate limit skipped is not inserted.
        let inserted = rows(&client, "SELECT 1 FROM runs WHERE id = $1", &[&run]).await?;
        Ok((!inserted.is_empty()).then_some(run))
    }
}
