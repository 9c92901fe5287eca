//! The example application (`examples/rust-app`, built on `flare::App`) runs its own jobs, and no
//! node defines the seed's demo jobs unless told to: the real binaries, over HTTP.
//!
//! - `rust-app serve`: an order goes through `charge-order`, which chains `order.charged` to
//!   `email-receipt` and `update-stats`; `/api/jobs` lists only the application's three jobs.
//! - `flare serve --demo=false` and `flare serve` with endpoints given define no job; plain
//!   `flare serve` still defines the demo jobs (the README's first command shows them).
//! - `flare worker` defines no job; `flare worker --demo` defines the demo jobs.
//!
//! The example is built here with `cargo build -p rust-app` into the target directory of this
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

/// Builds the example once per test run and returns its binary.
fn example_binary() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
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
            .args(["build", "-p", "rust-app", "--quiet", "--profile", profile])
            .arg("--target-dir")
            .arg(target_dir)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo build -p rust-app");
        assert!(status.success(), "cargo build -p rust-app failed: {status}");
        let binary = profile_dir.join(format!("rust-app{}", std::env::consts::EXE_SUFFIX));
        assert!(binary.exists(), "no example binary at {}", binary.display());
        binary
    })
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

async fn serve(
    what: &str,
    program: &Path,
    extra: &[&str],
    envs: &[(&str, &str)],
    dir: &Path,
) -> Served {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let db = format!("sqlite://{}", dir.join(format!("{port}.db")).display());
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
    async fn get(&self, path: &str) -> Value {
        let answer = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200, "GET {path}");
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

    let sent: Value = app
        .http
        .post(format!("{}/trigger", app.base))
        .json(&json!({
            "event": "order.placed",
            "payload": {"orderId": "o_1", "email": "ada@example.com", "amountCents": 4200, "currency": "eur"},
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
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
