//! Each `RunJobResponse` status mapped onto Flare's outcomes; bad answers turned into clear run
//! errors.

use serde_json::{json, Value};

use super::support::TestDb;
use super::{in_ms, script, Setup, KEY};
use crate::backend_tests;

async fn statuses_map_onto_outcomes(db: TestDb) {
    let setup = Setup::start(
        &db,
        vec![
            ("ok", script(|_| async { json!({"status": "SUCCESS", "output": {"a": 1}}) })),
            ("payload", script(|_| async { json!({"status": "INVALID_PAYLOAD", "errors": [{"path": ["n"], "message": "Expected string"}]}) })),
            ("auth", script(|_| async { json!({"status": "UNRESOLVED_AUTH_ERROR", "issues": {"github": {"id": "github", "error": "no token"}}}) })),
            ("canceled", script(|_| async { json!({"status": "CANCELED", "task": {"id": "t"}}) })),
            (
                "auto-yield",
                script(|ctx| async move {
                    if let Some(t) = ctx.cached("partial") {
                        assert_eq!(t["output"], json!({"half": true}));
                        return json!({"status": "SUCCESS", "output": "resumed"});
                    }
                    if ctx.body["runChunkExecutionLimit"].as_u64().is_none() {
                        return json!({"status": "ERROR", "error": {"message": "no execution limit sent"}});
                    }
                    let (_, task) = ctx.task(json!({"idempotencyKey": "partial", "name": "partial"})).await;
                    json!({"status": "AUTO_YIELD_EXECUTION_WITH_COMPLETED_TASK", "id": task["id"], "properties": [],
                           "output": "{\"half\":true}", "data": {"location": "x", "timeRemaining": 1, "timeElapsed": 1}})
                }),
            ),
            (
                "parallel",
                script(|ctx| async move {
                    if ctx.cached("p-wait").is_some() {
                        return json!({"status": "SUCCESS", "output": "parallel"});
                    }
                    let (_, task) = ctx
                        .task(json!({"idempotencyKey": "p-wait", "name": "wait", "noop": true, "delayUntil": in_ms(200)}))
                        .await;
                    json!({"status": "RESUME_WITH_PARALLEL_TASK", "task": task, "childErrors": []})
                }),
            ),
            (
                "yield",
                script(|ctx| async move {
                    if ctx.body["yieldedExecutions"].as_array().is_some_and(|y| y.contains(&json!("k1"))) {
                        json!({"status": "SUCCESS", "output": "yielded"})
                    } else {
                        json!({"status": "YIELD_EXECUTION", "key": "k1"})
                    }
                }),
            ),
            (
                "wait",
                script(|ctx| async move {
                    if ctx.cached("wait-key").is_some_and(|t| t["status"] == "COMPLETED") {
                        return json!({"status": "SUCCESS", "output": "waited"});
                    }
                    let (status, task) = ctx
                        .task(json!({"idempotencyKey": "wait-key", "name": "wait", "noop": true, "delayUntil": in_ms(400), "params": {"seconds": 0.4}}))
                        .await;
                    assert_eq!(status, 200, "{task}");
                    assert_eq!(task["status"], "WAITING", "{task}");
                    json!({"status": "RESUME_WITH_TASK", "task": task})
                }),
            ),
            (
                "retry",
                script(|ctx| async move {
                    let (_, task) = ctx.task(json!({"idempotencyKey": "flaky", "name": "flaky"})).await;
                    if task["attempts"] == 1 {
                        return json!({"status": "RETRY_WITH_TASK", "task": task, "error": {"message": "try later"}, "retryAt": in_ms(300)});
                    }
                    assert_eq!(task["status"], "RUNNING", "{task}");
                    let id = task["id"].as_str().unwrap();
                    let (status, done) = ctx.post(&format!("/tasks/{id}/complete"), json!({"output": "{\"ok\":true}"})).await;
                    assert_eq!(status, 200, "{done}");
                    json!({"status": "SUCCESS", "output": {"attempts": task["attempts"]}})
                }),
            ),
        ],
    )
    .await;

    let ok = setup.send("ok").await;
    let run = setup.finished(&ok).await;
    assert_eq!(
        (run["status"].clone(), run["output"].clone()),
        (json!("succeeded"), json!({"a": 1}))
    );
    let body = &setup.calls_of("ok")[0];
    assert_eq!(body["event"]["payload"], json!({"n": 1}));
    assert_eq!(body["run"]["isTest"], false);

    for (job, says) in [
        ("payload", "invalid payload"),
        ("auth", "unresolved integration auth"),
        ("canceled", "CANCELED"),
    ] {
        let event = setup.send(job).await;
        let run = setup.finished(&event).await;
        assert_eq!(run["status"], "failed", "{job}: {run}");
        assert_eq!(run["attempt"], 1, "{job} fails without retry: {run}");
        assert!(
            run["error"].as_str().unwrap().contains(says),
            "{job}: {run}"
        );
    }

    let yielded = setup.send("yield").await;
    let run = setup.finished(&yielded).await;
    assert_eq!(run["output"], "yielded", "{run}");
    assert_eq!(run["attempt"], 1);
    assert_eq!(setup.calls_of("yield").len(), 2, "executed again at once");

    for (job, output) in [("auto-yield", "resumed"), ("parallel", "parallel")] {
        let event = setup.send(job).await;
        let run = setup.finished(&event).await;
        assert_eq!(run["status"], "succeeded", "{job}: {run}");
        assert_eq!(run["output"], output, "{job}: {run}");
        assert_eq!(run["attempt"], 1, "{job}: {run}");
    }

    // The SDK's read routes.
    let get = |path: String| {
        let request = setup
            .http
            .get(format!("{}{path}", setup.flare))
            .bearer_auth(KEY);
        async move { request.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let run_id = setup.run_of(&ok).await["id"].as_str().unwrap().to_string();
    let run = get(format!("/api/v2/runs/{run_id}")).await;
    assert_eq!(
        (run["status"].clone(), run["output"].clone()),
        (json!("SUCCESS"), json!({"a": 1})),
        "{run}"
    );
    let statuses = get(format!("/api/v2/runs/{run_id}/statuses")).await;
    assert_eq!(statuses["run"]["status"], "SUCCESS", "{statuses}");
    let runs = get("/api/v1/jobs/ok/runs".into()).await;
    assert_eq!(runs["runs"][0]["id"], run_id.as_str(), "{runs}");
    let cancelled: Value = setup
        .http
        .post(format!("{}/api/v1/events/{ok}/cancel-runs", setup.flare))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        cancelled["cancelledRunIds"],
        json!([]),
        "a finished run stays: {cancelled}"
    );

    let waited = setup.send("wait").await;
    let waiting = setup
        .until(&waited, |r| {
            r["status"] == "queued" && r["steps"].to_string().contains("wait-key")
        })
        .await;
    assert!(
        waiting["attempts"].as_array().is_none_or(|a| a.len() <= 1),
        "{waiting}"
    );
    let run = setup.finished(&waited).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["output"], "waited");
    assert_eq!(run["attempt"], 1, "a wait is not an attempt: {run}");

    let retried = setup.send("retry").await;
    let run = setup.finished(&retried).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(
        run["output"],
        json!({"attempts": 2}),
        "the task's second attempt: {run}"
    );
    assert_eq!(
        run["attempt"], 1,
        "a task retry is not a run attempt: {run}"
    );
    let steps = run["steps"].to_string();
    assert!(
        steps.contains("flaky") && steps.contains("\"ok\":true"),
        "{steps}"
    );
}

async fn bad_answers_give_clear_run_errors(db: TestDb) {
    let setup = Setup::start(
        &db,
        vec![
            ("shape", script(|_| async { json!({"hello": "world"}) })),
            (
                "unknown-status",
                script(|_| async { json!({"status": "SOMETHING_NEW"}) }),
            ),
            (
                "unknown-task",
                script(|ctx| async move {
                    let (status, answer) = ctx
                        .post("/tasks/task_nope/complete", json!({"output": "1"}))
                        .await;
                    assert_eq!(status, 404, "{answer}");
                    json!({"status": "ERROR", "error": {"message": "Failed to complete task"}})
                }),
            ),
            (
                "resume-unknown",
                script(|_| async {
                    json!({"status": "RESUME_WITH_TASK", "task": {"id": "task_nope"}})
                }),
            ),
            (
                "huge",
                script(|ctx| async move {
                    let (_, task) = ctx
                        .task(json!({"idempotencyKey": "big", "name": "big"}))
                        .await;
                    let output = serde_json::to_string(&"x".repeat(300 * 1024)).unwrap();
                    let id = task["id"].as_str().unwrap();
                    let (status, answer) = ctx
                        .post(
                            &format!("/tasks/{id}/complete"),
                            json!({ "output": output }),
                        )
                        .await;
                    assert_eq!(status, 413, "{answer}");
                    json!({"status": "ERROR", "error": {"message": "Failed to complete task"}})
                }),
            ),
            (
                "gone",
                script(|ctx| async move {
                    let (status, _) = ctx
                        .task(json!({"idempotencyKey": "before-crash", "name": "step"}))
                        .await;
                    assert_eq!(status, 200);
                    panic!("the endpoint goes away mid-run");
                }),
            ),
        ],
    )
    .await;

    // Retryable: each attempt fails with what was wrong, and the run ends failed (default policy:
    // three attempts), so nothing is left running or stuck.
    let mut events = Vec::new();
    for (job, says) in [
        ("shape", "the answer has no \"status\""),
        ("unknown-status", "SOMETHING_NEW"),
        ("gone", "could not reach the endpoint"),
    ] {
        events.push((job, says, setup.send(job).await));
    }
    for (job, says, event) in events {
        let run = setup.finished(&event).await;
        assert_eq!(run["status"], "failed", "{job}: {run}");
        assert_eq!(run["attempt"], 3, "{job}: {run}");
        let error = run["error"].as_str().unwrap();
        assert!(error.contains(says), "{job}: {error}");
    }

    for (job, says) in [
        ("unknown-task", "\"task_nope\", which run"),
        (
            "resume-unknown",
            "\"task_nope\", which the run does not have",
        ),
        ("huge", "more than the 262144 Flare keeps"),
    ] {
        let event = setup.send(job).await;
        let run = setup.finished(&event).await;
        assert_eq!(run["status"], "failed", "{job}: {run}");
        assert_eq!(
            run["attempt"], 1,
            "{job}: a bad answer is not retried: {run}"
        );
        assert!(
            run["error"].as_str().unwrap().contains(says),
            "{job}: {run}"
        );
    }

    // Only a run's current execution may write its tasks.
    let answer = setup
        .http
        .post(format!("{}/api/v1/runs/run_not_running/tasks", setup.flare))
        .bearer_auth(KEY)
        .json(&json!({"idempotencyKey": "k", "name": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 409);
    let body: Value = answer.json().await.unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("not executing"),
        "{body}"
    );

    // Flare's own registration takes the protocol too (registering again updates the endpoint).
    let register = |body: Value| {
        setup
            .http
            .post(format!("{}/api/endpoints", setup.flare))
            .json(&body)
            .send()
    };
    let answer = register(json!({"url": setup.fake_url, "secret": KEY, "protocol": "trigger.dev-v2", "clientId": "fake"}))
        .await
        .unwrap();
    assert_eq!(answer.status(), 201);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["protocol"], "trigger.dev-v2", "{body}");
    let answer =
        register(json!({"url": setup.fake_url, "secret": KEY, "protocol": "trigger.dev-v3"}))
            .await
            .unwrap();
    assert_eq!(answer.status(), 400);
    let answer = register(json!({"url": setup.fake_url, "secret": "tr_dev_wrong", "protocol": "trigger.dev-v2", "clientId": "fake"}))
        .await
        .unwrap();
    assert_eq!(answer.status(), 422, "the endpoint refuses another key");

    // A v2 feature Flare does not have answers a JSON error naming it.
    let answer = setup
        .http
        .put(format!("{}/api/v1/runs/r/statuses/s", setup.flare))
        .bearer_auth(KEY)
        .json(&json!({"label": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 501);
    let body: Value = answer.json().await.unwrap();
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("run status updates"),
        "{body}"
    );
}

backend_tests!(
    statuses_map_onto_outcomes,
    bad_answers_give_clear_run_errors
);
