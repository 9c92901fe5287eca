//! What the store tests build on: a job's stored definition, a new event, claim parameters, a
//! claimed attempt's completion, and several `Store`s (nodes) opened on one database.

use std::time::Duration;

use flare::job::JobSpec;
use flare::store::{ClaimGroup, ClaimParams, ClaimedRun, Completion, Finish, NewEvent, Store};
use flare::RetryPolicy;
use serde_json::json;

use crate::support::TestDb;

pub const NODES: usize = 4;

pub fn spec(id: &str, event: &str, max_attempts: u32) -> JobSpec {
    JobSpec {
        id: id.into(),
        name: id.into(),
        version: "1.0.0".into(),
        event: event.into(),
        filter: None,
        schedule: None,
        retry: RetryPolicy::default().max_attempts(max_attempts),
        timeout: Duration::from_secs(30),
        concurrency: Default::default(),
        rate_limit: None,
        throttle: None,
        start_timeout: None,
        debounce: None,
        priority: None,
        cancel_on: Vec::new(),
    }
}

pub fn event(id: String, deliver_at: Option<i64>, now: i64) -> NewEvent {
    NewEvent {
        id,
        name: "order.placed".into(),
        payload: json!({"n": 1}),
        context: None,
        source: "api".into(),
        parent_run_id: None,
        deliver_at,
        now,
    }
}

/// The completion of the attempt `run` holds, finished at `at` with `finish`.
pub fn completion(run: &ClaimedRun, at: i64, finish: Finish) -> Completion {
    Completion {
        run_id: run.id.clone(),
        job_id: run.job_id.clone(),
        token: run.token,
        attempt: run.attempt,
        started_at: run.started_at,
        finished_at: at,
        finish,
        logs: Vec::new(),
    }
}

/// A claim of up to `limit` runs of `job`.
pub fn claim_params(
    job: &str,
    node: Option<&str>,
    now: i64,
    lease_until: i64,
    limit: usize,
) -> ClaimParams {
    ClaimParams {
        node: node.map(str::to_string),
        now,
        lease_until,
        groups: vec![ClaimGroup {
            jobs: vec![job.to_string()],
            limit,
            flow: None,
        }],
    }
}

/// A store on `url` with the job `ship` (on `order.placed`, 3 attempts) defined.
pub async fn store_with_ship(url: &str) -> Store {
    let store = Store::open(url).await.expect("open");
    store
        .job_define(spec("ship", "order.placed", 3))
        .await
        .expect("define ship");
    store
}

pub async fn nodes(db: &TestDb) -> Vec<Store> {
    let mut stores = Vec::new();
    for _ in 0..NODES {
        stores.push(Store::open(&db.url).await.expect("open"));
    }
    stores
}
