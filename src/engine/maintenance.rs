//! Maintenance services, one per chore, each with a `run_once` that tests call directly:
//! - **scheduler**: delivers scheduled events that are due (creates their runs), within one poll
//!   interval of their time, also after a restart (the schedule is in the database);
//! - **rescuer**: requeues runs whose lease expired because their worker died;
//! - **pruner**: deletes finished events, their runs and logs older than the retention, in
//!   bounded batches.

use std::sync::Arc;
use std::time::Duration;

use super::Shared;

const BATCH: usize = 1000;

/// Handle on the maintenance services of one engine.
#[derive(Clone)]
pub struct Maintenance {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Maintenance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Maintenance")
    }
}

impl Maintenance {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    /// Delivers every due scheduled event. Returns how many.
    pub async fn schedule_once(&self) -> crate::store::Result<usize> {
        let mut total = 0;
        loop {
            let n = self
                .shared
                .store
                .events_deliver_due(self.shared.clock.now_ms(), BATCH)
                .await?;
            total += n;
            if n < BATCH {
                return Ok(total);
            }
        }
    }

    /// Requeues runs with expired leases. Returns how many.
    pub async fn rescue_once(&self) -> crate::store::Result<usize> {
        let mut total = 0;
        loop {
            let n = self
                .shared
                .store
                .runs_rescue(self.shared.clock.now_ms())
                .await?;
            total += n;
            if n < BATCH {
                if total > 0 {
                    tracing::warn!(
                        runs = total,
                        "requeued runs whose worker stopped responding"
                    );
                }
                return Ok(total);
            }
        }
    }

    /// Prunes finished data older than the retention. Returns how many events were deleted.
    pub async fn prune_once(&self) -> crate::store::Result<usize> {
        let Some(retention) = self.shared.config.retention else {
            return Ok(0);
        };
        let cutoff = self.shared.clock.now_ms()
            - i64::try_from(retention.as_millis()).unwrap_or(i64::MAX / 2);
        let mut total = 0;
        loop {
            let n = self.shared.store.prune(cutoff, BATCH).await?;
            total += n;
            if n < BATCH {
                if total > 0 {
                    tracing::info!(events = total, "pruned finished events past retention");
                }
                return Ok(total);
            }
        }
    }
}

/// The maintenance loop: scheduler every poll interval, rescuer every half lease (at least every
/// poll interval), pruner every prune interval.
pub(crate) async fn run(shared: Arc<Shared>) {
    let m = Maintenance::new(Arc::clone(&shared));
    let tick = shared.config.poll_interval.max(Duration::from_millis(10));
    let rescue_every = (shared.config.lease / 2).max(tick);
    let mut last_rescue = tokio::time::Instant::now();
    let mut last_prune = tokio::time::Instant::now();
    // A restart rescues at once: leases of a crashed process may have expired while it was down.
    let _ = m.rescue_once().await;
    loop {
        if let Err(e) = m.schedule_once().await {
            tracing::error!(error = %e, "delivering scheduled events failed");
        }
        if last_rescue.elapsed() >= rescue_every {
            last_rescue = tokio::time::Instant::now();
            if let Err(e) = m.rescue_once().await {
                tracing::error!(error = %e, "rescuing expired runs failed");
            }
        }
        if last_prune.elapsed() >= shared.config.prune_interval {
            last_prune = tokio::time::Instant::now();
            if let Err(e) = m.prune_once().await {
                tracing::error!(error = %e, "pruning failed");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(tick) => {}
            _ = shared.stop.cancelled() => return,
        }
    }
}
