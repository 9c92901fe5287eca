//! The service and its worker nodes, wired from a validated configuration.
//!
//! - `run_with(config, jobs, listener, shutdown)`: the whole service. Connects the store, defines
//!   the jobs, starts the engine, serves HTTP until `shutdown` resolves, then shuts the engine down
//!   gracefully. `run(config, listener, shutdown)` is the same without jobs of the caller's own;
//!   tests call either on a port-0 listener.
//! - `run_worker(config, jobs, shutdown)`: the engine alone (`flare worker`), for scale-out: the
//!   jobs, workers, scheduler, rescuer and pruner on a shared database, without HTTP. Every node
//!   claims only runs of the jobs it defined; maintenance runs on one leader at a time.
//!
//! Every node also runs an endpoint registry ([`crate::endpoints::Registry`]): it registers the
//! endpoints given at start (`config.endpoints`), indexes them (retrying in the background while
//! an application is not up yet) and runs the jobs of every stored endpoint.
//!
//! The jobs a node defines are the application's `jobs` (given to `flare::App`) and, only when
//! `config.demo` is set, the seed's demo jobs ([`reference_jobs`]), with a warning. Each
//! definition is stored before the node serves, so the dashboard and every other node see it; an
//! invalid job stops the start with [`Error::Jobs`] or [`Error::DuplicateJob`].
//!
//! Wiring only: no routes, no storage code, no job logic of its own.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::client::Client;
use crate::config::{EndpointSeed, ServeConfig, WorkerConfig};
use crate::endpoints::Registry;
use crate::engine::EngineConfig;
use crate::http::{app, AppState};
use crate::job::Job;
use crate::reference_jobs;

/// Why the server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store could not be opened.
    #[error(transparent)]
    Client(#[from] crate::client::Error),
    /// An endpoint given at start is unusable, or could not be stored.
    #[error(transparent)]
    Endpoint(#[from] crate::endpoints::Error),
    /// A job is invalid or its definition could not be stored.
    #[error("cannot define the jobs: {0}")]
    Jobs(#[source] crate::client::Error),
    /// Two jobs to define have the same id.
    #[error("job {0} is given twice: every job needs its own id")]
    DuplicateJob(String),
    /// Serving failed.
    #[error("HTTP server failed: {0}")]
    Serve(#[from] std::io::Error),
}

/// Connects, defines the jobs (the demo jobs only when `config.demo`) and returns the client,
/// ready to serve.
pub async fn start(config: &ServeConfig, jobs: Vec<Job>) -> Result<Client, Error> {
    connect(
        &config.database_url,
        config.engine.clone(),
        config.demo,
        jobs,
        config.paused,
    )
    .await
    .map(|(client, _)| client)
}

/// What every node does first, `serve` and `worker` alike: connect (this client becomes the
/// process's default) and define the jobs (their ids are returned), stopping the engine again if
/// that fails.
async fn connect(
    url: &str,
    engine: EngineConfig,
    demo: bool,
    jobs: Vec<Job>,
    paused: bool,
) -> Result<(Client, Vec<String>), Error> {
    let client = Client::builder(url)
        .config(engine)
        .paused(paused)
        .connect()
        .await?;
    client.make_default();
    let defined = match define_jobs(&client, demo, jobs).await {
        Ok(ids) => ids,
        Err(e) => {
            client.shutdown().await;
            return Err(e);
        }
    };
    if paused {
        // The jobs this start defined for the first time, too.
        if let Err(e) = client.store().jobs_pause_all().await {
            client.shutdown().await;
            return Err(Error::Jobs(e.into()));
        }
    }
    Ok((client, defined))
}

/// Starts `registry` with the endpoints given at start; on failure stops `client`'s engine.
async fn start_endpoints(
    client: &Client,
    registry: Arc<Registry>,
    seeds: Vec<EndpointSeed>,
) -> Result<Arc<Registry>, Error> {
    if let Err(e) = registry.start(seeds).await {
        client.shutdown().await;
        return Err(e.into());
    }
    Ok(registry)
}

/// Runs the service on `listener` until `shutdown` resolves, with the demo jobs if
/// `config.demo` and no jobs of the caller's own.
pub async fn run(
    config: ServeConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    run_with(config, Vec::new(), listener, shutdown).await
}

/// Runs the service with `jobs` on `listener` until `shutdown` resolves.
pub async fn run_with(
    config: ServeConfig,
    jobs: Vec<Job>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let (client, code) = connect(
        &config.database_url,
        config.engine.clone(),
        config.demo,
        jobs,
        config.paused,
    )
    .await?;
    let endpoints = start_endpoints(
        &client,
        Registry::with_allow(client.clone(), config.endpoint_allow.clone()),
        config.endpoints.clone(),
    )
    .await?;
    log_what_runs(&client, &code, &endpoints, config.endpoints.len()).await;
    let (limits, drain) = (config.limits, config.engine.shutdown_grace);
    let state = AppState::with_endpoints(client.clone(), &config, Arc::clone(&endpoints));
    let addr = listener.local_addr()?;
    tracing::info!(%addr, node = %client.engine().node_id(), "flare is listening; dashboard and API on http://{addr}");
    // On the signal the engine's shutdown starts at once, beside the requests' drain, so that
    // the whole shutdown ends within the grace period plus the engine's bound.
    let (engine_stopping, stopping) = tokio::sync::oneshot::channel();
    let signal = {
        let (client, endpoints) = (client.clone(), Arc::clone(&endpoints));
        async move {
            shutdown.await;
            tracing::info!("shutting down: finishing running jobs and requests");
            endpoints.stop();
            let _ = engine_stopping.send(tokio::spawn(async move { client.shutdown().await }));
        }
    };
    let served = crate::http::connections::serve(listener, app(state), limits, signal, drain).await;
    match stopping.await {
        Ok(engine) => {
            let _ = engine.await;
        }
        Err(_) => {
            // Serving ended without the signal (an error): stop the engine now.
            endpoints.stop();
            client.shutdown().await;
        }
    }
    served?;
    Ok(())
}

/// Runs the engine without HTTP until `shutdown` resolves: `jobs` (and the demo jobs if
/// `config.demo`), then a graceful shutdown (running runs get the grace period, the rest is
/// released, leadership is handed over).
pub async fn run_worker(
    config: WorkerConfig,
    jobs: Vec<Job>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let (client, code) = connect(
        &config.database_url,
        config.engine.clone(),
        config.demo,
        jobs,
        config.paused,
    )
    .await?;
    let endpoints = start_endpoints(
        &client,
        Registry::without_api(client.clone(), config.endpoint_allow.clone()),
        config.endpoints.clone(),
    )
    .await?;
    log_what_runs(&client, &code, &endpoints, config.endpoints.len()).await;
    tracing::info!(
        node = %client.engine().node_id(),
        concurrency = config.engine.concurrency,
        "flare worker is running jobs"
    );
    shutdown.await;
    tracing::info!("shutting down: finishing running jobs");
    endpoints.stop();
    client.shutdown().await;
    Ok(())
}

/// Defines the demo jobs (when `demo`) and `jobs`, each stored before this returns. Refuses two
/// jobs with one id rather than letting the second silently replace the first.
async fn define_jobs(client: &Client, demo: bool, jobs: Vec<Job>) -> Result<Vec<String>, Error> {
    let mut all = Vec::new();
    if demo {
        all = reference_jobs::all();
        let ids: Vec<&str> = all.iter().map(Job::id).collect();
        tracing::warn!(
            jobs = %ids.join(", "),
            "running the seed's demo jobs, which act on events such as user.created and \
             file.uploaded; pass --demo=false / FLARE_DEMO=false in a deployment"
        );
    }
    all.extend(jobs);
    let mut seen = HashSet::new();
    for job in &all {
        if !seen.insert(job.id().to_string()) {
            return Err(Error::DuplicateJob(job.id().to_string()));
        }
    }
    let ids: Vec<String> = all.iter().map(|j| j.id().to_string()).collect();
    for job in all {
        client.register_job(job).await.map_err(Error::Jobs)?;
    }
    Ok(ids)
}

/// Logs what this node runs once its endpoints are loaded: the jobs of its code and those of
/// the stored endpoints (a node that defines no job in code still runs those).
async fn log_what_runs(client: &Client, code: &[String], registry: &Registry, seeds: usize) {
    if let Err(e) = registry.sync().await {
        tracing::debug!(error = %e, "could not load the endpoints yet");
    }
    let endpoint: Vec<String> = client
        .engine()
        .job_ids()
        .into_iter()
        .filter(|j| !code.contains(j))
        .collect();
    tracing::info!("{}", what_runs(code, &endpoint, seeds));
}

/// `1 job`, `2 jobs`.
fn jobs(n: usize) -> String {
    if n == 1 {
        "1 job".to_string()
    } else {
        format!("{n} jobs")
    }
}

/// The start-up line saying which jobs a node runs: those defined in its code, those of
/// endpoints, and the endpoints given at start whose index is still to come.
fn what_runs(code: &[String], endpoint: &[String], seeds: usize) -> String {
    let mut parts = Vec::new();
    if !code.is_empty() {
        parts.push(format!(
            "{} defined in its code ({})",
            jobs(code.len()),
            code.join(", ")
        ));
    }
    if !endpoint.is_empty() {
        parts.push(format!(
            "{} of HTTP endpoints ({})",
            jobs(endpoint.len()),
            endpoint.join(", ")
        ));
    }
    let later = if seeds > 0 {
        format!(
            "; and the jobs of the {seeds} endpoint(s) given at start once they answer their index"
        )
    } else {
        String::new()
    };
    if parts.is_empty() {
        format!(
            "this node runs no jobs yet: none defined in its code, no endpoint registered{later}; \
             it runs the jobs of endpoints registered later, and events still start the jobs \
             other nodes define"
        )
    } else {
        format!("this node runs {}{later}", parts.join(" and "))
    }
}

#[cfg(test)]
mod tests {
    use super::what_runs;

    fn ids(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_start_up_line_names_the_endpoints_jobs_too() {
        let line = what_runs(&[], &ids(&["upload-process"]), 0);
        assert_eq!(
            line,
            "this node runs 1 job of HTTP endpoints (upload-process)"
        );
        assert!(!line.contains("no jobs"));
        let line = what_runs(&ids(&["greet"]), &ids(&["a", "b"]), 0);
        assert_eq!(
            line,
            "this node runs 1 job defined in its code (greet) and 2 jobs of HTTP endpoints (a, b)"
        );
        let line = what_runs(&[], &[], 1);
        assert!(line.starts_with("this node runs no jobs yet"), "{line}");
        assert!(line.contains("the 1 endpoint(s) given at start"), "{line}");
    }
}
