//! The webhook sources file given at start (`--webhook-sources`/`FLARE_WEBHOOK_SOURCES`): a JSON
//! array of sources as the API takes them (`{"id": "github", "preset": "github", "secret":
//! "…"}`), where a source may name the environment variable holding its secrets instead
//! (`"secretEnv": "GITHUB_WEBHOOK_SECRET"`, several separated by commas) so the file itself holds
//! none. Read once at start; a source in it cannot be changed through the API.

use serde_json::Value;

use super::Error;
use crate::webhooks::source::{Origin, Source, SourceSpec};

/// Reads and checks the file at `path`; `env` reads a variable.
pub(super) fn read(path: &str, env: impl Fn(&str) -> Option<String>) -> Result<Vec<Source>, Error> {
    let fail = |reason: String| Error::WebhookSources {
        path: path.to_string(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| fail(format!("cannot read it: {e}")))?;
    parse(&text, env).map_err(fail)
}

fn parse(text: &str, env: impl Fn(&str) -> Option<String>) -> Result<Vec<Source>, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Array(items) = value else {
        return Err("expected a JSON array of sources".into());
    };
    let mut out: Vec<Source> = Vec::with_capacity(items.len());
    for (n, mut item) in items.into_iter().enumerate() {
        let at = |e: String| format!("source {}: {e}", n + 1);
        let from_env = match &mut item {
            Value::Object(map) => match map.remove("secretEnv") {
                None => None,
                Some(Value::String(name)) => Some(name),
                Some(_) => return Err(at("secretEnv must be a variable name".into())),
            },
            _ => None,
        };
        if let (Some(name), Value::Object(map)) = (&from_env, &mut item) {
            if map.contains_key("secret") {
                return Err(at("give secret or secretEnv, not both".into()));
            }
            let value = env(name)
                .filter(|v| !v.trim().is_empty())
                .ok_or_else(|| at(format!("the variable {name} named by secretEnv is not set")))?;
            let list: Vec<Value> = value
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| Value::String(s.to_string()))
                .collect();
            map.insert("secret".into(), Value::Array(list));
        }
        let spec = SourceSpec::parse(&item).map_err(at)?;
        let id = spec.id.ok_or_else(|| at("id is required".into()))?;
        if ["payments", "auth"].contains(&id.as_str()) || out.iter().any(|s| s.id == id) {
            return Err(at(format!("the id {id:?} is taken")));
        }
        let secrets = spec.secrets.unwrap_or_default();
        if secrets.is_empty() && spec.settings.verified() {
            return Err(at("secret (or secretEnv) is required".into()));
        }
        out.push(Source {
            id,
            settings: spec.settings,
            secrets,
            origin: Origin::File,
            times: None,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_read_with_secrets_from_the_environment() {
        let text = r#"[
            {"id": "github", "preset": "github", "secretEnv": "GH"},
            {"id": "db", "preset": "database", "secret": ["t1", "t2"]}
        ]"#;
        let env = |name: &str| (name == "GH").then(|| "s1, s2".to_string());
        let sources = parse(text, env).expect("parse");
        assert_eq!(sources[0].secrets, ["s1", "s2"]);
        assert_eq!(sources[1].secrets, ["t1", "t2"]);
    }

    #[test]
    fn errors_name_the_source_and_never_a_secret() {
        let none = |_: &str| None;
        for (text, needle) in [
            (r#"{}"#, "array"),
            (
                r#"[{"id": "payments", "preset": "stripe", "secret": "s"}]"#,
                "taken",
            ),
            (
                r#"[{"id": "a", "preset": "github", "secret": "s"}, {"id": "a", "preset": "github", "secret": "s"}]"#,
                "source 2",
            ),
            (
                r#"[{"id": "a", "preset": "github", "secretEnv": "NOPE"}]"#,
                "NOPE",
            ),
            (r#"[{"id": "a", "preset": "github"}]"#, "secret"),
            (
                r#"[{"id": "a", "preset": "clerk", "secret": "hunter2"}]"#,
                "source 1",
            ),
        ] {
            let e = parse(text, none).expect_err(text);
            assert!(e.contains(needle), "{e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
    }
}
