//! A job's priority (issue 26): `{"run": "event.payload.plan == 'enterprise' ? 120 : 0"}`, a
//! CEL expression over the event (see `model::cel`) giving seconds, evaluated once when a run is
//! created and stored with it. Among due runs, a run with priority `p` is claimed as if it had
//! become due `p` seconds earlier, and never before it is actually due.
//!
//! A value outside −600 … 600 is clamped to that range (it comes from the event, when the run is
//! created: there is no one to refuse it to); a value that is not a whole number (a string, a
//! fraction, a missing field, a type error) is priority 0. The store keeps the offset in ms with
//! the run (`priority_ms`, none for 0) and orders due runs by `run_at − priority_ms`: a retried or
//! waiting run keeps its offset from its new due time.

use serde_json::{json, Value};

use super::cel::{CelKey, EventFields};

/// Highest priority, seconds; the lowest is its negative.
pub const MAX_PRIORITY_S: i64 = 600;
/// [`MAX_PRIORITY_S`] in ms: how far a run's rank may lie from its due time.
pub const MAX_PRIORITY_MS: i64 = MAX_PRIORITY_S * 1_000;

/// A checked priority: its expression, compiled.
#[derive(Debug, Clone, PartialEq)]
pub struct Priority {
    run: CelKey,
}

impl Priority {
    /// Compiles the expression `run`; the error names the field (`priority.run: …`).
    pub fn parse(run: &str) -> Result<Self, String> {
        CelKey::parse(run)
            .map(|run| Self { run })
            .map_err(|e| format!("priority.run: {e}"))
    }

    /// Reads `{"run": "<CEL>"}` (an endpoint's index) into the expression's text; errors name
    /// the field under `field`.
    pub fn text_from_json(v: &Value, field: &str) -> Result<String, String> {
        let Value::Object(o) = v else {
            return Err(format!(
                "{field}: an object {{\"run\": \"<CEL expression>\"}}"
            ));
        };
        if let Some(other) = o.keys().find(|k| k.as_str() != "run") {
            return Err(format!("{field}.{other}: unknown field (run)"));
        }
        match o.get("run") {
            Some(Value::String(s)) => Ok(s.clone()),
            _ => Err(format!(
                "{field}.run: a string, a CEL expression giving seconds"
            )),
        }
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        self.run.source()
    }

    /// The stored and listed form: `{"run": "<CEL>"}`.
    pub fn to_json(&self) -> Value {
        json!({ "run": self.run.source() })
    }

    /// The priority of a run for `event`, seconds: clamped to ±[`MAX_PRIORITY_S`], 0 when the
    /// expression does not give a whole number.
    pub fn seconds_of(&self, event: &EventFields<'_>) -> i64 {
        self.run
            .eval(event)
            .and_then(|v| v.as_i64().or_else(|| v.as_u64().map(|_| i64::MAX)))
            .map_or(0, |s| s.clamp(-MAX_PRIORITY_S, MAX_PRIORITY_S))
    }

    /// What the store keeps with a run for `event`: the offset in ms, `None` for priority 0
    /// (such a run is ordered by its due time alone, with the runs of jobs without a priority).
    pub fn offset_ms(&self, event: &EventFields<'_>) -> Option<i64> {
        let s = self.seconds_of(event);
        (s != 0).then_some(s * 1_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seconds(expr: &str, payload: Value) -> i64 {
        let p = Priority::parse(expr).expect("parses");
        p.seconds_of(&EventFields {
            id: "e1",
            name: "plan.changed",
            payload: &payload,
            context: None,
            source: "api",
        })
    }

    #[test]
    fn a_priority_is_whole_seconds_clamped_and_zero_otherwise() {
        let plan = "event.payload.plan == 'enterprise' ? 120 : 0";
        assert_eq!(seconds(plan, json!({"plan": "enterprise"})), 120);
        assert_eq!(seconds(plan, json!({"plan": "free"})), 0);
        assert_eq!(seconds("event.payload.p", json!({"p": 30})), 30);
        assert_eq!(seconds("event.payload.p", json!({"p": -30})), -30);
        assert_eq!(seconds("event.payload.p", json!({"p": 5000})), 600);
        assert_eq!(seconds("event.payload.p", json!({"p": -5000})), -600);
        assert_eq!(seconds("event.payload.p", json!({"p": u64::MAX})), 600);
        // Not a whole number: priority 0.
        assert_eq!(seconds("event.payload.p", json!({"p": 1.5})), 0);
        assert_eq!(seconds("event.payload.p", json!({"p": "120"})), 0);
        assert_eq!(seconds("event.payload.p", json!({})), 0);
        assert_eq!(seconds("event.payload.p", json!({"p": null})), 0);
    }

    #[test]
    fn bad_priorities_name_the_field() {
        assert!(Priority::parse("event.payload.(")
            .expect_err("refused")
            .starts_with("priority.run: not a CEL expression"));
        assert!(Priority::parse("plan == 1")
            .expect_err("refused")
            .contains("unknown variable"));
        assert!(Priority::parse(" ")
            .expect_err("refused")
            .starts_with("priority.run"));
        let read = |v: Value| Priority::text_from_json(&v, "priority");
        assert_eq!(read(json!({"run": "1"})), Ok("1".to_string()));
        assert!(read(json!("1"))
            .expect_err("refused")
            .starts_with("priority:"));
        assert!(read(json!({"run": 1}))
            .expect_err("refused")
            .starts_with("priority.run"));
        assert!(read(json!({"run": "1", "x": 1}))
            .expect_err("refused")
            .starts_with("priority.x"));
    }
}
