//! Webhook deliveries in the store: a verified delivery to record with its events
//! ([`NewWebhookDelivery`]), what recording it did ([`WebhookRecorded`]), and a delivery as the
//! dashboard lists it ([`WebhookDelivery`]).

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
