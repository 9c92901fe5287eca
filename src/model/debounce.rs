//! A job's debounce: a burst of events for one value of a key (a CEL expression over the event,
//! as for concurrency keys) becomes **one** run, started `period` after the last of them, with
//! the last event's payload; each event within the window pushes the start back, never past
//! `timeout` after the first. A run that has started is not changed: a later event opens a new
//! window. The earlier events link to the run they were folded into.
//!
//! [`Debounce`] is what is written (the `Job` builder, an endpoint's `debounce`), checked into a
//! [`DebounceWindow`] when the job is defined; [`DebounceWindow::due`] is the start of a window's
//! run, the one rule both stores apply.

use std::time::Duration;

use serde_json::{json, Value};

use super::cel::{CelKey, EventFields};
use super::period::{check_period, WindowJson, MAX_PERIOD_MS};

/// The key of a debounce without one: the whole job.
pub const WHOLE_JOB: &str = "*";

/// A debounce as written, before checking: `Debounce::new(period).key("…").timeout(…)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Debounce {
    /// How long after the last event the run starts, ms.
    pub period_ms: u64,
    /// The key: a CEL expression over `event`; none for the whole job.
    pub key: Option<String>,
    /// The latest start after the window's first event, ms; none: no bound.
    pub timeout_ms: Option<u64>,
}

impl Debounce {
    /// One run per burst of events, started `period` (1 s to 7 days) after the last of them.
    pub fn new(period: Duration) -> Self {
        Self {
            period_ms: millis(period),
            key: None,
            timeout_ms: None,
        }
    }

    /// One window per value of `key`, a CEL expression over `event` (`event.payload.id`).
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// The run starts at most `timeout` (from the period to 7 days) after the window's first
    /// event, however many events follow.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout_ms = Some(millis(timeout));
        self
    }

    /// Reads `{"periodMs", "key"?, "timeoutMs"?}`; errors name the field under `field`.
    pub fn from_json(v: &Value, field: &str) -> Result<Self, String> {
        let o = WindowJson::read(v, field, &["periodMs", "key", "timeoutMs"])?;
        Ok(Self {
            period_ms: o.whole("periodMs")?,
            key: o.key()?,
            timeout_ms: o.whole_opt("timeoutMs")?,
        })
    }

    /// Checks it: a period from 1 s to 7 days, a timeout from the period to 7 days, a key that
    /// compiles. Errors name the field (`debounce.periodMs`, …).
    pub fn check(&self) -> Result<DebounceWindow, String> {
        check_period("debounce", self.period_ms)?;
        if let Some(t) = self.timeout_ms {
            if t < self.period_ms || t > MAX_PERIOD_MS {
                return Err(format!(
                    "debounce.timeoutMs: must be from periodMs ({}) to {MAX_PERIOD_MS} (7 days), got {t}",
                    self.period_ms
                ));
            }
        }
        let key = self
            .key
            .as_deref()
            .map(CelKey::parse)
            .transpose()
            .map_err(|e| format!("debounce.key: {e}"))?;
        Ok(DebounceWindow {
            period_ms: self.period_ms,
            key,
            timeout_ms: self.timeout_ms,
        })
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A checked debounce.
#[derive(Debug, Clone, PartialEq)]
pub struct DebounceWindow {
    /// How long after the last event the run starts, ms.
    pub period_ms: u64,
    /// The key.
    pub key: Option<CelKey>,
    /// The latest start after the window's first event, ms.
    pub timeout_ms: Option<u64>,
}

impl DebounceWindow {
    /// The stored and listed form: `{"periodMs", "key"?, "timeoutMs"?}`.
    pub fn to_json(&self) -> Value {
        let mut v = json!({ "periodMs": self.period_ms });
        if let Some(k) = &self.key {
            v["key"] = json!(k.source());
        }
        if let Some(t) = self.timeout_ms {
            v["timeoutMs"] = json!(t);
        }
        v
    }

    /// The key's text for `event` ([`WHOLE_JOB`] without a key).
    pub fn key_of(&self, event: &EventFields<'_>) -> String {
        match &self.key {
            Some(k) => k.key_of(event),
            None => WHOLE_JOB.to_string(),
        }
    }

    /// The period, ms, as the stores keep times.
    pub fn period(&self) -> i64 {
        i64::try_from(self.period_ms).unwrap_or(i64::MAX)
    }

    /// The timeout, ms; without one, no bound.
    pub fn timeout(&self) -> i64 {
        self.timeout_ms
            .map_or(i64::MAX, |t| i64::try_from(t).unwrap_or(i64::MAX))
    }

    /// When the run of a window opened at `first` starts after an event at `now`, given its
    /// start so far (`due`, none for a new window): the period after `now`, never past the
    /// timeout after `first`, and never earlier than it was (clocks of several processes).
    pub fn due(&self, first: i64, now: i64, due: Option<i64>) -> i64 {
        let at = now
            .saturating_add(self.period())
            .min(first.saturating_add(self.timeout()));
        due.map_or(at, |d| d.max(at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(period_ms: u64, timeout_ms: Option<u64>) -> DebounceWindow {
        Debounce {
            period_ms,
            key: None,
            timeout_ms,
        }
        .check()
        .expect("valid")
    }

    #[test]
    fn each_event_pushes_the_start_back_up_to_the_timeout() {
        let w = window(5_000, Some(12_000));
        assert_eq!(w.due(1_000, 1_000, None), 6_000);
        assert_eq!(w.due(1_000, 4_000, Some(6_000)), 9_000);
        assert_eq!(
            w.due(1_000, 9_000, Some(9_000)),
            13_000,
            "capped at first + timeout"
        );
        assert_eq!(w.due(1_000, 8_000, Some(13_000)), 13_000, "never earlier");
        let unbounded = window(5_000, None);
        assert_eq!(unbounded.due(0, 1_000_000, Some(6_000)), 1_005_000);
    }

    #[test]
    fn bad_debounces_name_the_field() {
        let bad = |period_ms, timeout_ms, key: Option<&str>| {
            Debounce {
                period_ms,
                key: key.map(str::to_string),
                timeout_ms,
            }
            .check()
            .expect_err("refused")
        };
        assert!(bad(999, None, None).starts_with("debounce.periodMs"));
        assert!(bad(MAX_PERIOD_MS + 1, None, None).starts_with("debounce.periodMs"));
        assert!(bad(5_000, Some(4_999), None).starts_with("debounce.timeoutMs"));
        assert!(bad(5_000, Some(MAX_PERIOD_MS + 1), None).starts_with("debounce.timeoutMs"));
        assert!(bad(5_000, None, Some("event.(")).starts_with("debounce.key"));
        let read = |v: Value| Debounce::from_json(&v, "debounce").expect_err("refused");
        assert!(read(json!({"key": "event.id"})).starts_with("debounce.periodMs"));
        assert!(
            read(json!({"periodMs": 5000, "timeoutMs": "1m"})).starts_with("debounce.timeoutMs")
        );
        assert!(read(json!({"periodMs": 5000, "limit": 1})).starts_with("debounce.limit"));
        assert!(read(json!(5000)).starts_with("debounce:"));
    }

    #[test]
    fn the_builder_reads_like_its_json() {
        let built = Debounce::new(Duration::from_secs(5))
            .key("event.payload.id")
            .timeout(Duration::from_secs(60));
        let read = Debounce::from_json(
            &json!({"periodMs": 5000, "key": "event.payload.id", "timeoutMs": 60000}),
            "debounce",
        )
        .expect("valid");
        assert_eq!(built, read);
        assert_eq!(
            built.check().expect("valid").to_json(),
            json!({"periodMs": 5000, "key": "event.payload.id", "timeoutMs": 60000})
        );
    }
}
