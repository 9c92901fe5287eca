//! A job's rate limit: at most `limit` runs *created* per `period` per value of a key (a CEL
//! expression over the event, as for concurrency keys); an event beyond it starts no run of the
//! job, and records why (`skipped`). Exact over a sliding window: the store keeps, per job and
//! key, the creation times of the last `limit` runs.

use serde_json::{json, Value};

use super::cel::{CelKey, EventFields};
use super::period::{check_period, WindowJson};
pub use super::period::{MAX_PERIOD_MS, MIN_PERIOD_MS};

/// Most runs a rate limit may allow per period (the store keeps that many times per key).
pub const MAX_RATE_LIMIT: u32 = 1_000;
/// The key of a rate limit without one: the whole job.
pub const WHOLE_JOB: &str = "*";

/// A rate limit as written (the `Job` builder, an endpoint's `rateLimit`), before checking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitSpec {
    /// Runs created per period.
    pub limit: u32,
    /// The period, ms.
    pub period_ms: u64,
    /// The key: a CEL expression over `event`; none for the whole job.
    pub key: Option<String>,
}

/// A checked rate limit.
#[derive(Debug, Clone, PartialEq)]
pub struct RateLimit {
    /// Runs created per period.
    pub limit: u32,
    /// The period, ms.
    pub period_ms: u64,
    /// The key.
    pub key: Option<CelKey>,
}

impl RateLimitSpec {
    /// Reads `{"limit", "periodMs", "key"?}`; errors name the field under `field`.
    pub fn from_json(v: &Value, field: &str) -> Result<Self, String> {
        let o = WindowJson::read(v, field, &["limit", "periodMs", "key"])?;
        let key = o.key()?;
        let whole = |name: &str| o.whole(name);
        Ok(Self {
            limit: u32::try_from(whole("limit")?).unwrap_or(u32::MAX),
            period_ms: whole("periodMs")?,
            key,
        })
    }

    /// Checks it: a limit from 1 to [`MAX_RATE_LIMIT`], a period from 1 s to 7 days, a key that
    /// compiles. Errors name the field (`rateLimit.periodMs`, …).
    pub fn check(&self) -> Result<RateLimit, String> {
        if self.limit == 0 || self.limit > MAX_RATE_LIMIT {
            return Err(format!(
                "rateLimit.limit: must be from 1 to {MAX_RATE_LIMIT}, got {}",
                self.limit
            ));
        }
        check_period("rateLimit", self.period_ms)?;
        let key = self
            .key
            .as_deref()
            .map(CelKey::parse)
            .transpose()
            .map_err(|e| format!("rateLimit.key: {e}"))?;
        Ok(RateLimit {
            limit: self.limit,
            period_ms: self.period_ms,
            key,
        })
    }
}

impl RateLimit {
    /// The stored and listed form: `{"limit", "periodMs", "key"?}`.
    pub fn to_json(&self) -> Value {
        match &self.key {
            Some(k) => {
                json!({ "limit": self.limit, "periodMs": self.period_ms, "key": k.source() })
            }
            None => json!({ "limit": self.limit, "periodMs": self.period_ms }),
        }
    }

    /// The key's text for `event` ([`WHOLE_JOB`] without a key).
    pub fn key_of(&self, event: &EventFields<'_>) -> String {
        match &self.key {
            Some(k) => k.key_of(event),
            None => WHOLE_JOB.to_string(),
        }
    }

    /// Why a run was not created: the reason an event's `skipped` entry gives.
    pub fn reason(&self, key: &str) -> String {
        let per = if key == WHOLE_JOB {
            String::new()
        } else {
            format!(" for key {key}")
        };
        format!(
            "rate limit: at most {} run(s) per {} ms{per}",
            self.limit, self.period_ms
        )
    }

    /// Whether one more run may be created at `now` after the runs created at `hits`
    /// (ascending); returns the times to keep (those within the period, plus `now` if allowed).
    pub fn take(&self, hits: &[i64], now: i64) -> (bool, Vec<i64>) {
        let since = now - i64::try_from(self.period_ms).unwrap_or(i64::MAX);
        let mut kept: Vec<i64> = hits.iter().copied().filter(|t| *t > since).collect();
        let allowed = kept.len() < self.limit as usize;
        if allowed {
            kept.push(now);
        }
        (allowed, kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sliding_window_allows_limit_per_period() {
        let r = RateLimitSpec {
            limit: 2,
            period_ms: 1_000,
            key: None,
        }
        .check()
        .expect("valid");
        let (ok, hits) = r.take(&[], 0);
        assert!(ok);
        let (ok, hits) = r.take(&hits, 500);
        assert!(ok);
        let (ok, hits) = r.take(&hits, 999);
        assert!(!ok, "two in the last second already");
        assert_eq!(hits, [0, 500]);
        let (ok, hits) = r.take(&hits, 1_000);
        assert!(ok, "the first left the window");
        assert_eq!(hits, [500, 1_000]);
    }

    #[test]
    fn bad_rate_limits_name_the_field() {
        let bad = |limit, period_ms, key: Option<&str>| {
            RateLimitSpec {
                limit,
                period_ms,
                key: key.map(str::to_string),
            }
            .check()
            .expect_err("refused")
        };
        assert!(bad(0, 1_000, None).starts_with("rateLimit.limit"));
        assert!(bad(1, 999, None).starts_with("rateLimit.periodMs"));
        assert!(bad(1, MAX_PERIOD_MS + 1, None).starts_with("rateLimit.periodMs"));
        assert!(bad(1, 1_000, Some("event.(")).starts_with("rateLimit.key"));
        assert!(RateLimitSpec::from_json(&json!({"limit": 1}), "rateLimit")
            .expect_err("refused")
            .starts_with("rateLimit.periodMs"));
    }
}
