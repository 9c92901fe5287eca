//! What this node saw of each endpoint's calls (successes, errors), reported to the store once a
//! second by the registry: the endpoints' health and recent errors.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::store::endpoints::EndpointReport;

/// What a node's calls taught it about each endpoint since its last report.
#[derive(Debug, Default)]
pub(crate) struct Reports(Mutex<HashMap<String, EndpointReport>>);

impl Reports {
    pub(crate) fn ok(&self, endpoint: &str, at: i64) {
        crate::metrics::endpoint_call(endpoint, true);
        if let Ok(mut r) = self.0.lock() {
            let e = r.entry(endpoint.to_string()).or_default();
            e.ok_at = Some(e.ok_at.map_or(at, |t| t.max(at)));
        }
    }

    pub(crate) fn error(&self, endpoint: &str, at: i64, message: String) {
        crate::metrics::endpoint_call(endpoint, false);
        if let Ok(mut r) = self.0.lock() {
            let e = r.entry(endpoint.to_string()).or_default();
            // A burst of failures keeps the latest few: the store keeps ten anyway.
            if e.errors.len() >= crate::store::endpoints::MAX_RECENT_ERRORS {
                e.errors.remove(0);
            }
            e.errors.push((at, message));
        }
    }

    pub(crate) fn take(&self) -> HashMap<String, EndpointReport> {
        self.0
            .lock()
            .map(|mut r| std::mem::take(&mut *r))
            .unwrap_or_default()
    }
}
