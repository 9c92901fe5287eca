//! HTTP job endpoints in the store: their records, an index to apply, what applying it did, and
//! what nodes report of their calls.
//!
//! An endpoint's last accepted index is kept twice: as the JSON the endpoint sent (validated), from
//! which every node rebuilds the job definitions with their full retry policy, and as one row per
//! job in `jobs` (with `endpoint_id`), which fan-out and the dashboard read like any other job.
//! Applying an index writes both, removes the jobs that left it and cancels their queued runs, in
//! one transaction, so no job is ever half-registered.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::{Error, Result};
use crate::model::{ms_to_time, JobSpec};

/// Recent errors kept per endpoint.
pub const MAX_RECENT_ERRORS: usize = 10;

/// The protocol an endpoint speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Protocol {
    /// Flare's own (`docs/endpoints.md`): signed `index` and `run` requests.
    #[default]
    #[serde(rename = "flare")]
    Flare,
    /// The platform side of Trigger.dev v2 (`@trigger.dev/sdk` 2.x, `docs/trigger-dev-v2.md`).
    #[serde(rename = "trigger.dev-v2")]
    TriggerDevV2,
}

impl Protocol {
    /// The stored spelling: `flare` or `trigger.dev-v2`.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Flare => "flare",
            Protocol::TriggerDevV2 => "trigger.dev-v2",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(s: &str) -> Option<Self> {
        [Protocol::Flare, Protocol::TriggerDevV2]
            .into_iter()
            .find(|p| p.as_str() == s)
    }
}

/// An endpoint to store: its id (derived from the URL), URL and signing secret.
#[derive(Clone)]
pub struct NewEndpoint {
    /// `ep_…`.
    pub id: String,
    /// Where its jobs are served.
    pub url: String,
    /// Flare's protocol: the Standard Webhooks secret Flare signs its requests with (`whsec_…`);
    /// Trigger.dev v2: the API key the endpoint was registered with (`x-trigger-api-key`).
    pub secret: String,
    /// The protocol it speaks.
    pub protocol: Protocol,
    /// Trigger.dev v2: the client id (`x-trigger-endpoint-id`).
    pub client_id: Option<String>,
    /// Now, ms.
    pub now: i64,
}

impl std::fmt::Debug for NewEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewEndpoint")
            .field("id", &self.id)
            .field("url", &self.url)
            .field("secret", &"<redacted>")
            .field("protocol", &self.protocol)
            .field("client_id", &self.client_id)
            .finish()
    }
}

/// An accepted index to apply to an endpoint.
#[derive(Debug, Clone)]
pub struct EndpointIndex {
    /// The jobs, validated.
    pub jobs: Vec<JobSpec>,
    /// The index as the endpoint sent it (a JSON array of job definitions), kept for the nodes.
    pub raw: Value,
    /// The jobs it offered that Flare did not take, with why: a JSON array of `{id, reason}`.
    pub skipped: Value,
    /// Now, ms.
    pub now: i64,
}

/// What applying an index (or removing an endpoint) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IndexApplied {
    /// Jobs that left the index (or the endpoint's jobs, when it was removed).
    pub removed: Vec<String>,
    /// Their queued runs, now cancelled.
    pub cancelled_runs: u64,
}

/// One recorded failure of an endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointError {
    /// When it happened.
    pub at: DateTime<Utc>,
    /// What happened.
    pub message: String,
}

/// How an endpoint is doing, from its last calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EndpointHealth {
    /// Its last call (index or run) succeeded.
    Ok,
    /// Its last call failed.
    Failing,
    /// It was never indexed: Flare does not know its jobs yet.
    Unindexed,
}

impl EndpointHealth {
    /// `ok`, `failing` or `unindexed`.
    pub fn as_str(self) -> &'static str {
        match self {
            EndpointHealth::Ok => "ok",
            EndpointHealth::Failing => "failing",
            EndpointHealth::Unindexed => "unindexed",
        }
    }
}

/// An endpoint as the API and the dashboard show it (never with its secret).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointSummary {
    /// `ep_…`.
    pub id: String,
    /// Where its jobs are served.
    pub url: String,
    /// When it was registered.
    pub created_at: DateTime<Utc>,
    /// When its current index was accepted.
    pub indexed_at: Option<DateTime<Utc>>,
    /// The ids of the jobs of its current index.
    pub jobs: Vec<String>,
    /// Its last successful call (index or run).
    pub last_ok_at: Option<DateTime<Utc>>,
    /// Its last failed call.
    pub last_error_at: Option<DateTime<Utc>>,
    /// Its recent failures, newest first (at most [`MAX_RECENT_ERRORS`]).
    pub recent_errors: Vec<EndpointError>,
    /// Derived from the above.
    pub health: EndpointHealth,
    /// The protocol it speaks.
    pub protocol: Protocol,
    /// Trigger.dev v2: the client id it was registered with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// The jobs of its last index that Flare did not take, with why (`[{id, reason}]`).
    pub skipped_jobs: Value,
}

/// An endpoint with what a node needs to run its jobs.
#[derive(Clone)]
pub struct StoredEndpoint {
    /// What is shown.
    pub summary: EndpointSummary,
    /// The signing secret.
    pub secret: String,
    /// The current index as the endpoint sent it.
    pub index: Value,
    /// The revision of this row (ms).
    pub updated_at: i64,
}

impl std::fmt::Debug for StoredEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredEndpoint")
            .field("summary", &self.summary)
            .field("secret", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// The columns of an endpoint row, as both backends read them.
pub(crate) struct EndpointRow {
    pub id: String,
    pub url: String,
    pub secret: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub indexed_at: Option<i64>,
    pub jobs: String,
    pub last_ok_at: Option<i64>,
    pub last_error_at: Option<i64>,
    pub errors: String,
    pub protocol: String,
    pub client_id: Option<String>,
    pub skipped: String,
}

/// The columns [`EndpointRow`] is read from, in order.
pub(crate) const ENDPOINT_COLUMNS: &str =
    "id, url, secret, created_at, updated_at, indexed_at, jobs, last_ok_at, last_error_at, errors, \
     protocol, client_id, skipped";

impl EndpointRow {
    pub(crate) fn into_stored(self) -> Result<StoredEndpoint> {
        let index: Value = serde_json::from_str(&self.jobs)
            .map_err(|e| Error::Corrupt(format!("endpoint {} index: {e}", self.id)))?;
        let jobs = index
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|j| j.get("id").and_then(Value::as_str).map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let recent_errors: Vec<EndpointError> = serde_json::from_str(&self.errors)
            .map_err(|e| Error::Corrupt(format!("endpoint {} errors: {e}", self.id)))?;
        let protocol = Protocol::parse(&self.protocol).ok_or_else(|| {
            Error::Corrupt(format!("endpoint {} protocol {:?}", self.id, self.protocol))
        })?;
        let skipped_jobs: Value = serde_json::from_str(&self.skipped)
            .map_err(|e| Error::Corrupt(format!("endpoint {} skipped: {e}", self.id)))?;
        let health = match (self.indexed_at, self.last_ok_at, self.last_error_at) {
            (None, _, _) => EndpointHealth::Unindexed,
            // On a tie (same millisecond) the failure is shown: the cautious reading.
            (_, Some(ok), Some(err)) if err >= ok => EndpointHealth::Failing,
            (_, None, Some(_)) => EndpointHealth::Failing,
            _ => EndpointHealth::Ok,
        };
        Ok(StoredEndpoint {
            summary: EndpointSummary {
                id: self.id,
                url: self.url,
                created_at: ms_to_time(self.created_at),
                indexed_at: self.indexed_at.map(ms_to_time),
                jobs,
                last_ok_at: self.last_ok_at.map(ms_to_time),
                last_error_at: self.last_error_at.map(ms_to_time),
                recent_errors,
                health,
                protocol,
                client_id: self.client_id,
                skipped_jobs,
            },
            secret: self.secret,
            index,
            updated_at: self.updated_at,
        })
    }
}

/// What a node learned about an endpoint from its calls since the last report.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EndpointReport {
    /// Its latest successful call, ms.
    pub ok_at: Option<i64>,
    /// Its failures, oldest first: (ms, message).
    pub errors: Vec<(i64, String)>,
}

/// `errors` (stored, newest first) with `new` (oldest first) added, newest first, capped.
pub(crate) fn merge_errors(stored: &str, new: &[(i64, String)]) -> Result<String> {
    let mut all: Vec<EndpointError> = serde_json::from_str(stored)
        .map_err(|e| Error::Corrupt(format!("endpoint errors: {e}")))?;
    for (at, message) in new {
        all.insert(
            0,
            EndpointError {
                at: ms_to_time(*at),
                message: message.clone(),
            },
        );
    }
    all.truncate(MAX_RECENT_ERRORS);
    serde_json::to_string(&all).map_err(|e| Error::Corrupt(e.to_string()))
}

/// Checks that an endpoint may serve `jobs`: a job id that another endpoint serves, or that a
/// live node defines in its own code, is refused (job ids are one namespace). `owners` maps each
/// stored job id among them to its endpoint (`None`: defined in code); `endpoint_urls` names the
/// other endpoints.
pub(crate) fn check_owners(
    endpoint_id: &str,
    jobs: &[JobSpec],
    owners: &HashMap<String, Option<String>>,
    endpoint_urls: &HashMap<String, String>,
    defined_by_live_nodes: &HashSet<String>,
) -> Result<()> {
    for job in jobs {
        match owners.get(&job.id) {
            Some(Some(other)) if other != endpoint_id => {
                let url = endpoint_urls
                    .get(other)
                    .map_or(other.as_str(), String::as_str);
                return Err(Error::Conflict(format!(
                    "job {:?} is already served by the endpoint {url}",
                    job.id
                )));
            }
            Some(None) if defined_by_live_nodes.contains(&job.id) => {
                return Err(Error::Conflict(format!(
                    "job {:?} is defined in the code of a running Flare process; job ids are shared by every endpoint and process",
                    job.id
                )));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The error a queued run of a job that left its endpoint's index is cancelled with.
pub(crate) fn removed_message(job_id: &str, url: &str) -> String {
    format!("cancelled: job {job_id:?} was removed from the endpoint {url}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_kept_newest_first_and_capped() {
        let new: Vec<(i64, String)> = (0..12).map(|i| (i * 1000, format!("e{i}"))).collect();
        let merged = merge_errors("[]", &new[..2]).expect("merge");
        let merged = merge_errors(&merged, &new[2..]).expect("merge");
        let all: Vec<EndpointError> = serde_json::from_str(&merged).expect("json");
        assert_eq!(all.len(), MAX_RECENT_ERRORS);
        assert_eq!(all[0].message, "e11");
        assert_eq!(all[9].message, "e2");
    }

    fn row(indexed: Option<i64>, ok: Option<i64>, err: Option<i64>) -> EndpointHealth {
        EndpointRow {
            id: "ep_1".into(),
            url: "http://x".into(),
            secret: "s".into(),
            created_at: 0,
            updated_at: 0,
            indexed_at: indexed,
            jobs: r#"[{"id": "a"}]"#.into(),
            last_ok_at: ok,
            last_error_at: err,
            errors: "[]".into(),
            protocol: "flare".into(),
            client_id: None,
            skipped: "[]".into(),
        }
        .into_stored()
        .expect("row")
        .summary
        .health
    }

    #[test]
    fn health_follows_the_last_call() {
        assert_eq!(row(None, Some(1), None), EndpointHealth::Unindexed);
        assert_eq!(row(Some(1), Some(1), None), EndpointHealth::Ok);
        assert_eq!(row(Some(1), Some(1), Some(2)), EndpointHealth::Failing);
        assert_eq!(row(Some(1), Some(3), Some(2)), EndpointHealth::Ok);
        assert_eq!(row(Some(1), Some(2), Some(2)), EndpointHealth::Failing);
        assert_eq!(row(Some(1), None, Some(2)), EndpointHealth::Failing);
    }
}
