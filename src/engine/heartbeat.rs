//! The heartbeat (extends the leases of the runs executing here, and stops the ones whose lease is
//! gone) and the node's beat (this process is alive and defines these jobs).

use std::sync::Arc;
use std::time::Duration;

use super::shared::{cancel_local, ms, Shared};
use crate::log_throttle::storage_failure;
use crate::store::Lease;

pub(crate) async fn node_beat(shared: &Shared) -> Result<(), crate::store::Error> {
    let mut jobs: Vec<String> = shared
        .jobs
        .read()
        .map(|j| j.keys().cloned().collect())
        .unwrap_or_default();
    jobs.sort();
    shared
        .store
        .node_beat(crate::store::NodeBeat {
            id: shared.node_id.clone(),
            started_at: shared.started_at,
            now: shared.clock.now_ms(),
            jobs,
            version: env!("CARGO_PKG_VERSION").to_string(),
            concurrency: shared.config.concurrency as u64,
            running: shared.inflight.lock().map(|m| m.len() as u64).unwrap_or(0),
        })
        .await
}

/// Records every [`EngineConfig::node_beat`] that this node is alive and which jobs it defines.
pub(crate) async fn node_loop(shared: Arc<Shared>) {
    loop {
        if let Err(e) = node_beat(&shared).await {
            tracing::debug!(error = %e, "could not record this node's jobs");
        }
        tokio::select! {
            _ = tokio::time::sleep(shared.config.node_beat) => {}
            _ = shared.stop.cancelled() => return,
        }
    }
}

pub(crate) async fn heartbeat_loop(shared: Arc<Shared>) {
    let every = (shared.config.lease / 3).max(Duration::from_millis(10));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = shared.stop.cancelled() => return,
        }
        let mut leases: Vec<Lease> = match shared.inflight.lock() {
            Ok(m) => m
                .iter()
                .map(|(id, f)| Lease {
                    run_id: id.clone(),
                    token: f.token,
                })
                .collect(),
            Err(_) => continue,
        };
        if let Ok(r) = shared.recording.lock() {
            leases.extend(r.iter().map(|(id, token)| Lease {
                run_id: id.clone(),
                token: *token,
            }));
        }
        if leases.is_empty() {
            continue;
        }
        let until = shared.clock.now_ms() + ms(shared.config.lease);
        let _writing = shared.lease_writes.lock().await;
        match shared.store.runs_heartbeat(leases, until).await {
            Ok(lost) => cancel_local(&shared, &lost),
            Err(e) => {
                if let Some(suppressed) = storage_failure("engine:heartbeat") {
                    tracing::warn!(error = %e, suppressed, "extending leases failed");
                }
            }
        }
    }
}
