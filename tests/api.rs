//! The JSON API, `/metrics` and the OpenAPI document, driven through the router with real events
//! and jobs: a job that succeeds and logs, one that fails once without retries, and a chain.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use axum::http::StatusCode;
use axum::Router;
use chrono::{DateTime, Utc};
use flare::model::Source;
use flare::{event_trigger, Client, Delay, Io, Job, ManualClock, SendEvent};
use serde_json::{json, Value};
use support::db::client_at;
use support::{http, sample, TestDb};

/// 2024-05-01T12:00:00Z.
const T0: i64 = 1_714_564_800_000;
const MINUTE: Duration = Duration::from_secs(60);

struct Fixture {
    client: Client,
    clock: ManualClock,
    app: Router,
    users: Vec<String>,
    order: String,
    upload: String,
    child: String,
    audit: String,
    hook: String,
    later: String,
    /// Last, so the database outlives the client (fields drop in order).
    _db: TestDb,
}

fn time(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .expect("time")
        .to_rfc3339()
}

/// Sends the fixture's events one minute apart, each settled before the next:
/// 5 × `user.created` (greet succeeds and logs), `order.placed` (explode fails on its first
/// call; later calls succeed), `file.uploaded` (upload sends `file.processed`, which processed
/// handles), `audit.noted` over http and `stripe.ping` from a webhook (no jobs), and a
/// `reminder.send` delayed by an hour.
async fn fixture(db: TestDb) -> Fixture {
    let url = db.url.clone();
    let (client, clock) = client_at(&url, T0).await;
    sample::define_jobs(&client);
    client
        .define_job(
            Job::new("processed", "File processed", "1.0.0")
                .trigger(event_trigger("file.processed"))
                .run(|_: Value, _io: Io| async move { Ok(Value::Null) }),
        )
        .expect("processed");

    let mut ids = Vec::new();
    let sends: Vec<(SendEvent, Source)> = (0..5)
        .map(|i| {
            (
                SendEvent::new(
                    "user.created",
                    &json!({"email": format!("user{i}@example.com")}),
                ),
                Source::Api,
            )
        })
        .chain([
            (
                SendEvent::new(
                    "order.placed",
                    &json!({"orderId": "o-1", "note": "50% off_sale"}),
                )
                .context(json!({"requestId": "req-9"})),
                Source::Api,
            ),
            (
                SendEvent::new("file.uploaded", &json!({"file": "a.png"})),
                Source::Api,
            ),
            (
                SendEvent::new("audit.noted", &json!({"who": "ada"})),
                Source::Http,
            ),
            (
                SendEvent::new("stripe.ping", &json!({"type": "ping"})),
                Source::Webhook("payments".into()),
            ),
            (
                SendEvent::new("reminder.send", &json!({"userId": "u1"})).delay(Delay::hours(1)),
                Source::Api,
            ),
        ])
        .collect();
    for (i, (send, source)) in sends.into_iter().enumerate() {
        if i > 0 {
            clock.advance(MINUTE);
        }
        let inserted = client.send_inserted(send, source).await.expect("send");
        ids.push(inserted.event.id);
        sample::settle(&client).await;
    }
    let upload = ids[6].clone();
    let detail = client
        .store()
        .event_detail(&upload)
        .await
        .expect("detail")
        .expect("upload event");
    let child = detail.children[0].id.clone();
    let app = sample::router(&client, url, None);
    Fixture {
        _db: db,
        users: ids[0..5].to_vec(),
        order: ids[5].clone(),
        upload,
        child,
        audit: ids[7].clone(),
        hook: ids[8].clone(),
        later: ids[9].clone(),
        client,
        clock,
        app,
    }
}

impl Fixture {
    async fn call(&self, method: &str, uri: &str, body: Option<Value>) -> (StatusCode, Value) {
        let (status, text) = self.call_text(method, uri, body).await;
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    }

    async fn call_text(
        &self,
        method: &str,
        uri: &str,
        body: Option<Value>,
    ) -> (StatusCode, String) {
        request_text(&self.app, method, uri, body).await
    }

    async fn get(&self, uri: &str) -> Value {
        let (status, body) = self.call("GET", uri, None).await;
        assert_eq!(status, StatusCode::OK, "GET {uri}: {body}");
        body
    }

    /// The ids of the events listed at `uri`.
    async fn event_ids(&self, uri: &str) -> Vec<String> {
        ids(&self.get(uri).await["events"])
    }

    /// Every event, newest first, as the fixture sent them.
    fn all_newest_first(&self) -> Vec<String> {
        let mut all = self.users.clone();
        all.extend([
            self.order.clone(),
            self.upload.clone(),
            self.child.clone(),
            self.audit.clone(),
            self.hook.clone(),
            self.later.clone(),
        ]);
        all.reverse();
        all
    }
}

fn ids(list: &Value) -> Vec<String> {
    list.as_array()
        .expect("array")
        .iter()
        .map(|e| e["id"].as_str().expect("id").to_string())
        .collect()
}

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
        vec![f.hook.clone(), f.audit.clone()]
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
    assert_eq!(f.event_ids("/api/events?q=_").await, vec![f.order.clone()]);
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
    ] {
        let (status, answer) = f.call("POST", uri, Some(body.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri} {body}: {answer}");
    }
}

async fn bad_parameters_are_400_and_name_the_parameter(db: TestDb) {
    let f = fixture(db).await;
    for (uri, name) in [
        ("/api/events?limit=0", "limit"),
        ("/api/events?limit=501", "limit"),
        ("/api/events?limit=ten", "limit"),
        ("/api/events?status=done", "status"),
        ("/api/events?from=yesterday", "from"),
        ("/api/events?to=2024-05-01", "to"),
        ("/api/events?cursor=garbage", "cursor"),
        ("/api/events?nme=user.created", "nme"),
        ("/api/events?name=a.b&name=c.d", "name"),
        ("/api/runs?status=done", "status"),
        ("/api/runs?limit=-1", "limit"),
        ("/api/runs?job=greet", "job"),
        ("/api/stats?window=7d", "window"),
        ("/api/jobs?x=1", "x"),
    ] {
        let (status, body) = f.call("GET", uri, None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}: {body}");
        let message = body["error"].as_str().expect("error message");
        assert!(message.contains(name), "{uri}: {message}");
    }
    let max = f.get("/api/events?limit=500").await;
    assert_eq!(max["events"].as_array().expect("events").len(), 11);
}

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
    assert_eq!(stats["events"], 11);
    assert_eq!(stats["runs"]["succeeded"], 7);
    assert_eq!(stats["runs"]["failed"], 1);
    assert_eq!(stats["runs"]["successRate"], 7.0 / 8.0);
    let buckets = stats["buckets"].as_array().expect("buckets");
    assert_eq!(buckets.len(), 60);
    let per_bucket: Vec<u64> = buckets
        .iter()
        .map(|b| b["events"].as_u64().expect("n"))
        .collect();
    assert_eq!(per_bucket.iter().sum::<u64>(), 11);
    // The last ten buckets hold one event per minute (two at the upload's minute, none after).
    assert_eq!(&per_bucket[50..], &[1, 1, 1, 1, 1, 1, 2, 1, 1, 1]);
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
    assert_eq!(day["events"], 11);
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
                .replace("{file}", "missing-file");
            let (status, body) = f.call(&method.to_uppercase(), &uri, None).await;
            assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
            assert_ne!(body["error"], "no such route", "{method} {path}");
        }
    }
}

/// Sends one request to `app`; the answer's status and body (JSON when it is JSON).
async fn request(
    app: &Router,
    method: &str,
    uri: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let (status, text) = request_text(app, method, uri, body).await;
    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, value)
}

/// Sends one request to `app` with a loopback `Host` (the app has no key, see
/// `flare::http::guard`), as every HTTP client sends; the answer's status and body text.
async fn request_text(
    app: &Router,
    method: &str,
    uri: &str,
    body: Option<Value>,
) -> (StatusCode, String) {
    let answer = http::call(app, http::json_request(method, uri, body)).await;
    (answer.status, answer.text)
}

/// A send-only client on `db` and the app over it.
async fn bare_app(db: &TestDb) -> (Client, Router) {
    let clock = ManualClock::new(T0);
    let client = db.sender(&clock).await;
    let app = sample::router(&client, db.url.clone(), None);
    (client, app)
}

/// PostgreSQL text cannot hold NUL: ids and filter text with one answer as on SQLite, never 503.
async fn nul_characters_in_ids_and_filters_are_400_or_404(db: TestDb) {
    let (client, app) = bare_app(&db).await;
    let sent = client
        .send_inserted(SendEvent::new("note.added", &json!({})), Source::Api)
        .await
        .expect("send");

    // Ids in paths: no stored id contains NUL, so no such record.
    for (method, uri) in [
        ("GET", "/api/events/a%00b"),
        ("GET", "/api/runs/a%00b"),
        ("POST", "/api/events/a%00b/replay"),
        ("POST", "/api/events/a%00b/cancel"),
        ("POST", "/api/runs/a%00b/retry"),
        ("GET", "/api/v1/events/a%00b"),
        ("POST", "/api/v1/events/a%00b/cancel"),
        ("GET", "/events/a%00b"),
        ("GET", "/runs/a%00b"),
    ] {
        let (status, body) = request(&app, method, uri, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {uri}: {body}");
    }

    // Filters: a bad parameter, named.
    for (uri, name) in [
        ("/api/events?name=a%00b", "name"),
        ("/api/events?source=api%00", "source"),
        ("/api/events?q=%00", "q"),
        ("/api/runs?jobId=greet%00", "jobId"),
        ("/api/runs?eventId=a%00b", "eventId"),
    ] {
        let (status, body) = request(&app, "GET", uri, None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}: {body}");
        let message = body["error"].as_str().expect("error message");
        assert!(
            message.contains(name) && message.contains("NUL"),
            "{uri}: {message}"
        );
    }
    // The dashboard's lists (and the store itself) find nothing, on both backends.
    for uri in ["/events?name=a%00b&q=%00", "/runs?jobId=a%00b"] {
        let (status, body) = request(&app, "GET", uri, None).await;
        assert_eq!(status, StatusCode::OK, "{uri}: {body}");
    }
    let store = client.store();
    let nothing = store
        .events_list(flare::store::query::EventQuery {
            q: Some("\0".into()),
            ..Default::default()
        })
        .await
        .expect("list");
    assert!(nothing.items.is_empty());
    assert!(store.event_detail("a\0b").await.expect("detail").is_none());

    // Sending an event whose id contains NUL is refused the same way everywhere.
    let err = client
        .send_event_with(SendEvent::new("note.added", &json!({})).id("a\0b"))
        .await
        .expect_err("a NUL in the id");
    assert!(matches!(err, flare::client::Error::InvalidId(_)), "{err}");
    for (uri, body) in [
        (
            "/trigger",
            json!({"event": "note.added", "payload": {}, "id": "a\u{0}b"}),
        ),
        (
            "/api/v1/events",
            json!({"event": {"name": "note.added", "payload": {}, "id": "a\u{0}b"}}),
        ),
        (
            "/api/v1/events/bulk",
            json!({"events": [{"name": "note.added", "payload": {}, "id": "a\u{0}b"}]}),
        ),
        (
            "/e/key",
            json!({"name": "note.added", "data": {}, "id": "a\u{0}b"}),
        ),
    ] {
        let (status, answer) = request(&app, "POST", uri, Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}: {answer}");
        let message = answer["error"].as_str().expect("error message");
        assert!(message.contains("NUL"), "{uri}: {message}");
    }

    // NUL inside a JSON string of the payload is stored and read back.
    let payload = json!({"text": "a\u{0}b"});
    let (status, answer) = request(
        &app,
        "POST",
        "/trigger",
        Some(json!({"event": "note.added", "payload": payload})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let id = answer["result"]["id"].as_str().expect("id");
    let (status, detail) = request(&app, "GET", &format!("/api/events/{id}"), None).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    assert_eq!(detail["payload"], payload);
    let (status, _) = request(&app, "GET", &format!("/api/events/{}", sent.event.id), None).await;
    assert_eq!(status, StatusCode::OK);
}

/// `/readyz` writes: a database that refuses writes is not ready, and is again once it takes them.
async fn readiness_needs_storage_that_takes_writes(db: TestDb) {
    let (client, app) = bare_app(&db).await;
    let (status, body) = request(&app, "GET", "/readyz", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "ready");

    client
        .store()
        .health_fail_writes(true)
        .await
        .expect("read-only");
    let (status, body) = request(&app, "GET", "/readyz", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let message = body["error"].as_str().expect("error message");
    assert!(message.contains("refuses writes"), "{message}");
    // Health (the process is up) does not look at storage.
    let (status, _) = request(&app, "GET", "/healthz", None).await;
    assert_eq!(status, StatusCode::OK);

    client
        .store()
        .health_fail_writes(false)
        .await
        .expect("writable");
    let (status, body) = request(&app, "GET", "/readyz", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// A storage failure says "nothing was stored" only where something was to be stored.
async fn storage_failures_say_whether_anything_was_stored(db: TestDb) {
    let (client, app) = bare_app(&db).await;
    let sent = client
        .send_inserted(SendEvent::new("note.added", &json!({})), Source::Api)
        .await
        .expect("send");

    client
        .store()
        .health_fail_writes(true)
        .await
        .expect("read-only");
    let (status, body) = request(
        &app,
        "POST",
        "/trigger",
        Some(json!({"event": "note.added", "payload": {}})),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(
        body["error"],
        "storage is unavailable; nothing was stored, try again"
    );
    client
        .store()
        .health_fail_writes(false)
        .await
        .expect("writable");

    // Reads fail once the events table is gone.
    let rename = "ALTER TABLE events RENAME TO events_gone";
    match db.backend {
        support::Backend::Sqlite => {
            let path = db.url.strip_prefix("sqlite://").expect("sqlite path");
            let conn = rusqlite::Connection::open(path).expect("open");
            conn.execute_batch(rename).expect("rename");
        }
        support::Backend::Postgres => {
            let (pg, conn) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
                .await
                .expect("connect");
            tokio::spawn(conn);
            pg.batch_execute(rename).await.expect("rename");
        }
    }
    let read = "storage is unavailable: could not read what was asked for; try again";
    for uri in [
        "/api/events".to_string(),
        format!("/api/events/{}", sent.event.id),
    ] {
        let (status, body) = request(&app, "GET", &uri, None).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{uri}: {body}");
        assert_eq!(body["error"], read, "{uri}");
        let (status, _) = request(&app, "HEAD", &uri, None).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "HEAD {uri}");
    }
    // A dashboard page says the same, as HTML.
    let (status, body) = request(&app, "GET", "/events", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let html = body.as_str().expect("html");
    assert!(html.contains("could not read"), "{html}");
    // A write that failed on its way (reading the event to replay) stored nothing.
    let (status, body) = request(
        &app,
        "POST",
        &format!("/api/events/{}/replay", sent.event.id),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(
        body["error"],
        "storage is unavailable; nothing was stored, try again"
    );
}

fn urlencode(s: &str) -> String {
    s.replace('+', "%2B").replace(':', "%3A")
}

backend_tests!(
    event_list_filters_by_every_parameter,
    cursors_walk_every_page_once_newest_first,
    details_show_runs_children_logs_and_attempts,
    replay_retry_and_cancel_act_and_refuse_the_wrong_state,
    pause_resume_and_cancel_through_the_api,
    bulk_actions_act_on_what_the_filter_selects,
    bad_parameters_are_400_and_name_the_parameter,
    jobs_stats_metrics_and_the_openapi_document,
    nul_characters_in_ids_and_filters_are_400_or_404,
    readiness_needs_storage_that_takes_writes,
    storage_failures_say_whether_anything_was_stored,
);
