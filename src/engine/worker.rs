//! The worker loop: claims runs of the jobs defined in this process, up to the free slots (a
//! job's concurrency limits are kept by the store's claim, across processes), in one transaction per batch, and starts an execution of each; it sleeps
//! until a commit wakes it or the next run is due.

use std::sync::Arc;
use std::time::Duration;

use super::executor;
use super::shared::{ms, Shared};
use crate::log_throttle::storage_failure;
use crate::store::{ClaimGroup, ClaimParams, FlowGroup};

/// Claim groups for the free slots: one group for every job's runs without slots (jobs without
/// limits, and runs created before their job had one), one per job with concurrency limits,
/// claimed through its slots (the limits hold across processes: see `model::flow`).
pub(crate) fn claim_groups(shared: &Shared, free: usize) -> Vec<ClaimGroup> {
    let jobs = match shared.jobs.read() {
        Ok(j) => j,
        Err(_) => return Vec::new(),
    };
    let batch = free.min(shared.config.claim_batch);
    let mut plain = Vec::new();
    let mut groups = Vec::new();
    for (id, reg) in jobs.iter() {
        plain.push(id.clone());
        if reg.spec.has_flow() {
            groups.push(ClaimGroup {
                jobs: vec![id.clone()],
                limit: batch,
                flow: Some(FlowGroup {
                    second_slot: reg.spec.second_slot(),
                }),
            });
        }
    }
    if !plain.is_empty() {
        groups.push(ClaimGroup {
            jobs: plain,
            limit: batch,
            flow: None,
        });
    }
    groups
}

pub(crate) async fn worker_loop(shared: Arc<Shared>) {
    let store_wake = Arc::clone(shared.store.work_notify());
    let mut failures = 0u32;
    // Consecutive claims that found nothing although something was due: runs another node was
    // claiming at that moment (locked rows are skipped, yet still look queued). Each one doubles
    // the pause before looking again, so idle nodes do not hammer the database; a wake-up (new
    // work committed) still ends the pause at once.
    let mut contended = 0u32;
    // Which claim group goes first: they take turns, since a claim takes at most the free room
    // in all (`ClaimParams::groups`), so the first could leave nothing to the others.
    let mut turn = 0usize;
    loop {
        if shared.stop.is_cancelled() {
            return;
        }
        let in_flight = shared
            .inflight
            .lock()
            .map(|m| m.len())
            .unwrap_or(usize::MAX);
        let free = shared.config.concurrency.saturating_sub(in_flight);
        let mut full_batch = false;
        let mut claimed_none = false;
        if free > 0 {
            let mut groups = claim_groups(&shared, free);
            if !groups.is_empty() {
                turn = turn.wrapping_add(1);
                let first = turn % groups.len();
                groups.rotate_left(first);
            }
            let asked = groups.iter().map(|g| g.limit).max().unwrap_or(0);
            if asked > 0 {
                let now = shared.clock.now_ms();
                let params = ClaimParams {
                    now,
                    lease_until: now + ms(shared.config.lease),
                    node: Some(shared.node_id.clone()),
                    groups,
                };
                match shared.store.runs_claim(params).await {
                    Ok(runs) => {
                        failures = 0;
                        full_batch = runs.len() == asked;
                        claimed_none = runs.is_empty();
                        for run in runs {
                            executor::spawn(&shared, run);
                        }
                    }
                    Err(e) => {
                        failures += 1;
                        if let Some(suppressed) = storage_failure("engine:claim") {
                            tracing::error!(error = %e, suppressed, "claiming runs failed; retrying");
                        }
                        let backoff = Duration::from_millis(50 * 2u64.pow(failures.min(6)));
                        tokio::select! {
                            _ = tokio::time::sleep(backoff) => {}
                            _ = shared.stop.cancelled() => return,
                        }
                        continue;
                    }
                }
            }
        }
        if full_batch {
            continue;
        }
        let wait = if free == 0 {
            shared.config.poll_interval
        } else {
            let local: Vec<String> = shared
                .jobs
                .read()
                .map(|j| j.keys().cloned().collect())
                .unwrap_or_default();
            match shared.store.runs_next_due(local).await {
                Ok(Some(due)) => {
                    let until = (due - shared.clock.now_ms()).max(0);
                    Duration::from_millis(u64::try_from(until).unwrap_or(0))
                        .min(shared.config.poll_interval)
                }
                _ => shared.config.poll_interval,
            }
        };
        let wait = if wait.is_zero() && claimed_none {
            contended = (contended + 1).min(8);
            Duration::from_millis(1 << contended).min(shared.config.poll_interval)
        } else {
            contended = 0;
            wait
        };
        tokio::select! {
            _ = store_wake.notified() => {}
            _ = shared.wake.notified() => {}
            _ = tokio::time::sleep(wait.max(Duration::from_millis(1))) => {}
            _ = shared.stop.cancelled() => return,
        }
    }
}
