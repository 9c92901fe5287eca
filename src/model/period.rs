//! What a rate limit, a throttle and a debounce share: the bounds of their period, and reading
//! their JSON form (`{"limit", "periodMs", "key", …}` from a `Job` builder's value or an
//! endpoint's index) with errors that name the field.

use serde_json::{Map, Value};

/// Shortest period, ms.
pub const MIN_PERIOD_MS: u64 = 1_000;
/// Longest period, ms (7 days).
pub const MAX_PERIOD_MS: u64 = 7 * 86_400_000;

/// A window's JSON object, its fields checked against `allowed`; errors say `{field}.{name}`.
pub(crate) struct WindowJson<'a> {
    o: &'a Map<String, Value>,
    field: &'a str,
}

impl<'a> WindowJson<'a> {
    /// `v` as an object holding only `allowed` fields.
    pub(crate) fn read(v: &'a Value, field: &'a str, allowed: &[&str]) -> Result<Self, String> {
        let list = allowed.join(", ");
        let Value::Object(o) = v else {
            let quoted: Vec<String> = allowed.iter().map(|f| format!("\"{f}\"")).collect();
            return Err(format!("{field}: an object {{{}}}", quoted.join(", ")));
        };
        if let Some(other) = o.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(format!("{field}.{other}: unknown field ({list})"));
        }
        Ok(Self { o, field })
    }

    /// Field `name`, a whole number.
    pub(crate) fn whole(&self, name: &str) -> Result<u64, String> {
        self.o
            .get(name)
            .and_then(Value::as_u64)
            .ok_or_else(|| format!("{}.{name}: a whole number", self.field))
    }

    /// Field `name` when present (not null), a whole number.
    pub(crate) fn whole_opt(&self, name: &str) -> Result<Option<u64>, String> {
        match self.o.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(_) => self.whole(name).map(Some),
        }
    }

    /// The `key`: a string (a CEL expression), or none.
    pub(crate) fn key(&self) -> Result<Option<String>, String> {
        match self.o.get("key") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!("{}.key: a string", self.field)),
        }
    }
}

/// Checks a period: from [`MIN_PERIOD_MS`] (1 s) to [`MAX_PERIOD_MS`] (7 days).
pub(crate) fn check_period(field: &str, period_ms: u64) -> Result<(), String> {
    if (MIN_PERIOD_MS..=MAX_PERIOD_MS).contains(&period_ms) {
        return Ok(());
    }
    Err(format!(
        "{field}.periodMs: must be from {MIN_PERIOD_MS} (1 s) to {MAX_PERIOD_MS} (7 days), got {period_ms}"
    ))
}
