//! Verified webhook deliveries in SQLite: the delivery row and every event it produces are written
//! by one operation of the writer, so they commit (or fail) together.

use rusqlite::{params, OptionalExtension};

use super::events::insert_event;
use super::rows::json_text;
use super::SqliteStore;
use crate::model::ms_to_time;
use crate::store::webhooks::REJECTIONS_STORED;
use crate::store::{
    Error, NewEvent, NewWebhookDelivery, Result, StoredWebhookSource, WebhookDelivery,
    WebhookRecorded, WebhookRejection,
};

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

/// The columns of `webhook_sources`, in the order [`source_row`] reads them.
const SOURCE_COLUMNS: &str = "id, definition, secrets, created_at, updated_at";

fn source_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(String, String, String, i64, i64)> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
}

fn source_from(row: (String, String, String, i64, i64)) -> Result<StoredWebhookSource> {
    let (id, definition, secrets, created_at, updated_at) = row;
    Ok(StoredWebhookSource {
        definition: json_text(&definition)?,
        secrets: serde_json::from_str(&secrets)
            .map_err(|e| Error::Corrupt(format!("webhook source {id} secrets: {e}")))?,
        id,
        created_at,
        updated_at,
    })
}

fn texts(source: &StoredWebhookSource) -> Result<(String, String)> {
    let definition =
        serde_json::to_string(&source.definition).map_err(|e| Error::Corrupt(e.to_string()))?;
    let secrets =
        serde_json::to_string(&source.secrets).map_err(|e| Error::Corrupt(e.to_string()))?;
    Ok((definition, secrets))
}

impl SqliteStore {
    /// See [`crate::store::Store::webhook_delivery_get`].
    pub async fn webhook_delivery_get(
        &self,
        source: String,
        delivery_id: String,
    ) -> Result<Option<WebhookDelivery>> {
        self.read(move |conn| {
            let row = conn
                .prepare_cached(
                    "SELECT provider, delivery_id, received_at, event_type, outcome, event_ids, raw_body \
                     FROM webhook_deliveries WHERE provider = ?1 AND delivery_id = ?2",
                )?
                .query_row(params![source, delivery_id], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, i64>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, String>(4)?,
                        r.get::<_, String>(5)?,
                        r.get::<_, Vec<u8>>(6)?,
                    ))
                })
                .optional()?;
            row.map(|(provider, delivery_id, at, event_type, outcome, ids, body)| {
                Ok(WebhookDelivery {
                    provider,
                    delivery_id,
                    received_at: ms_to_time(at),
                    event_type,
                    outcome,
                    event_ids: event_ids(&ids)?,
                    raw_body: String::from_utf8_lossy(&body).into_owned(),
                })
            })
            .transpose()
        })
        .await
    }

    /// See [`crate::store::Store::webhook_rejection_record`].
    pub async fn webhook_rejection_record(&self, rejection: WebhookRejection) -> Result<()> {
        let keep = i64::try_from(REJECTIONS_STORED).unwrap_or(i64::MAX);
        self.write(move |ctx| {
            ctx.conn
                .prepare_cached(
                    "INSERT INTO webhook_rejections (source, at, status, reason) VALUES (?1, ?2, ?3, ?4)",
                )?
                .execute(params![
                    rejection.source,
                    rejection.at.timestamp_millis(),
                    rejection.status,
                    rejection.reason
                ])?;
            ctx.conn
                .prepare_cached(
                    "DELETE FROM webhook_rejections WHERE source = ?1 AND seq <= \
                       (SELECT seq FROM webhook_rejections WHERE source = ?1 ORDER BY seq DESC LIMIT 1 OFFSET ?2)",
                )?
                .execute(params![rejection.source, keep])?;
            Ok(())
        })
        .await
    }

    /// See [`crate::store::Store::webhook_rejections_list`].
    pub async fn webhook_rejections_list(
        &self,
        source: String,
        limit: usize,
    ) -> Result<Vec<WebhookRejection>> {
        let limit = i64::try_from(limit.min(REJECTIONS_STORED)).unwrap_or(0);
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT at, status, reason FROM webhook_rejections WHERE source = ?1 ORDER BY seq DESC LIMIT ?2",
            )?;
            let rows = stmt.query_map(params![source, limit], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, u16>(1)?, r.get::<_, String>(2)?))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (at, status, reason) = row?;
                out.push(WebhookRejection {
                    source: source.clone(),
                    at: ms_to_time(at),
                    status,
                    reason,
                });
            }
            Ok(out)
        })
        .await
    }

    /// See [`crate::store::Store::webhook_source_create`].
    pub async fn webhook_source_create(&self, source: StoredWebhookSource) -> Result<()> {
        let (definition, secrets) = texts(&source)?;
        self.write(move |ctx| {
            let inserted = ctx
                .conn
                .prepare_cached(
                    "INSERT INTO webhook_sources (id, definition, secrets, created_at, updated_at) \
                     VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (id) DO NOTHING",
                )?
                .execute(params![
                    source.id,
                    definition,
                    secrets,
                    source.created_at,
                    source.updated_at
                ])?;
            if inserted == 0 {
                return Err(Error::Conflict(format!(
                    "a webhook source with id {:?} exists already",
                    source.id
                )));
            }
            Ok(())
        })
        .await
    }

    /// See [`crate::store::Store::webhook_source_get`].
    pub async fn webhook_source_get(&self, id: String) -> Result<Option<StoredWebhookSource>> {
        self.read(move |conn| {
            conn.prepare_cached(&format!(
                "SELECT {SOURCE_COLUMNS} FROM webhook_sources WHERE id = ?1"
            ))?
            .query_row(params![id], source_row)
            .optional()?
            .map(source_from)
            .transpose()
        })
        .await
    }

    /// See [`crate::store::Store::webhook_sources_list`].
    pub async fn webhook_sources_list(&self) -> Result<Vec<StoredWebhookSource>> {
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {SOURCE_COLUMNS} FROM webhook_sources ORDER BY id"
            ))?;
            let rows = stmt.query_map([], source_row)?;
            let mut out = Vec::new();
            for row in rows {
                out.push(source_from(row?)?);
            }
            Ok(out)
        })
        .await
    }

    /// See [`crate::store::Store::webhook_source_update`].
    pub async fn webhook_source_update(&self, source: StoredWebhookSource) -> Result<()> {
        let (definition, secrets) = texts(&source)?;
        self.write(move |ctx| {
            let changed = ctx
                .conn
                .prepare_cached(
                    "UPDATE webhook_sources SET definition = ?2, secrets = ?3, updated_at = ?4 WHERE id = ?1",
                )?
                .execute(params![source.id, definition, secrets, source.updated_at])?;
            if changed == 0 {
                return Err(Error::NotFound {
                    what: "webhook source",
                    id: source.id,
                });
            }
            Ok(())
        })
        .await
    }

    /// See [`crate::store::Store::webhook_source_delete`].
    pub async fn webhook_source_delete(&self, id: String) -> Result<bool> {
        self.write(move |ctx| {
            Ok(ctx
                .conn
                .prepare_cached("DELETE FROM webhook_sources WHERE id = ?1")?
                .execute(params![id])?
                > 0)
        })
        .await
    }
}
