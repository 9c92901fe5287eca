//! A job's throttle: at most `limit` run *starts* per `period` per value of a key (CEL over the
//! event, as for concurrency keys), `burst` of them at once; the other runs wait queued, in
//! order, and start as the window allows. Nothing is dropped.
//!
//! It is a GCRA (generic cell rate algorithm): starts are spaced `period / limit` apart, and a
//! key that has been quiet may start `burst` at once. The store keeps per key the *theoretical
//! arrival time* (`tat`) on the run's first slot (see `model::flow`): a start is allowed at `now`
//! when `tat - tolerance <= now`, and moves `tat` to `max(tat, now) + interval`.

use serde_json::{json, Value};

use super::cel::CelKey;
use super::period::{check_period, WindowJson};
pub use super::period::{MAX_PERIOD_MS, MIN_PERIOD_MS};

/// Most starts per period.
pub const MAX_THROTTLE_LIMIT: u32 = 100_000;

/// A throttle as written (the `Job` builder, an endpoint's `throttle`), before checking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThrottleSpec {
    /// Starts per period.
    pub limit: u32,
    /// The period, ms.
    pub period_ms: u64,
    /// The key: a CEL expression over `event`; none for the whole job.
    pub key: Option<String>,
    /// Starts allowed at once after a quiet spell (default 1).
    pub burst: u32,
}

/// A checked throttle.
#[derive(Debug, Clone, PartialEq)]
pub struct Throttle {
    /// Starts per period.
    pub limit: u32,
    /// The period, ms.
    pub period_ms: u64,
    /// The key.
    pub key: Option<CelKey>,
    /// Starts allowed at once.
    pub burst: u32,
}

impl ThrottleSpec {
    /// Reads `{"limit", "periodMs", "key"?, "burst"?}`; errors name the field under `field`.
    pub fn from_json(v: &Value, field: &str) -> Result<Self, String> {
        let o = WindowJson::read(v, field, &["limit", "periodMs", "key", "burst"])?;
        let key = o.key()?;
        let whole = |name: &str| o.whole(name);
        let burst = o
            .whole_opt("burst")?
            .map_or(1, |b| u32::try_from(b).unwrap_or(u32::MAX));
        Ok(Self {
            limit: u32::try_from(whole("limit")?).unwrap_or(u32::MAX),
            period_ms: whole("periodMs")?,
            key,
            burst,
        })
    }

    /// Checks it: a limit from 1 to [`MAX_THROTTLE_LIMIT`], a period from 1 s to 7 days, a
    /// burst from 1 to the limit, a key that compiles. Errors name the field.
    pub fn check(&self) -> Result<Throttle, String> {
        if self.limit == 0 || self.limit > MAX_THROTTLE_LIMIT {
            return Err(format!(
                "throttle.limit: must be from 1 to {MAX_THROTTLE_LIMIT}, got {}",
                self.limit
            ));
        }
        check_period("throttle", self.period_ms)?;
        if self.burst == 0 || self.burst > self.limit {
            return Err(format!(
                "throttle.burst: must be from 1 to the limit ({}), got {}",
                self.limit, self.burst
            ));
        }
        let key = self
            .key
            .as_deref()
            .map(CelKey::parse)
            .transpose()
            .map_err(|e| format!("throttle.key: {e}"))?;
        Ok(Throttle {
            limit: self.limit,
            period_ms: self.period_ms,
            key,
            burst: self.burst,
        })
    }
}

impl Throttle {
    /// The stored and listed form.
    pub fn to_json(&self) -> Value {
        let mut v = json!({ "limit": self.limit, "periodMs": self.period_ms, "burst": self.burst });
        if let Some(k) = &self.key {
            v["key"] = json!(k.source());
        }
        v
    }

    /// The spacing of starts, ms.
    pub fn interval(&self) -> f64 {
        self.period_ms as f64 / f64::from(self.limit)
    }

    /// How far ahead of `now` the theoretical arrival time may be for a start, ms.
    pub fn tolerance(&self) -> f64 {
        self.interval() * f64::from(self.burst - 1)
    }
}

/// Up to `want` starts at `now` for a key whose theoretical arrival time is `tat` (`None`: never
/// started), spaced `interval` apart with `tolerance`: how many are allowed, and the new `tat`.
pub fn admit(tat: Option<f64>, now: f64, interval: f64, tolerance: f64, want: i64) -> (i64, f64) {
    let mut tat = tat.unwrap_or(now);
    let mut n = 0;
    while n < want && tat - tolerance <= now {
        tat = tat.max(now) + interval;
        n += 1;
    }
    (n, tat)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_are_spaced_and_a_burst_goes_at_once() {
        // 2 per 10 s: one every 5 s.
        assert_eq!(admit(None, 0.0, 5_000.0, 0.0, 10), (1, 5_000.0));
        assert_eq!(
            admit(Some(5_000.0), 1_000.0, 5_000.0, 0.0, 10),
            (0, 5_000.0)
        );
        assert_eq!(
            admit(Some(5_000.0), 5_000.0, 5_000.0, 0.0, 10),
            (1, 10_000.0)
        );
        // burst 2: two at once after a quiet spell, then one per interval.
        assert_eq!(admit(None, 0.0, 5_000.0, 5_000.0, 10), (2, 10_000.0));
        assert_eq!(
            admit(Some(10_000.0), 5_000.0, 5_000.0, 5_000.0, 10),
            (1, 15_000.0)
        );
    }

    #[test]
    fn bad_throttles_name_the_field() {
        let bad = |limit, period_ms, burst| {
            ThrottleSpec {
                limit,
                period_ms,
                key: None,
                burst,
            }
            .check()
            .expect_err("refused")
        };
        assert!(bad(0, 1_000, 1).starts_with("throttle.limit"));
        assert!(bad(1, 10, 1).starts_with("throttle.periodMs"));
        assert!(bad(2, 1_000, 3).starts_with("throttle.burst"));
        assert!(bad(2, 1_000, 0).starts_with("throttle.burst"));
    }
}
