//! Behaviour suite: runs that end cancelled without an attempt — expired before they started
//! (their job's start timeout), or dropped because their endpoint job left its index — send
//! `flare/run.cancelled` like any cancel: committed with the final state, once, with why; none
//! for runs of jobs triggered by `flare/…` events.

use std::time::Duration;

use flare::store::endpoints::{EndpointIndex, NewEndpoint, Protocol};
use flare::store::{EventQuery, NewEvent, Store};
use flare::{RunStatus, StoredEvent};
use serde_json::{json, Value};

use crate::backend_tests;
use crate::fixture::spec;
use crate::support::TestDb;

async fn send(store: &Store, id: &str, name: &str, now: i64) -> Vec<String> {
    store
        .event_insert(NewEvent {
            id: id.into(),
            name: name.into(),
            payload: json!({}),
            context: None,
            source: "api".into(),
            parent_run_id: None,
            deliver_at: None,
            now,
        })
        .await
        .unwrap()
        .event
        .run_ids
}

async fn cancelled_events(store: &Store) -> Vec<StoredEvent> {
    store
        .events_list(EventQuery {
            name: Some("flare/run.cancelled".into()),
            ..EventQuery::default()
        })
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|s| s.event)
        .collect()
}

async fn an_expired_run_sends_one_cancelled_event_and_a_flare_run_none(db: TestDb) {
    let store = Store::open(&db.url).await.unwrap();
    let mut report = spec("report", "report.asked", 3);
    report.start_timeout = Some(Duration::from_secs(5));
    store.job_define(report).await.unwrap();
    // A handler of cancellations that never starts either: its run is of a `flare/…` event.
    let mut alert = spec("alert", "flare/run.cancelled", 1);
    alert.start_timeout = Some(Duration::from_secs(5));
    store.job_define(alert).await.unwrap();
    let run = send(&store, "e1", "report.asked", 1_000).await.remove(0);
    assert_eq!(store.runs_expire(6_001).await.unwrap(), 1);
    let sent = cancelled_events(&store).await;
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].source, "flare");
    assert_eq!(
        sent[0].payload,
        json!({
            "runId": run,
            "jobId": "report",
            "jobVersion": "1.0.0",
            "eventId": "e1",
            "eventName": "report.asked",
            "attempt": 0,
            "error": "expired before it started",
        })
    );
    // Committed with the final state, and started the handler's run.
    let d = store.run_detail(&run).await.unwrap().unwrap();
    assert_eq!(d.run.status, RunStatus::Cancelled);
    assert_eq!(sent[0].run_ids.len(), 1);
    // Another pass finds nothing; the handler's run expires in turn and sends nothing.
    assert_eq!(store.runs_expire(6_002).await.unwrap(), 0);
    assert_eq!(store.runs_expire(11_002).await.unwrap(), 1);
    let handler = store
        .run_detail(&sent[0].run_ids[0])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(handler.run.status, RunStatus::Cancelled);
    assert_eq!(
        cancelled_events(&store).await.len(),
        1,
        "exactly once, none for the handler"
    );
}

async fn a_run_of_a_job_that_left_its_index_sends_a_cancelled_event(db: TestDb) {
    let store = Store::open(&db.url).await.unwrap();
    let def = json!({"id": "ship", "name": "ship", "version": "1.0.0",
        "trigger": {"event": "order.placed"}});
    let index = |jobs: Vec<flare::job::JobSpec>, raw: Value, now: i64| EndpointIndex {
        jobs,
        raw,
        skipped: json!([]),
        now,
    };
    store
        .endpoint_create(
            NewEndpoint {
                id: "ep_1".into(),
                url: "http://127.0.0.1:9/flare".into(),
                secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
                protocol: Protocol::Flare,
                client_id: None,
                now: 1_000,
            },
            index(vec![spec("ship", "order.placed", 3)], json!([def]), 1_000),
        )
        .await
        .unwrap();
    let run = send(&store, "e1", "order.placed", 2_000).await.remove(0);
    let applied = store
        .endpoint_index("ep_1", index(Vec::new(), json!([]), 3_000))
        .await
        .unwrap();
    assert_eq!(applied.cancelled_runs, 1);
    let d = store.run_detail(&run).await.unwrap().unwrap();
    assert_eq!(d.run.status, RunStatus::Cancelled);
    let why = d.run.error.clone().unwrap();
    let sent = cancelled_events(&store).await;
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].payload["runId"], json!(run));
    assert_eq!(sent[0].payload["error"], json!(why));
    store.endpoint_remove("ep_1", 4_000).await.unwrap();
    assert_eq!(cancelled_events(&store).await.len(), 1, "never twice");
}

backend_tests!(
    an_expired_run_sends_one_cancelled_event_and_a_flare_run_none,
    a_run_of_a_job_that_left_its_index_sends_a_cancelled_event,
);
