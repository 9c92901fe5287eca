//! Maintenance services, one per chore, each with a `*_once` that tests call directly:
//! - **scheduler**: delivers scheduled events that are due (creates their runs), within one poll
//!   interval of their time, also after a restart (the schedule is in the database); and fires
//!   scheduled jobs (cron, interval) whose next tick is due: the tick's event (id
//!   `schedule:<job>:<tick ms>`) is inserted and the next tick moved in one transaction, so a tick
//!   is neither lost nor doubled across a crash, a restart or a leader change. After downtime a
//!   schedule fires once, for its most recent missed tick, then goes on from now
//!   ([`crate::schedule`]);
//! - **rescuer**: requeues runs whose lease expired because their worker died;
//! - **pruner**: deletes finished events, their runs and logs older than the retention, and the
//!   webhook deliveries (raw bodies included) received before it, in bounded batches;
//! - **indexer**: adds new events to the payload search's index (SQLite; `store/sqlite/search.rs`),
//!   a chunk per write and at most [`INDEX_CHUNKS_PER_PASS`] chunks per pass, so catching up on a
//!   large history never holds up the other chores for long.
//!
//! With several nodes on one database only one of them does this work: the **leader**. Every
//! tick, each node takes or renews the leader lease [`LEADER`] in the store (held for
//! [`crate::EngineConfig::leader_ttl`]); only the holder runs the chores. A node stopping
//! gracefully releases the lease; a node that dies stops renewing it, and the first node to tick
//! after it expired takes over (and rescues at once: the dead leader may have held runs). The
//! chores stay correct if two nodes ever run them at once (each is one transaction that
//! re-checks its rows), so leadership is about not doing the work N times, not about safety.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::shared::{ms, Shared};
use crate::log_throttle::storage_failure;

const BATCH: usize = 1000;

/// Most chunks of [`crate::store::SEARCH_CHUNK`] events the indexer writes per pass
/// (10,000 events). On an otherwise idle writer it indexes about 8,000 events/s at a million
/// events (BENCHMARKS.md); while it is behind, searches read the not-yet-indexed events by a scan.
pub const INDEX_CHUNKS_PER_PASS: usize = 40;

/// The name of the leader lease that maintenance runs under.
pub const LEADER: &str = "maintenance";

/// What one leader pass did; see [`Maintenance::lead_once`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pass {
    /// Scheduled events delivered.
    pub delivered: usize,
    /// Schedule ticks fired (scheduled jobs' events inserted).
    pub fired: usize,
    /// Runs with an expired lease requeued (or failed).
    pub rescued: usize,
    /// Finished events pruned.
    pub pruned: usize,
}

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

    /// Takes or renews this node's leader lease. True when this node leads now.
    pub async fn lead(&self) -> crate::store::Result<bool> {
        let s = &self.shared;
        let held = s
            .store
            .leader_acquire(
                LEADER,
                &s.node_id,
                s.clock.now_ms(),
                ms(s.config.leader_ttl),
            )
            .await;
        // An error leaves us unsure: stop leading; the lease expires if we still hold it.
        s.leading.store(matches!(held, Ok(true)), Ordering::SeqCst);
        held
    }

    /// Releases the leader lease if this node holds it, so another node takes over at once.
    pub async fn resign(&self) -> crate::store::Result<()> {
        let s = &self.shared;
        s.leading.store(false, Ordering::SeqCst);
        s.store.leader_release(LEADER, &s.node_id).await
    }

    /// One pass with every chore: takes or renews the leader lease, then, only if this node
    /// leads, delivers due events, rescues expired leases and prunes. `None` when another node
    /// leads (nothing was done).
    pub async fn lead_once(&self) -> crate::store::Result<Option<Pass>> {
        if !self.lead().await? {
            return Ok(None);
        }
        Ok(Some(Pass {
            delivered: self.schedule_once().await?,
            fired: self.ticks_once().await?,
            rescued: self.rescue_once().await?,
            pruned: self.prune_once().await?,
        }))
    }

    /// Delivers every due scheduled event, whether or not this node leads. Returns how many.
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

    /// Fires every scheduled job whose next tick is due, whether or not this node leads: one
    /// event per schedule (its most recent tick at or before now), next tick moved past now.
    /// Returns how many fired.
    pub async fn ticks_once(&self) -> crate::store::Result<usize> {
        let store = &self.shared.store;
        let now = self.shared.clock.now_ms();
        batched(|| store.schedules_fire_due(now, BATCH)).await
    }

    /// Requeues runs with expired leases, whether or not this node leads, and cancels queued
    /// runs past their start timeout. Returns how many runs were requeued.
    pub async fn rescue_once(&self) -> crate::store::Result<usize> {
        loop {
            let expired = self
                .shared
                .store
                .runs_expire(self.shared.clock.now_ms())
                .await?;
            if expired > 0 {
                tracing::info!(
                    runs = expired,
                    "cancelled runs that expired before they started"
                );
            }
            if expired < 1_000 {
                break;
            }
        }
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

    /// Adds events to the payload search's index, whether or not this node leads: chunks until
    /// caught up or [`INDEX_CHUNKS_PER_PASS`] were written. Returns how many events.
    pub async fn index_once(&self) -> crate::store::Result<usize> {
        let chunk = crate::store::SEARCH_CHUNK;
        let mut total = 0;
        for _ in 0..INDEX_CHUNKS_PER_PASS {
            let n = self.shared.store.search_index(chunk).await?;
            total += n;
            if n < chunk {
                break;
            }
        }
        Ok(total)
    }

    /// Prunes finished data older than the retention, whether or not this node leads: events
    /// with their runs and logs, then webhook deliveries with their raw bodies. Returns how many
    /// events were deleted.
    pub async fn prune_once(&self) -> crate::store::Result<usize> {
        let Some(retention) = self.shared.config.retention else {
            return Ok(0);
        };
        let cutoff = self.shared.clock.now_ms()
            - i64::try_from(retention.as_millis()).unwrap_or(i64::MAX / 2);
        let store = &self.shared.store;
        let events = batched(|| store.events_prune(cutoff, BATCH)).await?;
        let deliveries = batched(|| store.webhook_deliveries_prune(cutoff, BATCH)).await?;
        if events > 0 || deliveries > 0 {
            tracing::info!(
                events,
                webhook_deliveries = deliveries,
                "pruned finished events and webhook deliveries past retention"
            );
        }
        Ok(events)
    }
}

/// Calls `batch` until it deletes fewer than [`BATCH`] rows; returns how many it deleted in all.
async fn batched<F, Fut>(mut batch: F) -> crate::store::Result<usize>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = crate::store::Result<usize>>,
{
    let mut total = 0;
    loop {
        let n = batch().await?;
        total += n;
        if n < BATCH {
            return Ok(total);
        }
    }
}

/// The maintenance loop. Every poll interval (the first one poll interval after start): take or renew the leader lease; when leading, run
/// the scheduler, the rescuer every half lease (and at once on taking over) and the pruner every
/// prune interval.
pub(crate) async fn run(shared: Arc<Shared>) {
    let m = Maintenance::new(Arc::clone(&shared));
    let tick = shared.config.poll_interval.max(Duration::from_millis(10));
    let rescue_every = (shared.config.lease / 2).max(tick);
    // `None`: rescue at the next pass.
    let mut last_rescue: Option<tokio::time::Instant> = None;
    let mut last_prune = tokio::time::Instant::now();
    let mut leading = false;
    loop {
        // The first pass comes one tick after start: a node starting up has its jobs defined by
        // then, and tests that drive maintenance by hand can turn the loop off with a long tick.
        tokio::select! {
            _ = tokio::time::sleep(tick) => {}
            _ = shared.stop.cancelled() => return,
        }
        match m.lead().await {
            Ok(true) => {
                if !leading {
                    tracing::info!(node = %shared.node_id, "this node leads maintenance (scheduler, rescuer, pruner)");
                    // The previous leader may have died with runs in flight, or this is a
                    // restart after a crash: rescue now.
                    last_rescue = None;
                }
                leading = true;
                chores(&m, &shared, rescue_every, &mut last_rescue, &mut last_prune).await;
            }
            Ok(false) => {
                if leading {
                    tracing::info!(node = %shared.node_id, "another node leads maintenance now");
                }
                leading = false;
            }
            Err(e) => {
                if let Some(suppressed) = storage_failure("maintenance:lease") {
                    tracing::error!(error = %e, suppressed, "taking the maintenance lease failed");
                }
                leading = false;
            }
        }
    }
}

async fn chores(
    m: &Maintenance,
    shared: &Shared,
    rescue_every: Duration,
    last_rescue: &mut Option<tokio::time::Instant>,
    last_prune: &mut tokio::time::Instant,
) {
    if let Err(e) = m.schedule_once().await {
        if let Some(suppressed) = storage_failure("maintenance:schedule") {
            tracing::error!(error = %e, suppressed, "delivering scheduled events failed");
        }
    }
    if let Err(e) = m.ticks_once().await {
        if let Some(suppressed) = storage_failure("maintenance:ticks") {
            tracing::error!(error = %e, suppressed, "firing scheduled jobs failed");
        }
    }
    if last_rescue.is_none_or(|at| at.elapsed() >= rescue_every) {
        *last_rescue = Some(tokio::time::Instant::now());
        if let Err(e) = m.rescue_once().await {
            if let Some(suppressed) = storage_failure("maintenance:rescue") {
                tracing::error!(error = %e, suppressed, "rescuing expired runs failed");
            }
        }
    }
    if let Err(e) = m.index_once().await {
        if let Some(suppressed) = storage_failure("maintenance:index") {
            tracing::error!(error = %e, suppressed, "indexing events for the payload search failed");
        }
    }
    if last_prune.elapsed() >= shared.config.prune_interval {
        *last_prune = tokio::time::Instant::now();
        if let Err(e) = m.prune_once().await {
            if let Some(suppressed) = storage_failure("maintenance:prune") {
                tracing::error!(error = %e, suppressed, "pruning failed");
            }
        }
    }
}
