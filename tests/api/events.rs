//! Reading events: the list filtered by every parameter, keyset cursors over every page, and the
//! details of an event and a run (runs, children, logs, attempts).

use std::collections::HashSet;

use axum::http::StatusCode;
use serde_json::{json, Value};

use crate::backend_tests;
use crate::fixture::{fixture, ids, time, urlencode, T0};
use crate::support::TestDb;

async fn event_list_filters_by_every_parameter(db: TestDb) {
    let f = fixture(db).await;
    assert_eq!(f.event_ids("/api/events").await, f.all_newest_first());

    let users: Vec<String> = f.users.iter().rev().cloned().collect();
    assert_eq!(f.event_ids("/api/events?name=user.created").await, users);
    assert_eq!(
        f.event_ids("/api/events?source=http").await,
        vec![f.audit.clone()]
    );
    assert_eq!(
        f.event_ids("/api/events?source=webhook").await,
        vec![f.hook.clone()]
    );
    assert_eq!(
        f.event_ids("/api/events?source=webhook:payments").await,
        vec![f.hook.clone()]
    );
    assert_eq!(
        f.event_ids("/api/events?source=job").await,
        vec![f.child.clone()]
    );
    assert!(f.event_ids("/api/events?source=web").await.is_empty());
    assert_eq!(f.event_ids("/api/events?source=api").await.len(), 8);
    assert_eq!(
        f.event_ids("/api/events?source=flare").await,
        vec![f.failure.clone()]
    );

    // Outcomes partition the events.
    let mut succeeded = vec![f.child.clone(), f.upload.clone()];
    succeeded.extend(users.clone());
    assert_eq!(f.event_ids("/api/events?status=succeeded").await, succeeded);
    assert_eq!(
        f.event_ids("/api/events?status=failed").await,
        vec![f.order.clone()]
    );
    assert_eq!(
        f.event_ids("/api/events?status=no_runs").await,
        vec![f.hook.clone(), f.audit.clone(), f.failure.clone()]
    );
    assert_eq!(
        f.event_ids("/api/events?status=scheduled").await,
        vec![f.later.clone()]
    );
    assert!(f.event_ids("/api/events?status=running").await.is_empty());
    assert!(f.event_ids("/api/events?status=cancelled").await.is_empty());

    // Time range: [from, to) on the receive time; users 1 and 2 were sent at T0+1m and T0+2m.
    let uri = format!(
        "/api/events?from={}&to={}",
        urlencode(&time(T0 + 60_000)),
        urlencode(&time(T0 + 180_000))
    );
    assert_eq!(
        f.event_ids(&uri).await,
        vec![f.users[2].clone(), f.users[1].clone()]
    );

    // Payload search: case-insensitive, with % and _ taken literally.
    assert_eq!(
        f.event_ids("/api/events?q=USER3%40").await,
        vec![f.users[3].clone()]
    );
    assert_eq!(
        f.event_ids("/api/events?q=50%25").await,
        vec![f.order.clone()]
    );
    // (`flare/run.failed`'s payload holds the run id, `run_…`.)
    assert_eq!(
        f.event_ids("/api/events?q=_").await,
        vec![f.failure.clone(), f.order.clone()]
    );
    assert_eq!(
        f.event_ids("/api/events?q=user&name=user.created&status=succeeded&limit=2")
            .await,
        users[..2].to_vec()
    );

    // Each row carries its outcome and run counts; empty parameters count as absent.
    let body = f.get("/api/events?name=order.placed&source=").await;
    let order = &body["events"][0];
    assert_eq!(order["status"], "failed");
    assert_eq!(order["runCounts"]["failed"], 1);
    assert_eq!(order["context"], json!({"requestId": "req-9"}));
    assert_eq!(order["timestamp"], json!("2024-05-01T12:05:00Z"));
    assert_eq!(body["nextCursor"], Value::Null);
}

async fn cursors_walk_every_page_once_newest_first(db: TestDb) {
    let f = fixture(db).await;
    let mut seen = Vec::new();
    let mut uri = "/api/events?limit=3".to_string();
    let mut pages = 0;
    loop {
        let body = f.get(&uri).await;
        let page = ids(&body["events"]);
        assert!(page.len() <= 3);
        seen.extend(page);
        pages += 1;
        match body["nextCursor"].as_str() {
            Some(c) => uri = format!("/api/events?limit=3&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(pages, 4);
    assert_eq!(seen, f.all_newest_first());

    // Filters hold across pages.
    let first = f.get("/api/events?name=user.created&limit=4").await;
    let cursor = first["nextCursor"].as_str().expect("cursor");
    let rest = f
        .event_ids(&format!(
            "/api/events?name=user.created&limit=4&cursor={cursor}"
        ))
        .await;
    assert_eq!(rest, vec![f.users[0].clone()]);

    // Runs paginate the same way: 8 runs, no duplicates, newest first.
    let mut runs = Vec::new();
    let mut uri = "/api/runs?limit=3".to_string();
    loop {
        let body = f.get(&uri).await;
        runs.extend(ids(&body["runs"]));
        match body["nextCursor"].as_str() {
            Some(c) => uri = format!("/api/runs?limit=3&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(runs.len(), 8);
    assert_eq!(runs.iter().collect::<HashSet<_>>().len(), 8);
    let mut sorted = runs.clone();
    sorted.sort();
    sorted.reverse();
    assert_eq!(
        runs, sorted,
        "run ids are time-ordered, so newest first sorts descending"
    );
}

async fn details_show_runs_children_logs_and_attempts(db: TestDb) {
    let f = fixture(db).await;
    let upload = f.get(&format!("/api/events/{}", f.upload)).await;
    assert_eq!(upload["name"], "file.uploaded");
    assert_eq!(upload["status"], "succeeded");
    let runs = upload["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 1);
    let run = &runs[0];
    assert_eq!(run["jobId"], "upload");
    assert_eq!(run["jobVersion"], "1.0.0");
    assert_eq!(run["status"], "succeeded");
    assert_eq!(run["attempt"], 1);
    assert_eq!(run["error"], Value::Null);
    assert_eq!(run["output"], json!({"processed": true}));
    let run_id = run["id"].as_str().expect("run id");
    let children = upload["children"].as_array().expect("children");
    assert_eq!(ids(&upload["children"]), vec![f.child.clone()]);
    assert_eq!(children[0]["parentRunId"], run_id);
    assert_eq!(children[0]["source"], format!("job:{run_id}"));

    // The chained send is the run's one step.
    let upload_run = f.get(&format!("/api/runs/{run_id}")).await;
    let steps = upload_run["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 1, "{steps:?}");
    assert_eq!(steps[0]["key"], "event:0");
    assert_eq!(steps[0]["kind"], "event");
    assert_eq!(steps[0]["status"], "succeeded");
    assert_eq!(steps[0]["attempt"], 1);
    assert_eq!(steps[0]["output"], json!({"eventId": f.child}));
    assert_eq!(steps[0]["durationMs"], 0, "the manual clock stood still");
    assert_eq!(steps[0]["error"], Value::Null);

    let child = f.get(&format!("/api/events/{}", f.child)).await;
    assert_eq!(child["parentRunId"], run_id);
    assert_eq!(child["runs"][0]["jobId"], "processed");

    let order = f.get(&format!("/api/events/{}", f.order)).await;
    assert_eq!(order["status"], "failed");
    assert_eq!(order["runs"][0]["status"], "failed");
    assert_eq!(order["runs"][0]["jobVersion"], "2.1.0");
    assert_eq!(order["runs"][0]["error"], "card declined");

    let greet = f.get(&format!("/api/events/{}", f.users[0])).await;
    let greet_run = greet["runs"][0]["id"].as_str().expect("greet run");
    let detail = f.get(&format!("/api/runs/{greet_run}")).await;
    assert_eq!(detail["status"], "succeeded");
    assert_eq!(detail["logs"][0]["message"], "welcome user0@example.com");
    assert_eq!(detail["logs"][0]["level"], "info");
    assert_eq!(detail["attempts"][0]["outcome"], "succeeded");

    // Run list filters.
    let greet_runs = f.get("/api/runs?jobId=greet").await;
    assert_eq!(greet_runs["runs"].as_array().expect("runs").len(), 5);
    assert_eq!(greet_runs["runs"][0]["eventName"], "user.created");
    let failed = f.get("/api/runs?status=failed").await;
    assert_eq!(failed["runs"][0]["jobId"], "explode");
    assert_eq!(failed["runs"].as_array().expect("runs").len(), 1);
    let of_upload = f.get(&format!("/api/runs?eventId={}", f.upload)).await;
    assert_eq!(ids(&of_upload["runs"]), vec![run_id.to_string()]);
    let none = f.get("/api/runs?jobId=greet&status=failed").await;
    assert!(none["runs"].as_array().expect("runs").is_empty());

    for uri in ["/api/events/nope", "/api/runs/nope"] {
        let (status, body) = f.call("GET", uri, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{uri}");
        assert!(
            body["error"].as_str().expect("error").contains("nope"),
            "{body}"
        );
    }
}

backend_tests!(
    event_list_filters_by_every_parameter,
    cursors_walk_every_page_once_newest_first,
    details_show_runs_children_logs_and_attempts,
);
