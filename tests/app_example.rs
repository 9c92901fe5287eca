//! The example application (`examples/rust-app`, built on `flare::App`) runs its own jobs, and no
//! node defines the seed's demo jobs unless told to: the real binaries, over HTTP.
//!
//! - `rust-app serve`: an order goes through `charge-order`, which chains `order.charged` to
//!   `email-receipt` and `update-stats`; `/api/jobs` lists only the application's three jobs.
//! - `flare serve --demo=false` and `flare serve` with endpoints given define no job; plain
//!   `flare serve` still defines the demo jobs (the README's first command shows them).
//! - `flare worker` defines no job; `flare worker --demo` defines the demo jobs.
//! - `onboarding serve` (`examples/onboarding`, the README's walk through issue 27's workflow):
//!   the run waits for `user.verified` through a restart, then fans out to `send-tips`.
//!
//! The examples are built here with `cargo build` into the target directory of this
//! test's `flare` binary, so CI's `cargo test` checks that it compiles and runs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::process::{free_port, Proc};

/// How long the jobs get to finish, and a process to become healthy.
const PATIENCE: Duration = Duration::from_secs(30);

/// The seed's demo jobs (`flare::reference_jobs`).
fn demo_job_ids() -> BTreeSet<String> {
    flare::reference_jobs::all()
        .iter()
        .map(|j| j.id().to_string())
        .collect()
}

/// Builds the example application once per test run and returns its binary.
fn example_binary() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| built(&["-p", "rust-app"], "rust-app"))
}

/// Builds `examples/onboarding` (an example of this crate) once per test run; its binary.
fn onboarding_binary() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| built(&["--example", "onboarding"], "examples/onboarding"))
}

/// `cargo build <what>` into the target directory of this test's `flare` binary, in its
/// profile, so CI's `cargo test` checks that it compiles and runs; the binary at `binary`
/// under the profile's directory.
fn built(what: &[&str], binary: &str) -> PathBuf {
    // The directory of this test's `flare` is the profile's: `<target>/debug`, `<target>/release`…
    let profile_dir = Path::new(env!("CARGO_BIN_EXE_flare"))
        .parent()
        .expect("the flare binary is in a directory");
    let target_dir = profile_dir.parent().expect("a target directory");
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev",
        Some(other) => other,
        None => panic!("unexpected binary path {}", profile_dir.display()),
    };
    let status = Command::new(env!("CARGO"))
        .arg("build")
        .args(what)
        .args(["--quiet", "--profile", profile])
        .arg("--target-dir")
        .arg(target_dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .unwrap_or_else(|e| panic!("run cargo build {what:?}: {e}"));
    assert!(status.success(), "cargo build {what:?} failed: {status}");
    let binary = profile_dir.join(format!("{binary}{}", std::env::consts::EXE_SUFFIX));
    assert!(binary.exists(), "no example binary at {}", binary.display());
    binary
}

/// `program args…` in `dir`, with nothing of the caller's Flare environment.
fn command(program: &Path, args: &[&str], dir: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(dir)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1");
    for var in [
        "DATABASE_URL",
        "FLARE_API_KEY",
        "FLARE_DEMO",
        "FLARE_ENDPOINTS",
        "FLARE_ENDPOINT_SECRET",
        "FLARE_LISTEN",
        "STRIPE_WEBHOOK_SECRET",
        "CLERK_WEBHOOK_SECRET",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// A `serve` process on a free port and its own SQLite file.
struct Served {
    proc: Proc,
    base: String,
    http: reqwest::Client,
}

/// Starts `program serve extra…` and waits until it is healthy. Its SQLite file in `dir` is named
/// after `what`: started again with the same `what`, it finds what it stored.
async fn serve(
    what: &str,
    program: &Path,
    extra: &[&str],
    envs: &[(&str, &str)],
    dir: &Path,
) -> Served {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let file: String = what
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let db = format!("sqlite://{}", dir.join(format!("{file}.db")).display());
    let mut args = vec!["serve", "--listen", &listen, "--database-url", &db];
    args.extend_from_slice(extra);
    let mut cmd = command(program, &args, dir);
    cmd.envs(envs.iter().copied());
    let mut proc = Proc::spawn(what, cmd);
    let base = format!("http://{listen}");
    let http = reqwest::Client::new();
    let deadline = Instant::now() + PATIENCE;
    loop {
        proc.assert_running();
        if let Ok(r) = http.get(format!("{base}/healthz")).send().await {
            if r.status().is_success() {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{what} did not become healthy:\n{}",
            proc.output()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Served { proc, base, http }
}

impl Served {
    /// `GET path`, answered 200.
    async fn get_ok(&self, path: &str) -> reqwest::Response {
        let answer = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200, "GET {path}");
        answer
    }

    async fn get(&self, path: &str) -> Value {
        self.get_ok(path).await.json().await.unwrap()
    }

    /// The dashboard's page at `path`, as HTML.
    async fn page(&self, path: &str) -> String {
        self.get_ok(path).await.text().await.unwrap()
    }

    /// `POST /trigger` of event `name` with `payload`; the answer.
    async fn send(&self, name: &str, payload: Value) -> Value {
        let answer = self
            .http
            .post(format!("{}/trigger", self.base))
            .json(&json!({ "event": name, "payload": payload }))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200, "POST /trigger {name}");
        answer.json().await.unwrap()
    }

    async fn job_ids(&self) -> BTreeSet<String> {
        let jobs = self.get("/api/jobs").await;
        jobs["jobs"]
            .as_array()
            .unwrap_or_else(|| panic!("/api/jobs: {jobs}"))
            .iter()
            .map(|j| j["id"].as_str().expect("a job id").to_string())
            .collect()
    }

    /// Polls `GET path` until `done` holds (bounded), and returns the last answer.
    async fn poll(&self, path: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let answer = self.get(path).await;
            if done(&answer) {
                return answer;
            }
            assert!(
                Instant::now() < deadline,
                "GET {path} still not done after {PATIENCE:?}; last answer: {answer:#}\n{}:\n{}",
                self.proc.what,
                self.proc.output()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Every run listed under `key` succeeded, and there are `n` of them.
fn all_succeeded(answer: &Value, key: &str, n: usize) -> bool {
    answer[key]
        .as_array()
        .is_some_and(|runs| runs.len() == n && runs.iter().all(|r| r["status"] == "succeeded"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_app_runs_its_own_jobs_and_chains_and_defines_no_demo_job() {
    let binary = tokio::task::spawn_blocking(example_binary).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let app = serve("rust-app serve", binary, &[], &[], dir.path()).await;

    let sent = app
        .send(
            "order.placed",
            json!({"orderId": "o_1", "email": "ada@example.com", "amountCents": 4200, "currency": "eur"}),
        )
        .await;
    let id = sent["result"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{sent}"));
    assert_eq!(
        sent["result"]["runIds"].as_array().map(Vec::len),
        Some(1),
        "{sent}"
    );

    let placed = app
        .poll(&format!("/api/events/{id}"), |e| {
            all_succeeded(e, "runs", 1) && e["children"].as_array().is_some_and(|c| c.len() == 1)
        })
        .await;
    assert_eq!(placed["runs"][0]["jobId"], "charge-order");
    let charge_id = placed["runs"][0]["output"]["chargeId"]
        .as_str()
        .unwrap_or_else(|| panic!("{placed:#}"));
    let charged = &placed["children"][0];
    assert_eq!(charged["name"], "order.charged");
    assert_eq!(charged["payload"]["chargeId"], charge_id);
    assert_eq!(charged["parentRunId"], placed["runs"][0]["id"]);

    // order.charged: a receipt and a statistics update (broadcast), both done.
    let chained_id = charged["id"].as_str().unwrap();
    let chained = app
        .poll(&format!("/api/events/{chained_id}"), |e| {
            all_succeeded(e, "runs", 2)
        })
        .await;
    let jobs: BTreeSet<&str> = chained["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["jobId"].as_str().unwrap())
        .collect();
    assert_eq!(jobs, BTreeSet::from(["email-receipt", "update-stats"]));
    let receipts = app
        .poll("/api/runs?jobId=email-receipt", |r| {
            all_succeeded(r, "runs", 1)
        })
        .await;
    assert_eq!(
        receipts["runs"][0]["output"],
        json!({"sentTo": "ada@example.com"})
    );

    let expected: BTreeSet<String> = ["charge-order", "email-receipt", "update-stats"]
        .map(String::from)
        .into();
    assert_eq!(app.job_ids().await, expected, "only the application's jobs");
    assert!(
        !app.proc.output().contains("demo jobs"),
        "no demo warning:\n{}",
        app.proc.output()
    );
    app.proc.stop(PATIENCE);
}

/// The README's walk through the onboarding workflow on the dashboard: its jobs in the service,
/// the run waiting for `user.verified` (shown on its page) through a restart, then resumed and
/// fanned out to one `send-tips` run per team.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_onboarding_example_serves_its_workflow_through_a_restart_in_its_wait() {
    let binary = tokio::task::spawn_blocking(onboarding_binary)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let what = "onboarding serve";
    let start = || serve(what, binary, &[], &[], dir.path());
    let app = start().await;
    let expected: BTreeSet<String> = ["onboarding", "onboarding-on-failure", "send-tips"]
        .map(String::from)
        .into();
    assert_eq!(app.job_ids().await, expected, "the workflow's jobs only");

    let teams = json!([{"name": "core"}, {"name": "web"}]);
    let created = app
        .send("user.created", json!({"userId": "u_1", "teams": teams}))
        .await;
    let run = created["result"]["runIds"][0]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_string();
    let waiting = app
        .poll(&format!("/api/runs/{run}"), |r| !r["wait"].is_null())
        .await;
    let wait = &waiting["wait"];
    assert_eq!(wait["event"], "user.verified", "{waiting:#}");
    assert_eq!(wait["match"], "payload.userId", "{waiting:#}");
    assert_eq!(wait["matchValue"], "u_1", "{waiting:#}");
    let until = wait["until"].as_str().expect("a deadline").to_string();
    let page = app.page(&format!("/runs/{run}")).await;
    assert!(
        page.contains("user.verified") && page.contains("payload.userId"),
        "the run page shows what the run waits for"
    );
    app.proc.stop(PATIENCE);

    // Started again on the same file: the run still waits, with the same deadline.
    let app = start().await;
    let still = app.get(&format!("/api/runs/{run}")).await;
    assert_eq!(still["wait"]["event"], "user.verified", "{still:#}");
    assert_eq!(still["wait"]["until"], until.as_str(), "{still:#}");
    app.send("user.verified", json!({"userId": "u_1"})).await;
    let done = app
        .poll(&format!("/api/runs/{run}"), |r| r["status"] == "succeeded")
        .await;
    assert_eq!(
        done["output"],
        json!({"account": "acct-u_1", "verified": true, "teams": 2}),
        "{done:#}"
    );
    let children = done["children"].as_array().expect("children");
    assert_eq!(children.len(), 2, "one send-tips run per team: {done:#}");
    let page = app.page(&format!("/runs/{run}")).await;
    for child in children {
        assert_eq!(child["jobId"], "send-tips", "{done:#}");
        assert_eq!(child["status"], "succeeded", "{done:#}");
        let id = child["runId"].as_str().expect("a child's run id");
        assert!(page.contains(id), "the run page links its child {id}");
        let detail = app.get(&format!("/api/runs/{id}")).await;
        assert_eq!(detail["parentRunId"], run.as_str(), "{detail:#}");
    }
    app.proc.stop(PATIENCE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flare_serve_defines_the_demo_jobs_only_without_demo_false_or_endpoints() {
    let flare = Path::new(env!("CARGO_BIN_EXE_flare"));
    let dir = tempfile::tempdir().unwrap();

    let off = serve(
        "flare serve --demo=false",
        flare,
        &["--demo=false"],
        &[],
        dir.path(),
    )
    .await;
    assert_eq!(
        off.job_ids().await,
        BTreeSet::new(),
        "--demo=false defines no job"
    );
    off.proc.stop(PATIENCE);

    let with_endpoint = serve(
        "flare serve with FLARE_ENDPOINTS",
        flare,
        &[],
        &[
            ("FLARE_ENDPOINTS", "http://127.0.0.1:9/flare"),
            (
                "FLARE_ENDPOINT_SECRET",
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            ),
        ],
        dir.path(),
    )
    .await;
    let ids = with_endpoint.job_ids().await;
    assert!(
        ids.is_disjoint(&demo_job_ids()),
        "endpoints at start turn the demo off: {ids:?}"
    );
    with_endpoint.proc.stop(PATIENCE);

    let demo = serve("flare serve", flare, &[], &[], dir.path()).await;
    assert_eq!(
        demo.job_ids().await,
        demo_job_ids(),
        "plain flare serve shows the demo"
    );
    assert!(
        demo.proc
            .output()
            .contains("--demo=false / FLARE_DEMO=false"),
        "the demo is announced with a warning:\n{}",
        demo.proc.output()
    );
    demo.proc.stop(PATIENCE);
}

/// Starts `flare worker args…` on a fresh SQLite file, waits until it runs, stops it and returns
/// the ids of the jobs stored in the file.
async fn worker_job_ids(args: &[&str], dir: &Path) -> BTreeSet<String> {
    let name = format!("worker{}", args.join(""));
    let db = format!("sqlite://{}", dir.join(format!("{name}.db")).display());
    let mut all = vec!["worker", "--database-url", &db];
    all.extend_from_slice(args);
    let what = format!("flare {}", all.join(" "));
    let cmd = command(Path::new(env!("CARGO_BIN_EXE_flare")), &all, dir);
    let mut proc = Proc::spawn(&what, cmd);
    // Its log, until it says it runs.
    let deadline = Instant::now() + PATIENCE;
    while !proc.output().contains("flare worker is running jobs") {
        proc.assert_running();
        assert!(
            Instant::now() < deadline,
            "{what} did not start:\n{}",
            proc.output()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    proc.stop(PATIENCE);

    let observer = flare::Client::builder(&db)
        .workers(false)
        .connect()
        .await
        .unwrap();
    let jobs = observer
        .store()
        .jobs_list(chrono::Utc::now())
        .await
        .unwrap();
    observer.shutdown().await;
    jobs.into_iter().map(|j| j.job.id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flare_worker_defines_the_demo_jobs_only_with_demo() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        worker_job_ids(&[], dir.path()).await,
        BTreeSet::new(),
        "flare worker defines no job by default"
    );
    assert_eq!(
        worker_job_ids(&["--demo"], dir.path()).await,
        demo_job_ids(),
        "flare worker --demo defines the demo jobs"
    );
}
