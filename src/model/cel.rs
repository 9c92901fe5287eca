//! CEL expressions over an event ([`CelKey`]), the keys of flow control (`model::flow`,
//! `model::rate`, `model::throttle`): compiled when a job is defined, evaluated when a run is
//! created, with the variable `event` ([`EventFields`]).

use std::fmt;
use std::sync::Arc;

use cel_interpreter::{Context, Program};
use serde_json::{Map, Value};

/// The key of a run whose key expression did not evaluate (a missing field, a type error).
pub const NULL_KEY: &str = "null";
/// Longest key value kept (longer values are cut at a character boundary).
pub const MAX_KEY_VALUE: usize = 200;
/// Longest CEL expression, in bytes.
pub const MAX_KEY_EXPR: usize = 1_000;
/// A CEL expression over the event, compiled. Evaluated with the variable `event` (`name`,
/// `payload`, `context`, `id`, `source`).
#[derive(Clone)]
pub struct CelKey {
    source: String,
    program: Arc<Program>,
}

impl fmt::Debug for CelKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

impl PartialEq for CelKey {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

/// The event as a CEL expression sees it.
#[derive(Debug, Clone, Copy)]
pub struct EventFields<'a> {
    /// `event.id`.
    pub id: &'a str,
    /// `event.name`.
    pub name: &'a str,
    /// `event.payload`.
    pub payload: &'a Value,
    /// `event.context` (null when absent).
    pub context: Option<&'a Value>,
    /// `event.source`.
    pub source: &'a str,
}

impl CelKey {
    /// Compiles `source`; refuses text that does not parse or that names a variable other
    /// than `event`.
    pub fn parse(source: &str) -> Result<Self, String> {
        if source.trim().is_empty() {
            return Err("an empty expression".into());
        }
        if source.len() > MAX_KEY_EXPR {
            return Err(format!("longer than {MAX_KEY_EXPR} bytes"));
        }
        let program = Program::compile(source)
            .map_err(|e| format!("not a CEL expression: {}", first_line(&e.to_string())))?;
        let refs = program.references();
        if let Some(var) = refs.variables().into_iter().find(|v| *v != "event") {
            return Err(format!(
                "unknown variable {var:?}: the expression sees only `event` (event.payload, event.name, event.context, event.id, event.source)"
            ));
        }
        Ok(Self {
            source: source.to_string(),
            program: Arc::new(program),
        })
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The value over `event`, or `None` when it does not evaluate (a missing field, a type
    /// error) or gives `null`.
    pub fn eval(&self, event: &EventFields<'_>) -> Option<Value> {
        let mut obj = Map::new();
        obj.insert("id".into(), Value::String(event.id.into()));
        obj.insert("name".into(), Value::String(event.name.into()));
        obj.insert("payload".into(), event.payload.clone());
        obj.insert(
            "context".into(),
            event.context.cloned().unwrap_or(Value::Null),
        );
        obj.insert("source".into(), Value::String(event.source.into()));
        let mut ctx = Context::default();
        ctx.add_variable("event", Value::Object(obj)).ok()?;
        let out = self.program.execute(&ctx).ok()?;
        match out.json().ok()? {
            Value::Null => None,
            v => Some(v),
        }
    }

    /// The key's text over `event`: a string as it is, any other value as JSON, and
    /// [`NULL_KEY`] when it does not evaluate.
    pub fn key_of(&self, event: &EventFields<'_>) -> String {
        let mut text = match self.eval(event) {
            None => return NULL_KEY.to_string(),
            Some(Value::String(s)) => s,
            Some(v) => v.to_string(),
        };
        if text.len() > MAX_KEY_VALUE {
            let mut cut = MAX_KEY_VALUE;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
        }
        text.replace('\0', "")
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}
