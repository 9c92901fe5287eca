//! Waiting for an event (`io.wait_for_event`): what a waiting run is matched on ([`EventWait`]),
//! the rules of a match (a payload field equal in the run's event and the incoming one, looked
//! up by its value) and of a CEL condition over `event` (the run's event) and `async` (the
//! incoming one), and the event a wait resumes with ([`WaitedEvent`]). Pure rules: the store
//! keeps the waits and applies them when an event is inserted.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a match path starts with: a field of the payload (`payload.invoiceId`).
pub const MATCH_PREFIX: &str = "payload.";

/// Longest match path or CEL condition, in bytes.
pub const MAX_WAIT_TEXT_LEN: usize = 2_000;

/// How a run waits for an event, as stored with the waiting run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventWait {
    /// The event name waited for.
    pub event: String,
    /// `payload.<field>[.<field>…]`, or empty without a match.
    pub match_path: String,
    /// The run's own event's value at `match_path` ([`match_key`]); empty without a match.
    pub match_value: String,
    /// A CEL condition over `event` and `async`, if any.
    pub condition: Option<String>,
    /// The run's event (`{id, name, payload}`), kept for the condition; `None` without one.
    pub run_event: Option<Value>,
}

impl EventWait {
    /// A wait for `event`, matched on the field `match_path` and/or the CEL `condition`, by a run
    /// whose event is `{id, name, payload}` (`run_event`). A malformed path or condition, or a
    /// match field the run's event lacks, is an error saying so.
    pub fn new(
        event: &str,
        match_path: Option<&str>,
        condition: Option<&str>,
        run_event: Value,
    ) -> Result<Self, String> {
        crate::model::validate_event_name(event).map_err(|e| e.to_string())?;
        let (match_path, match_value) = match match_path {
            None => (String::new(), String::new()),
            Some(path) => {
                check_path(path)?;
                let value = match_key(&run_event, path).ok_or_else(|| {
                    format!(
                        "match {path:?}: the run's event has no string, number or boolean there"
                    )
                })?;
                (path.to_string(), value)
            }
        };
        let condition = match condition {
            None => None,
            Some(c) => {
                check_condition(c)?;
                Some(c.to_string())
            }
        };
        Ok(Self {
            event: event.to_string(),
            match_path,
            match_value,
            run_event: condition.is_some().then_some(run_event),
            condition,
        })
    }

    /// Whether the incoming event `incoming` (`{id, name, payload}`) resumes this wait.
    pub fn accepts(&self, incoming: &Value) -> bool {
        if incoming.get("name").and_then(Value::as_str) != Some(self.event.as_str()) {
            return false;
        }
        if !self.match_path.is_empty()
            && match_key(incoming, &self.match_path).as_deref() != Some(self.match_value.as_str())
        {
            return false;
        }
        match &self.condition {
            None => true,
            Some(c) => {
                condition_holds(c, self.run_event.as_ref().unwrap_or(&Value::Null), incoming)
            }
        }
    }
}

/// An event as a wait and a condition see it: `{id, name, payload}`.
pub fn event_value(id: &str, name: &str, payload: &Value) -> Value {
    serde_json::json!({ "id": id, "name": name, "payload": payload })
}

/// Checks a match path: `payload.` then dot-separated non-empty field names.
pub fn check_path(path: &str) -> Result<(), String> {
    let fields = path.strip_prefix(MATCH_PREFIX).ok_or_else(|| {
        format!("match {path:?}: a match names a payload field, as \"payload.invoiceId\"")
    })?;
    if path.len() > MAX_WAIT_TEXT_LEN || fields.split('.').any(str::is_empty) || path.contains('\0')
    {
        return Err(format!(
            "match {path:?}: use \"payload.\" and dot-separated field names (at most {MAX_WAIT_TEXT_LEN} bytes)"
        ));
    }
    Ok(())
}

/// The value at `path` (`payload.a.b`) of an event `{id, name, payload}`, in the form waits are
/// looked up by: a string as itself, a number or boolean as its JSON text; `None` for anything
/// else (missing, null, array, object).
pub fn match_key(event: &Value, path: &str) -> Option<String> {
    let mut at = event.get("payload")?;
    for field in path.strip_prefix(MATCH_PREFIX)?.split('.') {
        at = at.get(field)?;
    }
    match at {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Checks that `condition` is a CEL expression.
pub fn check_condition(condition: &str) -> Result<(), String> {
    if condition.len() > MAX_WAIT_TEXT_LEN || condition.trim().is_empty() {
        return Err(format!(
            "condition: give a CEL expression of at most {MAX_WAIT_TEXT_LEN} bytes"
        ));
    }
    // The parser panics on some malformed input instead of answering an error.
    match std::panic::catch_unwind(|| cel_interpreter::Program::compile(condition).map(|_| ())) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("condition {condition:?} is not CEL: {e}")),
        Err(_) => Err(format!("condition {condition:?} is not CEL")),
    }
}

/// Whether the CEL `condition` is true with `event` (the run's event) and `async` (the incoming
/// one); an error in evaluating it (a missing field, a type mismatch) counts as false.
pub fn condition_holds(condition: &str, event: &Value, incoming: &Value) -> bool {
    // The interpreter may panic where it should answer an error: that counts as false too.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        evaluate(condition, event, incoming)
    }))
    .unwrap_or(false)
}

fn evaluate(condition: &str, event: &Value, incoming: &Value) -> bool {
    let Ok(program) = cel_interpreter::Program::compile(condition) else {
        return false;
    };
    let mut ctx = cel_interpreter::Context::default();
    let (Ok(event), Ok(incoming)) = (
        cel_interpreter::to_value(event),
        cel_interpreter::to_value(incoming),
    ) else {
        return false;
    };
    ctx.add_variable_from_value("event", event);
    ctx.add_variable_from_value("async", incoming);
    matches!(
        program.execute(&ctx),
        Ok(cel_interpreter::Value::Bool(true))
    )
}

/// The event a wait resumed with: what `io.wait_for_event` returns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WaitedEvent {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its payload.
    pub payload: Value,
    /// When it was sent.
    pub timestamp: DateTime<Utc>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn match_and_condition() {
        let run = event_value(
            "e1",
            "invoice.created",
            &json!({"invoiceId": "in_1", "n": 3}),
        );
        let w = EventWait::new("invoice.paid", Some("payload.invoiceId"), None, run.clone())
            .expect("valid");
        assert_eq!(w.match_value, "in_1");
        assert!(w.accepts(&event_value(
            "e2",
            "invoice.paid",
            &json!({"invoiceId": "in_1"})
        )));
        assert!(!w.accepts(&event_value(
            "e2",
            "invoice.paid",
            &json!({"invoiceId": "in_2"})
        )));
        assert!(!w.accepts(&event_value(
            "e2",
            "invoice.sent",
            &json!({"invoiceId": "in_1"})
        )));
        let c = EventWait::new(
            "invoice.paid",
            None,
            Some("async.payload.n > event.payload.n"),
            run.clone(),
        )
        .expect("valid");
        assert!(c.accepts(&event_value("e3", "invoice.paid", &json!({"n": 4}))));
        assert!(!c.accepts(&event_value("e3", "invoice.paid", &json!({"n": 2}))));
        assert!(!c.accepts(&event_value("e3", "invoice.paid", &json!({}))));
        assert!(EventWait::new("x", Some("invoiceId"), None, run.clone()).is_err());
        assert!(EventWait::new("x", Some("payload.missing"), None, run.clone()).is_err());
        assert!(EventWait::new("x", None, Some("event.payload.n >"), run).is_err());
    }
}
