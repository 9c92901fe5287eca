//! Flow control of a job: its cluster-wide concurrency limits ([`Concurrency`]), each over the
//! whole job, per value of a CEL key evaluated on the event ([`CelKey`]), or shared by every job
//! naming a group; and the *slots* a run takes ([`RunSlots`]), the counters the store keeps per
//! limit so that a claim only looks at keys with free capacity.
//!
//! A run of a job with limits gets one or two slot names when it is created: the first (`a`) is
//! always the job's own (`key:<job>:<value>` for a keyed limit, else `job:<job>`) and is the
//! queue its runs wait in; the second (`b`), when the job has a second limit, is `job:<job>` or
//! `group:<name>`. A run executes only while both of its slots have room.

pub use super::cel::{CelKey, EventFields, MAX_KEY_EXPR, MAX_KEY_VALUE, NULL_KEY};
use super::throttle::Throttle;
use serde_json::{json, Value};

/// The capacity of a job's own slot when only a group limits it.
pub const UNLIMITED: u32 = i32::MAX as u32;

/// One concurrency limit as written (the `Job` builder, an endpoint's index), before checking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConcurrencyLimit {
    /// Runs executing at once.
    pub limit: u32,
    /// What the limit counts over.
    pub scope: LimitScope,
}

/// What a limit counts over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitScope {
    /// The whole job.
    Job,
    /// Each value of a CEL expression over the event.
    Key(String),
    /// Every job naming this group.
    Group(String),
}

impl ConcurrencyLimit {
    /// At most `limit` runs of the job at once, across every process.
    pub fn job(limit: u32) -> Self {
        Self {
            limit,
            scope: LimitScope::Job,
        }
    }
    /// At most `limit` runs at once per value of `key`, a CEL expression over `event`
    /// (`event.payload.customerId`).
    pub fn key(limit: u32, key: impl Into<String>) -> Self {
        Self {
            limit,
            scope: LimitScope::Key(key.into()),
        }
    }
    /// At most `limit` runs at once of all the jobs naming `group`.
    pub fn group(limit: u32, group: impl Into<String>) -> Self {
        Self {
            limit,
            scope: LimitScope::Group(group.into()),
        }
    }

    /// The limit as JSON: `{"limit": n}`, with `key` or `group`.
    pub fn to_json(&self) -> Value {
        match &self.scope {
            LimitScope::Job => json!({ "limit": self.limit }),
            LimitScope::Key(k) => json!({ "limit": self.limit, "key": k }),
            LimitScope::Group(g) => json!({ "limit": self.limit, "group": g }),
        }
    }

    /// Reads the JSON forms of `concurrency`: a number, an object (`limit` with `key` or
    /// `group`), or a list of at most two of these. Errors name the field under `field`.
    pub fn list_from_json(v: &Value, field: &str) -> Result<Vec<Self>, String> {
        match v {
            Value::Null => Ok(Vec::new()),
            Value::Array(items) => {
                if items.len() > 2 {
                    return Err(format!("{field}: a list of at most two limits"));
                }
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| match item {
                        Value::Array(_) => Err(format!("{field}[{i}]: a number or an object")),
                        other => Self::one_from_json(other, &format!("{field}[{i}]")),
                    })
                    .collect()
            }
            other => Ok(vec![Self::one_from_json(other, field)?]),
        }
    }

    fn one_from_json(v: &Value, field: &str) -> Result<Self, String> {
        let limit_of = |n: &Value, f: &str| {
            n.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| format!("{f}: a whole number from 1"))
        };
        match v {
            Value::Number(_) => Ok(Self::job(limit_of(v, field)?)),
            Value::Object(o) => {
                if let Some(other) = o
                    .keys()
                    .find(|k| !["limit", "key", "group"].contains(&k.as_str()))
                {
                    return Err(format!(
                        "{field}.{other}: unknown field (limit, key, group)"
                    ));
                }
                let limit = limit_of(
                    o.get("limit").unwrap_or(&Value::Null),
                    &format!("{field}.limit"),
                )?;
                let text = |name: &str| match o.get(name) {
                    None | Some(Value::Null) => Ok(None),
                    Some(Value::String(s)) => Ok(Some(s.clone())),
                    Some(_) => Err(format!("{field}.{name}: a string")),
                };
                match (text("key")?, text("group")?) {
                    (Some(_), Some(_)) => Err(format!("{field}: key or group, not both")),
                    (Some(k), None) => Ok(Self::key(limit, k)),
                    (None, Some(g)) => Ok(Self::group(limit, g)),
                    (None, None) => Ok(Self::job(limit)),
                }
            }
            _ => Err(format!("{field}: a number, an object or a list")),
        }
    }
}

/// A checked limit.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    /// Runs executing at once.
    pub limit: u32,
    /// What it counts over.
    pub scope: Scope,
}

/// What a checked limit counts over.
#[derive(Debug, Clone, PartialEq)]
pub enum Scope {
    /// The whole job.
    Job,
    /// Each value of the key.
    Key(CelKey),
    /// Every job naming the group.
    Group(String),
}

/// A job's checked concurrency limits: none, one, or two of different shapes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Concurrency {
    limits: Vec<Limit>,
}

/// The slots one run takes (see the module's doc).
#[derive(Debug, Clone, PartialEq)]
pub struct RunSlots {
    /// The job's own slot: the queue the run waits in.
    pub a: String,
    /// Its capacity.
    pub cap_a: u32,
    /// The second slot and its capacity.
    pub b: Option<(String, u32)>,
    /// The key's value, for a keyed limit.
    pub key: Option<String>,
    /// The throttle on the first slot: the spacing of starts and the tolerance, ms.
    pub throttle: Option<(f64, f64)>,
}

fn group_ok(g: &str) -> bool {
    !g.is_empty()
        && g.len() <= 100
        && g.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

impl Concurrency {
    /// Checks limits as written: each at least 1, a key that compiles, a group name of 1-100
    /// letters, digits, `-`, `_`, `.`, at most two limits and not two of one shape. The error
    /// names the field (`concurrency`, `concurrency[1].key`, …).
    pub fn new(drafts: &[ConcurrencyLimit]) -> Result<Self, String> {
        if drafts.len() > 2 {
            return Err("concurrency: at most two limits".into());
        }
        let mut limits = Vec::with_capacity(drafts.len());
        for (i, d) in drafts.iter().enumerate() {
            let field = if drafts.len() == 1 {
                "concurrency".to_string()
            } else {
                format!("concurrency[{i}]")
            };
            if d.limit == 0 || d.limit >= UNLIMITED {
                return Err(format!(
                    "{field}.limit: must be from 1 to {}, got {}",
                    UNLIMITED - 1,
                    d.limit
                ));
            }
            let scope = match &d.scope {
                LimitScope::Job => Scope::Job,
                LimitScope::Key(k) => {
                    Scope::Key(CelKey::parse(k).map_err(|e| format!("{field}.key: {e}"))?)
                }
                LimitScope::Group(g) => {
                    if !group_ok(g) {
                        return Err(format!(
                            "{field}.group: {g:?} is not a group name (1-100 letters, digits, '-', '_', '.')"
                        ));
                    }
                    Scope::Group(g.clone())
                }
            };
            limits.push(Limit {
                limit: d.limit,
                scope,
            });
        }
        if let [x, y] = limits.as_slice() {
            if std::mem::discriminant(&x.scope) == std::mem::discriminant(&y.scope) {
                return Err(
                    "concurrency: two limits of the same shape (use one per job, one per key, one group)"
                        .into(),
                );
            }
        }
        Ok(Self { limits })
    }

    /// No limit.
    pub fn is_empty(&self) -> bool {
        self.limits.is_empty()
    }

    /// The limits.
    pub fn limits(&self) -> &[Limit] {
        &self.limits
    }

    /// The whole-job limit, if any.
    pub fn job_limit(&self) -> Option<u32> {
        self.limits
            .iter()
            .find(|l| l.scope == Scope::Job)
            .map(|l| l.limit)
    }

    /// The limits as written.
    pub fn drafts(&self) -> Vec<ConcurrencyLimit> {
        self.limits
            .iter()
            .map(|l| ConcurrencyLimit {
                limit: l.limit,
                scope: match &l.scope {
                    Scope::Job => LimitScope::Job,
                    Scope::Key(k) => LimitScope::Key(k.source().to_string()),
                    Scope::Group(g) => LimitScope::Group(g.clone()),
                },
            })
            .collect()
    }

    /// The stored form: a JSON list of limits, `None` without limits.
    pub fn to_json(&self) -> Option<Value> {
        (!self.is_empty())
            .then(|| Value::Array(self.drafts().iter().map(|d| d.to_json()).collect()))
    }

    /// The job's second slot (`job:<job>` or `group:<name>`), the same for all its runs.
    pub fn second_slot(&self, job: &str) -> Option<(String, u32)> {
        self.second_slot_with(job, None)
    }

    /// The slots a run of `job` takes for `event`; `None` without limits.
    pub fn slots(&self, job: &str, event: &EventFields<'_>) -> Option<RunSlots> {
        self.slots_with(job, None, event)
    }

    fn key_limit(&self) -> Option<(&CelKey, u32)> {
        self.limits.iter().find_map(|l| match &l.scope {
            Scope::Key(k) => Some((k, l.limit)),
            _ => None,
        })
    }

    /// Checks these limits together with a throttle: the throttle is kept on the run's first
    /// slot, so a keyed throttle needs the concurrency key (or none), a throttle over the whole
    /// job no concurrency key, and what is left for the second slot is one limit at most.
    pub fn check_with(&self, throttle: Option<&Throttle>) -> Result<(), String> {
        let Some(t) = throttle else { return Ok(()) };
        match (self.key_limit(), &t.key) {
            (Some((k, _)), Some(tk)) if k.source() != tk.source() => Err(format!(
                "throttle.key: must be the concurrency key ({}) when both are keyed",
                k.source()
            )),
            (Some(_), None) => Err(
                "throttle: a throttle over the whole job cannot go with a concurrency limit per key; give it the same key"
                    .into(),
            ),
            (None, Some(_)) if self.limits.len() == 2 => Err(
                "throttle.key: a keyed throttle goes with at most one concurrency limit over the whole job or a group"
                    .into(),
            ),
            _ => Ok(()),
        }
    }

    /// [`Concurrency::second_slot`] for a job that also has `throttle`.
    pub fn second_slot_with(
        &self,
        job: &str,
        throttle: Option<&Throttle>,
    ) -> Option<(String, u32)> {
        let keyed = self.key_limit().is_some() || throttle.is_some_and(|t| t.key.is_some());
        let group = self.limits.iter().find_map(|l| match &l.scope {
            Scope::Group(g) => Some((format!("group:{g}"), l.limit)),
            _ => None,
        });
        let whole = self.job_limit().map(|n| (format!("job:{job}"), n));
        match (keyed, group, whole) {
            (true, Some(g), _) => Some(g),
            (true, None, Some(j)) => Some(j),
            (false, Some(g), _) => Some(g),
            _ => None,
        }
    }

    /// [`Concurrency::slots`] for a job that also has `throttle` (kept on the first slot).
    pub fn slots_with(
        &self,
        job: &str,
        throttle: Option<&Throttle>,
        event: &EventFields<'_>,
    ) -> Option<RunSlots> {
        if self.is_empty() && throttle.is_none() {
            return None;
        }
        let throttle_key = throttle.and_then(|t| t.key.as_ref());
        let (a, cap_a, key) = match (self.key_limit(), throttle_key) {
            (Some((k, cap)), _) => {
                let value = k.key_of(event);
                (format!("key:{job}:{value}"), cap, Some(value))
            }
            (None, Some(k)) => {
                let value = k.key_of(event);
                (format!("key:{job}:{value}"), UNLIMITED, Some(value))
            }
            // A group alone: the job's own slot does not limit.
            (None, None) => (
                format!("job:{job}"),
                self.job_limit().unwrap_or(UNLIMITED),
                None,
            ),
        };
        let b = self
            .second_slot_with(job, throttle)
            .filter(|(name, _)| *name != a);
        Some(RunSlots {
            a,
            cap_a,
            b,
            key,
            throttle: throttle.map(|t| (t.interval(), t.tolerance())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(payload: &Value) -> EventFields<'_> {
        EventFields {
            id: "e1",
            name: "order.paid",
            payload,
            context: None,
            source: "api",
        }
    }

    #[test]
    fn keys_evaluate_over_the_event_and_missing_fields_are_null() {
        let k = CelKey::parse("event.payload.customerId").expect("parses");
        assert_eq!(k.key_of(&ev(&json!({"customerId": "cus_1"}))), "cus_1");
        assert_eq!(k.key_of(&ev(&json!({"customerId": 7}))), "7");
        assert_eq!(k.key_of(&ev(&json!({}))), NULL_KEY);
        let name = CelKey::parse("event.name + ':' + event.source").expect("parses");
        assert_eq!(name.key_of(&ev(&json!({}))), "order.paid:api");
    }

    #[test]
    fn bad_definitions_name_the_field() {
        let err = |d: &[ConcurrencyLimit]| Concurrency::new(d).expect_err("refused");
        assert!(err(&[ConcurrencyLimit::job(0)]).starts_with("concurrency.limit"));
        assert!(err(&[ConcurrencyLimit::key(1, "event.payload.(")]).starts_with("concurrency.key"));
        assert!(err(&[ConcurrencyLimit::key(1, "payload.x")]).contains("unknown variable"));
        assert!(err(&[ConcurrencyLimit::group(1, "a b")]).starts_with("concurrency.group"));
        assert!(err(&[ConcurrencyLimit::job(1), ConcurrencyLimit::job(2)]).contains("same shape"));
        assert!(err(&[
            ConcurrencyLimit::key(1, "event.id"),
            ConcurrencyLimit::key(2, "event.name")
        ])
        .contains("same shape"));
    }

    #[test]
    fn a_throttle_lives_on_the_first_slot() {
        use crate::model::throttle::ThrottleSpec;
        let throttle = |key: Option<&str>| {
            ThrottleSpec {
                limit: 1,
                period_ms: 1_000,
                key: key.map(str::to_string),
                burst: 1,
            }
            .check()
            .expect("valid")
        };
        let keyed =
            Concurrency::new(&[ConcurrencyLimit::key(1, "event.payload.c")]).expect("valid");
        assert!(keyed
            .check_with(Some(&throttle(Some("event.payload.c"))))
            .is_ok());
        assert!(keyed
            .check_with(Some(&throttle(Some("event.id"))))
            .expect_err("refused")
            .starts_with("throttle.key"));
        assert!(keyed.check_with(Some(&throttle(None))).is_err());
        // A keyed throttle alone: the key is the first slot, unlimited; a group is the second.
        let group = Concurrency::new(&[ConcurrencyLimit::group(3, "g")]).expect("valid");
        let t = throttle(Some("event.payload.c"));
        let p = json!({"c": "x"});
        let s = group.slots_with("j", Some(&t), &ev(&p)).expect("slots");
        assert_eq!((s.a.as_str(), s.cap_a), ("key:j:x", UNLIMITED));
        assert_eq!(s.b, Some(("group:g".into(), 3)));
        assert_eq!(s.throttle, Some((1_000.0, 0.0)));
        let two = Concurrency::new(&[ConcurrencyLimit::job(2), ConcurrencyLimit::group(3, "g")])
            .expect("valid");
        assert!(two.check_with(Some(&t)).is_err());
    }

    #[test]
    fn json_forms_read_and_write_back() {
        let v = json!([{"limit": 1, "key": "event.payload.c"}, {"limit": 10, "group": "openai"}]);
        let drafts = ConcurrencyLimit::list_from_json(&v, "concurrency").expect("reads");
        let c = Concurrency::new(&drafts).expect("valid");
        assert_eq!(c.to_json(), Some(v));
        assert_eq!(
            ConcurrencyLimit::list_from_json(&json!(5), "concurrency").expect("reads"),
            vec![ConcurrencyLimit::job(5)]
        );
        assert!(
            ConcurrencyLimit::list_from_json(&json!({"limit": 0.5}), "concurrency")
                .expect_err("refused")
                .starts_with("concurrency.limit")
        );
        assert!(
            ConcurrencyLimit::list_from_json(&json!({"limit": 1, "x": 1}), "concurrency")
                .expect_err("refused")
                .starts_with("concurrency.x")
        );
    }

    #[test]
    fn slots_put_the_job_own_limit_first() {
        let p = json!({"c": "a"});
        let slots = |d: &[ConcurrencyLimit]| {
            Concurrency::new(d)
                .expect("valid")
                .slots("j", &ev(&p))
                .expect("limited")
        };
        let s = slots(&[
            ConcurrencyLimit::key(1, "event.payload.c"),
            ConcurrencyLimit::group(10, "g"),
        ]);
        assert_eq!((s.a.as_str(), s.cap_a), ("key:j:a", 1));
        assert_eq!(s.b, Some(("group:g".into(), 10)));
        let s = slots(&[ConcurrencyLimit::job(3)]);
        assert_eq!((s.a.as_str(), s.cap_a, s.b), ("job:j", 3, None));
        let s = slots(&[ConcurrencyLimit::group(4, "g")]);
        assert_eq!((s.a.as_str(), s.cap_a), ("job:j", UNLIMITED));
        assert_eq!(s.b, Some(("group:g".into(), 4)));
        let s = slots(&[
            ConcurrencyLimit::key(2, "event.payload.c"),
            ConcurrencyLimit::job(5),
        ]);
        assert_eq!(s.b, Some(("job:j".into(), 5)));
        let s = slots(&[ConcurrencyLimit::job(2), ConcurrencyLimit::group(5, "g")]);
        assert_eq!((s.a.as_str(), s.cap_a), ("job:j", 2));
        assert_eq!(s.b, Some(("group:g".into(), 5)));
        assert!(Concurrency::default().slots("j", &ev(&p)).is_none());
    }
}
