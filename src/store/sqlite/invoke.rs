//! A run of one job for an event inserted without fan-out (Trigger.dev v2's `invokeJob`, which
//! has no calling run: see [`crate::store::Store::job_invoke`]). A run invoked by another run
//! (`io.invoke`) is `Store::runs_invoke`, in `children.rs`.

use rusqlite::{params, OptionalExtension};

use super::SqliteStore;
use crate::store::events::NewEvent;
use crate::store::{Error, Result};

impl SqliteStore {
    /// See [`crate::store::Store::job_invoke`]: one operation of the writer.
    pub async fn job_invoke(&self, job_id: String, event: NewEvent) -> Result<Option<String>> {
        let job = self.triggers().get(&job_id).ok_or(Error::NotFound {
            what: "job",
            id: job_id,
        })?;
        let (payload, context) = event.texts();
        self.write(move |ctx| {
            let created = ctx
                .conn
                .prepare_cached(
                    "INSERT INTO events (id, name, payload, context, source, parent_run_id, timestamp, delivered_at) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7) ON CONFLICT (id) DO NOTHING",
                )?
                .execute(params![
                    event.id,
                    event.name,
                    payload,
                    context,
                    event.source,
                    event.parent_run_id,
                    event.now
                ])?;
            if created == 0 {
                return Ok(ctx
                    .conn
                    .prepare_cached("SELECT id FROM runs WHERE event_id = ?1 ORDER BY rowid LIMIT 1")?
                    .query_row([&event.id], |r| r.get(0))
                    .optional()?);
            }
            ctx.tally.events(event.now, 1);
            let fields = crate::model::EventFields {
                id: &event.id,
                name: &event.name,
                payload: &event.payload,
                context: event.context.as_ref(),
                source: &event.source,
            };
            let run = super::flow::run_insert(ctx.conn, &job, &fields, event.now)?;
            ctx.wake = true;
            Ok(run)
        })
        .await
    }
}
