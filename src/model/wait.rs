//! Waiting for an event (`io.wait_for_event`): what a waiting run is matched on ([`EventWait`]),
//! the rules of a match (a payload field equal in the run's event and the incoming one, looked
//! up by its value) and of a CEL condition over `event` (the run's event) and `async` (the
//! incoming one), and the event a wait resumes with ([`WaitedEvent`]). Pure rules: the store
//! keeps the waits and applies them when an event is inserted.
//!
//! A condition may call `matchesFilter(value, filter)`: whether `value` passes a payload filter
//! written as a trigger's ([`crate::filter`]), e.g.
//! `matchesFilter(async.payload, {"plan": ["pro"], "amount": [{"$gte": 100}]})`. A Trigger.dev
//! v2 `io.waitForEvent` filter is such a condition ([`EventWait::filtered`]).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a match path starts with: a field of the payload (`payload.invoiceId`).
pub const MATCH_PREFIX: &str = "payload.";

/// Longest match path or CEL condition, in bytes.
pub const MAX_WAIT_TEXT_LEN: usize = 2_000;

/// The name of the event that starts a run invoked by another (`io.invoke`): the child's event,
/// inserted without fan-out (it starts the invoked job alone). A parent waits for its child under
/// this name, matched on [`INVOKE_PATH`] = the child's run id, and is resumed when the child
/// ends, not by any event.
pub const INVOKE_EVENT: &str = "flare/job.invoked";

/// The match path of a parent's wait for its child (never a payload path: no event matches it).
pub const INVOKE_PATH: &str = "run";

/// The id of the event that starts the child of run `run_id`'s invoke step `key`: its
/// idempotency key. The first child is `<run>-invoke-<key>`; one started again by a retry of the
/// caller (`again_in`: that attempt) `<run>-invoke<attempt>-<key>`. The text after `invoke` (a
/// `-`, or digits and a `-`) tells the two apart, so no key can give another key's id.
pub fn invoke_event_id(run_id: &str, key: &str, again_in: Option<u32>) -> String {
    match again_in {
        None => format!("{run_id}-invoke-{key}"),
        Some(attempt) => format!("{run_id}-invoke{attempt}-{key}"),
    }
}

/// The name a run waits under for a callback (`io.callback`), matched on [`CALLBACK_PATH`] = the
/// callback's token; resumed by a `POST /callbacks/{token}`, not by any event.
pub const CALLBACK_EVENT: &str = "flare/callback";

/// The match path of a wait for a callback.
pub const CALLBACK_PATH: &str = "token";

/// The CEL function of a payload filter (see the module doc).
pub const FILTER_FUNCTION: &str = "matchesFilter";

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

    /// A wait for `event` whose payload passes `filter` (a trigger's payload filter, see
    /// [`crate::filter`]; `None` or `{}`: any payload), as a Trigger.dev v2 `io.waitForEvent`
    /// asks. The filter becomes the condition `matchesFilter(async.payload, <filter>)`; a
    /// top-level field it wants equal to one string is also the wait's match, so an insert finds
    /// the wait by that value (an index lookup) rather than testing every waiter of the name.
    pub fn filtered(event: &str, filter: Option<&Value>) -> Result<Self, String> {
        crate::model::validate_event_name(event).map_err(|e| e.to_string())?;
        let filter = filter.filter(|f| f.as_object().is_none_or(|o| !o.is_empty()));
        let Some(filter) = filter else {
            return Ok(Self {
                event: event.to_string(),
                match_path: String::new(),
                match_value: String::new(),
                condition: None,
                run_event: None,
            });
        };
        crate::filter::Filter::parse(filter).map_err(|e| format!("filter: {e}"))?;
        // A JSON object is a CEL map literal.
        let condition = format!("{FILTER_FUNCTION}(async.payload, {filter})");
        check_condition(&condition).map_err(|_| {
            format!(
                "filter: at most {} bytes of JSON, with integers that fit 64 bits",
                MAX_WAIT_TEXT_LEN - FILTER_FUNCTION.len() - 20
            )
        })?;
        let single = filter.as_object().and_then(|fields| {
            fields
                .iter()
                .find_map(|(field, conditions)| match conditions.as_array() {
                    Some(one) if one.len() == 1 && !field.contains('.') => one[0]
                        .as_str()
                        .map(|v| (format!("{MATCH_PREFIX}{field}"), v)),
                    _ => None,
                })
        });
        let (match_path, match_value) = match single {
            Some((path, value)) if check_path(&path).is_ok() => (path, value.to_string()),
            _ => (String::new(), String::new()),
        };
        Ok(Self {
            event: event.to_string(),
            match_path,
            match_value,
            condition: Some(condition),
            run_event: None,
        })
    }

    /// The wait of a parent for its child run `child_run_id` (`io.invoke`).
    pub fn invoke(child_run_id: &str) -> Self {
        Self {
            event: INVOKE_EVENT.to_string(),
            match_path: INVOKE_PATH.to_string(),
            match_value: child_run_id.to_string(),
            condition: None,
            run_event: None,
        }
    }

    /// The wait of a run for its callback `token` (`io.callback`).
    pub fn callback(token: &str) -> Self {
        Self {
            event: CALLBACK_EVENT.to_string(),
            match_path: CALLBACK_PATH.to_string(),
            match_value: token.to_string(),
            condition: None,
            run_event: None,
        }
    }

    /// Whether this is a run's wait for a callback.
    pub fn is_callback(&self) -> bool {
        self.event == CALLBACK_EVENT && self.match_path == CALLBACK_PATH
    }

    /// The kind of the step that waits so.
    pub fn step_kind(&self) -> crate::model::StepKind {
        if self.is_invoke() {
            crate::model::StepKind::Invoke
        } else if self.is_callback() {
            crate::model::StepKind::Callback
        } else {
            crate::model::StepKind::EventWait
        }
    }

    /// Whether this is a parent's wait for its child run.
    pub fn is_invoke(&self) -> bool {
        self.event == INVOKE_EVENT && self.match_path == INVOKE_PATH
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
    payload_key(event.get("payload")?, path)
}

/// [`match_key`] read from the event's payload itself, without building the event's value (an
/// insert looks every event up by it, and most look nothing up).
pub fn payload_key(payload: &Value, path: &str) -> Option<String> {
    let mut at = payload;
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
    ctx.add_function(FILTER_FUNCTION, matches_filter);
    matches!(
        program.execute(&ctx),
        Ok(cel_interpreter::Value::Bool(true))
    )
}

/// `matchesFilter(value, filter)`: whether `value` passes the payload filter `filter`; false
/// for a filter that is not one.
fn matches_filter(value: cel_interpreter::Value, filter: cel_interpreter::Value) -> bool {
    let (Ok(value), Ok(filter)) = (value.json(), filter.json()) else {
        return false;
    };
    crate::filter::Filter::parse(&filter).is_ok_and(|f| f.matches(&value))
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

    #[test]
    fn a_v2_filter_is_a_condition_and_its_one_string_field_the_match() {
        let w = EventWait::filtered(
            "invoice.paid",
            Some(&json!({"invoiceId": ["in_1"], "amount": [{"$gte": 100}]})),
        )
        .expect("valid");
        assert_eq!(
            (w.match_path.as_str(), w.match_value.as_str()),
            ("payload.invoiceId", "in_1")
        );
        let paid = |payload: Value| w.accepts(&event_value("e", "invoice.paid", &payload));
        assert!(paid(json!({"invoiceId": "in_1", "amount": 120})));
        assert!(paid(json!({"invoiceId": "in_1", "amount": 100.5})));
        assert!(!paid(json!({"invoiceId": "in_1", "amount": 99})));
        assert!(!paid(json!({"invoiceId": "in_2", "amount": 120})));
        assert!(!paid(json!({"invoiceId": "in_1"})));
        // No single string: every waiter of the name is tested.
        let any = EventWait::filtered("x.y", Some(&json!({"n": [1, 2], "s": {"$x": 1}})));
        assert!(
            any.is_err(),
            "a nested filter with an unknown operator is refused"
        );
        let w = EventWait::filtered(
            "x.y",
            Some(&json!({"n": [1, 2], "who": {"name": ["it's \"q\" é\n"]}})),
        )
        .expect("valid");
        assert_eq!(w.match_path, "");
        assert!(w.accepts(&event_value(
            "e",
            "x.y",
            &json!({"n": 2, "who": {"name": "it's \"q\" é\n"}})
        )));
        assert!(!w.accepts(&event_value(
            "e",
            "x.y",
            &json!({"n": 3, "who": {"name": "it's \"q\" é\n"}})
        )));
        let all = EventWait::filtered("x.y", Some(&json!({}))).expect("valid");
        assert!(all.condition.is_none() && all.accepts(&event_value("e", "x.y", &json!(null))));
        assert!(EventWait::filtered("x.y", Some(&json!({"a": [{"$isNull": true}]}))).is_err());
        assert!(EventWait::filtered("X Y", None).is_err());
        // A Rust job's condition may use the function too.
        assert!(condition_holds(
            "matchesFilter(async.payload, {\"plan\": [\"pro\"]}) && event.payload.n == 1",
            &event_value("r", "a.b", &json!({"n": 1})),
            &event_value("e", "a.c", &json!({"plan": "pro"})),
        ));
    }
}
