//! The seed's Trigger.dev v2 project (`examples/trigger-dev-v2`: the real `@trigger.dev/sdk`
//! 2.3.19 from npm, served on plain Node `http`) run by the real `flare serve`, registered as the
//! v2 CLI registers it (`POST /api/v1/endpoints` with `{url, name}` and the Bearer key), checked
//! over Flare's JSON API. `seed`: the seed's jobs (broadcast, chaining, retries, `io.wait` across
//! a restart, failures, log lines) and the example registering itself; `waits`: the v2 features
//! on Flare's durable waits (`io.waitForEvent`, `io.waitForRequest`, `invokeTrigger` with
//! `invokeAndWaitForCompletion` and `job.invoke`, `client.invokeJob`, `cancelRunsForJob`).
//! The helpers both use are here.
//!
//! Needs `node` and `npm ci --prefix examples/trigger-dev-v2`. Without them the test skips with a
//! message, or fails when `CI` is set.

#[path = "../support/mod.rs"]
mod support;

mod seed;
mod waits;

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

    /// The detail of the first run of event `event`, once `done` holds for it.
    async fn run_of(
        &self,
        event: &str,
        what: &str,
        done: impl Fn(&Value) -> bool,
        procs: &mut [&mut Proc],
    ) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let detail = match self.get(&format!("/api/events/{event}")).await {
                Some(e) => match e["runs"][0]["id"].as_str() {
                    Some(id) => self.get(&format!("/api/runs/{id}")).await,
                    None => None,
                },
                None => None,
            };
            if let Some(run) = detail.filter(|r| done(r)) {
                return run;
            }
            for p in procs.iter_mut() {
                p.assert_running();
            }
            if Instant::now() > deadline {
                let logs: Vec<String> = procs.iter().map(|p| p.output()).collect();
                panic!(
                    "the run of {event} is not {what}:\n{}",
                    logs.join("\n-----\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The detail of the first run of event `event` once it ended.
    async fn ended(&self, event: &str, procs: &mut [&mut Proc]) -> Value {
        self.run_of(event, "ended", ended, procs).await
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

fn ended(run: &Value) -> bool {
    matches!(
        run["status"].as_str(),
        Some("succeeded" | "failed" | "cancelled")
    )
}

/// Whether `run` waits (queued, its durable wait pending) for `event`.
fn waits_for(run: &Value, event: &str) -> bool {
    run["status"] == "queued" && run["wait"]["event"] == event
}

fn messages(run: &Value) -> Vec<String> {
    run["logs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["message"].as_str().map(str::to_string))
        .collect()
}

/// The example's `src/test-client.ts` (the SDK's client outside a run): its JSON answer.
fn sdk_client(api: &Api, args: &[&str]) -> Value {
    let Some(mut command) = runner() else {
        panic!("the runner was there a moment ago");
    };
    let out = command
        .arg("src/test-client.ts")
        .args(args)
        .current_dir(example_dir())
        .env("FLARE_URL", &api.base)
        .env("TRIGGER_API_KEY", KEY)
        .output()
        .expect("the SDK client runs");
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "test-client {args:?}: {e}: {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Starts the example with its test jobs (`STATE_DIR`) and registers it as the v2 CLI does.
async fn start_example(
    mut command: Command,
    api: &Api,
    state: &Path,
    server: &mut Proc,
) -> (Proc, Value) {
    let app_port = free_port();
    command
        .arg("src/server.ts")
        .current_dir(example_dir())
        .env("FLARE_URL", &api.base)
        .env("PORT", app_port.to_string())
        .env("STATE_DIR", state)
        .env("TRIGGER_API_KEY", KEY)
        .env("FLARE_REGISTER", "false");
    let mut app = Proc::spawn("the Trigger.dev v2 example", command);
    let app_url = format!("http://127.0.0.1:{app_port}/api/trigger");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
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
            return (app, body);
        }
        app.assert_running();
        server.assert_running();
        assert!(
            Instant::now() < deadline,
            "registration failed: {status} {body}\n{}",
            app.output()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn wait_healthy(api: &Api, flare: &mut Proc) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while api.get("/healthz").await.is_none() {
        flare.assert_running();
        assert!(Instant::now() < deadline, "flare serve did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
