//! The jobs list, the statistics per window, `/metrics`, and the OpenAPI document, whose every
//! route is routed.

use axum::http::StatusCode;
use serde_json::json;

use crate::backend_tests;
use crate::fixture::fixture;
use crate::support::TestDb;

async fn jobs_stats_metrics_and_the_openapi_document(db: TestDb) {
    let f = fixture(db).await;

    let jobs = f.get("/api/jobs").await;
    let list = jobs["jobs"].as_array().expect("jobs");
    let names: Vec<&str> = list.iter().map(|j| j["id"].as_str().expect("id")).collect();
    assert_eq!(names, ["explode", "greet", "processed", "upload"]);
    let greet = &list[1];
    assert_eq!(greet["version"], "1.0.0");
    assert_eq!(greet["event"], "user.created");
    assert_eq!(greet["lastHour"]["succeeded"], 5);
    assert_eq!(greet["lastHour"]["successRate"], 1.0);
    assert_eq!(greet["lastDay"]["succeeded"], 5);
    let explode = &list[0];
    assert_eq!(explode["maxAttempts"], 1);
    assert_eq!(explode["lastHour"]["failed"], 1);
    assert_eq!(explode["lastHour"]["successRate"], 0.0);
    assert_eq!(explode["lastHour"]["failureRate"], 1.0);
    assert_eq!(explode["queued"], 0);

    let stats = f.get("/api/stats?window=1h").await;
    assert_eq!(stats["window"], "1h");
    assert_eq!(stats["bucketSeconds"], 60);
    assert_eq!(stats["events"], 12);
    assert_eq!(stats["runs"]["succeeded"], 7);
    assert_eq!(stats["runs"]["failed"], 1);
    assert_eq!(stats["runs"]["successRate"], 7.0 / 8.0);
    let buckets = stats["buckets"].as_array().expect("buckets");
    assert_eq!(buckets.len(), 60);
    let per_bucket: Vec<u64> = buckets
        .iter()
        .map(|b| b["events"].as_u64().expect("n"))
        .collect();
    assert_eq!(per_bucket.iter().sum::<u64>(), 12);
    // The last ten buckets hold one event per minute (two at the order's minute, with its
    // run's `flare/run.failed`, and at the upload's, none after).
    assert_eq!(&per_bucket[50..], &[1, 1, 1, 1, 1, 2, 2, 1, 1, 1]);
    assert_eq!(buckets[55]["failed"], 1);
    assert_eq!(stats["to"], json!("2024-05-01T12:10:00Z"));
    assert_eq!(stats["queue"]["scheduledEvents"], 1);
    assert_eq!(stats["queue"]["ready"], 0);
    let per_job: Vec<(&str, u64)> = stats["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| {
            (
                j["jobId"].as_str().expect("id"),
                j["succeeded"].as_u64().expect("n"),
            )
        })
        .collect();
    assert_eq!(
        per_job,
        [
            ("explode", 0),
            ("greet", 5),
            ("processed", 1),
            ("upload", 1)
        ]
    );
    let day = f.get("/api/stats?window=24h").await;
    assert_eq!(day["buckets"].as_array().expect("buckets").len(), 24);
    assert_eq!(day["events"], 12);
    assert_eq!(f.get("/api/stats").await["window"], "1h");

    let (status, text) = f.call_text("GET", "/metrics", None).await;
    assert_eq!(status, StatusCode::OK);
    for needle in [
        "flare_events_received_total{source=\"api\"}",
        "flare_events_received_total{source=\"job\"}",
        "flare_events_received_total{source=\"webhook:payments\"}",
        "flare_runs_finished_total{job=\"greet\",outcome=\"succeeded\"}",
        "flare_runs_finished_total{job=\"explode\",outcome=\"failed\"}",
        "flare_run_duration_seconds_bucket{job=\"greet\",le=\"0.005\"}",
        "flare_queue_depth{state=\"scheduled_events\"} 1",
        "flare_queue_depth{state=\"ready\"} 0",
    ] {
        assert!(text.contains(needle), "missing {needle} in\n{text}");
    }

    // Every documented route is routed (the fallback answers "no such route").
    let doc = f.get("/api/openapi.json").await;
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().expect("paths");
    for expected in [
        "/api/events",
        "/api/events/{id}",
        "/api/events/{id}/replay",
        "/api/events/{id}/cancel",
        "/api/runs",
        "/api/runs/{id}",
        "/api/runs/{id}/retry",
        "/api/runs/{id}/cancel",
        "/api/jobs",
        "/api/jobs/{id}/pause",
        "/api/runs/bulk",
        "/api/events/bulk",
        "/api/jobs/{id}/resume",
        "/api/stats",
        "/api/openapi.json",
        "/metrics",
        "/trigger",
        "/webhooks/payments",
        "/webhooks/auth",
        "/api/v1/events",
        "/api/v1/events/bulk",
        "/api/v1/events/{id}",
        "/api/v2/events/{id}",
        "/api/v1/events/{id}/cancel",
        "/e/{key}",
        "/healthz",
        "/readyz",
        "/",
        "/events/{id}/replay",
    ] {
        assert!(paths.contains_key(expected), "{expected} is not documented");
    }
    for (path, item) in paths {
        for method in item.as_object().expect("path item").keys() {
            let uri = path
                .replace("{id}", "missing-id")
                .replace("{key}", "any-key")
                .replace("{file}", "missing-file")
                // An unknown webhook source answers as an unknown route does: use a real one.
                .replace("{source}", "payments")
                .replace("{delivery}", "missing-delivery");
            let (status, body) = f.call(&method.to_uppercase(), &uri, None).await;
            assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
            assert_ne!(body["error"], "no such route", "{method} {path}");
        }
    }
}

backend_tests!(jobs_stats_metrics_and_the_openapi_document,);
