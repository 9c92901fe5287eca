//! Retry policy: how many attempts a job gets and how long to wait between them.
//!
//! Backoff is exponential with "full jitter" around its midpoint: attempt `n` (counting from 1)
//! waits `min_delay * factor^(n-1)` capped at `max_delay`, then scaled by a random factor in
//! `[0.5, 1.0]` so that failures of many runs do not retry in lockstep. The jitter source is a
//! parameter, so tests pin it.

use std::time::Duration;

/// How a job is retried. Defaults: 3 attempts, 1 s first delay, doubling, capped at 1 hour.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Total attempts, including the first. At least 1.
    pub max_attempts: u32,
    /// Delay before the second attempt.
    pub min_delay: Duration,
    /// Largest delay between attempts.
    pub max_delay: Duration,
    /// Growth per attempt.
    pub factor: f64,
    /// Whether to randomise delays (recommended).
    pub jitter: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            min_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(3600),
            factor: 2.0,
            jitter: true,
        }
    }
}

impl RetryPolicy {
    /// A policy that never retries.
    pub fn none() -> Self {
        Self {
            max_attempts: 1,
            ..Self::default()
        }
    }

    /// Sets the number of attempts (including the first).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n;
        self
    }

    /// Sets the first and largest delay.
    pub fn delays(mut self, min: Duration, max: Duration) -> Self {
        self.min_delay = min;
        self.max_delay = max;
        self
    }

    /// Turns jitter on or off.
    pub fn jitter(mut self, on: bool) -> Self {
        self.jitter = on;
        self
    }

    /// Checks the policy's bounds.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_attempts == 0 {
            return Err("max_attempts must be at least 1".into());
        }
        if self.min_delay > self.max_delay {
            return Err("min_delay must not exceed max_delay".into());
        }
        if !(self.factor >= 1.0 && self.factor.is_finite()) {
            return Err("backoff factor must be a finite number >= 1".into());
        }
        Ok(())
    }

    /// The wait after attempt `attempt` (1-based) failed. `unit` is a random number in `[0, 1)`.
    pub fn backoff(&self, attempt: u32, unit: f64) -> Duration {
        let exp = i32::try_from(attempt.saturating_sub(1)).unwrap_or(i32::MAX);
        let base = self.min_delay.as_secs_f64() * self.factor.powi(exp);
        let capped = base.min(self.max_delay.as_secs_f64());
        let scaled = if self.jitter {
            capped * (0.5 + 0.5 * unit.clamp(0.0, 1.0))
        } else {
            capped
        };
        Duration::from_secs_f64(scaled.max(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_exponentially_and_is_capped() {
        let p = RetryPolicy::default()
            .delays(Duration::from_secs(1), Duration::from_secs(10))
            .jitter(false);
        let waits: Vec<u64> = (1..=6).map(|a| p.backoff(a, 0.0).as_secs()).collect();
        assert_eq!(waits, vec![1, 2, 4, 8, 10, 10]);
    }

    #[test]
    fn jitter_stays_within_half_to_full() {
        let p = RetryPolicy::default();
        assert_eq!(p.backoff(3, 0.0), Duration::from_secs(2));
        assert_eq!(p.backoff(3, 1.0), Duration::from_secs(4));
        let mid = p.backoff(3, 0.5);
        assert!(mid > Duration::from_secs(2) && mid < Duration::from_secs(4));
    }

    #[test]
    fn invalid_policies_are_refused() {
        assert!(RetryPolicy::default().max_attempts(0).validate().is_err());
        assert!(RetryPolicy::default()
            .delays(Duration::from_secs(5), Duration::from_secs(1))
            .validate()
            .is_err());
        assert!(RetryPolicy::default().validate().is_ok());
    }
}
