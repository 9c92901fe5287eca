//! Nodes in the store: a node's beat ([`NodeBeat`]) and record ([`NodeSummary`]), and where each
//! job runs ([`JobPlacement`]: its endpoint, the live nodes defining it).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::endpoints::StoredEndpoint;
use super::error::{Error, Result};
use super::owners::{JobOwner, OwnerNote};

/// A node counts as live when it said so within this many ms (it does every few seconds).
pub const NODE_LIVE_MS: i64 = 20_000;

/// Node rows not seen for this long are deleted by the next beat of any node.
pub const NODE_FORGET_MS: i64 = 24 * 3_600_000;

/// A node's report that it is alive and which jobs it defines.
#[derive(Debug, Clone)]
pub struct NodeBeat {
    /// The engine's node id.
    pub id: String,
    /// When it started, ms.
    pub started_at: i64,
    /// Now, ms.
    pub now: i64,
    /// The ids of the jobs it defines (its own and its endpoints').
    pub jobs: Vec<String>,
    /// The Flare version it runs.
    pub version: String,
    /// Runs it executes at once at most.
    pub concurrency: u64,
    /// Runs it executes now.
    pub running: u64,
}

/// A node as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSummary {
    /// Node id.
    pub id: String,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// When it last said it was alive.
    pub seen_at: DateTime<Utc>,
    /// The jobs it defines.
    pub jobs: Vec<String>,
    /// Seen within [`NODE_LIVE_MS`].
    pub live: bool,
    /// The Flare version it runs (empty for a node of a version before it said).
    pub version: String,
    /// Runs it executes at once at most.
    pub concurrency: u64,
    /// Runs it executed at its last beat.
    pub running: u64,
}

/// An endpoint named by a job.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointRef {
    /// `ep_…`.
    pub id: String,
    /// Its URL.
    pub url: String,
}

/// Where a job runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobPlacement {
    /// The endpoint serving it, for a job of an HTTP endpoint.
    pub endpoint: Option<EndpointRef>,
    /// The live nodes that define it (for an endpoint's job: the nodes that call the endpoint).
    pub nodes: Vec<String>,
    /// False when no live node runs it: its runs stay queued until one does.
    pub served: bool,
    /// The last change of its owner (a job defined in code that displaced an endpoint's, or the
    /// reverse), if any.
    pub owner_note: Option<OwnerNote>,
}

/// The jobs of live nodes, by job id.
pub(crate) fn placements(
    jobs: &[JobOwner],
    endpoints: &[StoredEndpoint],
    nodes: &[NodeSummary],
) -> HashMap<String, JobPlacement> {
    let urls: HashMap<&str, &str> = endpoints
        .iter()
        .map(|e| (e.summary.id.as_str(), e.summary.url.as_str()))
        .collect();
    jobs.iter()
        .map(
            |JobOwner {
                 job,
                 endpoint,
                 note,
             }| {
                let on: Vec<String> = nodes
                    .iter()
                    .filter(|n| n.live && n.jobs.iter().any(|j| j == job))
                    .map(|n| n.id.clone())
                    .collect();
                let placement = JobPlacement {
                    endpoint: endpoint.as_ref().map(|id| EndpointRef {
                        id: id.clone(),
                        url: urls.get(id.as_str()).copied().unwrap_or("").to_string(),
                    }),
                    served: !on.is_empty(),
                    nodes: on,
                    owner_note: note.clone().map(OwnerNote::new),
                };
                (job.clone(), placement)
            },
        )
        .collect()
}

/// A node's stored job list (`nodes.jobs`, JSON text), as both backends read it.
pub(crate) fn jobs_of(text: &str) -> Result<Vec<String>> {
    serde_json::from_str(text).map_err(|e| Error::Corrupt(format!("node jobs: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ms_to_time;

    fn node(id: &str, live: bool, jobs: &[&str]) -> NodeSummary {
        NodeSummary {
            id: id.into(),
            started_at: ms_to_time(0),
            seen_at: ms_to_time(0),
            jobs: jobs.iter().map(|j| j.to_string()).collect(),
            live,
            version: String::new(),
            concurrency: 0,
            running: 0,
        }
    }

    #[test]
    fn a_job_is_served_only_by_live_nodes_that_define_it() {
        let owner = |job: &str, endpoint: Option<&str>| JobOwner {
            job: job.into(),
            endpoint: endpoint.map(Into::into),
            note: None,
        };
        let jobs = vec![owner("a", None), owner("b", Some("ep_1")), owner("c", None)];
        let nodes = [node("n1", true, &["a", "b"]), node("n2", false, &["c"])];
        let p = placements(&jobs, &[], &nodes);
        assert!(p["a"].served);
        assert_eq!(p["a"].nodes, ["n1"]);
        assert_eq!(
            p["b"].endpoint.as_ref().map(|e| e.id.as_str()),
            Some("ep_1")
        );
        assert!(!p["c"].served, "only a dead node defines it");
        assert!(p["c"].nodes.is_empty());
    }
}
