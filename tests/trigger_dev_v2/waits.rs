//! The v2 features on Flare's durable waits, with the real SDK.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::support::process::free_port;
use super::{
    ended, flare, messages, runner, sdk_client, start_example, wait_healthy, waits_for, Api,
};

/// The v2 features on Flare's durable waits, with the real SDK: `io.waitForEvent` resumed by a
/// matching event (after a restart of `flare serve`) or by its timeout, `io.waitForRequest`
/// resumed once by a `POST` to its callback URL, `invokeAndWaitForCompletion` of an
/// `invokeTrigger` job (the parent gets each child's output; the children are its children),
/// `job.invoke`, `client.invokeJob` and `client.cancelRunsForJob`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_waits_and_invokes_run_on_flares_durable_waits() {
    let Some(command) = runner() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).expect("state dir");
    let db = dir.path().join("flare.db");
    let port = free_port();
    let api = Api {
        base: format!("http://127.0.0.1:{port}"),
        http: reqwest::Client::new(),
    };
    let mut server = flare(&db, port);
    wait_healthy(&api, &mut server).await;
    let (mut app, endpoint) = start_example(command, &api, &state, &mut server).await;
    let jobs = endpoint["jobs"].to_string();
    assert!(
        jobs.contains("\"send-tips\""),
        "an invokeTrigger job is taken: {endpoint}"
    );

    // Three runs reach their waits: two for a payment (one with a 2 s timeout), one for a person.
    let paid = api
        .send(
            "test.invoice",
            json!({"invoiceId": "in_1", "timeoutSeconds": 600}),
        )
        .await;
    let unpaid = api
        .send(
            "test.invoice",
            json!({"invoiceId": "in_2", "timeoutSeconds": 2}),
        )
        .await;
    let approval = api.send("test.approval", json!({"request": "r1"})).await;
    let waiting = api
        .run_of(
            &paid,
            "waiting for invoice.paid",
            |r| waits_for(r, "invoice.paid"),
            &mut [&mut server, &mut app],
        )
        .await;
    assert_eq!(waiting["wait"]["match"], "payload.invoiceId", "{waiting}");
    assert_eq!(waiting["wait"]["matchValue"], "in_1", "{waiting}");
    assert_eq!(
        waiting["attempt"], 0,
        "a waiting run holds no attempt: {waiting}"
    );
    api.run_of(
        &approval,
        "waiting for its callback",
        |r| waits_for(r, "flare/callback"),
        &mut [&mut server, &mut app],
    )
    .await;
    let url = std::fs::read_to_string(state.join("approval-r1")).expect("the callback URL");
    assert!(
        url.starts_with(&format!("{}/callbacks/cb_", api.base)),
        "{url}"
    );

    // flare serve restarts while they wait; the waits hold.
    server.stop(Duration::from_secs(20));
    let mut server = flare(&db, port);
    wait_healthy(&api, &mut server).await;

    // Another invoice's payment passes the run by; its own resumes it.
    api.send("invoice.paid", json!({"invoiceId": "in_9", "amount": 1}))
        .await;
    let payment = api
        .send("invoice.paid", json!({"invoiceId": "in_1", "amount": 42}))
        .await;
    let run = api.ended(&paid, &mut [&mut server, &mut app]).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(
        run["output"],
        json!({"paid": true, "amount": 42, "eventId": payment}),
        "{run}"
    );
    assert_eq!(run["id"], waiting["id"]);
    assert_eq!(messages(&run), ["invoice in_1 paid"], "{run}");

    // The timeout: the SDK throws from the wait, the job catches it and sends a reminder.
    let run = api.ended(&unpaid, &mut [&mut server, &mut app]).await;
    assert_eq!(run["output"], json!({"paid": false}), "{run}");
    let said = messages(&run).join(" ");
    assert!(said.contains("Remote callback timeout"), "{run}");

    // The person answers once; the second answer is refused.
    let post = |body: Value| api.http.post(&url).json(&body).send();
    let answer = post(json!({"approved": true, "by": "ada"}))
        .await
        .expect("POST");
    assert_eq!(answer.status(), 200);
    let run = api.ended(&approval, &mut [&mut server, &mut app]).await;
    assert_eq!(
        run["output"],
        json!({"request": "r1", "approved": true, "by": "ada"}),
        "{run}"
    );
    let again = post(json!({"approved": false, "by": "eve"}))
        .await
        .expect("POST");
    assert_eq!(again.status(), 404, "a callback is answered once");

    // invokeAndWaitForCompletion: each child's output comes back, a failing child's error too;
    // batchInvokeAndWaitForCompletion waits for all of its children.
    let onboard = api
        .send("test.onboard", json!({"teams": ["a", "broken"]}))
        .await;
    let run = api.ended(&onboard, &mut [&mut server, &mut app]).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    let results = &run["output"]["results"];
    assert_eq!(results[0], json!({"team": "a", "tips": 3}), "{run}");
    assert_eq!(results[1]["failed"], "FAILURE", "{run}");
    assert!(
        results[1]["error"]
            .as_str()
            .is_some_and(|e| e.contains("no such team")),
        "{run}"
    );
    assert_eq!(
        run["output"]["batch"],
        json!([{"team": "c", "tips": 3}, {"team": "d", "tips": 3}]),
        "{run}"
    );
    let children = api.runs("send-tips").await;
    let parent = run["id"].as_str().unwrap_or_default();
    let mut linked = 0;
    for child in &children {
        let detail = api
            .get(&format!("/api/runs/{}", child["id"].as_str().unwrap_or("")))
            .await
            .unwrap_or_default();
        let event = api
            .get(&format!(
                "/api/events/{}",
                detail["eventId"].as_str().unwrap_or("")
            ))
            .await
            .unwrap_or_default();
        if event["parentRunId"] == parent {
            linked += 1;
            assert_eq!(event["name"], "flare/job.invoked", "{event}");
        }
    }
    assert_eq!(
        linked, 4,
        "the four waited-for runs are the parent's children: {children:?}"
    );
    // job.invoke inside the run started one more run, not waited for (nor the parent's child).
    let extra = run["output"]["extraRunId"]
        .as_str()
        .expect("extraRunId")
        .to_string();
    let extra_run = api
        .get(&format!("/api/runs/{extra}"))
        .await
        .expect("the extra run");
    assert_eq!(extra_run["jobId"], "send-tips", "{extra_run}");

    // client.invokeJob: a run of that job alone; the same idempotency key, the same run.
    let first = sdk_client(
        &api,
        &["invoke", "send-tips", r#"{"team": "cli"}"#, "key-1"],
    );
    let second = sdk_client(
        &api,
        &["invoke", "send-tips", r#"{"team": "cli"}"#, "key-1"],
    );
    assert_eq!(first["id"], second["id"], "{first} {second}");
    let id = first["id"].as_str().expect("a run id").to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    let invoked = loop {
        let run = api
            .get(&format!("/api/runs/{id}"))
            .await
            .unwrap_or_default();
        if ended(&run) {
            break run;
        }
        assert!(
            Instant::now() < deadline,
            "the invoked run did not end: {run}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        invoked["output"],
        json!({"team": "cli", "tips": 3}),
        "{invoked}"
    );
    let tips = std::fs::read_to_string(state.join("tips")).unwrap_or_default();
    assert_eq!(
        tips.matches("cli").count(),
        1,
        "one run for one key: {tips}"
    );

    // cancelRunsForJob: the job's waiting runs are cancelled; their callbacks are gone.
    let r2 = api.send("test.approval", json!({"request": "r2"})).await;
    let r3 = api.send("test.approval", json!({"request": "r3"})).await;
    let mut ids = Vec::new();
    for event in [&r2, &r3] {
        let run = api
            .run_of(
                event,
                "waiting",
                |r| waits_for(r, "flare/callback"),
                &mut [&mut server, &mut app],
            )
            .await;
        ids.push(run["id"].clone());
    }
    let cancelled = sdk_client(&api, &["cancel", "wait-for-approval"]);
    let mut got: Vec<Value> = cancelled["cancelledRunIds"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    got.sort_by_key(Value::to_string);
    ids.sort_by_key(Value::to_string);
    assert_eq!(got, ids, "{cancelled}");
    assert_eq!(cancelled["failedToCancelRunIds"], json!([]), "{cancelled}");
    let url = std::fs::read_to_string(state.join("approval-r2")).expect("r2's URL");
    let late = api
        .http
        .post(&url)
        .json(&json!({"approved": true}))
        .send()
        .await
        .expect("POST");
    assert_eq!(late.status(), 404, "a cancelled run's callback is gone");
    let run = api.ended(&r2, &mut [&mut server, &mut app]).await;
    assert_eq!(run["status"], "cancelled", "{run}");
    server.stop(Duration::from_secs(20));
}
