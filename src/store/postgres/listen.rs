//! The wake-up hint: a connection that `LISTEN`s on [`CHANNEL`] and wakes this process's workers
//! when another process (or this one) committed runnable work. Workers poll as well, so a lost
//! notification only delays them.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Notify};
use tokio_postgres::NoTls;

use crate::log_throttle::storage_failure;
use crate::store::{Error, Result};

/// The channel of the wake-up hint.
pub(crate) const CHANNEL: &str = "flare_work";

/// Keeps a connection that `LISTEN`s on [`CHANNEL`] and wakes the workers on each notification;
/// reconnects with a backoff when it drops (workers poll meanwhile).
pub(super) async fn listen_loop(config: tokio_postgres::Config, work: Arc<Notify>) {
    let mut failures = 0u32;
    loop {
        match listen_once(&config, &work).await {
            Ok(()) => failures = 0,
            Err(e) => {
                failures += 1;
                if let Some(suppressed) = storage_failure("postgres:listen") {
                    tracing::warn!(error = %e, suppressed, "the PostgreSQL wake-up listener stopped; workers poll until it reconnects");
                }
            }
        }
        // Something may have been queued while not listening.
        work.notify_one();
        tokio::time::sleep(Duration::from_millis(
            200 * u64::from(failures.clamp(1, 25)),
        ))
        .await;
    }
}

pub(super) async fn listen_once(config: &tokio_postgres::Config, work: &Notify) -> Result<()> {
    let (client, mut connection) = config.connect(NoTls).await?;
    let (seen_tx, mut seen_rx) = mpsc::unbounded_channel::<()>();
    let driver = tokio::spawn(async move {
        loop {
            match futures::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(tokio_postgres::AsyncMessage::Notification(_))) => {
                    if seen_tx.send(()).is_err() {
                        return Ok(());
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                None => return Ok(()),
            }
        }
    });
    client.batch_execute(&format!("LISTEN {CHANNEL}")).await?;
    work.notify_one();
    while seen_rx.recv().await.is_some() {
        // Coalesce a burst of notifications into one wake-up.
        while seen_rx.try_recv().is_ok() {}
        work.notify_one();
    }
    drop(client);
    match driver.await {
        Ok(r) => Ok(r?),
        Err(_) => Err(Error::Closed),
    }
}
