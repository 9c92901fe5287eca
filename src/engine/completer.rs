//! The completer: records finished attempts in batches (outcome, log lines, attempt history),
//! each fenced by the lease token it was claimed with.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::shared::Shared;
use crate::log_throttle::storage_failure;
use crate::store::Completion;

/// Hands a finished attempt to the completer and frees its slot.
pub(crate) async fn finish(shared: &Shared, completion: Completion) {
    let tx = shared.completions.lock().ok().and_then(|t| t.clone());
    let run_id = completion.run_id.clone();
    if let Ok(mut r) = shared.recording.lock() {
        r.insert(run_id.clone(), completion.token);
    }
    if let Some(tx) = tx {
        if tx.send(completion).await.is_err() {
            if let Ok(mut r) = shared.recording.lock() {
                r.remove(&run_id);
            }
            tracing::warn!(run = %run_id, "completer stopped; the run's lease will expire and it will run again");
        }
    }
    if let Ok(mut m) = shared.inflight.lock() {
        m.remove(&run_id);
    }
    shared.wake.notify_one();
}

pub(crate) async fn completer_loop(shared: Arc<Shared>, mut rx: mpsc::Receiver<Completion>) {
    let mut batch = Vec::new();
    while rx.recv_many(&mut batch, 1000).await > 0 {
        let mut failures = 0u32;
        loop {
            let written = {
                let _writing = shared.lease_writes.lock().await;
                shared.store.runs_complete(batch.clone()).await
            };
            match written {
                Ok(held) => {
                    for (c, ok) in batch.iter().zip(held) {
                        if !ok {
                            tracing::warn!(run = %c.run_id, "lease was lost before completion; the outcome of this attempt was discarded");
                        }
                    }
                    break;
                }
                Err(e) => {
                    failures += 1;
                    if let Some(suppressed) = storage_failure("engine:complete") {
                        tracing::error!(error = %e, runs = batch.len(), suppressed, "recording run outcomes failed; retrying");
                    }
                    if failures > 50 {
                        tracing::error!("giving up on these outcomes; their leases will expire and the runs will run again");
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100 * u64::from(failures.min(20))))
                        .await;
                }
            }
        }
        if let Ok(mut r) = shared.recording.lock() {
            for c in &batch {
                r.remove(&c.run_id);
            }
        }
        batch.clear();
    }
}
