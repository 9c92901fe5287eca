//! The [`Registry`] every node runs: it registers, indexes, re-indexes and removes endpoints, keeps
//! every stored endpoint's jobs defined in this node's engine (`jobs.rs`), and reports what it saw
//! of their calls (`reports.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::caller::Caller;
use super::error::Error;
use super::jobs::{define, define_v2, Target};
use super::protocol::JobDef;
use super::reports::Reports;
use super::seed::{endpoint_id, generate_secret, validate_secret, validate_url};
use super::{address, protocol, trigger_dev_v2, v2_execution, v2_runs};
use crate::client::Client;
use crate::io::Io;
use crate::store::endpoints::{
    EndpointIndex, EndpointSummary, IndexApplied, NewEndpoint, Protocol, StoredEndpoint,
};

/// How long Flare waits for an endpoint's index.
pub const INDEX_TIMEOUT: Duration = Duration::from_secs(10);

/// How often a node looks for changed endpoints and reports their health.
pub const SYNC_INTERVAL: Duration = Duration::from_secs(1);

/// What this node has defined from each endpoint: the row's revision and the job ids.
#[derive(Default)]
pub(crate) struct Defined(HashMap<String, (i64, Vec<String>)>);

/// The endpoints of one node: registers and indexes them, and keeps their jobs defined in the
/// node's engine.
pub struct Registry {
    client: Client,
    caller: Caller,
    reports: Arc<Reports>,
    defined: tokio::sync::Mutex<Defined>,
    revision: Mutex<Option<(i64, i64)>>,
    stop: CancellationToken,
    /// Trigger.dev v2 runs executing on this node (their SDK calls this node's API).
    v2_runs: Arc<v2_execution::Executions>,
    /// Whether this node serves the HTTP API: only such a node runs Trigger.dev v2 jobs, whose
    /// SDK calls back the API while a run executes.
    serves_api: bool,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

impl Registry {
    /// A registry for `client`'s node, calling no link-local, metadata or unspecified address.
    /// Call [`Registry::start`] to keep it in step with the store in the background.
    pub fn new(client: Client) -> Arc<Self> {
        Self::with_allow(client, address::AllowList::default())
    }

    /// [`Registry::new`], also registering and calling what `allow` lets through
    /// (`--endpoint-allow`).
    pub fn with_allow(client: Client, allow: address::AllowList) -> Arc<Self> {
        Arc::new(Self {
            client,
            caller: Caller::with_allow(Arc::new(allow)),
            reports: Arc::default(),
            defined: tokio::sync::Mutex::default(),
            revision: Mutex::default(),
            stop: CancellationToken::new(),
            v2_runs: Arc::default(),
            serves_api: true,
        })
    }

    /// A registry for a node without the HTTP API (`flare worker`): it does not run Trigger.dev
    /// v2 jobs, whose SDK calls the API of the node executing the run.
    pub fn without_api(client: Client, allow: address::AllowList) -> Arc<Self> {
        let mut this = Self::with_allow(client, allow);
        if let Some(r) = Arc::get_mut(&mut this) {
            r.serves_api = false;
        }
        this
    }

    /// The Trigger.dev v2 executions in progress on this node.
    pub fn v2_runs(&self) -> &v2_execution::Executions {
        &self.v2_runs
    }

    /// Registers `seeds` (endpoints given at start) and starts the background task: every
    /// `SYNC_INTERVAL` it picks up changed endpoints, retries the first index of seeds whose
    /// application was not up yet (with backoff), and reports health. Stops at
    /// [`Registry::stop`].
    pub async fn start(
        self: &Arc<Self>,
        seeds: Vec<crate::config::EndpointSeed>,
    ) -> Result<(), Error> {
        let now = self.client.clock().now_ms();
        let mut pending = Vec::new();
        for seed in seeds {
            let url = validate_url(&seed.url, self.caller.allow())?;
            validate_secret(&seed.secret)?;
            let id = endpoint_id(&url);
            self.client
                .store()
                .endpoint_upsert(NewEndpoint {
                    id: id.clone(),
                    url,
                    secret: seed.secret,
                    protocol: Protocol::Flare,
                    client_id: None,
                    now,
                })
                .await?;
            pending.push(id);
        }
        let this = Arc::clone(self);
        tokio::spawn(async move { this.run(pending).await });
        Ok(())
    }

    /// Stops the background task.
    pub fn stop(&self) {
        self.stop.cancel();
    }

    async fn run(self: Arc<Self>, mut pending: Vec<String>) {
        let mut delay = Duration::from_secs(1);
        let mut next_try = tokio::time::Instant::now();
        loop {
            if !pending.is_empty() && tokio::time::Instant::now() >= next_try {
                let mut still = Vec::new();
                for id in pending {
                    match self.reindex(&id).await {
                        Ok(_) => {}
                        Err(Error::Store(crate::store::Error::NotFound { .. })) => {
                            tracing::info!(endpoint = %id, "endpoint removed before its first index");
                        }
                        Err(e) => {
                            tracing::warn!(endpoint = %id, error = %e, retry_in = ?delay, "endpoint not indexed yet; retrying");
                            still.push(id);
                        }
                    }
                }
                pending = still;
                next_try = tokio::time::Instant::now() + delay;
                delay = (delay * 2).min(Duration::from_secs(60));
            }
            if let Err(e) = self.sync().await {
                if let Some(suppressed) = crate::log_throttle::storage_failure("endpoints:load") {
                    tracing::warn!(error = %e, suppressed, "could not load the endpoints; retrying");
                }
            }
            self.report().await;
            tokio::select! {
                _ = tokio::time::sleep(SYNC_INTERVAL) => {}
                _ = self.stop.cancelled() => {
                    self.report().await;
                    return;
                }
            }
        }
    }

    /// Asks `url` for its jobs: the checked index, or why it cannot be used.
    pub async fn fetch_index(&self, url: &str, secret: &str) -> Result<Vec<JobDef>, Error> {
        let index_error = |reason: String| Error::Index {
            url: url.to_string(),
            reason,
        };
        let answer = self
            .caller
            .call(url, secret, &protocol::index_request(), INDEX_TIMEOUT)
            .await
            .map_err(|e| index_error(e.to_string()))?;
        protocol::parse_index(answer).map_err(|e| index_error(format!("invalid index: {e}")))
    }

    /// Asks the Trigger.dev v2 endpoint at `url` (client `client_id`, API key `key`) for its
    /// jobs: a `PING`, then `INDEX_ENDPOINT`, translated (see [`trigger_dev_v2::translate_index`]).
    pub async fn fetch_v2_index(
        &self,
        url: &str,
        key: &str,
        client_id: &str,
    ) -> Result<(Vec<JobDef>, Vec<trigger_dev_v2::Skipped>), Error> {
        let index_error = |reason: String| Error::Index {
            url: url.to_string(),
            reason,
        };
        let ping = trigger_dev_v2::call(
            &self.caller,
            url,
            key,
            "PING",
            &[("x-trigger-endpoint-id", client_id.to_string())],
            &json!({}),
            INDEX_TIMEOUT,
        )
        .await
        .map_err(|e| index_error(format!("PING: {e}")))?;
        trigger_dev_v2::parse_ping(&ping).map_err(|e| index_error(format!("PING: {e}")))?;
        let answer = trigger_dev_v2::call(
            &self.caller,
            url,
            key,
            "INDEX_ENDPOINT",
            &[],
            &json!({}),
            INDEX_TIMEOUT,
        )
        .await
        .map_err(|e| index_error(format!("INDEX_ENDPOINT: {e}")))?;
        trigger_dev_v2::translate_index(&answer)
            .map_err(|e| index_error(format!("invalid index: {e}")))
    }

    /// Registers the endpoint at `url` with `secret` (the one the application checks): indexes it
    /// first, and stores nothing when that fails. Without a secret the error suggests a new one.
    pub async fn add(&self, url: &str, secret: Option<String>) -> Result<EndpointSummary, Error> {
        self.add_with(url, secret, Protocol::Flare, None).await
    }

    /// Registers an endpoint speaking `protocol`. Flare's protocol: `secret` is the signing
    /// secret. Trigger.dev v2: `secret` is the API key the endpoint checks (`x-trigger-api-key`)
    /// and `client_id` its `TriggerClient` id; registering a URL again updates its key and
    /// index (as the v2 CLI does at each start).
    pub async fn add_with(
        &self,
        url: &str,
        secret: Option<String>,
        protocol: Protocol,
        client_id: Option<String>,
    ) -> Result<EndpointSummary, Error> {
        let url = validate_url(url, self.caller.allow())?;
        let Some(secret) = secret.map(|s| s.trim().to_string()) else {
            return Err(Error::Secret(match protocol {
                // The application checks Flare's signature from the first request on (the
                // index), so it must know the secret before Flare calls it: the operator gives it.
                Protocol::Flare => format!(
                    "give the secret your application checks Flare's signatures with, for example a new one: {}",
                    generate_secret()
                ),
                Protocol::TriggerDevV2 => {
                    "give the API key of the TriggerClient (apiKey), which Flare sends as x-trigger-api-key".into()
                }
            }));
        };
        let id = endpoint_id(&url);
        let now = self.client.clock().now_ms();
        let (index, jobs) = match protocol {
            Protocol::Flare => {
                validate_secret(&secret)?;
                let defs = self.fetch_index(&url, &secret).await?;
                (self.index_of(&url, &defs, json!([]))?, defs.len())
            }
            Protocol::TriggerDevV2 => {
                let client_id = client_id
                    .as_deref()
                    .filter(|c| !c.is_empty() && c.len() <= 200)
                    .ok_or_else(|| Error::Index {
                        url: url.clone(),
                        reason:
                            "a Trigger.dev v2 endpoint needs its client id (name, 1 to 200 bytes)"
                                .into(),
                    })?;
                if secret.is_empty() || secret.len() > 500 {
                    return Err(Error::Secret("the API key must be 1 to 500 bytes".into()));
                }
                let (defs, skipped) = self.fetch_v2_index(&url, &secret, client_id).await?;
                let skipped = serde_json::to_value(&skipped).unwrap_or_else(|_| json!([]));
                (self.index_of(&url, &defs, skipped)?, defs.len())
            }
        };
        let endpoint = NewEndpoint {
            id: id.clone(),
            url: url.clone(),
            secret: secret.clone(),
            protocol,
            client_id,
            now,
        };
        let store = self.client.store();
        match store.endpoint_create(endpoint.clone(), index.clone()).await {
            Ok(_) => {}
            Err(crate::store::Error::Conflict(_)) if protocol == Protocol::TriggerDevV2 => {
                // The v2 CLI registers its endpoint at every start: take the new key and index.
                store.endpoint_upsert(endpoint).await?;
                store.endpoint_index(&id, index).await?;
            }
            Err(e) => return Err(e.into()),
        }
        tracing::info!(endpoint = %id, %url, protocol = protocol.as_str(), jobs, "endpoint registered");
        self.sync().await?;
        let summary = self.get(&id).await?;
        Ok(summary)
    }

    /// Asks endpoint `id` for its jobs again and applies the answer. A failure is recorded on
    /// the endpoint, which keeps its previous index.
    pub async fn reindex(&self, id: &str) -> Result<(EndpointSummary, IndexApplied), Error> {
        let endpoint = self.stored(id).await?;
        let url = endpoint.summary.url.clone();
        let fetched = match endpoint.summary.protocol {
            Protocol::Flare => self
                .fetch_index(&url, &endpoint.secret)
                .await
                .map(|defs| (defs, json!([]))),
            Protocol::TriggerDevV2 => {
                let client = endpoint.summary.client_id.clone().unwrap_or_default();
                self.fetch_v2_index(&url, &endpoint.secret, &client)
                    .await
                    .map(|(defs, skipped)| {
                        (
                            defs,
                            serde_json::to_value(&skipped).unwrap_or_else(|_| json!([])),
                        )
                    })
            }
        };
        let now = self.client.clock().now_ms();
        let (defs, skipped) = match fetched {
            Ok(fetched) => fetched,
            Err(e) => {
                self.reports.error(id, now, e.to_string());
                self.report().await;
                return Err(e);
            }
        };
        let index = self.index_of(&url, &defs, skipped)?;
        let applied = match self.client.store().endpoint_index(id, index).await {
            Ok(applied) => applied,
            Err(e @ crate::store::Error::Conflict(_)) => {
                let e = Error::Index {
                    url: url.clone(),
                    reason: e.to_string(),
                };
                self.reports.error(id, now, e.to_string());
                self.report().await;
                return Err(e);
            }
            Err(e) => return Err(e.into()),
        };
        if !applied.removed.is_empty() {
            tracing::info!(endpoint = %id, removed = ?applied.removed, cancelled_runs = applied.cancelled_runs, "jobs left the endpoint's index");
        }
        self.sync().await?;
        Ok((self.get(id).await?, applied))
    }

    /// Removes endpoint `id`: its jobs stop being triggered and their queued runs are cancelled.
    pub async fn remove(&self, id: &str) -> Result<IndexApplied, Error> {
        let now = self.client.clock().now_ms();
        let applied = self.client.store().endpoint_remove(id, now).await?;
        tracing::info!(endpoint = %id, cancelled_runs = applied.cancelled_runs, "endpoint removed");
        self.sync().await?;
        Ok(applied)
    }

    /// Every endpoint, ordered by URL.
    pub async fn list(&self) -> Result<Vec<EndpointSummary>, Error> {
        self.report().await;
        Ok(self
            .client
            .store()
            .endpoints_load()
            .await?
            .into_iter()
            .map(|e| e.summary)
            .collect())
    }

    /// One endpoint.
    pub async fn get(&self, id: &str) -> Result<EndpointSummary, Error> {
        self.report().await;
        Ok(self.stored(id).await?.summary)
    }

    async fn stored(&self, id: &str) -> Result<StoredEndpoint, Error> {
        self.client
            .store()
            .endpoints_load()
            .await?
            .into_iter()
            .find(|e| e.summary.id == id)
            .ok_or_else(|| {
                Error::Store(crate::store::Error::NotFound {
                    what: "endpoint",
                    id: id.to_string(),
                })
            })
    }

    /// The index to store for `defs` (checked by [`protocol::parse_index`]) of `url`.
    fn index_of(&self, url: &str, defs: &[JobDef], skipped: Value) -> Result<EndpointIndex, Error> {
        let mut jobs = Vec::with_capacity(defs.len());
        for def in defs {
            let (spec, _) = def
                .to_job()
                .and_then(|job| {
                    job.run(|_: Value, _: Io| async { Ok(Value::Null) })
                        .validate()
                        .map_err(|e| e.to_string())
                })
                .map_err(|reason| Error::Index {
                    url: url.to_string(),
                    reason,
                })?;
            jobs.push(spec);
        }
        Ok(EndpointIndex {
            jobs,
            raw: serde_json::to_value(defs).unwrap_or_else(|_| json!([])),
            skipped,
            now: self.client.clock().now_ms(),
        })
    }

    /// Brings this node's endpoint jobs in step with the store: defines the jobs of new or
    /// changed endpoints (each with a body that calls its endpoint), and stops running the jobs
    /// that left an index or whose endpoint was removed.
    pub async fn sync(&self) -> Result<(), Error> {
        let store = self.client.store();
        let mut defined = self.defined.lock().await;
        let revision = store.endpoints_revision().await?;
        let seen = self.revision.lock().map(|r| *r).unwrap_or(None);
        if seen == Some(revision) {
            return Ok(());
        }
        let endpoints = store.endpoints_load().await?;
        // One job id, one owner: an index may still list a job that code has since displaced
        // (`store::owners`); only the jobs the endpoint owns are run from it.
        let owners = store.job_owners().await?;
        let engine = self.client.engine();
        let mut changed = false;
        let live: Vec<&str> = endpoints.iter().map(|e| e.summary.id.as_str()).collect();
        let gone: Vec<String> = defined
            .0
            .keys()
            .filter(|id| !live.contains(&id.as_str()))
            .cloned()
            .collect();
        for id in gone {
            if let Some((_, jobs)) = defined.0.remove(&id) {
                jobs.iter().for_each(|j| engine.undefine(j));
                changed = true;
            }
        }
        for endpoint in &endpoints {
            let id = &endpoint.summary.id;
            if defined
                .0
                .get(id)
                .is_some_and(|(rev, _)| *rev == endpoint.updated_at)
            {
                continue;
            }
            let defs = match protocol::parse_index(json!({ "jobs": endpoint.index })) {
                Ok(defs) => defs,
                Err(e) => {
                    tracing::error!(endpoint = %id, error = %e, "stored index is unusable");
                    continue;
                }
            };
            if endpoint.summary.protocol == Protocol::TriggerDevV2 && !self.serves_api {
                // Its runs call back the API of the node executing them: a node without the API
                // leaves them to `flare serve`.
                continue;
            }
            let target = Arc::new(Target {
                id: id.clone(),
                url: endpoint.summary.url.clone(),
                secret: endpoint.secret.clone(),
                caller: self.caller.clone(),
                reports: Arc::clone(&self.reports),
                clock: self.client.clock().clone(),
            });
            let v2_target = (endpoint.summary.protocol == Protocol::TriggerDevV2).then(|| {
                Arc::new(v2_runs::V2Target {
                    id: id.clone(),
                    url: endpoint.summary.url.clone(),
                    key: endpoint.secret.clone(),
                    caller: self.caller.clone(),
                    reports: Arc::clone(&self.reports),
                    store: store.clone(),
                    clock: self.client.clock().clone(),
                    runs: Arc::clone(&self.v2_runs),
                })
            });
            let mut ids = Vec::with_capacity(defs.len());
            for def in &defs {
                if owners
                    .get(&def.id)
                    .is_some_and(|owner| owner.as_ref() != Some(id))
                {
                    tracing::debug!(endpoint = %id, job = %def.id, "not running an endpoint job that code displaced");
                    continue;
                }
                let defined = match &v2_target {
                    Some(v2) => define_v2(engine, v2, def),
                    None => define(engine, &target, def),
                };
                match defined {
                    Ok(()) => ids.push(def.id.clone()),
                    Err(e) => {
                        tracing::error!(endpoint = %id, job = %def.id, error = %e, "cannot define an endpoint job")
                    }
                }
            }
            let old = defined
                .0
                .insert(id.clone(), (endpoint.updated_at, ids.clone()))
                .map(|(_, old)| old)
                .unwrap_or_default();
            for job in old.iter().filter(|j| !ids.contains(j)) {
                engine.undefine(job);
            }
            changed = true;
        }
        if let Ok(mut r) = self.revision.lock() {
            *r = Some(revision);
        }
        drop(defined);
        if changed {
            // Tell the others now which jobs this node runs (the jobs page reads it).
            if let Err(e) = engine.beat().await {
                tracing::debug!(error = %e, "could not record this node's jobs");
            }
        }
        Ok(())
    }

    /// Writes what this node saw of the endpoints' calls since the last report.
    async fn report(&self) {
        for (id, report) in self.reports.take() {
            if let Err(e) = self.client.store().endpoint_report(&id, report).await {
                tracing::debug!(endpoint = %id, error = %e, "could not record the endpoint's health");
            }
        }
    }
}
