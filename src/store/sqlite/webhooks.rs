//! Verified webhook deliveries in SQLite: the delivery row and every event it produces are written
//! by one operation of the writer, so they commit (or fail) together.

use rusqlite::{params, OptionalExtension};

use super::events::insert_event;
use super::rows::json_text;
use super::SqliteStore;
use crate::model::ms_to_time;
use crate::store::{Error, NewEvent, NewWebhookDelivery, Result, WebhookDelivery, WebhookRecorded};

/// Most deliveries one list returns.
pub(super) const MAX_LIST: usize = 1000;

pub(super) fn event_ids(text: &str) -> Result<Vec<String>> {
    serde_json::from_value(json_text(text)?)
        .map_err(|e| Error::Corrupt(format!("webhook delivery event ids: {e}")))
}

impl SqliteStore {
    /// See [`crate::store::Store::webhook_record`].
    pub async fn webhook_record(&self, delivery: NewWebhookDelivery) -> Result<WebhookRecorded> {
        let texts: Vec<(String, Option<String>)> =
            delivery.events.iter().map(NewEvent::texts).collect();
        self.write(move |ctx| {
            let existing: Option<String> = ctx
                .conn
                .prepare_cached(
                    "SELECT event_ids FROM webhook_deliveries WHERE provider = ?1 AND delivery_id = ?2",
                )?
                .query_row(params![delivery.provider, delivery.delivery_id], |r| {
                    r.get(0)
                })
                .optional()?;
            if let Some(ids) = existing {
                return Ok(WebhookRecorded {
                    event_ids: event_ids(&ids)?,
                    duplicate: true,
                    events: Vec::new(),
                });
            }
            let mut events = Vec::with_capacity(delivery.events.len());
            for (ev, (payload, context)) in delivery.events.iter().zip(&texts) {
                events.push(insert_event(ctx, ev, payload, context.as_deref())?.event);
            }
            let ids: Vec<String> = events.iter().map(|e| e.id.clone()).collect();
            let ids_text =
                serde_json::to_string(&ids).map_err(|e| Error::Corrupt(e.to_string()))?;
            ctx.conn
                .prepare_cached(
                    "INSERT INTO webhook_deliveries (provider, delivery_id, received_at, event_type, outcome, event_ids, raw_body) \
                     VALUES (?1, ?2, ?3, ?4, 'accepted', ?5, ?6)",
                )?
                .execute(params![
                    delivery.provider,
                    delivery.delivery_id,
                    delivery.received_at,
                    delivery.event_type,
                    ids_text,
                    delivery.raw_body
                ])?;
            Ok(WebhookRecorded {
                event_ids: ids,
                duplicate: false,
                events,
            })
        })
        .await
    }

    /// See [`crate::store::Store::webhook_deliveries_prune`]: the oldest `limit` rows by `seq`
    /// (the primary key, so no scan), those of them received before `before` deleted.
    pub async fn webhook_deliveries_prune(&self, before: i64, limit: usize) -> Result<usize> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.write(move |ctx| {
            Ok(ctx
                .conn
                .prepare_cached(
                    "DELETE FROM webhook_deliveries WHERE seq IN (SELECT seq FROM \
                       (SELECT seq, received_at FROM webhook_deliveries ORDER BY seq LIMIT ?2) \
                     WHERE received_at < ?1)",
                )?
                .execute(params![before, limit])?)
        })
        .await
    }

    /// See [`crate::store::Store::webhook_deliveries_list`].
    pub async fn webhook_deliveries_list(
        &self,
        provider: Option<String>,
        limit: usize,
    ) -> Result<Vec<WebhookDelivery>> {
        let limit = i64::try_from(limit.min(MAX_LIST)).unwrap_or(0);
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT provider, delivery_id, received_at, event_type, outcome, event_ids, raw_body \
                 FROM webhook_deliveries WHERE (?1 IS NULL OR provider = ?1) ORDER BY seq DESC LIMIT ?2",
            )?;
            let rows = stmt.query_map(params![provider, limit], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, String>(5)?,
                    r.get::<_, Vec<u8>>(6)?,
                ))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (provider, delivery_id, received_at, event_type, outcome, ids, body) = row?;
                out.push(WebhookDelivery {
                    provider,
                    delivery_id,
                    received_at: ms_to_time(received_at),
                    event_type,
                    outcome,
                    event_ids: event_ids(&ids)?,
                    raw_body: String::from_utf8_lossy(&body).into_owned(),
                });
            }
            Ok(out)
        })
        .await
    }
}
