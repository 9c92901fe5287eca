//! Which node serves what: a job no live node serves is flagged, nodes pick up endpoints
//! registered elsewhere, and endpoints given at start are indexed once their application answers.

use std::collections::HashMap;
use std::time::Duration;

use axum::http::StatusCode;
use flare::endpoints::Registry;
use flare::store::endpoints::EndpointHealth;
use flare::{Client, Clock, RunStatus};
use serde_json::{json, Value};

use crate::backend_tests;
use crate::fixture::{define_in_code, job, json_answer, registry, run_of, serving, App, SECRET};
use crate::support::{wait_for, TestDb};

async fn a_job_no_live_node_serves_is_flagged(db: TestDb) {
    let app = App::start(serving(vec![job("remote", "r.r")], |_| {
        json_answer(json!({"output": 1}))
    }))
    .await;
    let (client, clock, registry) = registry(&db).await;
    registry.add(&app.url, Some(SECRET.into())).await.unwrap();
    define_in_code(&client, "local", "l.l").await;
    let node = client.engine().node_id().to_string();
    let now = || chrono::DateTime::from_timestamp_millis(clock.now_ms()).unwrap();
    let placed: HashMap<String, _> = client
        .store()
        .jobs_list(now())
        .await
        .unwrap()
        .into_iter()
        .map(|j| (j.job.id.clone(), j.placement))
        .collect();
    assert!(placed["local"].served);
    assert_eq!(placed["local"].nodes, std::slice::from_ref(&node));
    assert!(placed["local"].endpoint.is_none());
    assert!(placed["remote"].served);
    assert_eq!(placed["remote"].endpoint.as_ref().unwrap().url, app.url);

    // The node stops saying it is alive: after 20 s nothing serves either job.
    clock.advance(Duration::from_secs(25));
    let jobs = client.store().jobs_list(now()).await.unwrap();
    assert!(jobs.iter().all(|j| !j.placement.served), "{jobs:?}");
    let api: Value = serde_json::to_value(&jobs).unwrap();
    assert_eq!(api[0]["placement"]["served"], json!(false));

    // A node that shut down is forgotten at once.
    client.engine().beat().await.unwrap();
    client.shutdown().await;
    let reader = db.sender(&clock).await;
    let nodes = reader.store().nodes_list(clock.now_ms()).await.unwrap();
    assert!(nodes.iter().all(|n| n.id != node), "{nodes:?}");
}

/// Waits until `client`'s engine defines job `id` (its registry picked the endpoint up).
async fn defined(client: &Client, id: &str) {
    wait_for("the endpoint's job to be defined", || async {
        client
            .engine()
            .job_ids()
            .iter()
            .any(|j| j == id)
            .then_some(())
    })
    .await;
}

async fn nodes_pick_up_endpoints_registered_elsewhere(db: TestDb) {
    let app = App::start(serving(vec![job("shared-work", "w.w")], |req| {
        json_answer(json!({"output": req["run"]["id"]}))
    }))
    .await;
    let (api_node, clock) = db.client().await;
    let api_registry = Registry::new(api_node.clone());
    // The worker node runs the endpoint's jobs; the API node only registers it.
    let (worker, _) = db.client().await;
    let worker_registry = Registry::new(worker.clone());
    worker_registry.start(Vec::new()).await.unwrap();
    api_registry
        .add(&app.url, Some(SECRET.into()))
        .await
        .unwrap();
    api_node.shutdown().await;
    let sender = db.sender(&clock).await;
    defined(&worker, "shared-work").await;
    let sent = sender.send_event("w.w", &json!({})).await.unwrap();
    let run = run_of(&sender, &sent.id, "shared-work").await;
    assert_eq!(run.run.status, RunStatus::Succeeded);
    assert_eq!(run.run.node.as_deref(), Some(worker.engine().node_id()));
    worker_registry.stop();
    worker.shutdown().await;
}

async fn endpoints_given_at_start_are_indexed_once_their_application_answers(db: TestDb) {
    let app = App::start(|_| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            vec![],
            b"starting".to_vec(),
        )
    })
    .await;
    let (client, _clock, registry) = registry(&db).await;
    registry
        .start(vec![flare::config::EndpointSeed {
            url: app.url.clone(),
            secret: SECRET.into(),
        }])
        .await
        .expect("a valid seed is stored at once");
    let first = wait_for("the first index to fail and be recorded", || async {
        let e = registry.list().await.unwrap().pop()?;
        (!e.recent_errors.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(first.health, EndpointHealth::Unindexed);
    assert!(
        first.recent_errors[0].message.contains("HTTP 503"),
        "{first:?}"
    );
    // The application comes up: the background retry indexes it and the job runs.
    app.set(serving(vec![job("late", "l.l")], |_| {
        json_answer(json!({"output": "late"}))
    }));
    defined(&client, "late").await;
    let sent = client.send_event("l.l", &json!({})).await.unwrap();
    assert_eq!(
        run_of(&client, &sent.id, "late").await.run.output,
        Some(json!("late"))
    );
    registry.stop();
    client.shutdown().await;
}

backend_tests!(
    endpoints_given_at_start_are_indexed_once_their_application_answers,
    a_job_no_live_node_serves_is_flagged,
    nodes_pick_up_endpoints_registered_elsewhere,
);
