//! Callback tasks on Flare's durable waits, invoking a job and cancelling a job's runs, as the
//! SDK calls them: a `POST` to the task's `callbackUrl`, an ephemeral event dispatcher naming it
//! (`io.waitForEvent`), an invoke with it as `callbackUrl` (`invokeAndWaitForCompletion`), the
//! deadline; what Flare refuses, naming the field.

use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use super::support::TestDb;
use super::{script, Ctx, Setup};
use crate::backend_tests;

/// Creates the callback task `key` (deadline `seconds`) and answers its `ServerTask`.
async fn callback_task(ctx: &Ctx, key: &str, seconds: f64) -> Value {
    let (status, task) = ctx
        .task(
            json!({"idempotencyKey": key, "name": "Wait for Request", "displayKey": key,
                     "callback": {"enabled": true, "timeoutInSeconds": seconds}}),
        )
        .await;
    assert_eq!(status, 200, "{task}");
    task
}

fn resume(task: &Value) -> Value {
    json!({"status": "RESUME_WITH_TASK", "task": task})
}

/// `SUCCESS` with the output of the cached task `key`, if the run has it.
fn done(ctx: &Ctx, key: &str) -> Option<Value> {
    ctx.cached(key)
        .map(|t| json!({"status": "SUCCESS", "output": t["output"]}))
}

fn waits_for(run: &Value, event: &str) -> bool {
    run["status"] == "queued" && run["wait"]["event"] == event
}

async fn callback_tasks_resume_on_a_post_an_event_or_an_invoked_run(db: TestDb) {
    let url: Arc<Mutex<Option<String>>> = Arc::default();
    let slot = Arc::clone(&url);
    let setup = Setup::start(
        &db,
        vec![
            (
                "request",
                script(move |ctx| {
                    let slot = Arc::clone(&slot);
                    async move {
                        if let Some(done) = done(&ctx, "approval") {
                            return done;
                        }
                        let task = callback_task(&ctx, "approval", 60.0).await;
                        assert_eq!(task["status"], "WAITING", "{task}");
                        *slot.lock().unwrap() = task["callbackUrl"].as_str().map(str::to_string);
                        resume(&task)
                    }
                }),
            ),
            (
                "event",
                script(|ctx| async move {
                    if let Some(done) = done(&ctx, "paid") {
                        return done;
                    }
                    let task = callback_task(&ctx, "paid", 60.0).await;
                    let (status, d) = ctx
                        .api(
                            "/api/v1/event-dispatchers/ephemeral",
                            json!({"url": task["callbackUrl"], "name": "order.paid",
                                   "filter": {"orderId": ["o1"]}, "timeoutInSeconds": 60}),
                            &[],
                        )
                        .await;
                    assert_eq!(status, 200, "{d}");
                    assert!(d["id"].is_string(), "{d}");
                    resume(&task)
                }),
            ),
            (
                "early",
                script(|ctx| async move {
                    if let Some(done) = done(&ctx, "shipped") {
                        return done;
                    }
                    let task = callback_task(&ctx, "shipped", 60.0).await;
                    let (status, _) = ctx
                        .api(
                            "/api/v1/event-dispatchers/ephemeral",
                            json!({"url": task["callbackUrl"], "name": ["order.shipped"],
                                   "filter": {"orderId": ["o7"]}}),
                            &[],
                        )
                        .await;
                    assert_eq!(status, 200);
                    // Sent after the dispatcher, before the run waits: it must not be missed.
                    let (status, sent) = ctx
                        .api(
                            "/api/v1/events",
                            json!({"event": {"name": "order.shipped", "payload": {"orderId": "o7"}}}),
                            &[],
                        )
                        .await;
                    assert_eq!(status, 200, "{sent}");
                    resume(&task)
                }),
            ),
            (
                "parent",
                script(|ctx| async move {
                    if let Some(done) = done(&ctx, "child") {
                        return done;
                    }
                    let task = callback_task(&ctx, "child", 60.0).await;
                    let key = task["idempotencyKey"].as_str().unwrap().to_string();
                    let (status, invoked) = ctx
                        .api(
                            "/api/v1/jobs/invoked-double/invoke",
                            json!({"payload": {"n": 21}, "context": {},
                                   "options": {"callbackUrl": task["callbackUrl"]}}),
                            &[("Idempotency-Key", key.as_str())],
                        )
                        .await;
                    assert_eq!(status, 200, "{invoked}");
                    assert!(invoked["id"].is_string(), "{invoked}");
                    resume(&task)
                }),
            ),
            (
                "invoked-double",
                script(|ctx| async move {
                    let n = ctx.body["event"]["payload"]["n"].as_i64().unwrap_or(0);
                    json!({"status": "SUCCESS", "output": {"doubled": n * 2}})
                }),
            ),
            (
                "late",
                script(|ctx| async move {
                    let task = callback_task(&ctx, "late", 0.3).await;
                    if task["status"] == "WAITING" {
                        return resume(&task);
                    }
                    json!({"status": "SUCCESS", "output": {"status": task["status"], "error": task["error"]}})
                }),
            ),
        ],
    )
    .await;

    // A POST to the callback URL (no API key) resumes the run with its body, once.
    let request = setup.send("request").await;
    let waiting = setup
        .until(&request, |r| waits_for(r, "flare/callback"))
        .await;
    assert_eq!(
        waiting["steps"][0]["label"], "Wait for Request · approval",
        "{waiting}"
    );
    let url = url.lock().unwrap().clone().expect("the callback URL");
    assert!(
        url.starts_with(&format!("{}/callbacks/cb_", setup.flare)),
        "{url}"
    );
    let post = |body: Value| reqwest::Client::new().post(&url).json(&body).send();
    assert_eq!(post(json!({"approved": true})).await.unwrap().status(), 200);
    let run = setup.finished(&request).await;
    assert_eq!(run["output"], json!({"approved": true}), "{run}");
    assert_eq!(run["attempt"], 1, "a wait is not an attempt: {run}");
    assert_eq!(
        post(json!({"approved": false})).await.unwrap().status(),
        404
    );

    // The dispatcher's event, its filter matched: another order's payment passes it by.
    let event = setup.send("event").await;
    let waiting = setup.until(&event, |r| waits_for(r, "order.paid")).await;
    assert_eq!(waiting["wait"]["match"], "payload.orderId", "{waiting}");
    assert_eq!(waiting["wait"]["matchValue"], "o1", "{waiting}");
    let send = |name: &str, payload: Value| {
        let request = setup
            .http
            .post(format!("{}/trigger", setup.flare))
            .json(&json!({"event": name, "payload": payload}));
        async move {
            let answer: Value = request.send().await.unwrap().json().await.unwrap();
            answer["result"]["id"].as_str().unwrap().to_string()
        }
    };
    send("order.paid", json!({"orderId": "o2"})).await;
    let paid = send("order.paid", json!({"orderId": "o1", "total": 5})).await;
    let run = setup.finished(&event).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    let got = &run["output"];
    assert_eq!(
        (&got["id"], &got["name"], &got["source"], &got["payload"]),
        (
            &json!(paid),
            &json!("order.paid"),
            &json!("trigger.dev"),
            &json!({"orderId": "o1", "total": 5})
        ),
        "{run}"
    );
    assert!(got["timestamp"].is_string(), "{run}");

    // An event sent while the run was on its way into the wait resumes it.
    let early = setup.send("early").await;
    let run = setup.finished(&early).await;
    assert_eq!(run["output"]["payload"], json!({"orderId": "o7"}), "{run}");

    // invokeAndWaitForCompletion: the child's RunNotification; the child is the parent's.
    let parent = setup.send("parent").await;
    let run = setup.finished(&parent).await;
    let n = &run["output"];
    assert_eq!(
        (&n["ok"], &n["status"]),
        (&json!(true), &json!("SUCCESS")),
        "{run}"
    );
    assert_eq!(n["output"], json!({"doubled": 42}), "{run}");
    assert_eq!(n["job"]["id"], "invoked-double", "{run}");
    let child: Value = setup
        .http
        .get(format!(
            "{}/api/runs/{}",
            setup.flare,
            n["id"].as_str().unwrap()
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let child_event: Value = setup
        .http
        .get(format!(
            "{}/api/events/{}",
            setup.flare,
            child["eventId"].as_str().unwrap()
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(child_event["parentRunId"], run["id"], "{child_event}");

    // Nothing by the deadline: the task is errored as Trigger.dev errors it.
    let late = setup.send("late").await;
    let run = setup.finished(&late).await;
    assert_eq!(
        run["output"],
        json!({"status": "ERRORED", "error": "Remote callback timeout - no requests received"}),
        "{run}"
    );
}

async fn invoking_and_cancelling_and_what_flare_refuses(db: TestDb) {
    let setup = Setup::start(
        &db,
        vec![
            (
                "invoked-double",
                script(|ctx| async move {
                    let n = ctx.body["event"]["payload"]["n"].as_i64().unwrap_or(0);
                    json!({"status": "SUCCESS", "output": {"doubled": n * 2}})
                }),
            ),
            (
                "waiting",
                script(|ctx| async move { resume(&callback_task(&ctx, "w", 600.0).await) }),
            ),
            (
                "bad-wait",
                script(|ctx| async move {
                    let task = callback_task(&ctx, "w", 60.0).await;
                    let (status, e) = ctx
                        .api(
                            "/api/v1/event-dispatchers/ephemeral",
                            json!({"url": task["callbackUrl"], "name": "a.b",
                                   "contextFilter": {"tenant": ["t1"]}}),
                            &[],
                        )
                        .await;
                    assert_eq!(status, 400, "{e}");
                    json!({"status": "ERROR", "error": {"message": e["error"]}})
                }),
            ),
            (
                "bad-invoke",
                script(|ctx| async move {
                    let task = callback_task(&ctx, "w", 60.0).await;
                    let (status, e) = ctx
                        .api(
                            "/api/v1/jobs/nope/invoke",
                            json!({"payload": {}, "options": {"callbackUrl": task["callbackUrl"]}}),
                            &[],
                        )
                        .await;
                    assert_eq!(status, 404, "{e}");
                    json!({"status": "ERROR", "error": {"message": e["error"]}})
                }),
            ),
            (
                "bad-timeout",
                script(|ctx| async move {
                    let (status, e) = ctx
                        .task(json!({"idempotencyKey": "t", "name": "x",
                                     "callback": {"enabled": true, "timeoutInSeconds": 0}}))
                        .await;
                    json!({"status": "SUCCESS", "output": {"status": status, "error": e["error"]}})
                }),
            ),
        ],
    )
    .await;
    let post = |path: &str, body: Value, key: Option<&str>| {
        let mut request = setup
            .http
            .post(format!("{}{path}", setup.flare))
            .bearer_auth(super::KEY)
            .json(&body);
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        async move {
            let answer = request.send().await.unwrap();
            let status = answer.status().as_u16();
            (status, answer.json::<Value>().await.unwrap_or_default())
        }
    };

    // client.invokeJob: a run of that job alone, one per idempotency key.
    let path = "/api/v1/jobs/invoked-double/invoke";
    let (status, a) = post(path, json!({"payload": {"n": 1}}), Some("k1")).await;
    assert_eq!(status, 200, "{a}");
    let (_, again) = post(path, json!({"payload": {"n": 1}}), Some("k1")).await;
    let (_, other) = post(path, json!({"payload": {"n": 1}}), None).await;
    assert_eq!(a["id"], again["id"]);
    assert_ne!(a["id"], other["id"]);
    let run = setup.finished("invoke-k1").await;
    assert_eq!(
        (&run["id"], &run["output"]),
        (&a["id"], &json!({"doubled": 2})),
        "{run}"
    );
    let event: Value = setup
        .http
        .get(format!("{}/api/events/invoke-k1", setup.flare))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(event["name"], "flare/job.invoked", "{event}");
    assert_eq!(
        event["runs"].as_array().map(Vec::len),
        Some(1),
        "that job alone: {event}"
    );

    // What Flare refuses, naming the field.
    for (path, body, status, says) in [
        (
            "/api/v1/jobs/nope/invoke",
            json!({"payload": {}}),
            404,
            "no job \"nope\"",
        ),
        (
            path,
            json!({"payload": {}, "options": {"accountId": "acc"}}),
            400,
            "options.accountId",
        ),
        (path, json!([1]), 400, ""),
        (
            path,
            json!({"options": {"callbackUrl": format!("{}/callbacks/cb_nope", setup.flare)}}),
            404,
            "options.callbackUrl",
        ),
        (
            "/api/v1/event-dispatchers/ephemeral",
            json!({"url": "http://x/callbacks/cb_nope", "name": "a.b"}),
            404,
            "url",
        ),
    ] {
        let (got, e) = post(path, body.clone(), None).await;
        assert_eq!(got, status, "{path} {body}: {e}");
        assert!(
            e["error"].as_str().unwrap_or_default().contains(says),
            "{path} {body}: {e}"
        );
    }
    for (job, says) in [
        ("bad-wait", "contextFilter"),
        ("bad-invoke", "no job \"nope\""),
    ] {
        let event = setup.send(job).await;
        let run = setup.finished(&event).await;
        assert_eq!(run["status"], "failed", "{job}: {run}");
        assert_eq!(run["attempt"], 1, "{job}: not retried: {run}");
        assert!(
            run["error"].as_str().unwrap().contains(says),
            "{job}: {run}"
        );
    }
    let event = setup.send("bad-timeout").await;
    let run = setup.finished(&event).await;
    assert_eq!(run["output"]["status"], 400, "{run}");
    assert!(
        run["output"]["error"]
            .as_str()
            .unwrap()
            .contains("callback.timeoutInSeconds"),
        "{run}"
    );

    // cancelRunsForJob: the job's waiting runs; then none are left.
    let mut ids = Vec::new();
    for _ in 0..2 {
        let event = setup.send("waiting").await;
        let run = setup
            .until(&event, |r| waits_for(r, "flare/callback"))
            .await;
        ids.push(run["id"].as_str().unwrap().to_string());
    }
    let (status, answer) = post("/api/v1/jobs/waiting/cancel-runs", json!({}), None).await;
    assert_eq!(status, 200, "{answer}");
    let mut cancelled: Vec<String> =
        serde_json::from_value(answer["cancelledRunIds"].clone()).unwrap();
    cancelled.sort();
    ids.sort();
    assert_eq!(cancelled, ids, "{answer}");
    assert_eq!(answer["failedToCancelRunIds"], json!([]));
    let (_, answer) = post("/api/v1/jobs/waiting/cancel-runs", json!({}), None).await;
    assert_eq!(
        answer,
        json!({"cancelledRunIds": [], "failedToCancelRunIds": []})
    );
}

backend_tests!(
    callback_tasks_resume_on_a_post_an_event_or_an_invoked_run,
    invoking_and_cancelling_and_what_flare_refuses,
);
