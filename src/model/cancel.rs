//! Cancelling a job's runs on an event (`cancel_on`, an endpoint's `cancelOn`): which event, the
//! match (a payload field equal in the run's event and the incoming one) and/or a CEL condition
//! over `event` (the run's event) and `async` (the incoming one), the same rules as a wait for an
//! event ([`super::wait`]), and how long after the run was created it stays armed. Pure rules:
//! the store keeps one key per run and armed entry, looked up by the incoming event.

use std::time::Duration;

use serde_json::{json, Map, Value};

use super::wait::{check_condition, check_path, EventWait};

/// Most `cancelOn` entries one job may have.
pub const MAX_CANCEL_ON: usize = 10;

/// Shortest `timeoutMs`: 1 s.
pub const MIN_CANCEL_TIMEOUT_MS: u64 = 1_000;

/// Longest `timeoutMs`: 365 days.
pub const MAX_CANCEL_TIMEOUT_MS: u64 = 365 * 86_400_000;

/// One event that cancels a job's runs, as written (the `Job` builder, an endpoint's index).
///
/// ```
/// use flare::CancelOn;
/// use std::time::Duration;
/// let on = CancelOn::event("order.cancelled")
///     .matching("payload.orderId")
///     .timeout(Duration::from_secs(7 * 86_400));
/// # let _ = on;
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct CancelOn {
    /// The event name.
    pub event: String,
    /// `payload.<field>…`: the incoming event's value there must equal the run's event's.
    pub match_path: Option<String>,
    /// A CEL condition over `event` (the run's event) and `async` (the incoming one).
    pub condition: Option<String>,
    /// How long after the run was created the entry stays armed; `None`: until the run ends.
    pub timeout: Option<Duration>,
}

impl CancelOn {
    /// The event `name` cancels the job's queued, running and waiting runs (narrow it with
    /// [`CancelOn::matching`] or [`CancelOn::condition`]).
    pub fn event(name: impl Into<String>) -> Self {
        Self {
            event: name.into(),
            match_path: None,
            condition: None,
            timeout: None,
        }
    }

    /// Only an event whose payload field `path` (`"payload.orderId"`) equals the run's event's
    /// (a string, number or boolean). Looked up by value: any number of runs may be armed.
    pub fn matching(mut self, path: &str) -> Self {
        self.match_path = Some(path.to_string());
        self
    }

    /// Only an event for which the CEL expression `cel` is true, with `event` the run's event
    /// and `async` the incoming one, each `{id, name, payload}`.
    pub fn condition(mut self, cel: &str) -> Self {
        self.condition = Some(cel.to_string());
        self
    }

    /// Armed only for `timeout` after the run was created (1 s to 365 days); without it, until
    /// the run ends.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Checks the entry at position `at` of the list: the event name, the match path, the
    /// condition, the timeout. Errors name the field (`cancelOn[0].match: …`).
    pub fn check(&self, at: usize) -> Result<(), String> {
        let field = format!("cancelOn[{at}]");
        super::validate_event_name(&self.event).map_err(|e| format!("{field}.event: {e}"))?;
        if let Some(path) = &self.match_path {
            check_path(path).map_err(|e| format!("{field}.match: {e}"))?;
        }
        if let Some(c) = &self.condition {
            check_condition(c).map_err(|e| format!("{field}.if: {e}"))?;
        }
        if let Some(t) = self.timeout {
            let ms = u64::try_from(t.as_millis()).unwrap_or(u64::MAX);
            if !(MIN_CANCEL_TIMEOUT_MS..=MAX_CANCEL_TIMEOUT_MS).contains(&ms) {
                return Err(format!(
                    "{field}.timeoutMs: must be from {MIN_CANCEL_TIMEOUT_MS} (1 s) to {MAX_CANCEL_TIMEOUT_MS} (365 days), got {ms}"
                ));
            }
        }
        Ok(())
    }

    /// Checks a job's whole list (at most [`MAX_CANCEL_ON`] entries, each [`CancelOn::check`]).
    pub fn check_list(list: &[CancelOn]) -> Result<(), String> {
        if list.len() > MAX_CANCEL_ON {
            return Err(format!(
                "cancelOn: at most {MAX_CANCEL_ON} entries, got {}",
                list.len()
            ));
        }
        list.iter().enumerate().try_for_each(|(i, c)| c.check(i))
    }

    /// The stored and listed form: `{"event", "match"?, "if"?, "timeoutMs"?}`.
    pub fn to_json(&self) -> Value {
        let mut o = Map::new();
        o.insert("event".into(), json!(self.event));
        if let Some(p) = &self.match_path {
            o.insert("match".into(), json!(p));
        }
        if let Some(c) = &self.condition {
            o.insert("if".into(), json!(c));
        }
        if let Some(t) = self.timeout {
            o.insert(
                "timeoutMs".into(),
                json!(u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
            );
        }
        Value::Object(o)
    }

    /// Reads a list `[{"event", "match"?, "if"?, "timeoutMs"?}, …]` (`field`: its name in
    /// errors), without checking the entries' rules ([`CancelOn::check_list`] does).
    pub fn list_from_json(v: &Value, field: &str) -> Result<Vec<CancelOn>, String> {
        let Value::Array(items) = v else {
            return Err(format!(
                "{field}: a list of {{\"event\", \"match\"?, \"if\"?, \"timeoutMs\"?}}"
            ));
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| Self::from_json(item, &format!("{field}[{i}]")))
            .collect()
    }

    fn from_json(v: &Value, field: &str) -> Result<Self, String> {
        let Value::Object(o) = v else {
            return Err(format!(
                "{field}: an object {{\"event\", \"match\"?, \"if\"?, \"timeoutMs\"?}}"
            ));
        };
        if let Some(other) = o
            .keys()
            .find(|k| !matches!(k.as_str(), "event" | "match" | "if" | "timeoutMs"))
        {
            return Err(format!(
                "{field}.{other}: unknown field (event, match, if, timeoutMs)"
            ));
        }
        let text = |name: &str| -> Result<Option<String>, String> {
            match o.get(name) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(format!("{field}.{name}: a string")),
            }
        };
        let event = text("event")?.ok_or_else(|| format!("{field}.event: an event name"))?;
        let timeout = match o.get("timeoutMs") {
            None | Some(Value::Null) => None,
            Some(t) => {
                Some(Duration::from_millis(t.as_u64().ok_or_else(|| {
                    format!("{field}.timeoutMs: a whole number")
                })?))
            }
        };
        Ok(Self {
            event,
            match_path: text("match")?,
            condition: text("if")?,
            timeout,
        })
    }

    /// The key a run whose event is `run_event` (`{id, name, payload}`), created at `created`
    /// (ms), is armed with: the match and condition as a wait's ([`EventWait`]), and when it is
    /// disarmed (ms; `None`: never). `None` when the run's event has no value at the match path
    /// (no incoming event could match it: the entry does not arm that run).
    pub fn key(&self, run_event: &Value, created: i64) -> Option<(EventWait, Option<i64>)> {
        let wait = EventWait::new(
            &self.event,
            self.match_path.as_deref(),
            self.condition.as_deref(),
            run_event.clone(),
        )
        .ok()?;
        let until = self
            .timeout
            .map(|t| created.saturating_add(i64::try_from(t.as_millis()).unwrap_or(i64::MAX)));
        Some((wait, until))
    }
}

/// The error a run cancelled by event `id` (named `name`) is left with.
pub fn cancelled_by_event(name: &str, id: &str) -> String {
    format!("cancelled by event {name} ({id})")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::wait::event_value;

    #[test]
    fn entries_are_checked_naming_the_field() {
        let ok = CancelOn::event("order.cancelled")
            .matching("payload.orderId")
            .condition("async.payload.reason != 'test'")
            .timeout(Duration::from_secs(60));
        assert_eq!(ok.check(0), Ok(()));
        let bad = [
            (CancelOn::event("Bad Name"), "cancelOn[0].event"),
            (
                CancelOn::event("a.b").matching("orderId"),
                "cancelOn[0].match",
            ),
            (
                CancelOn::event("a.b").condition("event.payload.n >"),
                "cancelOn[0].if",
            ),
            (
                CancelOn::event("a.b").timeout(Duration::from_millis(10)),
                "cancelOn[0].timeoutMs",
            ),
        ];
        for (entry, field) in bad {
            let err = entry.check(0).unwrap_err();
            assert!(err.starts_with(field), "{err}");
        }
        let many = vec![CancelOn::event("a.b"); MAX_CANCEL_ON + 1];
        assert!(CancelOn::check_list(&many).unwrap_err().contains("at most"));
    }

    #[test]
    fn the_json_form_reads_back_and_refuses_unknown_fields() {
        let on = CancelOn::event("order.cancelled")
            .matching("payload.orderId")
            .timeout(Duration::from_secs(60));
        let list = CancelOn::list_from_json(&json!([on.to_json()]), "cancelOn").unwrap();
        assert_eq!(list, vec![on]);
        let err = CancelOn::list_from_json(&json!([{"event": "a.b", "after": 1}]), "cancelOn")
            .unwrap_err();
        assert!(err.starts_with("cancelOn[0].after"), "{err}");
        let err = CancelOn::list_from_json(&json!({"event": "a.b"}), "cancelOn").unwrap_err();
        assert!(err.starts_with("cancelOn: a list"), "{err}");
        let err =
            CancelOn::list_from_json(&json!([{"event": "a.b", "timeoutMs": "1"}]), "cancelOn")
                .unwrap_err();
        assert!(err.starts_with("cancelOn[0].timeoutMs"), "{err}");
    }

    #[test]
    fn a_key_matches_like_a_wait_and_needs_the_match_field() {
        let run = event_value("e1", "order.placed", &json!({"orderId": "o1"}));
        let on = CancelOn::event("order.cancelled")
            .matching("payload.orderId")
            .timeout(Duration::from_secs(1));
        let (wait, until) = on.key(&run, 5_000).unwrap();
        assert_eq!(until, Some(6_000));
        assert!(wait.accepts(&event_value(
            "e2",
            "order.cancelled",
            &json!({"orderId": "o1"})
        )));
        assert!(!wait.accepts(&event_value(
            "e2",
            "order.cancelled",
            &json!({"orderId": "o2"})
        )));
        let none = event_value("e1", "order.placed", &json!({}));
        assert!(on.key(&none, 0).is_none());
    }
}
