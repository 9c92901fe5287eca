//! The sources given at start ([`Webhooks`]): `payments` (Stripe, `STRIPE_WEBHOOK_SECRET`) and
//! `auth` (Clerk, `CLERK_WEBHOOK_SECRET`), always there, and those of the file given with
//! `--webhook-sources`; with the recent refused deliveries per source kept in memory (the
//! dashboard reads the store's, which every node writes) and their summarised log lines. The
//! route is `crate::http::webhooks`; sources created through the API are in the store.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::source::{Preset, Source};
use crate::log_throttle::LogThrottle;
use crate::model::ms_to_time;

/// Rejected deliveries kept in memory per source.
pub const REJECTIONS_KEPT: usize = 100;

/// Refusals per source and second written to the store; past that a flood of forged deliveries
/// only counts in the log summary and the in-memory list.
pub const REJECTIONS_STORED_PER_SECOND: u32 = 10;

/// The two sources configured from the environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// `/webhooks/payments`, Stripe-compatible.
    Payments,
    /// `/webhooks/auth`, Clerk / Svix.
    Auth,
}

impl Provider {
    /// `payments` or `auth`: the route's last segment and the `webhook:<provider>` source.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Payments => "payments",
            Provider::Auth => "auth",
        }
    }

    /// The environment variable holding the provider's secrets.
    pub fn secret_variable(self) -> &'static str {
        match self {
            Provider::Payments => "STRIPE_WEBHOOK_SECRET",
            Provider::Auth => "CLERK_WEBHOOK_SECRET",
        }
    }

    /// The preset the source uses.
    pub fn preset(self) -> Preset {
        match self {
            Provider::Payments => Preset::Stripe,
            Provider::Auth => Preset::Clerk,
        }
    }
}

impl AsRef<str> for Provider {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

/// A rejected delivery, as the dashboard shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rejection {
    /// When it was rejected.
    pub at: DateTime<Utc>,
    /// The HTTP status answered (400, 413, 503).
    pub status: u16,
    /// Why (safe to show: no secret, no body, no header value).
    pub reason: String,
}

#[derive(Default)]
struct Refusals {
    recent: HashMap<String, VecDeque<Rejection>>,
    /// Per source: the second and how many refusals were stored in it.
    stored: HashMap<String, (i64, u32)>,
}

/// The sources given at start and the recent rejections.
pub struct Webhooks {
    configured: Vec<Source>,
    refusals: Mutex<Refusals>,
    /// Rejection log lines, summarised per source and status.
    log: LogThrottle,
}

impl std::fmt::Debug for Webhooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhooks")
            .field("configured", &self.configured)
            .finish_non_exhaustive()
    }
}

impl Webhooks {
    /// `payments` and `auth` from their secrets (an empty list leaves that source unconfigured:
    /// it answers 503 naming its variable).
    pub fn new(stripe_secrets: Vec<String>, clerk_secrets: Vec<String>) -> Self {
        Self::with_sources(stripe_secrets, clerk_secrets, Vec::new())
    }

    /// `payments`, `auth` and the sources of the start-up file (their ids checked unique by the
    /// configuration).
    pub fn with_sources(
        stripe_secrets: Vec<String>,
        clerk_secrets: Vec<String>,
        file: Vec<Source>,
    ) -> Self {
        let env = |p: Provider, secrets| {
            Source::environment(p.as_str(), p.preset(), p.secret_variable(), secrets)
        };
        let mut configured = vec![
            env(Provider::Payments, stripe_secrets),
            env(Provider::Auth, clerk_secrets),
        ];
        configured.extend(file);
        Self {
            configured,
            refusals: Mutex::default(),
            log: LogThrottle::default(),
        }
    }

    /// The source given at start with this id.
    pub fn configured(&self, id: &str) -> Option<&Source> {
        self.configured.iter().find(|s| s.id == id)
    }

    /// Every source given at start.
    pub fn configured_all(&self) -> &[Source] {
        &self.configured
    }

    /// The last rejected deliveries of `source` in this process (at most [`REJECTIONS_KEPT`]),
    /// newest first.
    pub fn rejections(&self, source: impl AsRef<str>) -> Vec<Rejection> {
        self.refusals
            .lock()
            .map(|r| {
                r.recent
                    .get(source.as_ref())
                    .map(|ring| ring.iter().rev().cloned().collect())
                    .unwrap_or_default()
            })
            .unwrap_or_default()
    }

    /// Keeps a refused delivery of `source` (answered `status`, for `reason`), logs it
    /// (summarised per source and status) and counts it; true when it should also be stored
    /// (at most [`REJECTIONS_STORED_PER_SECOND`] per source).
    pub fn reject(&self, source: &str, now_ms: i64, status: u16, reason: &str) -> bool {
        let kind = format!("webhook:{source}:{status}");
        if let Some(suppressed) = self.log.admit(&kind, now_ms) {
            tracing::warn!(
                provider = source,
                status,
                reason,
                suppressed,
                "webhook delivery rejected"
            );
        }
        record_outcome(source, "rejected", status);
        let Ok(mut all) = self.refusals.lock() else {
            return false;
        };
        let ring = all.recent.entry(source.to_string()).or_default();
        if ring.len() >= REJECTIONS_KEPT {
            ring.pop_front();
        }
        ring.push_back(Rejection {
            at: ms_to_time(now_ms),
            status,
            reason: reason.to_string(),
        });
        let second = now_ms.div_euclid(1000);
        let slot = all.stored.entry(source.to_string()).or_insert((second, 0));
        if slot.0 != second {
            *slot = (second, 0);
        }
        slot.1 += 1;
        slot.1 <= REJECTIONS_STORED_PER_SECOND
    }
}

/// The one place a delivery's outcome is counted: `accepted`, `duplicate`, `answered` (a
/// handshake) or `rejected` (with the status answered), in
/// `flare_webhook_deliveries_total{source, outcome, status}`.
pub fn record_outcome(source: &str, outcome: &'static str, status: u16) {
    crate::metrics::webhook_delivery(source, outcome, status);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_last_hundred_newest_first() {
        let hooks = Webhooks::new(Vec::new(), Vec::new());
        for i in 0..(REJECTIONS_KEPT as i64 + 5) {
            hooks.reject(Provider::Auth.as_str(), i * 1000, 400, &format!("r{i}"));
        }
        let kept = hooks.rejections(Provider::Auth);
        assert_eq!(kept.len(), REJECTIONS_KEPT);
        assert_eq!(kept[0].reason, format!("r{}", REJECTIONS_KEPT + 4));
        assert_eq!(kept[REJECTIONS_KEPT - 1].reason, "r5");
        assert!(hooks.rejections(Provider::Payments).is_empty());
    }

    #[test]
    fn only_ten_refusals_a_second_are_stored() {
        let hooks = Webhooks::new(Vec::new(), Vec::new());
        let stored = (0..50)
            .filter(|i| hooks.reject("github", 5_000 + i, 400, "bad"))
            .count();
        assert_eq!(stored, REJECTIONS_STORED_PER_SECOND as usize);
        assert!(hooks.reject("github", 6_000, 400, "bad"), "a new second");
        assert!(hooks.reject("shopify", 5_010, 400, "bad"), "per source");
    }

    /// The log lines `f` writes.
    #[test]
    fn a_flood_of_rejections_writes_a_line_then_a_summary_per_ten_seconds() {
        let hooks = Webhooks::new(Vec::new(), Vec::new());
        let bad = "no valid signature";
        let lines = crate::log_throttle::logged(|| {
            for ms in 0..10_000 {
                hooks.reject("payments", ms, 400, bad);
            }
            hooks.reject("payments", 10_000, 400, bad);
            hooks.reject("auth", 10_001, 400, bad);
            hooks.reject("payments", 10_002, 503, "not configured");
        });
        assert_eq!(lines.len(), 4, "{lines:#?}");
        assert!(lines[0].contains("suppressed=0"), "{}", lines[0]);
        assert!(lines[1].contains("suppressed=9999"), "{}", lines[1]);
        assert!(lines[2].contains("provider=\"auth\""), "{}", lines[2]);
        assert!(lines[3].contains("status=503"), "{}", lines[3]);
        assert_eq!(
            hooks.rejections(Provider::Payments).len(),
            REJECTIONS_KEPT,
            "the dashboard still sees them"
        );
    }
}
