//! The two inbound webhook routes' providers ([`Provider`]), their verifiers built once from the
//! configured secrets, and the recent refused deliveries kept in memory ([`Webhooks`]); the routes
//! themselves are `crate::http::webhooks`.

use std::collections::VecDeque;
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::stripe::StripeVerifier;
use super::svix::SvixVerifier;
use super::VerifyError;
use crate::log_throttle::LogThrottle;
use crate::model::ms_to_time;

/// Rejected deliveries kept in memory per provider.
pub const REJECTIONS_KEPT: usize = 100;

/// A webhook route.
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

    fn index(self) -> usize {
        match self {
            Provider::Payments => 0,
            Provider::Auth => 1,
        }
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

/// The verifiers, built once from the configuration, and the recent rejections.
#[derive(Debug)]
pub struct Webhooks {
    /// The Stripe verifier, or why there is none.
    pub stripe: Result<StripeVerifier, VerifyError>,
    /// The Svix (Clerk) verifier, or why there is none.
    pub svix: Result<SvixVerifier, VerifyError>,
    rejections: Mutex<[VecDeque<Rejection>; 2]>,
    /// Rejection log lines, summarised per provider and status.
    log: LogThrottle,
}

impl Webhooks {
    /// Builds the verifiers from the secrets (an empty list leaves that route unconfigured).
    pub fn new(stripe_secrets: Vec<String>, clerk_secrets: Vec<String>) -> Self {
        Self {
            stripe: StripeVerifier::new(stripe_secrets),
            svix: SvixVerifier::new(clerk_secrets),
            rejections: Mutex::new([VecDeque::new(), VecDeque::new()]),
            log: LogThrottle::default(),
        }
    }

    /// The last rejected deliveries of `provider` (at most [`REJECTIONS_KEPT`]), newest first.
    pub fn rejections(&self, provider: Provider) -> Vec<Rejection> {
        self.rejections
            .lock()
            .map(|r| r[provider.index()].iter().rev().cloned().collect())
            .unwrap_or_default()
    }

    /// Keeps a refused delivery of `provider` (answered `status`, for `reason`) and logs it,
    /// summarised per provider and status.
    pub fn reject(&self, provider: Provider, now_ms: i64, status: u16, reason: &str) {
        let kind = format!("webhook:{}:{status}", provider.as_str());
        if let Some(suppressed) = self.log.admit(&kind, now_ms) {
            tracing::warn!(
                provider = provider.as_str(),
                status,
                reason,
                suppressed,
                "webhook delivery rejected"
            );
        }
        if let Ok(mut all) = self.rejections.lock() {
            let ring = &mut all[provider.index()];
            if ring.len() >= REJECTIONS_KEPT {
                ring.pop_front();
            }
            ring.push_back(Rejection {
                at: ms_to_time(now_ms),
                status,
                reason: reason.to_string(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_last_hundred_newest_first() {
        let hooks = Webhooks::new(Vec::new(), Vec::new());
        for i in 0..(REJECTIONS_KEPT as i64 + 5) {
            hooks.reject(Provider::Auth, i * 1000, 400, &format!("r{i}"));
        }
        let kept = hooks.rejections(Provider::Auth);
        assert_eq!(kept.len(), REJECTIONS_KEPT);
        assert_eq!(kept[0].reason, format!("r{}", REJECTIONS_KEPT + 4));
        assert_eq!(kept[REJECTIONS_KEPT - 1].reason, "r5");
        assert!(hooks.rejections(Provider::Payments).is_empty());
    }

    /// The log lines `f` writes.
    #[test]
    fn a_flood_of_rejections_writes_a_line_then_a_summary_per_ten_seconds() {
        let hooks = Webhooks::new(Vec::new(), Vec::new());
        let bad = "no valid signature";
        let lines = crate::log_throttle::logged(|| {
            for ms in 0..10_000 {
                hooks.reject(Provider::Payments, ms, 400, bad);
            }
            hooks.reject(Provider::Payments, 10_000, 400, bad);
            hooks.reject(Provider::Auth, 10_001, 400, bad);
            hooks.reject(Provider::Payments, 10_002, 503, "not configured");
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
