//! The mappings of the presets added with sources (GitHub, Shopify, Paddle, Slack, database
//! records, Standard Webhooks senders) and of template sources: a verified body (and its
//! headers) in, the delivery id, the provider's type and the events out. Stripe's and Clerk's
//! are in [`super::mapping`].
//!
//! | preset | event | delivery id |
//! |---|---|---|
//! | github | `github.<X-GitHub-Event>.<action>` (`github.push` without an action); `ping` answered, no event | `X-GitHub-Delivery` |
//! | shopify | `shopify.<X-Shopify-Topic, / as .>` | `X-Shopify-Webhook-Id` |
//! | paddle | `paddle.<event_type>` | `event_id` |
//! | slack | `slack.<event.type>` for `event_callback`, else `slack.<type>`; `url_verification` answered with its challenge | `event_id`, else a hash of the body |
//! | database | `<table>.created` / `.updated` / `.deleted` (`type` INSERT / UPDATE / DELETE) | a hash of the body |
//! | standard-webhooks | `<source id>.<type>` | `webhook-id` |
//! | template | the source's `eventName` | the source's `deliveryId`, else a hash of the body |
//!
//! Every event's payload is the delivery's JSON body. A source's own `eventName` or
//! `deliveryId` replaces the preset's.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::mapping::{sanitize_name, MappedEvent};
use super::template::Template;

/// What a preset makes of a verified delivery.
#[derive(Debug, Clone, PartialEq)]
pub enum Mapped {
    /// Events to record under the delivery id.
    Events {
        /// The dedupe key (`None`: the caller's rule or the body's hash).
        delivery_id: Option<String>,
        /// The provider's type, as recorded with the delivery.
        event_type: String,
        /// The events.
        events: Vec<MappedEvent>,
    },
    /// A handshake answered as is, storing nothing (GitHub's `ping`, Slack's `url_verification`).
    Answer(Value),
}

/// Reads the body as JSON.
pub fn json_body(body: &[u8]) -> Result<Value, String> {
    serde_json::from_slice(body).map_err(|e| format!("webhook body is not valid JSON: {e}"))
}

/// `sha256:<hex>` of the body: the delivery id of senders that send none.
pub fn body_hash(body: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(body)))
}

fn required_header(
    header: &dyn Fn(&str) -> Option<String>,
    name: &str,
    shown: &str,
) -> Result<String, String> {
    header(name)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .ok_or_else(|| format!("missing required header {shown}"))
}

fn string_field<'a>(payload: &'a Value, field: &str) -> Result<&'a str, String> {
    match payload.get(field) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        Some(Value::String(_)) | None | Some(Value::Null) => Err(format!(
            "webhook body is missing the required field `{field}`"
        )),
        Some(_) => Err(format!("webhook body field `{field}` must be a string")),
    }
}

fn one(delivery_id: Option<String>, event_type: &str, name: String, payload: Value) -> Mapped {
    Mapped::Events {
        delivery_id,
        event_type: event_type.to_string(),
        events: vec![MappedEvent {
            name: sanitize_name(&name),
            payload,
        }],
    }
}

/// GitHub.
pub fn github(payload: Value, header: &dyn Fn(&str) -> Option<String>) -> Result<Mapped, String> {
    let event = required_header(header, "x-github-event", "X-GitHub-Event")?;
    let delivery = required_header(header, "x-github-delivery", "X-GitHub-Delivery")?;
    if event == "ping" {
        return Ok(Mapped::Answer(json!({
            "received": true,
            "ping": true,
            "zen": payload.get("zen").cloned().unwrap_or(Value::Null),
            "eventIds": [],
            "duplicate": false,
        })));
    }
    let (name, event_type) = match payload.get("action").and_then(Value::as_str) {
        Some(action) if !action.is_empty() => (
            format!("github.{event}.{action}"),
            format!("{event}.{action}"),
        ),
        _ => (format!("github.{event}"), event.clone()),
    };
    Ok(one(Some(delivery), &event_type, name, payload))
}

/// Shopify.
pub fn shopify(payload: Value, header: &dyn Fn(&str) -> Option<String>) -> Result<Mapped, String> {
    let topic = required_header(header, "x-shopify-topic", "X-Shopify-Topic")?;
    let delivery = required_header(header, "x-shopify-webhook-id", "X-Shopify-Webhook-Id")?;
    let name = format!("shopify.{}", topic.replace('/', "."));
    Ok(one(Some(delivery), &topic, name, payload))
}

/// Paddle Billing.
pub fn paddle(payload: Value) -> Result<Mapped, String> {
    let event_type = string_field(&payload, "event_type")?.to_string();
    let id = string_field(&payload, "event_id")?.to_string();
    Ok(one(
        Some(id),
        &event_type,
        format!("paddle.{event_type}"),
        payload,
    ))
}

/// Slack's Events API.
pub fn slack(payload: Value, body: &[u8]) -> Result<Mapped, String> {
    let kind = string_field(&payload, "type")?.to_string();
    if kind == "url_verification" {
        let challenge = string_field(&payload, "challenge")?;
        return Ok(Mapped::Answer(json!({ "challenge": challenge })));
    }
    let event_type = match payload.pointer("/event/type").and_then(Value::as_str) {
        Some(t) if kind == "event_callback" && !t.is_empty() => t.to_string(),
        _ => kind,
    };
    let id = payload
        .get("event_id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map_or_else(|| body_hash(body), str::to_string);
    Ok(one(
        Some(id),
        &event_type,
        format!("slack.{event_type}"),
        payload,
    ))
}

/// Database-record webhooks (Supabase's shape).
pub fn database(payload: Value, body: &[u8]) -> Result<Mapped, String> {
    let verb = match string_field(&payload, "type")? {
        "INSERT" => "created",
        "UPDATE" => "updated",
        "DELETE" => "deleted",
        other => {
            return Err(format!(
                "webhook body field `type` must be INSERT, UPDATE or DELETE, not {other:?}"
            ))
        }
    };
    let table = string_field(&payload, "table")?.to_string();
    let event_type = format!("{table}.{verb}");
    Ok(one(
        Some(body_hash(body)),
        &event_type,
        event_type.clone(),
        payload,
    ))
}

/// Standard Webhooks senders (Resend, Svix, …): `<source id>.<type>`, the delivery id from
/// `webhook-id` / `svix-id` (given by the caller).
pub fn standard(source: &str, payload: Value) -> Result<Mapped, String> {
    let event_type = string_field(&payload, "type")?.to_string();
    Ok(one(
        None,
        &event_type,
        format!("{source}.{event_type}"),
        payload,
    ))
}

/// A source's own `eventName` template.
pub fn template(
    rule: &Template,
    payload: Value,
    header: &dyn Fn(&str) -> Option<String>,
) -> Result<Mapped, String> {
    let name = rule.fill(&payload, header).map_err(|e| e.to_string())?;
    let name = sanitize_name(&name);
    Ok(one(None, &name.clone(), name, payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        }
    }

    fn names(m: &Mapped) -> Vec<String> {
        match m {
            Mapped::Events { events, .. } => events.iter().map(|e| e.name.clone()).collect(),
            Mapped::Answer(_) => Vec::new(),
        }
    }

    #[test]
    fn github_names_event_and_action_and_answers_ping() {
        let h = headers(&[("x-github-event", "issues"), ("x-github-delivery", "d-1")]);
        let m = github(json!({"action": "opened"}), &h).expect("map");
        assert_eq!(names(&m), ["github.issues.opened"]);
        let h = headers(&[("x-github-event", "push"), ("x-github-delivery", "d-2")]);
        let m = github(json!({"ref": "refs/heads/main"}), &h).expect("map");
        assert_eq!(names(&m), ["github.push"]);
        let h = headers(&[("x-github-event", "ping"), ("x-github-delivery", "d-3")]);
        assert!(matches!(
            github(json!({"zen": "z"}), &h),
            Ok(Mapped::Answer(_))
        ));
        let h = headers(&[("x-github-event", "push")]);
        assert_eq!(
            github(json!({}), &h).expect_err("no delivery"),
            "missing required header X-GitHub-Delivery"
        );
    }

    #[test]
    fn shopify_topic_slashes_become_dots() {
        let h = headers(&[
            ("x-shopify-topic", "orders/create"),
            ("x-shopify-webhook-id", "w"),
        ]);
        assert_eq!(
            names(&shopify(json!({}), &h).expect("map")),
            ["shopify.orders.create"]
        );
    }

    #[test]
    fn database_records_become_table_verbs() {
        for (kind, name) in [
            ("INSERT", "orders.created"),
            ("UPDATE", "orders.updated"),
            ("DELETE", "orders.deleted"),
        ] {
            let body = json!({"type": kind, "table": "orders", "schema": "public", "record": {"id": 1}, "old_record": null});
            let m = database(body.clone(), body.to_string().as_bytes()).expect("map");
            assert_eq!(names(&m), [name]);
        }
        let bad = json!({"type": "TRUNCATE", "table": "orders"});
        assert!(database(bad, b"{}").is_err());
    }

    #[test]
    fn slack_answers_the_challenge_and_names_inner_events() {
        let m = slack(json!({"type": "url_verification", "challenge": "abc"}), b"").expect("map");
        assert_eq!(m, Mapped::Answer(json!({"challenge": "abc"})));
        let m = slack(
            json!({"type": "event_callback", "event_id": "Ev1", "event": {"type": "app_mention"}}),
            b"",
        )
        .expect("map");
        assert_eq!(names(&m), ["slack.app_mention"]);
    }
}
