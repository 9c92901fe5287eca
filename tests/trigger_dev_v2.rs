//! The seed's Trigger.dev v2 project (`examples/trigger-dev-v2`: the real `@trigger.dev/sdk`
//! 2.3.19 from npm, served on plain Node `http`) run by the real `flare serve`, registered as the
//! v2 CLI registers it (`POST /api/v1/endpoints` with `{url, name}` and the Bearer key). Checked
//! over Flare's JSON API: broadcast, chaining (the chained event's parent is the run), a job that
//! fails after a completed `io.runTask` and whose retry does not repeat it, an `io.wait` that
//! resumes after `flare serve` was restarted in between, a failing job recorded failed with its
//! error, and the log lines on the runs.
//!
//! Needs `node` and `npm ci --prefix examples/trigger-dev-v2`. Without them the test skips with a
//! message, or fails when `CI` is set.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::process::{self, free_port, Proc};

const KEY: &str = "tr_dev_flareExampleKey1";

fn example_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/trigger-dev-v2")
}

/// `node --import tsx` (node itself, so killing it leaves no child behind: the `tsx` command
/// would run node as its child), or `None` (skip) when node or the npm install is missing
/// outside CI.
fn runner() -> Option<Command> {
    let tsx = example_dir().join("node_modules/tsx");
    let node = Command::new("node").arg("--version").output().is_ok();
    if node && tsx.exists() {
        let mut command = Command::new("node");
        command.args(["--import", "tsx"]);
        return Some(command);
    }
    let why = if node {
        "run `npm ci --prefix examples/trigger-dev-v2` first"
    } else {
        "node is not installed"
    };
    support::skip::skip(&format!("the Trigger.dev v2 example cannot run: {why}"));
    None
}

fn flare(db: &Path, port: u16) -> Proc {
    let mut command = process::flare(&["serve", "--listen", &format!("127.0.0.1:{port}")]);
    command
        .arg("--database-url")
        .arg(format!("sqlite://{}", db.display()))
        .env("FLARE_DEMO", "false")
        .env("RUST_LOG", "info");
    Proc::spawn("flare serve", command)
}

struct Api {
    base: String,
    http: reqwest::Client,
}

impl Api {
    async fn get(&self, path: &str) -> Option<Value> {
        let answer = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .ok()?;
        answer.status().is_success().then_some(())?;
        answer.json().await.ok()
    }

    async fn send(&self, event: &str, payload: Value) -> String {
        let answer: Value = self
            .http
            .post(format!("{}/trigger", self.base))
            .json(&json!({"event": event, "payload": payload}))
            .send()
            .await
            .expect("POST /trigger")
            .json()
            .await
            .expect("JSON");
        answer["result"]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("an event id in {answer}"))
            .to_string()
    }

    /// The runs of `job`, newest first.
    async fn runs(&self, job: &str) -> Vec<Value> {
        self.get(&format!("/api/runs?jobId={job}"))
            .await
            .and_then(|r| r["runs"].as_array().cloned())
            .unwrap_or_default()
    }

    /// Waits until `job` has a run in a final state and returns its detail.
    async fn finished(&self, job: &str, within: Duration, procs: &mut [&mut Proc]) -> Value {
        let deadline = Instant::now() + within;
        loop {
            if let Some(run) = self.runs(job).await.into_iter().find(|r| {
                matches!(
                    r["status"].as_str(),
                    Some("succeeded" | "failed" | "cancelled")
                )
            }) {
                let id = run["id"].as_str().unwrap_or_default();
                return self
                    .get(&format!("/api/runs/{id}"))
                    .await
                    .expect("run detail");
            }
            for p in procs.iter_mut() {
                p.assert_running();
            }
            if Instant::now() > deadline {
                let logs: Vec<String> = procs.iter().map(|p| p.output()).collect();
                panic!(
                    "no finished run of {job} within {within:?}: {:?}\n{}",
                    self.runs(job).await,
                    logs.join("\n-----\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn messages(run: &Value) -> Vec<String> {
    run["logs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["message"].as_str().map(str::to_string))
        .collect()
}

async fn wait_healthy(api: &Api, flare: &mut Proc) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while api.get("/healthz").await.is_none() {
        flare.assert_running();
        assert!(Instant::now() < deadline, "flare serve did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

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
