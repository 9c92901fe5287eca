//! Templates over a delivery: the event name (`acme.{payload.type}`) and the delivery id
//! (`{header.x-acme-delivery}`, `{payload.id}`) of a source.
//!
//! A template is literal text with placeholders in braces: `{payload.<path>}` (a dotted path into
//! the JSON body; a segment of digits indexes an array) and `{header.<name>}` (a request header,
//! any case). `{{` and `}}` stand for a literal brace. A placeholder's value is a string, or a
//! number or boolean written as JSON writes it; a missing field, `null`, an object or an array
//! is refused with the placeholder named, so a delivery never becomes an event named after
//! nothing.

use serde_json::Value;

/// The longest template accepted, in bytes.
pub const MAX_TEMPLATE_LEN: usize = 200;

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Payload(Vec<String>),
    Header(String),
}

/// A parsed template; [`Template::as_str`] gives it back as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    text: String,
    parts: Vec<Part>,
}

/// Why a template cannot be used, or cannot be filled for one delivery.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// The template is malformed (the message says where).
    #[error("{0}")]
    Invalid(String),
    /// The delivery lacks what a placeholder names.
    #[error("the delivery has no {0} (needed by the template {1:?})")]
    Missing(String, String),
}

impl Template {
    /// Parses `text`.
    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        if text.is_empty() || text.len() > MAX_TEMPLATE_LEN {
            return Err(TemplateError::Invalid(format!(
                "a template must be 1 to {MAX_TEMPLATE_LEN} bytes"
            )));
        }
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    literal.push('}');
                }
                '}' => {
                    return Err(TemplateError::Invalid(format!(
                        "template {text:?} has a `}}` without `{{` (write `}}}}` for a brace)"
                    )))
                }
                '{' => {
                    let mut inner = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some(c) => inner.push(c),
                            None => {
                                return Err(TemplateError::Invalid(format!(
                                    "template {text:?} has a `{{` without `}}`"
                                )))
                            }
                        }
                    }
                    if !literal.is_empty() {
                        parts.push(Part::Literal(std::mem::take(&mut literal)));
                    }
                    parts.push(placeholder(text, inner.trim())?);
                }
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Literal(literal));
        }
        Ok(Self {
            text: text.to_string(),
            parts,
        })
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The headers its placeholders name (lowercase).
    pub fn headers(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            Part::Header(h) => Some(h.as_str()),
            _ => None,
        })
    }

    /// True when it has no placeholder.
    pub fn is_literal(&self) -> bool {
        self.parts.iter().all(|p| matches!(p, Part::Literal(_)))
    }

    /// The text with every placeholder filled from `payload` and `header`.
    pub fn fill(
        &self,
        payload: &Value,
        header: &dyn Fn(&str) -> Option<String>,
    ) -> Result<String, TemplateError> {
        self.fill_with(|part| match part {
            Part::Payload(path) => lookup(payload, path).and_then(scalar),
            Part::Header(name) => header(name).filter(|v| !v.is_empty()),
            Part::Literal(_) => None,
        })
    }

    /// The text with every placeholder replaced by `x`: what a name looks like at best, for
    /// checking the literal parts when the source is created.
    pub fn sample(&self) -> String {
        self.fill_with(|_| Some("x".to_string()))
            .unwrap_or_default()
    }

    fn fill_with(
        &self,
        mut value: impl FnMut(&Part) -> Option<String>,
    ) -> Result<String, TemplateError> {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(text) => out.push_str(text),
                other => match value(other) {
                    Some(v) => out.push_str(&v),
                    None => {
                        let what = match other {
                            Part::Payload(path) => format!("payload field `{}`", path.join(".")),
                            Part::Header(name) => format!("header {name}"),
                            Part::Literal(_) => String::new(),
                        };
                        return Err(TemplateError::Missing(what, self.text.clone()));
                    }
                },
            }
        }
        Ok(out)
    }
}

fn placeholder(text: &str, inner: &str) -> Result<Part, TemplateError> {
    if let Some(path) = inner.strip_prefix("payload.") {
        let segments: Vec<String> = path.split('.').map(str::to_string).collect();
        if segments.iter().any(String::is_empty) {
            return Err(TemplateError::Invalid(format!(
                "template {text:?}: `{{{inner}}}` has an empty path segment"
            )));
        }
        return Ok(Part::Payload(segments));
    }
    if let Some(name) = inner.strip_prefix("header.") {
        let valid = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !valid {
            return Err(TemplateError::Invalid(format!(
                "template {text:?}: `{{{inner}}}` is not a header name"
            )));
        }
        return Ok(Part::Header(name.to_ascii_lowercase()));
    }
    Err(TemplateError::Invalid(format!(
        "template {text:?}: `{{{inner}}}` is neither `{{payload.<path>}}` nor `{{header.<name>}}`"
    )))
}

fn lookup<'a>(value: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, segment| match v {
        Value::Object(map) => map.get(segment),
        Value::Array(items) => segment.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => None,
    })
}

fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn no_headers(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn placeholders_fill_from_payload_and_headers() {
        let t = Template::parse("acme.{payload.type}.{header.X-Kind}").expect("parse");
        let payload = json!({"type": "invoice.paid"});
        let headers = |name: &str| (name == "x-kind").then(|| "v2".to_string());
        assert_eq!(
            t.fill(&payload, &headers).expect("fill"),
            "acme.invoice.paid.v2"
        );
        assert_eq!(t.headers().collect::<Vec<_>>(), vec!["x-kind"]);
        let t = Template::parse("{payload.items.1.id}-{payload.n}-{payload.ok}").expect("parse");
        let payload = json!({"items": [{"id": "a"}, {"id": "b"}], "n": 7, "ok": true});
        assert_eq!(t.fill(&payload, &no_headers).expect("fill"), "b-7-true");
        let t = Template::parse("{{literal}}").expect("parse");
        assert!(t.is_literal());
        assert_eq!(t.fill(&json!({}), &no_headers).expect("fill"), "{literal}");
    }

    #[test]
    fn a_missing_field_is_named() {
        let t = Template::parse("acme.{payload.type}").expect("parse");
        for payload in [
            json!({}),
            json!({"type": null}),
            json!({"type": {"a": 1}}),
            json!({"type": ""}),
        ] {
            let e = t.fill(&payload, &no_headers).expect_err("missing");
            assert_eq!(
                e.to_string(),
                "the delivery has no payload field `type` (needed by the template \"acme.{payload.type}\")"
            );
        }
    }

    #[test]
    fn malformed_templates_are_refused() {
        for bad in [
            "",
            "a{",
            "a}",
            "{type}",
            "{payload.}",
            "{payload.a..b}",
            "{header.}",
            "{header.a b}",
        ] {
            assert!(Template::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Template::parse(&"a".repeat(MAX_TEMPLATE_LEN + 1)).is_err());
    }
}
