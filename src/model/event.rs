//! Events: the event-name rule, where an event came from, and an event as stored.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Longest event name, in bytes.
pub const MAX_EVENT_NAME_LEN: usize = 200;

/// Why an event name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid event name {name:?}: {reason}")]
pub struct InvalidEventName {
    /// The refused name (truncated to 64 bytes).
    pub name: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Checks an event name: 1–200 bytes of lowercase ASCII letters, digits, `_` and `-`, in
/// non-empty segments separated by `.` or `/` (`user.created`, `stripe.invoice.payment_failed`,
/// `app/user.created`).
///
/// `/` is allowed because Inngest applications name their events `<app>/<entity>.<action>`
/// (`app/user.created`): it separates segments exactly as `.` does, so such a name is valid on
/// every route and in every trigger, not only on the Inngest route, and a job subscribes to it by
/// its full name. Uppercase letters are still refused everywhere.
pub fn validate_event_name(name: &str) -> Result<(), InvalidEventName> {
    let fail = |reason| {
        let mut shown: String = name.chars().take(64).collect();
        if shown.len() < name.len() {
            shown.push('…');
        }
        Err(InvalidEventName {
            name: shown,
            reason,
        })
    };
    if name.is_empty() {
        return fail("it is empty");
    }
    if name.len() > MAX_EVENT_NAME_LEN {
        return fail("it is longer than 200 bytes");
    }
    for segment in name.split(['.', '/']) {
        if segment.is_empty() {
            return fail(
                "it has an empty segment (names look like `entity.action` or `app/entity.action`)",
            );
        }
        if !segment
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
        {
            return fail(
                "only lowercase ASCII letters, digits, `_`, `-`, and `.` or `/` between them are allowed",
            );
        }
    }
    Ok(())
}
/// Where an event came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Sent from Rust with [`crate::Client::send_event`].
    Api,
    /// Sent over HTTP to `POST /trigger`.
    Http,
    /// Sent by a Trigger.dev v2 client to the compatible routes (`POST /api/v1/events`, `…/bulk`).
    TriggerDev,
    /// Sent by an Inngest client to the compatible route (`POST /e/{key}`).
    Inngest,
    /// A verified webhook from the named provider (`payments`, `auth`).
    Webhook(String),
    /// Sent by a job run with `io.send_event`.
    Job(String),
    /// A replay of another event.
    Replay(String),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Api => f.write_str("api"),
            Source::Http => f.write_str("http"),
            Source::TriggerDev => f.write_str("trigger.dev"),
            Source::Inngest => f.write_str("inngest"),
            Source::Webhook(p) => write!(f, "webhook:{p}"),
            Source::Job(run) => write!(f, "job:{run}"),
            Source::Replay(ev) => write!(f, "replay:{ev}"),
        }
    }
}

/// An event as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredEvent {
    /// Unique id (caller-supplied or generated).
    pub id: String,
    /// Event name, `entity.action` (or `app/entity.action`).
    pub name: String,
    /// The payload; `null` when absent.
    pub payload: Value,
    /// Optional caller context.
    pub context: Option<Value>,
    /// `api`, `http`, `trigger.dev`, `inngest`, `webhook:payments`, `webhook:auth`, `job:<run id>`,
    /// `replay:<event id>`.
    pub source: String,
    /// When Flare received it.
    pub timestamp: DateTime<Utc>,
    /// When it is due, for a delayed event.
    pub deliver_at: Option<DateTime<Utc>>,
    /// When its runs were created.
    pub delivered_at: Option<DateTime<Utc>>,
    /// When it was cancelled, if it was.
    pub cancelled_at: Option<DateTime<Utc>>,
    /// The run that sent it, for chained events.
    pub parent_run_id: Option<String>,
    /// The runs it started (one per matching job).
    pub run_ids: Vec<String>,
}

/// A payload type that names its event, so a sender and a job cannot disagree on the name or shape.
///
/// ```
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct UserCreated { user_id: String }
/// impl flare::Event for UserCreated { const NAME: &'static str = "user.created"; }
/// ```
pub trait Event: Serialize + DeserializeOwned + Send + 'static {
    /// The event name this payload is sent under.
    const NAME: &'static str;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names_follow_the_segment_rule() {
        for ok in [
            "user.created",
            "stripe.invoice.payment_failed",
            "a",
            "x-1.y_2",
            "reminder.send",
            "app/user.created",
            "shop/order/line.added",
        ] {
            assert!(validate_event_name(ok).is_ok(), "{ok} should be valid");
        }
        for bad in [
            "",
            "User.created",
            "user..created",
            ".user",
            "user.",
            "user created",
            "usér.x",
            "/user.created",
            "app/",
            "app//user.created",
            "app/.created",
            "App/user.created",
            "app\\user.created",
        ] {
            assert!(
                validate_event_name(bad).is_err(),
                "{bad:?} should be invalid"
            );
        }
        assert!(validate_event_name(&"a".repeat(200)).is_ok());
        let long = validate_event_name(&"a".repeat(201)).unwrap_err();
        assert!(long.to_string().contains("200 bytes"), "{long}");
    }

    #[test]
    fn sources_spell_as_the_spec_says() {
        assert_eq!(
            Source::Webhook("payments".into()).to_string(),
            "webhook:payments"
        );
        assert_eq!(Source::Job("r1".into()).to_string(), "job:r1");
        assert_eq!(Source::TriggerDev.to_string(), "trigger.dev");
        assert_eq!(Source::Inngest.to_string(), "inngest");
        assert_eq!(Source::Replay("e1".into()).to_string(), "replay:e1");
    }
}
