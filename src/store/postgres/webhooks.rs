//! Verified webhook deliveries in PostgreSQL: the delivery row and every event it produces are
//! written in one transaction. The delivery row goes first with `ON CONFLICT DO NOTHING`, so two
//! nodes receiving the same provider retry at once serialize on its key and the second one sees
//! a duplicate instead of failing.

use super::rows::{exec, json_text, rows, triggers_refresh};
use super::writer::{insert_events, EventRow};
use super::PgStore;
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

impl PgStore {
    /// See [`crate::store::Store::webhook_record`].
    pub async fn webhook_record(&self, delivery: NewWebhookDelivery) -> Result<WebhookRecorded> {
        let texts: Vec<(String, Option<String>)> =
            delivery.events.iter().map(NewEvent::texts).collect();
        let ids: Vec<String> = delivery.events.iter().map(|e| e.id.clone()).collect();
        let ids_text = serde_json::to_string(&ids).map_err(|e| Error::Corrupt(e.to_string()))?;
        let mut client = self.conn().await?;
        triggers_refresh(&client, self.triggers()).await?;
        let tx = self.begin(&mut client).await?;
        let fresh = rows(
            &tx,
            "INSERT INTO webhook_deliveries (provider, delivery_id, received_at, event_type, outcome, event_ids, raw_body) \
             VALUES ($1, $2, $3, $4, 'accepted', $5, $6) ON CONFLICT (provider, delivery_id) DO NOTHING RETURNING seq",
            &[
                &delivery.provider,
                &delivery.delivery_id,
                &delivery.received_at,
                &delivery.event_type,
                &ids_text,
                &delivery.raw_body,
            ],
        )
        .await?;
        if fresh.is_empty() {
            let existing = rows(
                &tx,
                "SELECT event_ids FROM webhook_deliveries WHERE provider = $1 AND delivery_id = $2",
                &[&delivery.provider, &delivery.delivery_id],
            )
            .await?;
            let text: String = existing
                .first()
                .map(|r| r.try_get(0))
                .transpose()?
                .ok_or_else(|| Error::NotFound {
                    what: "webhook delivery",
                    id: delivery.delivery_id.clone(),
                })?;
            tx.commit().await?;
            return Ok(WebhookRecorded {
                event_ids: event_ids(&text)?,
                duplicate: true,
                events: Vec::new(),
            });
        }
        let batch: Vec<EventRow<'_>> = delivery
            .events
            .iter()
            .zip(&texts)
            .map(|(event, (payload, context))| EventRow {
                event,
                payload,
                context: context.as_deref(),
            })
            .collect();
        let (inserted, wake) = insert_events(&tx, self.triggers(), &batch).await?;
        tx.commit().await?;
        if wake {
            self.wake();
        }
        Ok(WebhookRecorded {
            event_ids: ids,
            duplicate: false,
            events: inserted.into_iter().map(|i| i.event).collect(),
        })
    }

    /// See [`crate::store::Store::webhook_deliveries_prune`]: the oldest `limit` rows by `seq`
    /// (the primary key, so no scan), those of them received before `before` deleted; rows
    /// another node is pruning at the same moment are skipped.
    pub async fn webhook_deliveries_prune(&self, before: i64, limit: usize) -> Result<usize> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut client = self.conn().await?;
        let tx = self.begin(&mut client).await?;
        let n = exec(
            &tx,
            "DELETE FROM webhook_deliveries WHERE seq IN ( \
               SELECT seq FROM webhook_deliveries WHERE received_at < $1 AND seq IN ( \
                 SELECT seq FROM webhook_deliveries ORDER BY seq LIMIT $2) \
               FOR UPDATE SKIP LOCKED)",
            &[&before, &limit],
        )
        .await?;
        tx.commit().await?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    /// See [`crate::store::Store::webhook_deliveries_list`].
    pub async fn webhook_deliveries_list(
        &self,
        provider: Option<String>,
        limit: usize,
    ) -> Result<Vec<WebhookDelivery>> {
        let limit = i64::try_from(limit.min(MAX_LIST)).unwrap_or(0);
        let conn = self.conn().await?;
        let c = &conn;
        let mut out = Vec::new();
        for r in rows(
            c,
            "SELECT provider, delivery_id, received_at, event_type, outcome, event_ids, raw_body \
             FROM webhook_deliveries WHERE ($1::text IS NULL OR provider = $1) ORDER BY seq DESC LIMIT $2",
            &[&provider, &limit],
        )
        .await?
        {
            let body: Vec<u8> = r.try_get(6)?;
            out.push(WebhookDelivery {
                provider: r.try_get(0)?,
                delivery_id: r.try_get(1)?,
                received_at: ms_to_time(r.try_get(2)?),
                event_type: r.try_get(3)?,
                outcome: r.try_get(4)?,
                event_ids: event_ids(&r.try_get::<_, String>(5)?)?,
                raw_body: String::from_utf8_lossy(&body).into_owned(),
            });
        }
        Ok(out)
    }
}

/// The columns of `webhook_sources`, in the order [`source_from`] reads them.
const SOURCE_COLUMNS: &str = "id, definition, secrets, created_at, updated_at";

fn source_from(r: &tokio_postgres::Row) -> Result<StoredWebhookSource> {
    let id: String = r.try_get(0)?;
    let secrets: String = r.try_get(2)?;
    Ok(StoredWebhookSource {
        definition: json_text(&r.try_get::<_, String>(1)?)?,
        secrets: serde_json::from_str(&secrets)
            .map_err(|e| Error::Corrupt(format!("webhook source {id} secrets: {e}")))?,
        id,
        created_at: r.try_get(3)?,
        updated_at: r.try_get(4)?,
    })
}

fn texts(source: &StoredWebhookSource) -> Result<(String, String)> {
    let definition =
        serde_json::to_string(&source.definition).map_err(|e| Error::Corrupt(e.to_string()))?;
    let secrets =
        serde_json::to_string(&source.secrets).map_err(|e| Error::Corrupt(e.to_string()))?;
    Ok((definition, secrets))
}

impl PgStore {
    /// See [`crate::store::Store::webhook_delivery_get`].
    pub async fn webhook_delivery_get(
        &self,
        source: String,
        delivery_id: String,
    ) -> Result<Option<WebhookDelivery>> {
        let conn = self.conn().await?;
        let found = rows(
            &conn,
            "SELECT provider, delivery_id, received_at, event_type, outcome, event_ids, raw_body \
             FROM webhook_deliveries WHERE provider = $1 AND delivery_id = $2",
            &[&source, &delivery_id],
        )
        .await?;
        let Some(r) = found.first() else {
            return Ok(None);
        };
        let body: Vec<u8> = r.try_get(6)?;
        Ok(Some(WebhookDelivery {
            provider: r.try_get(0)?,
            delivery_id: r.try_get(1)?,
            received_at: ms_to_time(r.try_get(2)?),
            event_type: r.try_get(3)?,
            outcome: r.try_get(4)?,
            event_ids: event_ids(&r.try_get::<_, String>(5)?)?,
            raw_body: String::from_utf8_lossy(&body).into_owned(),
        }))
    }

    /// See [`crate::store::Store::webhook_rejection_record`].
    pub async fn webhook_rejection_record(&self, rejection: WebhookRejection) -> Result<()> {
        let keep = i64::try_from(REJECTIONS_STORED).unwrap_or(i64::MAX);
        let mut client = self.conn().await?;
        let tx = self.begin(&mut client).await?;
        exec(
            &tx,
            "INSERT INTO webhook_rejections (source, at, status, reason) VALUES ($1, $2, $3, $4)",
            &[
                &rejection.source,
                &rejection.at.timestamp_millis(),
                &i32::from(rejection.status),
                &rejection.reason,
            ],
        )
        .await?;
        exec(
            &tx,
            "DELETE FROM webhook_rejections WHERE source = $1 AND seq <= \
               (SELECT seq FROM webhook_rejections WHERE source = $1 ORDER BY seq DESC LIMIT 1 OFFSET $2)",
            &[&rejection.source, &keep],
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// See [`crate::store::Store::webhook_rejections_list`].
    pub async fn webhook_rejections_list(
        &self,
        source: String,
        limit: usize,
    ) -> Result<Vec<WebhookRejection>> {
        let limit = i64::try_from(limit.min(REJECTIONS_STORED)).unwrap_or(0);
        let conn = self.conn().await?;
        let mut out = Vec::new();
        for r in rows(
            &conn,
            "SELECT at, status, reason FROM webhook_rejections WHERE source = $1 ORDER BY seq DESC LIMIT $2",
            &[&source, &limit],
        )
        .await?
        {
            let status: i32 = r.try_get(1)?;
            out.push(WebhookRejection {
                source: source.clone(),
                at: ms_to_time(r.try_get(0)?),
                status: u16::try_from(status)
                    .map_err(|_| Error::Corrupt(format!("rejection status {status}")))?,
                reason: r.try_get(2)?,
            });
        }
        Ok(out)
    }

    /// See [`crate::store::Store::webhook_source_create`].
    pub async fn webhook_source_create(&self, source: StoredWebhookSource) -> Result<()> {
        let (definition, secrets) = texts(&source)?;
        let mut client = self.conn().await?;
        let tx = self.begin(&mut client).await?;
        let inserted = exec(
            &tx,
            "INSERT INTO webhook_sources (id, definition, secrets, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING",
            &[
                &source.id,
                &definition,
                &secrets,
                &source.created_at,
                &source.updated_at,
            ],
        )
        .await?;
        if inserted == 0 {
            return Err(Error::Conflict(format!(
                "a webhook source with id {:?} exists already",
                source.id
            )));
        }
        tx.commit().await?;
        Ok(())
    }

    /// See [`crate::store::Store::webhook_source_get`].
    pub async fn webhook_source_get(&self, id: String) -> Result<Option<StoredWebhookSource>> {
        let conn = self.conn().await?;
        let found = rows(
            &conn,
            &format!("SELECT {SOURCE_COLUMNS} FROM webhook_sources WHERE id = $1"),
            &[&id],
        )
        .await?;
        found.first().map(source_from).transpose()
    }

    /// See [`crate::store::Store::webhook_sources_list`].
    pub async fn webhook_sources_list(&self) -> Result<Vec<StoredWebhookSource>> {
        let conn = self.conn().await?;
        rows(
            &conn,
            &format!("SELECT {SOURCE_COLUMNS} FROM webhook_sources ORDER BY id"),
            &[],
        )
        .await?
        .iter()
        .map(source_from)
        .collect()
    }

    /// See [`crate::store::Store::webhook_source_update`].
    pub async fn webhook_source_update(&self, source: StoredWebhookSource) -> Result<()> {
        let (definition, secrets) = texts(&source)?;
        let mut client = self.conn().await?;
        let tx = self.begin(&mut client).await?;
        let changed = exec(
            &tx,
            "UPDATE webhook_sources SET definition = $2, secrets = $3, updated_at = $4 WHERE id = $1",
            &[&source.id, &definition, &secrets, &source.updated_at],
        )
        .await?;
        if changed == 0 {
            return Err(Error::NotFound {
                what: "webhook source",
                id: source.id,
            });
        }
        tx.commit().await?;
        Ok(())
    }

    /// See [`crate::store::Store::webhook_source_delete`].
    pub async fn webhook_source_delete(&self, id: String) -> Result<bool> {
        let mut client = self.conn().await?;
        let tx = self.begin(&mut client).await?;
        let n = exec(&tx, "DELETE FROM webhook_sources WHERE id = $1", &[&id]).await?;
        tx.commit().await?;
        Ok(n > 0)
    }
}
