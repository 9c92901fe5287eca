//! Verified webhook deliveries in PostgreSQL: the delivery row and every event it produces are
//! written in one transaction. The delivery row goes first with `ON CONFLICT DO NOTHING`, so two
//! nodes receiving the same provider retry at once serialize on its key and the second one sees
//! a duplicate instead of failing.

use super::rows::{exec, json_text, rows, triggers_refresh};
use super::writer::{insert_events, EventRow};
use super::PgStore;
use crate::model::ms_to_time;
use crate::store::{Error, NewEvent, NewWebhookDelivery, Result, WebhookDelivery, WebhookRecorded};

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
