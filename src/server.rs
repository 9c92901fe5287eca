//! `run(config, listener, shutdown)`: the whole service. Connects the store, starts the engine with
//! the reference jobs, serves HTTP until `shutdown` resolves, then shuts the engine down gracefully.
//! Tests call it on a port-0 listener.
//!
//! `run_worker(config, jobs, shutdown)`: the engine alone (`flare worker`), for scale-out: the same
//! jobs, workers, scheduler, rescuer and pruner on a shared database, without HTTP. Every node
//! claims only runs of the jobs it defined; maintenance runs on one leader at a time.

use std::future::Future;

use tokio::net::TcpListener;

use crate::client::Client;
use crate::config::{ServeConfig, WorkerConfig};
use crate::http::{app, AppState};
use crate::job::Job;
use crate::reference_jobs;

/// Why the server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store could not be opened or a job could not be defined.
    #[error(transparent)]
    Client(#[from] crate::client::Error),
    /// An endpoint given at start is unusable.
    #[error(transparent)]
    Endpoint(#[from] crate::endpoints::Error),
    /// Serving failed.
    #[error("HTTP server failed: {0}")]
    Serve(#[from] std::io::Error),
}

/// Connects, defines the reference jobs and returns the client, ready to serve.
pub async fn start(config: &ServeConfig) -> Result<Client, Error> {
    let client = Client::builder(&config.database_url)
        .config(config.engine.clone())
        .connect()
        .await?;
    client.make_default();
    reference_jobs::define_all(&client).await?;
    Ok(client)
}

/// Runs the service on `listener` until `shutdown` resolves.
pub async fn run(
    config: ServeConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let client = start(&config).await?;
    let endpoints = crate::endpoints::Registry::new(client.clone());
    endpoints.start(Vec::new()).await?;
    let state = AppState::with_endpoints(client.clone(), config, std::sync::Arc::clone(&endpoints));
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "flare is listening; dashboard and API on http://{addr}");
    let served = axum::serve(listener, app(state))
        .with_graceful_shutdown(shutdown)
        .await;
    tracing::info!("shutting down: finishing running jobs");
    endpoints.stop();
    client.shutdown().await;
    served?;
    Ok(())
}

/// Runs the engine without HTTP until `shutdown` resolves: the reference jobs plus `jobs`, then a
/// graceful shutdown (running runs get the grace period, the rest is released, leadership is
/// handed over).
pub async fn run_worker(
    config: WorkerConfig,
    jobs: Vec<Job>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let client = Client::builder(&config.database_url)
        .config(config.engine.clone())
        .connect()
        .await?;
    client.make_default();
    reference_jobs::define_all(&client).await?;
    for job in jobs {
        client.register_job(job).await?;
    }
    let endpoints = crate::endpoints::Registry::new(client.clone());
    endpoints.start(Vec::new()).await?;
    tracing::info!(
        node = client.engine().node_id(),
        concurrency = config.engine.concurrency,
        "flare worker is running jobs"
    );
    shutdown.await;
    tracing::info!("shutting down: finishing running jobs");
    endpoints.stop();
    client.shutdown().await;
    Ok(())
}
