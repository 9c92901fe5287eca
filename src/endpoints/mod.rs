//! HTTP job endpoints: jobs in any language, served by an application at a URL.
//!
//! An operator registers an endpoint (at start with `--endpoint`, or at run time through the JSON
//! API or the dashboard). Flare asks it for its jobs (the `index` action), checks them as it
//! checks a job defined in Rust, and stores them ([`crate::store::endpoints`]); from then on they
//! are jobs like any other: broadcast, filters, retries with backoff, timeouts, concurrency,
//! leases, versions, metrics and the dashboard apply unchanged. A run of such a job is one signed
//! `run` request to the endpoint ([`caller`]); its answer's output, error, log lines and chained
//! events become the attempt's outcome ([`protocol`]).
//!
//! Every node runs a [`Registry`]: it watches the stored endpoints and defines their jobs in its
//! engine, each with a body that calls the endpoint, so any node (`flare serve` or `flare worker`)
//! runs endpoint jobs. It also reports what it saw of each endpoint's calls (health, recent
//! errors) back to the store once a second.
//!
//! Endpoints are called only at addresses [`address`] allows: private networks are, link-local,
//! cloud metadata and unspecified addresses are not unless the operator allows them.
//!
//! The protocol is written down for endpoint authors in `docs/endpoints.md`.

pub mod address;
pub mod caller;
pub mod protocol;
pub mod trigger_dev_v2;
pub mod v2_runs;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use crate::client::Client;
use crate::io::Io;
use crate::model::JobError;
use crate::store::endpoints::{
    EndpointIndex, EndpointReport, EndpointSummary, IndexApplied, NewEndpoint, Protocol,
    StoredEndpoint,
};
use caller::Caller;
use protocol::{JobDef, RunRequest};

/// How long Flare waits for an endpoint's index.
pub const INDEX_TIMEOUT: Duration = Duration::from_secs(10);

/// How often a node looks for changed endpoints and reports their health.
pub const SYNC_INTERVAL: Duration = Duration::from_secs(1);

/// Longest URL accepted.
pub const MAX_URL_LEN: usize = 2000;

/// Why an endpoint operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The URL is unusable.
    #[error("invalid endpoint URL {url:?}: {reason}")]
    Url {
        /// The URL given.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// The secret is unusable (never shown).
    #[error("invalid endpoint secret: {0}")]
    Secret(String),
    /// Asking the endpoint for its jobs failed, or its answer was refused.
    #[error("indexing the endpoint {url} failed: {reason}")]
    Index {
        /// The endpoint.
        url: String,
        /// What went wrong.
        reason: String,
    },
    /// Storage refused or failed.
    #[error(transparent)]
    Store(#[from] crate::store::Error),
}

/// `ep_` and 16 hex digits of the URL's SHA-256: the same URL gets the same id on every node and
/// at every start.
pub fn endpoint_id(url: &str) -> String {
    let digest = Sha256::digest(url.as_bytes());
    format!("ep_{}", &hex::encode(digest)[..16])
}

/// Checks an endpoint URL: http or https, a host, no credentials, at most [`MAX_URL_LEN`] bytes,
/// and an address `allow` lets through ([`address`]). Returns it normalised (as the URL parser
/// writes it).
pub fn validate_url(url: &str, allow: &address::AllowList) -> Result<String, Error> {
    let bad = |reason: &str| Error::Url {
        url: shown_url(url.trim()),
        reason: reason.to_string(),
    };
    if url.len() > MAX_URL_LEN {
        return Err(bad("longer than 2000 bytes"));
    }
    let parsed = reqwest::Url::parse(url.trim()).map_err(|e| bad(&format!("not a URL ({e})")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(bad("the scheme must be http or https"));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(bad("the URL has no host"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(bad(
            "a user name or password in the URL is not allowed: Flare signs its calls with the endpoint's secret",
        ));
    }
    if parsed.fragment().is_some() {
        return Err(bad("remove the #fragment"));
    }
    allow.check_url(&parsed).map_err(|r| bad(&r.to_string()))?;
    Ok(parsed.to_string())
}

/// `raw` as it may be shown in an error: credentials replaced by `…`, at most 100 characters.
pub fn shown_url(raw: &str) -> String {
    let mut shown = raw.to_string();
    if let Some(start) = raw.find("://").map(|i| i + 3) {
        let authority_end = raw[start..]
            .find(['/', '?', '#'])
            .map_or(raw.len(), |i| start + i);
        if let Some(at) = raw[start..authority_end].rfind('@') {
            shown = format!("{}…@{}", &raw[..start], &raw[start + at + 1..]);
        }
    }
    if shown.chars().count() > 100 {
        shown = shown.chars().take(99).chain(['…']).collect();
    }
    shown
}

/// Checks a Standard Webhooks secret (`whsec_` and base64); the error never shows it.
pub fn validate_secret(secret: &str) -> Result<(), Error> {
    if !secret.starts_with(crate::webhooks::svix::SECRET_PREFIX) {
        return Err(Error::Secret(
            "it must look like whsec_<base64>, as Standard Webhooks secrets do".into(),
        ));
    }
    crate::webhooks::svix::sign(secret, "msg_check", 0, b"")
        .map(|_| ())
        .map_err(|e| Error::Secret(e.to_string()))
}

/// A new random secret: `whsec_` and 32 random bytes in base64.
pub fn generate_secret() -> String {
    let bytes: [u8; 32] = rand::random();
    format!(
        "{}{}",
        crate::webhooks::svix::SECRET_PREFIX,
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

/// What a node's calls taught it about each endpoint since its last report.
#[derive(Debug, Default)]
pub(crate) struct Reports(Mutex<HashMap<String, EndpointReport>>);

impl Reports {
    pub(crate) fn ok(&self, endpoint: &str, at: i64) {
        if let Ok(mut r) = self.0.lock() {
            let e = r.entry(endpoint.to_string()).or_default();
            e.ok_at = Some(e.ok_at.map_or(at, |t| t.max(at)));
        }
    }

    pub(crate) fn error(&self, endpoint: &str, at: i64, message: String) {
        if let Ok(mut r) = self.0.lock() {
            let e = r.entry(endpoint.to_string()).or_default();
            // A burst of failures keeps the latest few: the store keeps ten anyway.
            if e.errors.len() >= crate::store::endpoints::MAX_RECENT_ERRORS {
                e.errors.remove(0);
            }
            e.errors.push((at, message));
        }
    }

    fn take(&self) -> HashMap<String, EndpointReport> {
        self.0
            .lock()
            .map(|mut r| std::mem::take(&mut *r))
            .unwrap_or_default()
    }
}

/// One endpoint as its jobs' bodies call it.
struct Target {
    id: String,
    url: String,
    secret: String,
    caller: Caller,
    reports: Arc<Reports>,
    clock: crate::clock::SharedClock,
}

/// What this node has defined from each endpoint: the row's revision and the job ids.
#[derive(Default)]
struct Defined(HashMap<String, (i64, Vec<String>)>);

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
    v2_runs: Arc<v2_runs::Executions>,
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
    pub fn v2_runs(&self) -> &v2_runs::Executions {
        &self.v2_runs
    }

    /// Registers `seeds` (endpoints given at start) and starts the background task: every
    /// [`SYNC_INTERVAL`] it picks up changed endpoints, retries the first index of seeds whose
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

/// Defines `def` in `engine` with a body that runs it at `target`.
fn define(engine: &crate::Engine, target: &Arc<Target>, def: &JobDef) -> Result<(), String> {
    let job = def.to_job()?;
    let timeout = def
        .timeout_ms
        .map_or(Duration::from_secs(300), Duration::from_millis);
    let max_attempts = def
        .retry
        .as_ref()
        .and_then(|r| r.max_attempts)
        .unwrap_or(crate::RetryPolicy::default().max_attempts);
    let target = Arc::clone(target);
    let (job_id, version) = (def.id.clone(), def.version.clone());
    let job = job.run(move |payload: Value, io: Io| {
        let target = Arc::clone(&target);
        let (job_id, version) = (job_id.clone(), version.clone());
        async move {
            execute(
                &target,
                &job_id,
                &version,
                max_attempts,
                timeout,
                payload,
                io,
            )
            .await
        }
    });
    let (spec, handler) = job.validate().map_err(|e| e.to_string())?;
    engine.define_local(spec, handler);
    Ok(())
}

/// Defines the Trigger.dev v2 job `def` in `engine` with a body that executes it at `target`.
fn define_v2(
    engine: &crate::Engine,
    target: &Arc<v2_runs::V2Target>,
    def: &JobDef,
) -> Result<(), String> {
    let job = def.to_job()?;
    let timeout = def
        .timeout_ms
        .map_or(Duration::from_secs(300), Duration::from_millis);
    let target = Arc::clone(target);
    let (job_id, version) = (def.id.clone(), def.version.clone());
    let job = job.run(move |payload: Value, io: Io| {
        let target = Arc::clone(&target);
        let (job_id, version) = (job_id.clone(), version.clone());
        async move { v2_runs::execute(&target, (&job_id, &version), timeout, payload, io).await }
    });
    let (spec, handler) = job.validate().map_err(|e| e.to_string())?;
    engine.define_local(spec, handler);
    Ok(())
}

/// One attempt of an endpoint job: the `run` call, then its answer's logs, events and outcome.
async fn execute(
    target: &Target,
    job_id: &str,
    version: &str,
    max_attempts: u32,
    timeout: Duration,
    payload: Value,
    io: Io,
) -> Result<Value, JobError> {
    let body = RunRequest {
        run_id: io.run_id(),
        attempt: io.attempt(),
        max_attempts,
        job_id,
        job_version: version,
        event_id: io.event_id(),
        event_name: io.event_name(),
        payload,
    }
    .to_json();
    // Just inside the executor's own bound, so that the endpoint's health records the timeout.
    let bound = timeout
        .saturating_sub(Duration::from_millis(5))
        .max(Duration::from_millis(1));
    let now = || target.clock.now_ms();
    let failed = |e: String| {
        target.reports.error(
            &target.id,
            now(),
            format!(
                "run {} (job {job_id}, attempt {}): {e}",
                io.run_id(),
                io.attempt()
            ),
        );
        JobError::from(e)
    };
    let answer = target
        .caller
        .call(&target.url, &target.secret, &body, bound)
        .await
        .map_err(|e| failed(e.to_string()))?;
    let answer =
        protocol::parse_run_answer(answer).map_err(|e| failed(format!("invalid answer: {e}")))?;
    target.reports.ok(&target.id, now());
    for (level, message, fields) in answer.logs {
        io.logger.log(level, message, fields);
    }
    if !answer.events.is_empty() {
        io.send_keyed(answer.events)
            .await
            .map_err(|e| JobError::from(format!("could not send the answer's events: {e}")))?;
    }
    match answer.outcome {
        Some(Ok(output)) => Ok(output),
        Some(Err((message, true))) => Err(JobError::from(message)),
        Some(Err((message, false))) => Err(JobError::fatal(message)),
        None => Err(JobError::from("the answer has neither output nor error")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked() {
        let check = |url: &str| validate_url(url, &address::AllowList::default());
        assert_eq!(
            check("http://127.0.0.1:4000/flare").ok().as_deref(),
            Some("http://127.0.0.1:4000/flare")
        );
        assert!(check("https://jobs.example.com/api/flare?x=1").is_ok());
        for (bad, why) in [
            ("ftp://x/y", "http"),
            ("not a url", "invalid endpoint URL"),
            ("http://user:hunter2@x/", "user name or password"),
            ("http://x/#frag", "fragment"),
            ("file:///etc/passwd", "http"),
            ("http://169.254.169.254/latest", "cloud metadata service"),
            ("http://[fe80::1]:4000/", "link-local"),
            ("http://0.0.0.0:4000/", "unspecified"),
        ] {
            let err = check(bad).expect_err(bad).to_string();
            assert!(err.contains(why), "{bad}: {err}");
            assert!(!err.contains("hunter2"), "a password is never shown: {err}");
        }
        assert!(check(&format!("http://x/{}", "a".repeat(MAX_URL_LEN))).is_err());
    }

    #[test]
    fn ids_are_stable_and_secrets_valid() {
        assert_eq!(endpoint_id("http://a/"), endpoint_id("http://a/"));
        assert_ne!(endpoint_id("http://a/"), endpoint_id("http://b/"));
        assert!(endpoint_id("http://a/").starts_with("ep_"));
        let s = generate_secret();
        assert!(validate_secret(&s).is_ok());
        assert_ne!(s, generate_secret());
        let err = validate_secret("whsec_!!notbase64")
            .expect_err("bad")
            .to_string();
        assert!(!err.contains("!!notbase64"), "{err}");
        assert!(validate_secret("plain-secret").is_err());
    }
}
