//! HTTP job endpoints: jobs in any language, served by an application at a URL.
//!
//! An operator registers an endpoint (at start with `--endpoint`, or at run time through the JSON
//! API or the dashboard). Flare asks it for its jobs (the `index` action), checks them as it
//! checks a job defined in Rust, and stores them ([`crate::store::endpoints`]); from then on they
//! are jobs like any other: broadcast, filters, retries with backoff, timeouts, concurrency,
//! leases, versions, metrics and the dashboard apply unchanged. A run of such a job is one signed
//! `run` request to the endpoint ([`caller`]); its answer's output, error, log lines and chained
//! events become the attempt's outcome ([`protocol`]). An endpoint that speaks version 2 of the
//! protocol runs durable steps over HTTP: an attempt is a loop of calls, each carrying the run's
//! stored steps and answered with the steps reached ([`stepped`]).
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
//!
//! This module knows nothing of the HTTP routes that add endpoints (`crate::http::endpoints`, the
//! dashboard): they call the [`Registry`]. Storage goes through `crate::store` only.

pub mod address;
pub mod caller;
mod error;
mod jobs;
pub mod protocol;
mod registry;
mod reports;
mod seed;
pub mod step_answer;
pub mod stepped;
mod target;
pub mod trigger_dev_v2;
pub mod v2_callbacks;
pub mod v2_execution;
pub mod v2_runs;
pub mod v2_tasks;

pub use error::Error;
pub use registry::Registry;
pub use seed::{
    endpoint_id, generate_secret, shown_url, validate_secret, validate_url, EndpointSeed,
    MAX_URL_LEN,
};
