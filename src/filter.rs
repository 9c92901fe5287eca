//! Payload filters on triggers: a job's trigger may say which payloads it wants.
//!
//! A filter is a JSON object shaped like the payload. Each key holds either a nested filter object
//! or an array of *conditions*; the field matches when any condition in its array matches. A
//! condition is a literal (equal to the value, or contained in it when the value is an array) or an
//! operator object:
//!
//! | operator | matches when the field |
//! |---|---|
//! | `{"$gt": n}` `{"$gte": n}` `{"$lt": n}` `{"$lte": n}` | is a number compared with `n` |
//! | `{"$between": [a, b]}` | is a number with `a <= x <= b` |
//! | `{"$startsWith": "s"}` `{"$endsWith": "s"}` | is a string with that prefix / suffix |
//! | `{"$exists": true\|false}` | is present (or absent) |
//! | `{"$anythingBut": v or [v, …]}` | is present and equal to none of the values |
//! | `{"$includes": v}` | is an array containing `v` |
//!
//! ```
//! # use serde_json::json;
//! let f = flare::Filter::parse(&json!({"currency": ["usd", "eur"], "amount": [{"$gte": 100}]})).unwrap();
//! assert!(f.matches(&json!({"currency": "usd", "amount": 250})));
//! assert!(!f.matches(&json!({"currency": "gbp", "amount": 250})));
//! ```

use serde_json::{Map, Value};

/// Why a filter was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid payload filter at `{path}`: {reason}")]
pub struct InvalidFilter {
    /// Where in the filter the problem is.
    pub path: String,
    /// What is wrong.
    pub reason: String,
}

/// A parsed payload filter. Build it with [`Filter::parse`]; test payloads with [`Filter::matches`].
#[derive(Debug, Clone, PartialEq)]
pub struct Filter {
    source: Value,
    fields: Vec<(String, FieldRule)>,
}

#[derive(Debug, Clone, PartialEq)]
enum FieldRule {
    Nested(Filter),
    AnyOf(Vec<Condition>),
}

#[derive(Debug, Clone, PartialEq)]
enum Condition {
    Equals(Value),
    Gt(f64),
    Gte(f64),
    Lt(f64),
    Lte(f64),
    Between(f64, f64),
    StartsWith(String),
    EndsWith(String),
    Exists(bool),
    AnythingBut(Vec<Value>),
    Includes(Value),
}

impl Filter {
    /// Parses a filter object, refusing unknown operators and malformed arguments.
    pub fn parse(value: &Value) -> Result<Self, InvalidFilter> {
        Self::parse_at(value, "$")
    }

    fn parse_at(value: &Value, path: &str) -> Result<Self, InvalidFilter> {
        let obj = value.as_object().ok_or_else(|| InvalidFilter {
            path: path.to_string(),
            reason: "a filter must be a JSON object".into(),
        })?;
        let mut fields = Vec::with_capacity(obj.len());
        for (key, rule) in obj {
            let here = format!("{path}.{key}");
            let rule = match rule {
                Value::Object(_) => FieldRule::Nested(Self::parse_at(rule, &here)?),
                Value::Array(conds) => FieldRule::AnyOf(
                    conds
                        .iter()
                        .enumerate()
                        .map(|(i, c)| Condition::parse(c, &format!("{here}[{i}]")))
                        .collect::<Result<_, _>>()?,
                ),
                _ => {
                    return Err(InvalidFilter {
                        path: here,
                        reason: "expected an array of conditions or a nested object".into(),
                    })
                }
            };
            fields.push((key.clone(), rule));
        }
        Ok(Self {
            source: value.clone(),
            fields,
        })
    }

    /// The filter as written.
    pub fn as_json(&self) -> &Value {
        &self.source
    }

    /// True when the payload satisfies every field of the filter.
    pub fn matches(&self, payload: &Value) -> bool {
        let empty = Map::new();
        let obj = payload.as_object().unwrap_or(&empty);
        self.fields.iter().all(|(key, rule)| {
            let field = obj.get(key);
            match rule {
                FieldRule::Nested(inner) => field.is_some_and(|v| inner.matches(v)),
                FieldRule::AnyOf(conds) => conds.iter().any(|c| c.matches(field)),
            }
        })
    }
}

impl Condition {
    fn parse(value: &Value, path: &str) -> Result<Self, InvalidFilter> {
        let bad = |reason: &str| InvalidFilter {
            path: path.to_string(),
            reason: reason.to_string(),
        };
        let Some(obj) = value.as_object() else {
            return Ok(Condition::Equals(value.clone()));
        };
        if obj.len() != 1 {
            return Err(bad(
                "an operator object must have exactly one `$operator` key",
            ));
        }
        let Some((op, arg)) = obj.iter().next() else {
            return Err(bad("empty operator object"));
        };
        let number = || {
            arg.as_f64()
                .ok_or_else(|| bad(&format!("`{op}` needs a number")))
        };
        let string = || {
            arg.as_str()
                .map(str::to_string)
                .ok_or_else(|| bad(&format!("`{op}` needs a string")))
        };
        Ok(match op.as_str() {
            "$gt" => Condition::Gt(number()?),
            "$gte" => Condition::Gte(number()?),
            "$lt" => Condition::Lt(number()?),
            "$lte" => Condition::Lte(number()?),
            "$between" => match arg.as_array().map(Vec::as_slice) {
                Some([a, b]) => match (a.as_f64(), b.as_f64()) {
                    (Some(a), Some(b)) if a <= b => Condition::Between(a, b),
                    _ => return Err(bad("`$between` needs two numbers [low, high] with low <= high")),
                },
                _ => return Err(bad("`$between` needs two numbers [low, high]")),
            },
            "$startsWith" => Condition::StartsWith(string()?),
            "$endsWith" => Condition::EndsWith(string()?),
            "$exists" => Condition::Exists(arg.as_bool().ok_or_else(|| bad("`$exists` needs true or false"))?),
            "$anythingBut" => Condition::AnythingBut(match arg {
                Value::Array(vs) => vs.clone(),
                v => vec![v.clone()],
            }),
            "$includes" => Condition::Includes(arg.clone()),
            other => {
                return Err(bad(&format!(
                    "unknown operator `{other}` (known: $gt $gte $lt $lte $between $startsWith $endsWith $exists $anythingBut $includes)"
                )))
            }
        })
    }

    fn matches(&self, field: Option<&Value>) -> bool {
        let num = || field.and_then(Value::as_f64);
        let text = || field.and_then(Value::as_str);
        match self {
            Condition::Equals(want) => match field {
                Some(Value::Array(items)) => items.contains(want),
                Some(v) => v == want,
                None => false,
            },
            Condition::Gt(n) => num().is_some_and(|x| x > *n),
            Condition::Gte(n) => num().is_some_and(|x| x >= *n),
            Condition::Lt(n) => num().is_some_and(|x| x < *n),
            Condition::Lte(n) => num().is_some_and(|x| x <= *n),
            Condition::Between(a, b) => num().is_some_and(|x| *a <= x && x <= *b),
            Condition::StartsWith(p) => text().is_some_and(|s| s.starts_with(p.as_str())),
            Condition::EndsWith(p) => text().is_some_and(|s| s.ends_with(p.as_str())),
            Condition::Exists(want) => field.is_some() == *want,
            Condition::AnythingBut(values) => field.is_some_and(|v| !values.contains(v)),
            Condition::Includes(want) => field
                .and_then(Value::as_array)
                .is_some_and(|a| a.contains(want)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn f(v: Value) -> Filter {
        Filter::parse(&v).expect("valid filter")
    }

    #[test]
    fn literals_match_any_listed_value() {
        let filter = f(json!({"currency": ["usd", "eur"]}));
        assert!(filter.matches(&json!({"currency": "usd"})));
        assert!(filter.matches(&json!({"currency": "eur", "x": 1})));
        assert!(!filter.matches(&json!({"currency": "gbp"})));
        assert!(!filter.matches(&json!({})));
        assert!(!filter.matches(&json!(null)));
    }

    #[test]
    fn numeric_operators() {
        let p = json!({"amount": 100});
        assert!(f(json!({"amount": [{"$gt": 99}]})).matches(&p));
        assert!(!f(json!({"amount": [{"$gt": 100}]})).matches(&p));
        assert!(f(json!({"amount": [{"$gte": 100}]})).matches(&p));
        assert!(f(json!({"amount": [{"$lt": 101}]})).matches(&p));
        assert!(!f(json!({"amount": [{"$lt": 100}]})).matches(&p));
        assert!(f(json!({"amount": [{"$lte": 100}]})).matches(&p));
        assert!(f(json!({"amount": [{"$between": [50, 100]}]})).matches(&p));
        assert!(!f(json!({"amount": [{"$between": [101, 200]}]})).matches(&p));
        assert!(!f(json!({"amount": [{"$gt": 1}]})).matches(&json!({"amount": "100"})));
    }

    #[test]
    fn string_existence_and_exclusion_operators() {
        let p = json!({"email": "ada@example.com", "tags": ["vip", "beta"]});
        assert!(f(json!({"email": [{"$startsWith": "ada@"}]})).matches(&p));
        assert!(!f(json!({"email": [{"$startsWith": "bob@"}]})).matches(&p));
        assert!(f(json!({"email": [{"$endsWith": "example.com"}]})).matches(&p));
        assert!(f(json!({"email": [{"$exists": true}]})).matches(&p));
        assert!(!f(json!({"phone": [{"$exists": true}]})).matches(&p));
        assert!(f(json!({"phone": [{"$exists": false}]})).matches(&p));
        assert!(f(json!({"email": [{"$anythingBut": ["x@y.z"]}]})).matches(&p));
        assert!(!f(json!({"email": [{"$anythingBut": "ada@example.com"}]})).matches(&p));
        assert!(f(json!({"tags": [{"$includes": "vip"}]})).matches(&p));
        assert!(!f(json!({"tags": [{"$includes": "gold"}]})).matches(&p));
        assert!(
            f(json!({"tags": ["beta"]})).matches(&p),
            "a literal matches inside an array"
        );
    }

    #[test]
    fn nested_objects_and_all_fields_must_match() {
        let filter = f(json!({"customer": {"country": ["fr"]}, "amount": [{"$gt": 10}]}));
        assert!(filter.matches(&json!({"customer": {"country": "fr"}, "amount": 11})));
        assert!(!filter.matches(&json!({"customer": {"country": "fr"}, "amount": 9})));
        assert!(!filter.matches(&json!({"customer": {"country": "de"}, "amount": 11})));
        assert!(!filter.matches(&json!({"amount": 11})));
    }

    #[test]
    fn malformed_filters_are_refused_with_their_path() {
        let err = Filter::parse(&json!({"a": [{"$near": 1}]})).unwrap_err();
        assert_eq!(err.path, "$.a[0]");
        assert!(err.reason.contains("unknown operator `$near`"));
        assert!(Filter::parse(&json!({"a": 1})).is_err());
        assert!(Filter::parse(&json!({"a": [{"$between": [3, 1]}]})).is_err());
        assert!(Filter::parse(&json!({"a": [{"$gt": "x"}]})).is_err());
        assert!(Filter::parse(&json!([1])).is_err());
    }
}
