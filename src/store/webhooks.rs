//! Webhook deliveries in the store: a verified delivery to record with its events
//! ([`NewWebhookDelivery`]), what recording it did ([`WebhookRecorded`]), and a delivery as the
//! dashboard lists it ([`WebhookDelivery`]); the sources created through the API
//! ([`StoredWebhookSource`]) and the refused deliveries kept per source ([`WebhookRejection`]).

use serde::Serialize;

use super::events::NewEvent;
use crate::model::StoredEvent;

/// A verified webhook delivery to record, with the events it produces. See
/// [`crate::store::Store::webhook_record`].
#[derive(Debug, Clone)]
pub struct NewWebhookDelivery {
    /// Which webhook route received it: `payments` or `auth`.
    pub provider: String,
    /// The provider's id for the delivery (Stripe event id, `svix-id`): the dedupe key.
    pub delivery_id: String,
    /// The provider's event type, e.g. `payment_intent.succeeded`.
    pub event_type: String,
    /// The exact bytes that were signed.
    pub raw_body: Vec<u8>,
    /// Receive time, ms.
    pub received_at: i64,
    /// The events to send; their ids should be derived from the delivery so a retry cannot
    /// send them twice.
    pub events: Vec<NewEvent>,
}

/// What recording a webhook delivery did.
#[derive(Debug, Clone)]
pub struct WebhookRecorded {
    /// The ids of the delivery's events: the new ones, or for a duplicate the original ones.
    pub event_ids: Vec<String>,
    /// True when the delivery had been recorded before: nothing was stored or started.
    pub duplicate: bool,
    /// The events stored now, with their run ids (empty for a duplicate).
    pub events: Vec<StoredEvent>,
}

/// A recorded webhook delivery, for the dashboard.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookDelivery {
    /// `payments` or `auth`.
    pub provider: String,
    /// The provider's id for the delivery.
    pub delivery_id: String,
    /// When it was received.
    pub received_at: chrono::DateTime<chrono::Utc>,
    /// The provider's event type.
    pub event_type: String,
    /// `accepted`.
    pub outcome: String,
    /// The events it produced.
    pub event_ids: Vec<String>,
    /// The raw body (lossy UTF-8; the database keeps the exact bytes).
    pub raw_body: String,
}

/// A webhook source created through the API or the dashboard. The store keeps its settings as
/// JSON it does not read (`crate::webhooks::source` gives them meaning) and its secrets apart.
#[derive(Clone, PartialEq)]
pub struct StoredWebhookSource {
    /// The source's id: the last segment of `/webhooks/{id}`.
    pub id: String,
    /// The settings (scheme, event-name and delivery-id rules), without secrets.
    pub definition: serde_json::Value,
    /// The secrets, newest first (several while one is rotated).
    pub secrets: Vec<String>,
    /// Created, ms.
    pub created_at: i64,
    /// Last changed, ms.
    pub updated_at: i64,
}

impl std::fmt::Debug for StoredWebhookSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredWebhookSource")
            .field("id", &self.id)
            .field("definition", &self.definition)
            .field(
                "secrets",
                &format_args!("<{} redacted>", self.secrets.len()),
            )
            .field("created_at", &self.created_at)
            .field("updated_at", &self.updated_at)
            .finish()
    }
}

/// Refused deliveries kept per source ([`crate::store::Store::webhook_rejection_record`]).
pub const REJECTIONS_STORED: usize = 100;

/// A refused delivery, as stored per source.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookRejection {
    /// The source's id.
    pub source: String,
    /// When it was refused.
    pub at: chrono::DateTime<chrono::Utc>,
    /// The HTTP status answered.
    pub status: u16,
    /// Why (no secret, no body, no header value).
    pub reason: String,
}
