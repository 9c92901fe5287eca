//! What the API changes: replay, retry and cancel (refused in the wrong state), pausing and
//! resuming a job, and bulk actions on what a filter selects.

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::json;

use crate::backend_tests;
use crate::fixture::fixture;
use crate::support::{sample, TestDb};

async fn replay_retry_and_cancel_act_and_refuse_the_wrong_state(db: TestDb) {
    let f = fixture(db).await;

    // Replay with an edited payload: a new event, same name and context, source replay:<id>.
    let uri = format!("/api/events/{}/replay", f.order);
    let (status, replay) = f
        .call("POST", &uri, Some(json!({"payload": {"orderId": "o-2"}})))
        .await;
    assert_eq!(status, StatusCode::OK, "{replay}");
    assert_ne!(replay["id"], f.order.as_str());
    assert_eq!(replay["name"], "order.placed");
    assert_eq!(replay["source"], format!("replay:{}", f.order));
    assert_eq!(replay["payload"], json!({"orderId": "o-2"}));
    assert_eq!(replay["context"], json!({"requestId": "req-9"}));
    assert_eq!(replay["runIds"].as_array().expect("run ids").len(), 1);
    // Without a body the original payload is sent again.
    let (status, again) = f
        .call("POST", &format!("/api/events/{}/replay", f.users[1]), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(again["payload"], json!({"email": "user1@example.com"}));
    sample::settle(&f.client).await;
    let replayed = f
        .event_ids(&format!("/api/events?source=replay:{}", f.order))
        .await;
    assert_eq!(
        replayed,
        vec![replay["id"].as_str().expect("id").to_string()]
    );
    let (status, body) = f
        .call("POST", &uri, Some(json!({"payload": 1, "x": 2})))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    // Retry: the failed run is queued again and runs again (explode fails only on its first
    // call ever, so this attempt succeeds).
    let order = f.get(&format!("/api/events/{}", f.order)).await;
    let run_id = order["runs"][0]["id"].as_str().expect("run").to_string();
    assert_eq!(order["runs"][0]["status"], "failed");
    let (status, run) = f
        .call("POST", &format!("/api/runs/{run_id}/retry"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{run}");
    assert_ne!(run["status"], "failed", "{run}");
    sample::settle(&f.client).await;
    let detail = f.get(&format!("/api/runs/{run_id}")).await;
    assert_eq!(detail["status"], "succeeded", "{detail}");
    assert_eq!(detail["attempt"], 2);
    let outcomes: Vec<&str> = detail["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .map(|a| a["outcome"].as_str().expect("outcome"))
        .collect();
    assert_eq!(outcomes, ["failed", "succeeded"]);
    let (status, _) = f
        .call("POST", &format!("/api/runs/{run_id}/retry"), None)
        .await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "a succeeded run is not retried"
    );

    // Cancel: a delayed event once; a delivered one never.
    let (status, cancelled) = f
        .call("POST", &format!("/api/events/{}/cancel", f.later), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    assert!(cancelled["cancelledAt"].is_string());
    assert_eq!(
        f.event_ids("/api/events?status=cancelled").await,
        vec![f.later.clone()]
    );
    assert!(f.event_ids("/api/events?status=scheduled").await.is_empty());
    for id in [&f.later, &f.audit] {
        let (status, body) = f
            .call("POST", &format!("/api/events/{id}/cancel"), None)
            .await;
        assert_eq!(status, StatusCode::CONFLICT, "{id}: {body}");
    }
    f.clock.advance(Duration::from_secs(7200));
    f.client
        .engine()
        .maintenance()
        .schedule_once()
        .await
        .expect("schedule");
    let later = f.get(&format!("/api/events/{}", f.later)).await;
    assert!(later["runs"].as_array().expect("runs").is_empty());
    assert_eq!(later["status"], "cancelled");

    for (method, uri) in [
        ("POST", "/api/events/nope/replay"),
        ("POST", "/api/events/nope/cancel"),
        ("POST", "/api/runs/nope/retry"),
    ] {
        let (status, body) = f.call(method, uri, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{uri}: {body}");
    }
}

/// Pause and resume a job, cancel a run, through the API: a paused job's run waits, is cancelled,
/// and a resumed job's runs run; the wrong state is a 409, an unknown id a 404.
async fn pause_resume_and_cancel_through_the_api(db: TestDb) {
    let f = fixture(db).await;
    let (status, job) = f.call("POST", "/api/jobs/greet/pause", None).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(job["id"], "greet");
    assert_eq!(job["paused"], true);
    let jobs = f.get("/api/jobs").await;
    let paused: Vec<(&str, bool)> = jobs["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| {
            (
                j["id"].as_str().expect("id"),
                j["paused"].as_bool().expect("paused"),
            )
        })
        .collect();
    assert!(paused.contains(&("greet", true)), "{paused:?}");
    assert!(paused.iter().filter(|(_, p)| *p).count() == 1, "{paused:?}");

    let sent = f
        .client
        .send_event("user.created", &json!({"email": "held@example.com"}))
        .await
        .expect("send");
    let kept = sent.run_ids[0].clone();
    let other = f
        .client
        .send_event("user.created", &json!({"email": "cut@example.com"}))
        .await
        .expect("send");
    let cut = other.run_ids[0].clone();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let run = f.get(&format!("/api/runs/{kept}")).await;
    assert_eq!(run["status"], "queued", "a paused job's run waits: {run}");

    let (status, run) = f
        .call("POST", &format!("/api/runs/{cut}/cancel"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{run}");
    assert_eq!(run["status"], "cancelled");
    let (status, body) = f
        .call("POST", &format!("/api/runs/{cut}/cancel"), None)
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");

    let (status, job) = f.call("POST", "/api/jobs/greet/resume", None).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(job["paused"], false);
    sample::settle(&f.client).await;
    let run = f.get(&format!("/api/runs/{kept}")).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    let run = f.get(&format!("/api/runs/{cut}")).await;
    assert_eq!(run["status"], "cancelled", "{run}");

    for uri in [
        "/api/jobs/nope/pause",
        "/api/jobs/nope/resume",
        "/api/runs/nope/cancel",
    ] {
        let (status, body) = f.call("POST", uri, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{uri}: {body}");
    }
}

/// Bulk actions select what the list's filter selects; a dry run counts exactly what the action
/// then changes, and nothing outside the filter is touched.
async fn bulk_actions_act_on_what_the_filter_selects(db: TestDb) {
    let f = fixture(db).await;
    // Retry: the one failed run (order.placed's explode).
    let body = json!({"action": "retry", "filter": {"status": "failed"}, "dryRun": true});
    let (status, dry) = f.call("POST", "/api/runs/bulk", Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{dry}");
    assert_eq!(
        (dry["count"].as_u64(), dry["acted"].as_u64()),
        (Some(1), Some(0))
    );
    assert_eq!(dry["limit"], 10_000);
    assert_eq!(dry["truncated"], false);
    let body = json!({"action": "retry", "filter": {"status": "failed"}});
    let (status, done) = f.call("POST", "/api/runs/bulk", Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(
        (done["count"].as_u64(), done["acted"].as_u64()),
        (Some(1), Some(1))
    );
    sample::settle(&f.client).await;
    let order = f.get(&format!("/api/events/{}", f.order)).await;
    assert_eq!(order["runs"][0]["status"], "succeeded", "{order}");

    // Cancel: three queued runs of a paused job, none of another job.
    f.call("POST", "/api/jobs/greet/pause", None).await;
    for i in 0..3 {
        f.client
            .send_event(
                "user.created",
                &json!({"email": format!("b{i}@example.com")}),
            )
            .await
            .expect("send");
    }
    let upload = f
        .client
        .send_event("file.uploaded", &json!({"file": "b.png"}))
        .await
        .expect("send");
    let filter = json!({"jobId": "greet"});
    let (_, dry) = f
        .call(
            "POST",
            "/api/runs/bulk",
            Some(json!({"action": "cancel", "filter": filter, "dryRun": true})),
        )
        .await;
    assert_eq!(dry["count"], 3, "{dry}");
    let (_, done) = f
        .call(
            "POST",
            "/api/runs/bulk",
            Some(json!({"action": "cancel", "filter": filter})),
        )
        .await;
    assert_eq!(
        (done["count"].as_u64(), done["acted"].as_u64()),
        (Some(3), Some(3)),
        "{done}"
    );
    let cancelled = f.get("/api/runs?status=cancelled&jobId=greet").await;
    assert_eq!(cancelled["runs"].as_array().expect("runs").len(), 3);
    f.call("POST", "/api/jobs/greet/resume", None).await;
    sample::settle(&f.client).await;
    let upload = f.get(&format!("/api/events/{}", upload.id)).await;
    assert_eq!(
        upload["runs"][0]["status"], "succeeded",
        "outside the filter: {upload}"
    );
    // A second cancel finds nothing left to cancel.
    let (_, again) = f
        .call(
            "POST",
            "/api/runs/bulk",
            Some(json!({"action": "cancel", "filter": filter, "dryRun": true})),
        )
        .await;
    assert_eq!(again["count"], 0);

    // Replay: the audit events (one), newest first; the copies are new events.
    let filter = json!({"name": "audit.noted"});
    let (_, dry) = f
        .call(
            "POST",
            "/api/events/bulk",
            Some(json!({"action": "replay", "filter": filter, "dryRun": true})),
        )
        .await;
    assert_eq!(dry["count"], 1, "{dry}");
    let (_, done) = f
        .call(
            "POST",
            "/api/events/bulk",
            Some(json!({"action": "replay", "filter": filter})),
        )
        .await;
    assert_eq!(
        (done["count"].as_u64(), done["acted"].as_u64()),
        (Some(1), Some(1)),
        "{done}"
    );
    let replayed = f
        .event_ids(&format!("/api/events?source=replay:{}", f.audit))
        .await;
    assert_eq!(replayed.len(), 1);

    for (uri, body) in [
        ("/api/runs/bulk", json!({"action": "replay"})),
        (
            "/api/runs/bulk",
            json!({"action": "retry", "filter": {"status": "bogus"}}),
        ),
        (
            "/api/runs/bulk",
            json!({"action": "retry", "filter": {"nope": 1}}),
        ),
        ("/api/events/bulk", json!({"action": "retry"})),
        // An array is not read as the fields in order.
        ("/api/runs/bulk", json!(["cancel"])),
        (
            "/api/runs/bulk",
            json!({"action": "cancel", "filter": ["greet"]}),
        ),
        ("/api/events/bulk", json!(["replay", {}, true])),
        (
            "/api/events/bulk",
            json!({"action": "replay", "filter": [null]}),
        ),
    ] {
        let (status, answer) = f.call("POST", uri, Some(body.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri} {body}: {answer}");
    }
}

backend_tests!(
    replay_retry_and_cancel_act_and_refuse_the_wrong_state,
    pause_resume_and_cancel_through_the_api,
    bulk_actions_act_on_what_the_filter_selects,
);
