//! What the ingest routes (`/trigger`, Trigger.dev, Inngest) say when an event id is sent again.
//!
//! An id already stored is an idempotent resend: the answer carries the *stored* event, starts
//! nothing, and says `"duplicate": true`, as the webhook routes do. When the resent event's name or
//! payload differ from the stored one's, the caller most likely reused an id by mistake, and the
//! event it meant to send is dropped: the answer also says `"conflict": true` with
//! `"conflictingFields"` (`["name"]`, `["payload"]` or both), and a warning is logged through a
//! [`LogThrottle`] (one line, then at most one per 10 s per route with the count held back), since a
//! client can repeat it at will.

use serde_json::{json, Map, Value};

use crate::client::Sent;
use crate::log_throttle::LogThrottle;

/// The answer's fields about a resend: `duplicate`, `conflict` and, for a conflict,
/// `conflictingFields`.
pub fn fields(sent: &Sent) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("duplicate".into(), json!(sent.duplicate()));
    out.insert("conflict".into(), json!(sent.conflict.is_some()));
    if let Some(conflict) = &sent.conflict {
        out.insert("conflictingFields".into(), json!(conflict.fields()));
    }
    out
}

/// Adds [`fields`] to `answer` (a JSON object).
pub fn with_fields(mut answer: Value, sent: &Sent) -> Value {
    if let Value::Object(map) = &mut answer {
        map.extend(fields(sent));
    }
    answer
}

/// A sentence for the caller about a resend, or `None` for a new event.
pub fn message(sent: &Sent) -> Option<String> {
    let event = &sent.event;
    match &sent.conflict {
        _ if !sent.duplicate() => None,
        None => Some(format!(
            "Event id '{}' was received before: the stored event is returned and nothing new was started",
            event.id
        )),
        Some(conflict) => Some(format!(
            "Event id '{}' is already stored with a different {}: the stored event '{}' is returned, the one sent was not stored and nothing was started",
            event.id,
            conflict.fields().join(" and "),
            event.name
        )),
    }
}

/// Logs a conflicting resend on `route` at `now_ms` through `throttle`; nothing for the others.
pub fn log_conflicts(throttle: &LogThrottle, route: &'static str, now_ms: i64, sent: &[Sent]) {
    for s in sent {
        let Some(conflict) = &s.conflict else {
            continue;
        };
        if let Some(suppressed) = throttle.admit(route, now_ms) {
            tracing::warn!(
                route,
                event_id = %s.event.id,
                fields = ?conflict.fields(),
                suppressed,
                "an event id was sent again with a different name or payload; the stored event was kept"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::Conflict;
    use crate::model::{ms_to_time, StoredEvent};

    fn sent(created: bool, conflict: Option<Conflict>) -> Sent {
        Sent {
            event: StoredEvent {
                id: "order-1".into(),
                name: "order.placed".into(),
                payload: json!({"n": 1}),
                context: None,
                source: "http".into(),
                timestamp: ms_to_time(0),
                deliver_at: None,
                delivered_at: Some(ms_to_time(0)),
                cancelled_at: None,
                parent_run_id: None,
                run_ids: vec![],
            },
            created,
            conflict,
        }
    }

    #[test]
    fn the_fields_say_duplicate_and_conflict() {
        assert_eq!(
            Value::Object(fields(&sent(true, None))),
            json!({"duplicate": false, "conflict": false})
        );
        assert_eq!(
            Value::Object(fields(&sent(false, None))),
            json!({"duplicate": true, "conflict": false})
        );
        let both = Conflict {
            name: true,
            payload: true,
        };
        assert_eq!(
            Value::Object(fields(&sent(false, Some(both)))),
            json!({"duplicate": true, "conflict": true, "conflictingFields": ["name", "payload"]})
        );
        assert!(message(&sent(true, None)).is_none());
        let m = message(&sent(false, Some(both))).expect("message");
        assert!(m.contains("different name and payload"), "{m}");
    }

    #[test]
    fn conflicts_are_logged_at_most_once_per_interval() {
        let throttle = LogThrottle::default();
        let conflict = Conflict {
            name: false,
            payload: true,
        };
        let lines = crate::log_throttle::logged(|| {
            for ms in 0..100 {
                log_conflicts(
                    &throttle,
                    "trigger",
                    ms,
                    &[sent(false, Some(conflict)), sent(false, None)],
                );
            }
            log_conflicts(&throttle, "trigger", 10_000, &[sent(false, Some(conflict))]);
        });
        assert_eq!(lines.len(), 2, "{lines:#?}");
        assert!(lines[0].contains("event_id=order-1"), "{}", lines[0]);
        assert!(lines[1].contains("suppressed=99"), "{}", lines[1]);
    }
}
