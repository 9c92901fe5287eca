//! Turns a *verified* webhook body into the events Flare sends.
//!
//! Every delivery yields one raw event named after the provider's type, so nothing is dropped,
//! and well-known types also yield a domain event with a small camelCase payload. The domain
//! event, when there is one, comes first.
//!
//! **Stripe** ([`stripe_events`]): the raw event is `stripe.<type>` with payload
//! `{"stripeEventId", "type", "created", "livemode", "object", "previousAttributes"?}` where
//! `object` is the full `data.object` and `previousAttributes` (present on `*.updated`) is
//! `data.previous_attributes`. Domain events: `payment_intent.succeeded` → `payment.succeeded`,
//! `payment_intent.payment_failed` → `payment.failed`, `checkout.session.completed` →
//! `checkout.completed`, `invoice.paid`, `invoice.payment_failed`,
//! `customer.subscription.{created,updated,deleted}` → `subscription.*`, and `charge.refunded`
//! → `payment.refunded`. Fields missing from the object become `null`.
//!
//! **Clerk** ([`clerk_events`]): the raw event is `clerk.<type>` whose payload is the full
//! `data`. Domain events: `user.created` / `user.updated` → `{userId, email, name}`,
//! `user.deleted` → `{userId, deleted}`, `session.*` → `{sessionId, userId, status}` and
//! `organization.*` → `{organizationId, name, slug}`, named after the Clerk type.
//!
//! **Stored text.** The fields stored as text columns rather than inside a JSON payload — the
//! delivery's `id` (Stripe) and `type` (both) — are read by one function, which also refuses a
//! NUL character in them ([`MappingError::Nul`]): PostgreSQL's `text` cannot hold one while
//! SQLite's can, so both stores answer the same 400 and the provider stops retrying (a 503 from
//! one store only would be retried for days). Text inside a payload is stored as JSON, where a
//! NUL is escaped, and is kept as sent. (Clerk's delivery id is the `svix-id` header, which
//! cannot hold a NUL.)
//!
//! **Names.** Flare event names are dot-separated segments of lowercase ASCII letters, digits,
//! `_` and `-`, 1–200 bytes. Provider types are made to fit: an ASCII capital becomes lowercase
//! and is preceded by `_` when it follows a lowercase letter or digit
//! (`organizationMembership.created` → `organization_membership.created`); every other
//! disallowed character becomes `_`; an empty segment becomes `_`; the name is cut to 200 bytes
//! and trailing dots are dropped.

use serde::Serialize;
use serde_json::{Map, Value};

/// Longest allowed event name, in bytes.
const MAX_NAME_LEN: usize = 200;

/// One event to send, produced from a webhook delivery.
#[derive(Debug, Clone, PartialEq)]
pub struct MappedEvent {
    /// Event name, valid under Flare's naming rule.
    pub name: String,
    /// Event payload.
    pub payload: Value,
}

/// The events produced by one Stripe delivery.
#[derive(Debug, Clone, PartialEq)]
pub struct StripeDelivery {
    /// Stripe event id (`evt_…`), the dedupe key.
    pub id: String,
    /// Stripe event type as sent, e.g. `payment_intent.succeeded`.
    pub event_type: String,
    /// Domain event (if the type is well known) followed by `stripe.<type>`.
    pub events: Vec<MappedEvent>,
}

/// The events produced by one Clerk delivery (its dedupe key is the `svix-id` header).
#[derive(Debug, Clone, PartialEq)]
pub struct ClerkDelivery {
    /// Clerk event type as sent, e.g. `user.created`.
    pub event_type: String,
    /// Domain event (if the type is well known) followed by `clerk.<type>`.
    pub events: Vec<MappedEvent>,
}

/// Why a verified body could not be mapped to events.
#[derive(Debug, thiserror::Error)]
pub enum MappingError {
    /// The body is not JSON.
    #[error("webhook body is not valid JSON: {0}")]
    InvalidJson(#[source] serde_json::Error),
    /// A required field is absent, `null` or an empty string (dotted path, e.g. `data.object`).
    #[error("webhook body is missing the required field `{0}`")]
    MissingField(&'static str),
    /// A field stored as text holds a NUL character, which no store keeps (see the module docs).
    #[error(
        "webhook body field `{0}` contains a NUL character (\\u0000), which Flare cannot store"
    )]
    Nul(&'static str),
    /// A required field has the wrong JSON type.
    #[error("webhook body field `{field}` must be {expected}")]
    WrongType {
        /// Dotted path of the field.
        field: &'static str,
        /// What was expected, e.g. "a string".
        expected: &'static str,
    },
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StripeRawPayload<'a> {
    stripe_event_id: &'a str,
    #[serde(rename = "type")]
    event_type: &'a str,
    created: Option<i64>,
    livemode: Option<bool>,
    object: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    previous_attributes: Option<&'a Value>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PaymentPayload {
    payment_intent_id: Option<String>,
    stripe_event_id: String,
    amount: Option<i64>,
    currency: Option<String>,
    customer_id: Option<String>,
    status: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PaymentFailedPayload {
    #[serde(flatten)]
    payment: PaymentPayload,
    failure_code: Option<String>,
    failure_message: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CheckoutPayload {
    checkout_session_id: Option<String>,
    stripe_event_id: String,
    amount: Option<i64>,
    currency: Option<String>,
    customer_id: Option<String>,
    customer_email: Option<String>,
    mode: Option<String>,
    payment_status: Option<String>,
    status: Option<String>,
    payment_intent_id: Option<String>,
    subscription_id: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct InvoicePayload {
    invoice_id: Option<String>,
    stripe_event_id: String,
    amount_due: Option<i64>,
    amount_paid: Option<i64>,
    currency: Option<String>,
    customer_id: Option<String>,
    subscription_id: Option<String>,
    status: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SubscriptionPayload {
    subscription_id: Option<String>,
    stripe_event_id: String,
    customer_id: Option<String>,
    status: Option<String>,
    current_period_end: Option<i64>,
    cancel_at_period_end: Option<bool>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RefundPayload {
    charge_id: Option<String>,
    payment_intent_id: Option<String>,
    stripe_event_id: String,
    amount: Option<i64>,
    amount_refunded: Option<i64>,
    currency: Option<String>,
    customer_id: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct UserPayload {
    user_id: Option<String>,
    email: Option<String>,
    name: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct UserDeletedPayload {
    user_id: Option<String>,
    deleted: bool,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SessionPayload {
    session_id: Option<String>,
    user_id: Option<String>,
    status: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OrganizationPayload {
    organization_id: Option<String>,
    name: Option<String>,
    slug: Option<String>,
}

/// Maps a verified Stripe event body to its domain event (if any) and `stripe.<type>`.
///
/// Fails when the body is not a JSON object with a string `id`, a string `type` and an
/// object `data.object`.
pub fn stripe_events(body: &[u8]) -> Result<StripeDelivery, MappingError> {
    let envelope = parse_object(body)?;
    let id = required_str(&envelope, "id", "id")?;
    let event_type = required_str(&envelope, "type", "type")?;
    let data = required_object(&envelope, "data", "data")?;
    let object = data
        .get("object")
        .filter(|v| !v.is_null())
        .ok_or(MappingError::MissingField("data.object"))?;
    if !object.is_object() {
        return Err(MappingError::WrongType {
            field: "data.object",
            expected: "an object",
        });
    }

    let mut events = Vec::with_capacity(2);
    if let Some((name, payload)) = stripe_domain_event(&event_type, &id, object) {
        events.push(MappedEvent {
            name: name.to_owned(),
            payload,
        });
    }
    let raw = StripeRawPayload {
        stripe_event_id: &id,
        event_type: &event_type,
        created: envelope.get("created").and_then(Value::as_i64),
        livemode: envelope.get("livemode").and_then(Value::as_bool),
        object,
        previous_attributes: data.get("previous_attributes").filter(|v| !v.is_null()),
    };
    events.push(MappedEvent {
        name: event_name("stripe", &event_type),
        payload: to_value(raw),
    });
    Ok(StripeDelivery {
        id,
        event_type,
        events,
    })
}

/// The domain event for a well-known Stripe type.
fn stripe_domain_event(
    event_type: &str,
    event_id: &str,
    o: &Value,
) -> Option<(&'static str, Value)> {
    let stripe_event_id = event_id.to_owned();
    let payment = || PaymentPayload {
        payment_intent_id: text(o, "id"),
        stripe_event_id: stripe_event_id.clone(),
        amount: int(o, "amount"),
        currency: text(o, "currency"),
        customer_id: id_of(o.get("customer")),
        status: text(o, "status"),
    };
    let invoice = || InvoicePayload {
        invoice_id: text(o, "id"),
        stripe_event_id: stripe_event_id.clone(),
        amount_due: int(o, "amount_due"),
        amount_paid: int(o, "amount_paid"),
        currency: text(o, "currency"),
        customer_id: id_of(o.get("customer")),
        // Before API 2025-03-31.basil the subscription is top-level; since, under `parent`.
        subscription_id: id_of(o.get("subscription"))
            .or_else(|| id_of(o.pointer("/parent/subscription_details/subscription"))),
        status: text(o, "status"),
    };
    let subscription = || SubscriptionPayload {
        subscription_id: text(o, "id"),
        stripe_event_id: stripe_event_id.clone(),
        customer_id: id_of(o.get("customer")),
        status: text(o, "status"),
        // Before basil `current_period_end` is on the subscription; since, on each item.
        current_period_end: int(o, "current_period_end").or_else(|| {
            o.pointer("/items/data/0/current_period_end")
                .and_then(Value::as_i64)
        }),
        cancel_at_period_end: o.get("cancel_at_period_end").and_then(Value::as_bool),
    };
    let mapped = match event_type {
        "payment_intent.succeeded" => ("payment.succeeded", to_value(payment())),
        "payment_intent.payment_failed" => {
            let error = o.get("last_payment_error");
            let failed = PaymentFailedPayload {
                payment: payment(),
                failure_code: error.and_then(|e| text(e, "code")),
                failure_message: error.and_then(|e| text(e, "message")),
            };
            ("payment.failed", to_value(failed))
        }
        "checkout.session.completed" => {
            let checkout = CheckoutPayload {
                checkout_session_id: text(o, "id"),
                stripe_event_id,
                amount: int(o, "amount_total"),
                currency: text(o, "currency"),
                customer_id: id_of(o.get("customer")),
                customer_email: o
                    .pointer("/customer_details/email")
                    .and_then(Value::as_str)
                    .or_else(|| o.get("customer_email").and_then(Value::as_str))
                    .map(str::to_owned),
                mode: text(o, "mode"),
                payment_status: text(o, "payment_status"),
                status: text(o, "status"),
                payment_intent_id: id_of(o.get("payment_intent")),
                subscription_id: id_of(o.get("subscription")),
            };
            ("checkout.completed", to_value(checkout))
        }
        "invoice.paid" => ("invoice.paid", to_value(invoice())),
        "invoice.payment_failed" => ("invoice.payment_failed", to_value(invoice())),
        "customer.subscription.created" => ("subscription.created", to_value(subscription())),
        "customer.subscription.updated" => ("subscription.updated", to_value(subscription())),
        "customer.subscription.deleted" => ("subscription.deleted", to_value(subscription())),
        "charge.refunded" => {
            let refund = RefundPayload {
                charge_id: text(o, "id"),
                payment_intent_id: id_of(o.get("payment_intent")),
                stripe_event_id,
                amount: int(o, "amount"),
                amount_refunded: int(o, "amount_refunded"),
                currency: text(o, "currency"),
                customer_id: id_of(o.get("customer")),
            };
            ("payment.refunded", to_value(refund))
        }
        _ => return None,
    };
    Some(mapped)
}

/// Maps a verified Clerk event body to its domain event (if any) and `clerk.<type>`.
///
/// Fails when the body is not a JSON object with a string `type` and an object `data`.
pub fn clerk_events(body: &[u8]) -> Result<ClerkDelivery, MappingError> {
    let envelope = parse_object(body)?;
    let event_type = required_str(&envelope, "type", "type")?;
    let data = required_object(&envelope, "data", "data")?;
    let d = Value::Object(data);

    let (family, _) = event_type.split_once('.').unwrap_or((&event_type, ""));
    let domain = match (family, event_type.as_str()) {
        (_, "user.created" | "user.updated") => Some(to_value(UserPayload {
            user_id: text(&d, "id"),
            email: primary_email(&d),
            name: display_name(&d),
        })),
        (_, "user.deleted") => Some(to_value(UserDeletedPayload {
            user_id: text(&d, "id"),
            // A user.deleted event means the user is gone even if the flag is absent.
            deleted: d.get("deleted").and_then(Value::as_bool).unwrap_or(true),
        })),
        ("session", _) => Some(to_value(SessionPayload {
            session_id: text(&d, "id"),
            user_id: text(&d, "user_id"),
            status: text(&d, "status"),
        })),
        ("organization", _) => Some(to_value(OrganizationPayload {
            organization_id: text(&d, "id"),
            name: text(&d, "name"),
            slug: text(&d, "slug"),
        })),
        _ => None,
    };

    let mut events = Vec::with_capacity(2);
    if let Some(payload) = domain {
        events.push(MappedEvent {
            name: sanitize_name(&event_type),
            payload,
        });
    }
    events.push(MappedEvent {
        name: event_name("clerk", &event_type),
        payload: d,
    });
    Ok(ClerkDelivery { event_type, events })
}

/// The address in `email_addresses` whose `id` is `primary_email_address_id`, else the first.
fn primary_email(user: &Value) -> Option<String> {
    let addresses = user.get("email_addresses")?.as_array()?;
    let primary_id = user.get("primary_email_address_id").and_then(Value::as_str);
    addresses
        .iter()
        .find(|a| primary_id.is_some() && a.get("id").and_then(Value::as_str) == primary_id)
        .or_else(|| addresses.first())
        .and_then(|a| text(a, "email_address"))
}

/// "first last" trimmed, else the username, else `None`.
fn display_name(user: &Value) -> Option<String> {
    let part = |key| user.get(key).and_then(Value::as_str).unwrap_or("");
    let full = format!("{} {}", part("first_name"), part("last_name"));
    let full = full.trim();
    if !full.is_empty() {
        return Some(full.to_owned());
    }
    text(user, "username").filter(|u| !u.trim().is_empty())
}

fn parse_object(body: &[u8]) -> Result<Map<String, Value>, MappingError> {
    match serde_json::from_slice(body).map_err(MappingError::InvalidJson)? {
        Value::Object(map) => Ok(map),
        _ => Err(MappingError::WrongType {
            field: "(body)",
            expected: "a JSON object",
        }),
    }
}

/// A required, non-empty string field; its text is stored as is, so it may not hold a NUL.
fn required_str(
    map: &Map<String, Value>,
    key: &str,
    field: &'static str,
) -> Result<String, MappingError> {
    match map.get(key) {
        None | Some(Value::Null) => Err(MappingError::MissingField(field)),
        Some(Value::String(s)) if s.is_empty() => Err(MappingError::MissingField(field)),
        Some(Value::String(s)) if s.contains('\0') => Err(MappingError::Nul(field)),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(MappingError::WrongType {
            field,
            expected: "a string",
        }),
    }
}

fn required_object(
    map: &Map<String, Value>,
    key: &str,
    field: &'static str,
) -> Result<Map<String, Value>, MappingError> {
    match map.get(key) {
        None | Some(Value::Null) => Err(MappingError::MissingField(field)),
        Some(Value::Object(o)) => Ok(o.clone()),
        Some(_) => Err(MappingError::WrongType {
            field,
            expected: "an object",
        }),
    }
}

/// A string field, `None` when absent or not a string.
fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// An integer field, `None` when absent or not an integer.
fn int(v: &Value, key: &str) -> Option<i64> {
    v.get(key).and_then(Value::as_i64)
}

/// The id of a Stripe reference: either the id string or an expanded object's `id`.
fn id_of(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("id").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    }
}

fn to_value<T: Serialize>(payload: T) -> Value {
    // Serializing these plain structs (strings, numbers, JSON values) cannot fail.
    serde_json::to_value(payload).unwrap_or(Value::Null)
}

/// `"<prefix>.<provider type>"`, made valid (see the module docs).
fn event_name(prefix: &str, provider_type: &str) -> String {
    sanitize_name(&format!("{prefix}.{provider_type}"))
}

/// Makes `raw` a valid Flare event name (see the module docs for the rules).
pub(crate) fn sanitize_name(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len() + 8);
    let mut prev: Option<char> = None;
    for c in raw.chars() {
        match c {
            'A'..='Z' => {
                if prev.is_some_and(|p| p.is_ascii_lowercase() || p.is_ascii_digit()) {
                    out.push('_');
                }
                out.push(c.to_ascii_lowercase());
            }
            'a'..='z' | '0'..='9' | '_' | '-' => out.push(c),
            '.' => {
                if matches!(out.chars().last(), None | Some('.')) {
                    out.push('_');
                }
                out.push('.');
            }
            _ => out.push('_'),
        }
        prev = Some(c);
    }
    if out.ends_with('.') || out.is_empty() {
        out.push('_');
    }
    out.truncate(MAX_NAME_LEN);
    while out.ends_with('.') {
        out.pop();
    }
    out
}

#[cfg(test)]
mod tests;
