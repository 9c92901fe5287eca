//! The TypeScript and Python SDKs (`sdk/typescript`, `sdk/python`) end to end, under a real
//! `flare serve` on both stores.
//!
//! Each test starts a job of one SDK (`tests/sdk_apps/e2e.mjs`, `tests/sdk_apps/e2e.py`) as a
//! child process, and `flare serve --endpoint` at it. One event runs the job: a step, a durable
//! sleep across a restart of Flare (stopped while the run sleeps, started again on the same
//! database), a wait for an event (another value of the matched field resumes nothing; the
//! matching event resumes it), a child job of the same SDK invoked (its output used), a callback
//! whose URL the job builds from `FLARE_URL` and the test posts to, a step that fails on the
//! first attempt (the run retries, the first step is not run again), and a `sendEvent` step. The
//! run's stored steps, attempts, output, child run and chained event are checked through the JSON
//! API.
//!
//! Needs `node` (with `sdk/typescript` built: `npm ci` there) and `python3`. Without them the
//! tests skip with a message, or fail when `CI` is set. The PostgreSQL tests skip likewise.

mod support;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::process::{self, free_port, Proc};
use support::{Backend, TestDb};

const SECRET: &str = "whsec_c2RrIGVuZC10by1lbmQgdGVzdHMgc2VjcmV0ICMxIQ==";

/// One SDK's job application.
struct Sdk {
    program: &'static str,
    script: &'static str,
    /// A directory the SDK must have (the TypeScript SDK's dev dependencies, to build it).
    needs: Option<&'static str>,
    job: &'static str,
    /// The job it invokes.
    child: &'static str,
    event: &'static str,
}

const TS: Sdk = Sdk {
    program: "node",
    script: "tests/sdk_apps/e2e.mjs",
    needs: Some("sdk/typescript/node_modules"),
    job: "e2e-ts",
    child: "e2e-ts-child",
    event: "e2e.ts",
};

const PY: Sdk = Sdk {
    program: "python3",
    script: "tests/sdk_apps/e2e.py",
    needs: None,
    job: "e2e-py",
    child: "e2e-py-child",
    event: "e2e.py",
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_sdk_job_on_sqlite() {
    runs_end_to_end(&TS, TestDb::new(Backend::Sqlite).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_sdk_job_on_postgres() {
    if let Some(db) = TestDb::new_or_skip(Backend::Postgres).await {
        runs_end_to_end(&TS, db).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_job_on_sqlite() {
    runs_end_to_end(&PY, TestDb::new(Backend::Sqlite).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_job_on_postgres() {
    if let Some(db) = TestDb::new_or_skip(Backend::Postgres).await {
        runs_end_to_end(&PY, db).await;
    }
}

async fn runs_end_to_end(sdk: &Sdk, db: TestDb) {
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let Some(app) = start_app(sdk, &base).await else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut flare = start_flare(&db, port, &app.1, &dir);
    let http = reqwest::Client::new();
    let get = |path: String| {
        let request = http.get(format!("{base}{path}"));
        async move {
            let answer = request.send().await.ok()?;
            answer.status().is_success().then_some(())?;
            answer.json::<Value>().await.ok()
        }
    };
    let mut wait = Wait::new("the SDK's job is indexed", 30);
    loop {
        let jobs = get("/api/jobs".into()).await.unwrap_or_default();
        let indexed = jobs["jobs"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|j| j["id"] == sdk.job);
        if indexed {
            break;
        }
        wait.tick(&jobs.to_string(), &mut flare, &app.0).await;
    }
    let sent: Value = http
        .post(format!("{base}/trigger"))
        .json(&json!({"event": sdk.event, "payload": {"n": 7, "sleepMs": 3000}}))
        .send()
        .await
        .expect("POST /trigger")
        .json()
        .await
        .expect("JSON");
    let run_id = sent["result"]["runIds"][0]
        .as_str()
        .unwrap_or_else(|| panic!("one run: {sent}"))
        .to_string();

    // The run sleeps: its step is stored as waiting and no attempt is counted.
    let mut wait = Wait::new("the run to sleep", 30);
    loop {
        let run = get(format!("/api/runs/{run_id}")).await.unwrap_or_default();
        if step(&run, "nap").is_some_and(|s| s["status"] == "waiting") {
            assert_eq!(
                step(&run, "first").expect("the first step")["output"],
                json!({"n": 7})
            );
            break;
        }
        wait.tick(&run.to_string(), &mut flare, &app.0).await;
    }
    // Flare stops while the run sleeps, and starts again on the same database.
    flare.stop(Duration::from_secs(15));
    let mut flare = start_flare(&db, port, &app.1, &dir);

    // After the sleep the run waits for `e2e.paid` with the same `n`, holding no slot.
    let mut wait = Wait::new("the run to wait for its event", 60);
    loop {
        let run = get(format!("/api/runs/{run_id}")).await.unwrap_or_default();
        if step(&run, "paid").is_some_and(|s| s["status"] == "waiting") {
            assert_eq!(run["status"], json!("queued"), "{run}");
            break;
        }
        wait.tick(&run.to_string(), &mut flare, &app.0).await;
    }
    let send = |n: u32| {
        http.post(format!("{base}/trigger"))
            .json(&json!({"event": "e2e.paid", "payload": {"n": n}}))
            .send()
    };
    send(8).await.expect("POST /trigger");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let run = get(format!("/api/runs/{run_id}")).await.unwrap_or_default();
    assert_eq!(
        step(&run, "paid").map(|s| &s["status"]),
        Some(&json!("waiting")),
        "another n resumes nothing: {run}"
    );
    let paid: Value = send(7)
        .await
        .expect("POST /trigger")
        .json()
        .await
        .expect("JSON");
    let paid_id = paid["result"]["id"].clone();
    assert!(paid_id.is_string(), "{paid}");

    // The child job ran; the run waits for its callback, whose URL the job gave in `ask`.
    let mut wait = Wait::new("the run to wait for its callback", 60);
    let url = loop {
        let run = get(format!("/api/runs/{run_id}")).await.unwrap_or_default();
        // The callback is stored as waiting when it is made; the run waits once it asked.
        let asked = step(&run, "ask").is_some();
        if asked && run["status"] == "queued" {
            assert_eq!(
                step(&run, "approval").map(|s| &s["status"]),
                Some(&json!("waiting"))
            );
            break step(&run, "ask").expect("the step ask")["output"]
                .as_str()
                .unwrap_or_else(|| panic!("a URL: {run}"))
                .to_string();
        }
        assert!(run["status"] != "failed", "{run}\n{}", app.0.output());
        wait.tick(&run.to_string(), &mut flare, &app.0).await;
    };
    assert!(
        url.starts_with(&format!("{base}/callbacks/cb_")),
        "the URL is FLARE_URL and the path Flare told: {url}"
    );
    let posted = http
        .post(&url)
        .json(&json!({"approved": true}))
        .send()
        .await
        .expect("POST the callback");
    assert_eq!(posted.status(), 200, "{:?}", posted.text().await);

    let mut wait = Wait::new(
        "the run to succeed after its sleep, its waits and a retry",
        60,
    );
    let run = loop {
        let run = get(format!("/api/runs/{run_id}")).await.unwrap_or_default();
        if run["status"] == "succeeded" {
            break run;
        }
        assert!(
            run["status"] != "failed" && run["status"] != "cancelled",
            "{run}\n{}",
            app.0.output()
        );
        wait.tick(&run.to_string(), &mut flare, &app.0).await;
    };
    let event_id = format!("{run_id}-notify-0");
    assert_eq!(run["attempt"], json!(2), "{run}");
    assert_eq!(
        run["output"],
        json!({"first": {"n": 7}, "flaky": "ok on attempt 2", "sent": [event_id], "firstRuns": 1,
               "paid": {"id": paid_id, "payload": {"n": 7}}, "doubled": 14,
               "approved": {"approved": true}}),
        "the first step ran once, through the sleep, the restart, the waits and the retry"
    );
    let steps: Vec<(&str, &str, &str)> = run["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| {
            (
                s["key"].as_str().unwrap_or(""),
                s["kind"].as_str().unwrap_or(""),
                s["status"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        steps,
        [
            ("first", "task", "succeeded"),
            ("nap", "wait", "succeeded"),
            ("paid", "event_wait", "succeeded"),
            ("child", "invoke", "succeeded"),
            ("approval", "callback", "succeeded"),
            ("ask", "task", "succeeded"),
            ("flaky", "task", "succeeded"),
            ("notify", "event", "succeeded"),
        ],
        "{run}"
    );
    // The sleep and the three waits are executions that waited; the failure is attempt 1, retried.
    let outcomes: Vec<(&Value, &str)> = run["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .map(|a| (&a["attempt"], a["outcome"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(
        outcomes,
        [
            (&json!(1), "waiting"),
            (&json!(1), "waiting"),
            (&json!(1), "waiting"),
            (&json!(1), "waiting"),
            (&json!(1), "retrying"),
            (&json!(2), "succeeded")
        ],
        "{run}"
    );
    assert!(
        run["attempts"][4]["error"]
            .as_str()
            .is_some_and(|e| e.contains("flaky failure on attempt 1")),
        "{run}"
    );
    assert!(
        run["logs"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|l| l["message"] == "woke up"),
        "{run}"
    );
    let event = get(format!("/api/events/{event_id}"))
        .await
        .expect("the chained event");
    assert_eq!(event["name"], json!("e2e.done"));
    assert_eq!(event["payload"], json!({"n": 7}));
    // The child: a run of that one job, whose event's parent is the run; run once.
    let invoked = get(format!("/api/events/{run_id}-invoke-child"))
        .await
        .expect("the child's event");
    assert_eq!(invoked["parentRunId"], json!(run_id), "{invoked}");
    let runs = invoked["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 1, "{invoked}");
    assert_eq!(runs[0]["jobId"], json!(sdk.child));
    assert_eq!(runs[0]["status"], json!("succeeded"));
    assert_eq!(runs[0]["output"], json!({"doubled": 14}));
    flare.stop(Duration::from_secs(15));
}

fn step<'a>(run: &'a Value, key: &str) -> Option<&'a Value> {
    run["steps"].as_array()?.iter().find(|s| s["key"] == key)
}

fn start_flare(db: &TestDb, port: u16, endpoint: &str, dir: &tempfile::TempDir) -> Proc {
    let mut command = process::flare(&["serve", "--listen", &format!("127.0.0.1:{port}")]);
    command
        .args(["--database-url", &db.url, "--endpoint", endpoint])
        .env("FLARE_ENDPOINT_SECRET", SECRET)
        .env("FLARE_DEMO", "false")
        .current_dir(dir.path());
    Proc::spawn("flare serve", command)
}

/// Starts the SDK's application on a free port, telling it Flare's address `flare`: the process
/// and its endpoint URL; `None`, after saying why, when it cannot run here.
async fn start_app(sdk: &Sdk, flare: &str) -> Option<(Proc, String)> {
    if missing(sdk) {
        return None;
    }
    let port = free_port();
    let mut command = Command::new(sdk.program);
    command
        .arg(root().join(sdk.script))
        .env("PORT", port.to_string())
        .env("FLARE_ENDPOINT_SECRET", SECRET)
        .env("FLARE_URL", flare)
        .env("PYTHONUNBUFFERED", "1");
    let mut proc = Proc::spawn(sdk.script, command);
    let until = Instant::now() + Duration::from_secs(15);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        proc.assert_running();
        assert!(
            Instant::now() < until,
            "{} does not listen:\n{}",
            sdk.script,
            proc.output()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Some((proc, format!("http://127.0.0.1:{port}/flare")))
}

/// True, after saying why, when the SDK cannot run here; panics instead when `CI` is set.
fn missing(sdk: &Sdk) -> bool {
    let runs = Command::new(sdk.program)
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    let why = if !runs {
        format!("`{}` is not installed", sdk.program)
    } else if let Some(file) = sdk.needs.filter(|f| !root().join(f).exists()) {
        format!("{file} is missing (run `npm ci` in sdk/typescript)")
    } else {
        if sdk.needs.is_some() {
            build_typescript_sdk();
        }
        return false;
    };
    support::skip::skip(&why);
    true
}

/// Builds `sdk/typescript/dist` once per test process, so the jobs run the SDK as it is in the
/// tree, never a build left from an older checkout.
fn build_typescript_sdk() {
    static BUILT: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let out = Command::new("npm")
            .args(["run", "--silent", "build"])
            .current_dir(root().join("sdk/typescript"))
            .output()
            .map_err(|e| format!("npm run build: {e}"))?;
        out.status.success().then_some(()).ok_or_else(|| {
            format!(
                "npm run build in sdk/typescript failed:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        })
    });
    if let Err(e) = built {
        panic!("{e}");
    }
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A bounded wait that fails with what was seen last and both processes' output.
struct Wait {
    what: &'static str,
    until: Instant,
}

impl Wait {
    fn new(what: &'static str, secs: u64) -> Self {
        Self {
            what,
            until: Instant::now() + Duration::from_secs(secs),
        }
    }

    async fn tick(&mut self, seen: &str, flare: &mut Proc, app: &Proc) {
        flare.assert_running();
        assert!(
            Instant::now() < self.until,
            "timed out waiting for {}; last seen: {seen}\n--- flare ---\n{}\n--- app ---\n{}",
            self.what,
            flare.output(),
            app.output()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
