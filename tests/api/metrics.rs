//! `/metrics` for an operator's alerts (issue 25): readable with `FLARE_METRICS_TOKEN` (and only
//! `/metrics` with it), HTTP requests counted by route pattern and status, queued runs by what
//! they wait for, and those flow control holds back (issue 26), on each backend.

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use flare::store::{ClaimGroup, ClaimParams, FlowGroup};
use flare::{event_trigger, ConcurrencyLimit, Io, Job, ManualClock};
use serde_json::{json, Value};

use crate::backend_tests;
use crate::support::server::Server;
use crate::support::{http, sample, TestDb};

const KEY: &str = "metrics-test-api-key-0123456789";
const TOKEN: &str = "metrics-scrape-token-0123456789";

async fn get(url: &str, bearer: Option<&str>) -> (StatusCode, String) {
    let mut req = reqwest::Client::new().get(url);
    if let Some(b) = bearer {
        req = req.bearer_auth(b);
    }
    let res = req.send().await.expect("answer");
    let status = StatusCode::from_u16(res.status().as_u16()).expect("status");
    (status, res.text().await.expect("body"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_read_with_their_own_token_and_count_requests_by_route() {
    let server = Server::on_sqlite(|s| {
        s.api_key = Some(KEY.into());
        s.metrics_token = Some(TOKEN.into());
    })
    .await;
    let base = &server.url;
    // A run id the API does not know: its route pattern is the label, not the id.
    let (status, _) = get(&format!("{base}/api/runs/run_nope_123"), Some(KEY)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let (status, text) = get(&format!("{base}/metrics"), Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    for needle in [
        r#"flare_http_requests_total{method="GET",route="/api/runs/{id}",status="404"}"#,
        r#"flare_runs_waiting{reason="worker"} 0"#,
        r#"flare_runs_waiting{reason="paused"} 0"#,
    ] {
        assert!(text.contains(needle), "missing {needle} in\n{text}");
    }
    assert!(!text.contains("run_nope_123"), "ids never become labels");

    // The token reads the metrics and nothing else; the metrics still need a credential.
    let (status, _) = get(&format!("{base}/api/events"), Some(TOKEN)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = get(&format!("{base}/metrics"), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = get(&format!("{base}/metrics"), Some(KEY)).await;
    assert_eq!(status, StatusCode::OK);
    server.stop().await;
}

/// Due queued runs held by a key at its concurrency limit, by a throttled key, past their start
/// timeout, and an open debounce window's run, counted by reason at scrape time
/// (`flare_runs_held`).
async fn runs_held_by_flow_control_are_counted_by_reason(db: TestDb) {
    let t = 1_714_564_800_000;
    let clock = ManualClock::new(t);
    let client = db.sender(&clock).await;
    let job = |id: &str, event: &str| {
        Job::new(id, id, "1.0.0")
            .trigger(event_trigger(event))
            .run(|_: Value, _: Io| async { Ok(json!(null)) })
    };
    let jobs = [
        job("sync", "crm.changed").concurrency_limit(ConcurrencyLimit::key(1, "event.payload.c")),
        job("poll", "feed.changed").throttle(
            1,
            Duration::from_secs(60),
            Some("event.payload.f"),
            1,
        ),
        job("late", "report.asked").start_timeout(Duration::from_secs(1)),
        job("digest", "doc.edited").debounce(flare::model::Debounce::new(Duration::from_secs(60))),
    ];
    for j in jobs {
        client.register_job(j).await.expect("define");
    }
    for (name, payload) in [
        ("crm.changed", json!({"c": "a"})),
        ("crm.changed", json!({"c": "a"})),
        ("crm.changed", json!({"c": "a"})),
        ("feed.changed", json!({"f": "x"})),
        ("feed.changed", json!({"f": "x"})),
        ("feed.changed", json!({"f": "x"})),
        ("report.asked", json!({})),
        ("doc.edited", json!({})),
        ("doc.edited", json!({})),
    ] {
        client.send_event(name, &payload).await.expect("send");
    }
    // A worker takes what the limits allow: one run of key `a`, one start of feed `x`.
    for id in ["sync", "poll"] {
        let taken = client
            .store()
            .runs_claim(ClaimParams {
                now: t,
                lease_until: t + 600_000,
                node: Some("n1".into()),
                groups: vec![ClaimGroup {
                    jobs: vec![id.into()],
                    limit: 10,
                    flow: Some(FlowGroup { second_slot: None }),
                }],
            })
            .await
            .expect("claim");
        assert_eq!(taken.len(), 1, "{id}");
    }
    clock.advance(Duration::from_secs(5));
    let app = sample::router(&client, db.url.clone(), None);
    let req = Request::get("/metrics")
        .body(Body::empty())
        .expect("request");
    let answer = http::call(&app, req).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    for needle in [
        r#"flare_runs_held{reason="concurrency"} 2"#,
        r#"flare_runs_held{reason="throttle"} 2"#,
        r#"flare_runs_held{reason="start_timeout"} 1"#,
        r#"flare_runs_held{reason="debounce"} 1"#,
    ] {
        assert!(
            answer.text.contains(needle),
            "missing {needle} in\n{}",
            answer.text
        );
    }
    // The jobs list shows the keys: `a` at its limit, `x` throttled (no concurrency limit).
    let req = Request::get("/api/jobs")
        .body(Body::empty())
        .expect("request");
    let listed = http::call(&app, req).await.json;
    let keys_of = |id: &str| {
        listed["jobs"]
            .as_array()
            .expect("jobs")
            .iter()
            .find(|j| j["id"] == id)
            .expect("listed")["keys"]
            .clone()
    };
    assert_eq!(
        keys_of("sync"),
        json!({"atLimit": 1, "top": [{"key": "a", "running": 1, "limit": 1, "queued": 2}]})
    );
    assert_eq!(
        keys_of("poll"),
        json!({"atLimit": 0, "top": [{"key": "x", "running": 1, "limit": null, "queued": 2}]})
    );
    assert_eq!(keys_of("late"), json!({"atLimit": 0, "top": []}));
}

backend_tests!(runs_held_by_flow_control_are_counted_by_reason,);
