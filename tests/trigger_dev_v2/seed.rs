//! The seed's jobs under `flare serve`, and the example registering itself.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::support::process::free_port;
use super::{example_dir, flare, messages, runner, wait_healthy, Api, Proc, KEY};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_v2_jobs_run_unchanged_under_flare_serve() {
    let Some(mut command) = runner() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).expect("state dir");
    let db = dir.path().join("flare.db");
    let (port, app_port) = (free_port(), free_port());
    let api = Api {
        base: format!("http://127.0.0.1:{port}"),
        http: reqwest::Client::new(),
    };
    let mut server = flare(&db, port);
    wait_healthy(&api, &mut server).await;

    command
        .arg("src/server.ts")
        .current_dir(example_dir())
        .env("FLARE_URL", &api.base)
        .env("PORT", app_port.to_string())
        .env("STATE_DIR", &state)
        .env("TRIGGER_API_KEY", KEY)
        // This test registers it itself, as the v2 CLI would.
        .env("FLARE_REGISTER", "false");
    let mut app = Proc::spawn("the Trigger.dev v2 example", command);

    // Registration as the v2 CLI does it, retried while the example starts.
    let app_url = format!("http://127.0.0.1:{app_port}/api/trigger");
    let deadline = Instant::now() + Duration::from_secs(30);
    let endpoint = loop {
        let answer = api
            .http
            .post(format!("{}/api/v1/endpoints", api.base))
            .bearer_auth(KEY)
            .json(&json!({"url": app_url, "name": "flare-example"}))
            .send()
            .await
            .expect("POST /api/v1/endpoints");
        let status = answer.status();
        let body: Value = answer.json().await.unwrap_or_default();
        if status.is_success() {
            break body;
        }
        app.assert_running();
        assert!(
            Instant::now() < deadline,
            "registration failed: {status} {body}\n{}",
            app.output()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(endpoint["protocol"], "trigger.dev-v2", "{endpoint}");
    let jobs: Vec<&str> = endpoint["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for job in [
        "send-welcome-email",
        "track-signup",
        "process-upload",
        "notify-file-processed",
        "record-payment",
        "send-reminder",
    ] {
        assert!(jobs.contains(&job), "{job} is indexed: {endpoint}");
    }

    // Broadcast: one user.created starts both jobs, each with its log line.
    api.send(
        "user.created",
        json!({"email": "ada@example.com", "name": "Ada", "userId": "u_1"}),
    )
    .await;
    let welcome = api
        .finished(
            "send-welcome-email",
            Duration::from_secs(30),
            &mut [&mut server, &mut app],
        )
        .await;
    let tracked = api
        .finished(
            "track-signup",
            Duration::from_secs(30),
            &mut [&mut server, &mut app],
        )
        .await;
    assert_eq!(welcome["status"], "succeeded", "{welcome}");
    assert_eq!(
        welcome["output"],
        json!({"sent": true, "to": "ada@example.com"})
    );
    assert_eq!(
        messages(&welcome),
        ["sending welcome email to ada@example.com (hello Ada)"]
    );
    assert_eq!(tracked["status"], "succeeded", "{tracked}");
    assert_eq!(messages(&tracked), ["tracked signup of user u_1"]);

    // Chaining: io.sendEvent's event has the run as its parent and starts the next job.
    api.send(
        "file.uploaded",
        json!({"filename": "cat.png", "fileId": "f_1"}),
    )
    .await;
    let upload = api
        .finished(
            "process-upload",
            Duration::from_secs(30),
            &mut [&mut server, &mut app],
        )
        .await;
    assert_eq!(upload["status"], "succeeded", "{upload}");
    let notified = api
        .finished(
            "notify-file-processed",
            Duration::from_secs(30),
            &mut [&mut server, &mut app],
        )
        .await;
    assert_eq!(notified["status"], "succeeded", "{notified}");
    assert_eq!(
        messages(&notified),
        ["file f_1 processed: processed cat.png"]
    );
    let chained = api
        .get(&format!(
            "/api/events/{}",
            notified["eventId"].as_str().unwrap_or("")
        ))
        .await
        .expect("the chained event");
    assert_eq!(chained["parentRunId"], upload["id"], "{chained}");
    assert_eq!(upload["output"]["sentEventId"], chained["id"], "{upload}");

    // A failure after a completed task: the retry does not repeat the task.
    api.send("test.retry", json!({"orderId": "o_1"})).await;
    let retried = api
        .finished(
            "charge-then-fail-once",
            Duration::from_secs(30),
            &mut [&mut server, &mut app],
        )
        .await;
    assert_eq!(retried["status"], "succeeded", "{retried}");
    assert_eq!(retried["attempt"], 2, "{retried}");
    let charges = std::fs::read_to_string(state.join("charges")).unwrap_or_default();
    assert_eq!(charges, "o_1\n", "the charge ran once");
    assert!(
        retried["attempts"]
            .to_string()
            .contains("the shipping service is down"),
        "the first attempt's error is kept: {retried}"
    );

    // A failing job is recorded failed with its error (after its attempts).
    api.send("test.fail", json!({})).await;
    let failed = api
        .finished(
            "always-fails",
            Duration::from_secs(30),
            &mut [&mut server, &mut app],
        )
        .await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert!(
        failed["error"]
            .as_str()
            .unwrap_or("")
            .contains("card declined"),
        "{failed}"
    );

    // io.wait: the run waits (no worker), flare serve restarts, the run resumes after the wait.
    api.send("test.wait", json!({"seconds": 2})).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let waiting = loop {
        let runs = api.runs("wait-then-finish").await;
        if let Some(run) = runs.first() {
            let detail = api
                .get(&format!("/api/runs/{}", run["id"].as_str().unwrap_or("")))
                .await
                .unwrap_or_default();
            let steps = detail["steps"].to_string();
            if detail["status"] == "queued" && steps.contains("\"wait\"") {
                break detail;
            }
        }
        app.assert_running();
        assert!(Instant::now() < deadline, "the run never waited: {runs:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    server.stop(Duration::from_secs(20));
    let mut server = flare(&db, port);
    wait_healthy(&api, &mut server).await;
    let resumed = api
        .finished(
            "wait-then-finish",
            Duration::from_secs(30),
            &mut [&mut server, &mut app],
        )
        .await;
    assert_eq!(resumed["id"], waiting["id"]);
    assert_eq!(resumed["status"], "succeeded", "{resumed}");
    assert_eq!(resumed["attempt"], 1, "a wait is not an attempt: {resumed}");
    assert_eq!(
        messages(&resumed),
        ["before the wait", "after the wait"],
        "each log line once: {resumed}"
    );
    let after = std::fs::read_to_string(state.join("after-wait")).unwrap_or_default();
    assert_eq!(after, "done\n");
    let waited_ms = resumed["finishedAt"]
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .zip(
            waiting["createdAt"]
                .as_str()
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok()),
        )
        .map(|(end, start)| (end - start).num_milliseconds());
    assert!(
        waited_ms.is_some_and(|ms| ms >= 2000),
        "it resumed after the wait: {waited_ms:?}"
    );
}

/// The example runs against Flare in two commands (issue 25): started after (or before) `flare
/// serve`, it registers itself as the v2 CLI does, on a port of its own, and a sent event runs
/// its job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_registers_itself_with_flare() {
    let Some(mut command) = runner() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let (port, app_port) = (free_port(), free_port());
    let api = Api {
        base: format!("http://127.0.0.1:{port}"),
        http: reqwest::Client::new(),
    };
    // The application first: it waits for Flare.
    command
        .arg("src/server.ts")
        .current_dir(example_dir())
        .env("FLARE_URL", &api.base)
        .env("PORT", app_port.to_string())
        .env_remove("FLARE_REGISTER")
        .env("TRIGGER_API_KEY", KEY);
    let mut app = Proc::spawn("the Trigger.dev v2 example", command);
    let mut server = flare(&dir.path().join("flare.db"), port);
    wait_healthy(&api, &mut server).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let endpoint = loop {
        let listed = api.get("/api/endpoints").await.unwrap_or_default();
        if let Some(e) = listed["endpoints"]
            .as_array()
            .and_then(|l| l.first().cloned())
        {
            break e;
        }
        app.assert_running();
        assert!(
            Instant::now() < deadline,
            "the example did not register itself: {listed}\n{}",
            app.output()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        endpoint["url"],
        format!("http://127.0.0.1:{app_port}/api/trigger")
    );
    api.send(
        "user.created",
        json!({"userId": "u-1", "email": "ada@example.com"}),
    )
    .await;
    let run = api
        .finished(
            "send-welcome-email",
            Duration::from_secs(30),
            &mut [&mut server, &mut app],
        )
        .await;
    assert_eq!(run["status"], "succeeded", "{run}");

    // Its tasks show with their name and key, not as the SDK's 64-hex idempotency hash.
    api.send(
        "file.uploaded",
        json!({"fileId": "f1", "filename": "a.png"}),
    )
    .await;
    let run = api
        .finished(
            "process-upload",
            Duration::from_secs(30),
            &mut [&mut server, &mut app],
        )
        .await;
    let task = run["steps"]
        .as_array()
        .and_then(|steps| {
            steps.iter().find(|s| {
                s["label"]
                    .as_str()
                    .is_some_and(|l| l.contains("process-file"))
            })
        })
        .unwrap_or_else(|| panic!("the process-file task, labelled, in {run}"));
    let page = api
        .http
        .get(format!(
            "{}/runs/{}",
            api.base,
            run["id"].as_str().unwrap_or_default()
        ))
        .send()
        .await
        .expect("run page")
        .text()
        .await
        .expect("text");
    let key = task["key"].as_str().unwrap_or_default();
    assert!(page.contains("process-file"), "the label is shown");
    assert!(
        !page.contains(&format!(">{key}<")),
        "the hash is not shown as the step's name"
    );
    server.stop(Duration::from_secs(20));
}
