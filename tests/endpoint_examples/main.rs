//! The HTTP job endpoint examples, held to the protocol of docs/endpoints.md:
//! `examples/endpoint-node` (the TypeScript SDK, served by Express), `examples/endpoint-python`
//! (the Python SDK, served by FastAPI), both protocol version 2, and `examples/endpoint-protocol`
//! (plain Node, no dependency: the reference of version 1 for other languages).
//!
//! Each test starts one example as a child process on a free port. The first tests act as Flare
//! would: they sign requests with [`svix::sign`] and check the answers to `index` and `run` (for
//! version 2, calling again with the steps answered until the outcome, as Flare does), and
//! that a bad signature or a stale timestamp gets 401. The `*_under_flare_serve` tests start the
//! real binary with `--endpoint` and follow one event through both jobs, the chained one included.
//!
//! Needs `node` with the Node example's packages (`npm ci` in `sdk/typescript`, then in
//! `examples/endpoint-node`; the tests build both from the tree), and a Python with FastAPI and
//! uvicorn (`FLARE_SDK_PYTHON`, else `python3`; the example runs on the tree's SDK). Without them
//! a test skips with a message saying what is missing, or fails when `CI` is set.

#[path = "../support/mod.rs"]
mod support;

mod apps;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use apps::{App, Signed};
use flare::webhooks::svix;
use serde_json::{json, Value};
use support::process::{self, free_port, Proc};

/// The examples' secret in these tests.
const SECRET: &str = "whsec_ZW5kcG9pbnQgZXhhbXBsZXMgdGVzdCBzZWNyZXQgIzE=";
/// A valid secret that is not theirs.
const OTHER_SECRET: &str = "whsec_c29tZSBvdGhlciBlbmRwb2ludCBzZWNyZXQgICAjMg==";

/// One example application and what it promises.
struct Example {
    /// The interpreter (`python3`: `FLARE_SDK_PYTHON` when set); the tests skip when it is missing.
    program: &'static str,
    /// The server, relative to the repository root.
    script: &'static str,
    /// Directories whose packages it needs (`npm ci`), built in this order before it starts.
    npm: &'static [&'static str],
    /// Python modules it needs.
    modules: &'static [&'static str],
    /// The job that chains: its id and its trigger event.
    first: (&'static str, &'static str),
    /// The job that the chained event starts: its id and its trigger event.
    second: (&'static str, &'static str),
    /// The chained event's key.
    key: &'static str,
    /// A payload for the first job's event.
    payload: &'static str,
    /// What the first job's log line says for that payload.
    logged: &'static str,
    /// Speaks protocol version 2 (durable steps): its chained event is a `sendEvent` step.
    stepped: bool,
}

const NODE: Example = Example {
    program: "node",
    script: "examples/endpoint-node/dist/server.js",
    npm: &["sdk/typescript", "examples/endpoint-node"],
    modules: &[],
    first: ("upload-process", "file.uploaded"),
    second: ("upload-notify", "file.processed"),
    key: "processed",
    payload: r#"{"fileId": "f_1", "filename": "cat.png"}"#,
    logged: "processing cat.png",
    stepped: true,
};

const PROTOCOL: Example = Example {
    script: "examples/endpoint-protocol/server.mjs",
    npm: &[],
    stepped: false,
    ..NODE
};

const PYTHON: Example = Example {
    program: "python3",
    script: "examples/endpoint-python/app.py",
    npm: &[],
    modules: &["fastapi", "uvicorn"],
    first: ("invoice-create", "order.placed"),
    second: ("invoice-email", "invoice.created"),
    key: "invoice",
    payload: r#"{"orderId": "o_1", "email": "ada@example.com", "currency": "usd",
                 "items": [{"sku": "mug", "quantity": 2, "unitPriceCents": 1250}]}"#,
    logged: "invoice inv_o_1 for order o_1",
    stepped: true,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_endpoint_answers_index_and_run() {
    answers_index_and_run(&NODE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_endpoint_refuses_bad_signatures() {
    refuses_bad_signatures(&NODE).await;
}

/// Needs Flare's side of the protocol (`--endpoint`, `FLARE_DEMO`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_endpoint_runs_under_flare_serve() {
    runs_under_flare_serve(&NODE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_endpoint_answers_index_and_run() {
    answers_index_and_run(&PROTOCOL).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_endpoint_refuses_bad_signatures() {
    refuses_bad_signatures(&PROTOCOL).await;
}

/// Needs Flare's side of the protocol (`--endpoint`, `FLARE_DEMO`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_endpoint_runs_under_flare_serve() {
    runs_under_flare_serve(&PROTOCOL).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_endpoint_answers_index_and_run() {
    answers_index_and_run(&PYTHON).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_endpoint_refuses_bad_signatures() {
    refuses_bad_signatures(&PYTHON).await;
}

/// Needs Flare's side of the protocol (`--endpoint`, `FLARE_DEMO`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_endpoint_runs_under_flare_serve() {
    runs_under_flare_serve(&PYTHON).await;
}

/// The worked example of docs/endpoints.md is what Flare's signer computes, and the page still
/// shows every part of it.
#[test]
fn documented_signature_example_is_what_flare_signs() {
    let (secret, id, timestamp, body) = (
        "whsec_ZmxhcmUtZW5kcG9pbnQtZG9jcy1leGFtcGxlLWtleSE=",
        "msg_2f1c7b9e4a8d0356",
        1_717_171_717,
        r#"{"action":"index"}"#,
    );
    let signature = svix::sign(secret, id, timestamp, body.as_bytes()).expect("sign");
    assert_eq!(signature, "v1,JX3TgSCyryPPV0rp5x/lz2JM5/JeGDsQWGTdZN7nhGM=");
    let page = std::fs::read_to_string(root().join("docs/endpoints.md")).expect("the page");
    for shown in [secret, id, "1717171717", body, &signature] {
        assert!(page.contains(shown), "docs/endpoints.md lost {shown:?}");
    }
}

// ---- Acting as Flare --------------------------------------------------------------------------

async fn answers_index_and_run(example: &Example) {
    let Some(app) = App::start(example).await else {
        return;
    };
    let index = app.call(&json!({"action": "index"})).await;
    if example.stepped {
        only_fields(&index, &["protocol", "jobs"]);
        assert_eq!(index["protocol"], json!(2), "{index}");
    } else {
        only_fields(&index, &["jobs"]);
    }
    let jobs = index["jobs"].as_array().expect("jobs is an array");
    jobs.iter().for_each(assert_valid_job);
    let served: Vec<(&str, &str)> = jobs
        .iter()
        .map(|job| {
            let id = job["id"].as_str().unwrap_or_default();
            (id, job["trigger"]["event"].as_str().unwrap_or_default())
        })
        .collect();
    assert_eq!(served, [example.first, example.second]);

    let (first, first_event) = example.first;
    let answer = app
        .run(example, run_request(first, first_event, example.payload()))
        .await;
    assert_succeeded(&answer);
    assert!(
        log_messages(&answer).any(|m| m.contains(example.logged)),
        "{first}: no log line says {:?}: {answer}",
        example.logged
    );
    let events = answer["events"].as_array().expect("events is an array");
    assert_eq!(events.len(), 1, "{first} sends one event: {answer}");
    let chained = &events[0];
    only_fields(
        chained,
        &["name", "payload", "key", "delay", "deliverAt", "context"],
    );
    assert_eq!(chained["name"], example.second.1, "{answer}");
    assert_eq!(chained["key"], example.key, "{answer}");

    let (second, second_event) = example.second;
    let answer = app
        .run(
            example,
            run_request(second, second_event, chained["payload"].clone()),
        )
        .await;
    assert_succeeded(&answer);
    assert!(log_messages(&answer).next().is_some(), "{second}: {answer}");

    // A payload the job cannot use, and a job the endpoint does not have, fail at once.
    for (job, payload) in [(first, json!({})), ("no-such-job", example.payload())] {
        let answer = app
            .run(example, run_request(job, first_event, payload))
            .await;
        only_fields(&answer, &["error", "retry", "logs"]);
        assert!(
            answer["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{job}: {answer}"
        );
        assert_eq!(answer["retry"], json!(false), "{job}: {answer}");
    }
}

async fn refuses_bad_signatures(example: &Example) {
    let Some(app) = App::start(example).await else {
        return;
    };
    let index = json!({"action": "index"});
    let good = Signed::new(&index, SECRET, unix_now());
    let wrong = Signed::new(&index, OTHER_SECRET, unix_now());
    let refused = [
        ("signed with another secret", wrong.clone()),
        (
            "signed 10 minutes ago",
            Signed::new(&index, SECRET, unix_now() - 600),
        ),
        (
            "signed 10 minutes ahead",
            Signed::new(&index, SECRET, unix_now() + 600),
        ),
        (
            "a changed body",
            Signed {
                body: br#"{"action": "index"}"#.to_vec(),
                ..good.clone()
            },
        ),
        (
            "another webhook-id",
            Signed {
                id: "msg_another".into(),
                ..good.clone()
            },
        ),
        (
            "another webhook-timestamp",
            Signed {
                timestamp: good.timestamp - 1,
                ..good.clone()
            },
        ),
        (
            "the right signature as v2",
            Signed {
                signature: good.signature.replacen("v1,", "v2,", 1),
                ..good.clone()
            },
        ),
        (
            "an empty webhook-signature",
            Signed {
                signature: String::new(),
                ..good.clone()
            },
        ),
    ];
    for (what, request) in refused {
        let (status, text) = request.send(&app.url).await;
        assert_eq!(status, 401, "{what}: answered {status} {text}");
    }
    let unsigned = reqwest::Client::new()
        .post(&app.url)
        .json(&index)
        .send()
        .await
        .expect("the example answers");
    assert_eq!(unsigned.status(), 401, "no webhook-* headers");

    // Rotation: any v1 entry may match.
    let rotated = Signed {
        signature: format!("{} {}", wrong.signature, good.signature),
        ..good.clone()
    };
    let (status, text) = rotated.send(&app.url).await;
    assert_eq!(status, 200, "a matching second entry: {text}");
}

/// A `run` request as Flare sends it.
fn run_request(job: &str, event: &str, payload: Value) -> Value {
    json!({
        "action": "run",
        "run": {"id": "run_examples_1", "attempt": 1, "maxAttempts": 3},
        "job": {"id": job, "version": "1.0.0"},
        "event": {"id": "evt_examples_1", "name": event, "payload": payload},
    })
}

/// Asserts that `job` is an index entry Flare accepts (docs/endpoints.md, "Action index").
fn assert_valid_job(job: &Value) {
    only_fields(
        job,
        &[
            "id",
            "name",
            "version",
            "trigger",
            "retry",
            "timeoutMs",
            "concurrency",
        ],
    );
    let id = job["id"].as_str().expect("id is a string");
    assert!(
        (1..=100).contains(&id.len())
            && id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_'),
        "job id {id:?}"
    );
    assert!(
        job["name"].as_str().is_some_and(|n| !n.is_empty()),
        "{id}: name"
    );
    let version = job["version"].as_str().expect("version is a string");
    semver::Version::parse(version).unwrap_or_else(|e| panic!("{id}: version {version}: {e}"));
    only_fields(&job["trigger"], &["event", "filter"]);
    let event = job["trigger"]["event"]
        .as_str()
        .expect("trigger.event is a string");
    flare::model::validate_event_name(event).unwrap_or_else(|e| panic!("{id}: {e}"));
    if let Some(filter) = job["trigger"].get("filter") {
        flare::Filter::parse(filter).unwrap_or_else(|e| panic!("{id}: {e}"));
    }
    if let Some(retry) = job.get("retry") {
        only_fields(
            retry,
            &["maxAttempts", "minDelayMs", "maxDelayMs", "factor"],
        );
        for (field, least) in [("maxAttempts", 1), ("minDelayMs", 0), ("maxDelayMs", 0)] {
            if let Some(value) = retry.get(field) {
                assert!(
                    value.as_u64().is_some_and(|n| n >= least),
                    "{id}: retry.{field} {value}"
                );
            }
        }
        if let Some(factor) = retry.get("factor") {
            assert!(
                factor.as_f64().is_some_and(|f| f >= 1.0),
                "{id}: factor {factor}"
            );
        }
    }
    for field in ["timeoutMs", "concurrency"] {
        if let Some(value) = job.get(field) {
            assert!(
                value.as_u64().is_some_and(|n| n > 0),
                "{id}: {field} {value}"
            );
        }
    }
}

/// Asserts a successful `run` answer: an output, and well-formed log lines.
fn assert_succeeded(answer: &Value) {
    only_fields(answer, &["output", "logs", "events"]);
    assert!(
        answer.get("output").is_some_and(|o| !o.is_null()),
        "an output: {answer}"
    );
    for line in answer["logs"].as_array().expect("logs is an array") {
        only_fields(line, &["level", "message", "fields"]);
        assert!(
            ["debug", "info", "warn", "error"].contains(&line["level"].as_str().unwrap_or("")),
            "{line}"
        );
        assert!(line["message"].is_string(), "{line}");
        assert!(line.get("fields").is_none_or(Value::is_object), "{line}");
    }
}

/// The messages of a `run` answer's (or a stored run's) log lines.
fn log_messages(value: &Value) -> impl Iterator<Item = &str> {
    value["logs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|line| line["message"].as_str())
}

/// Asserts that `value` is an object whose fields are all in `allowed`.
fn only_fields(value: &Value, allowed: &[&str]) {
    let object = value
        .as_object()
        .unwrap_or_else(|| panic!("expected an object: {value}"));
    for key in object.keys() {
        assert!(
            allowed.contains(&key.as_str()),
            "unknown field {key:?} in {value}"
        );
    }
}

// ---- Under a real `flare serve` ---------------------------------------------------------------

async fn runs_under_flare_serve(example: &Example) {
    let Some(app) = App::start(example).await else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let mut command = process::flare(&["serve", "--listen", &format!("127.0.0.1:{port}")]);
    command
        .arg("--database-url")
        .arg(format!(
            "sqlite://{}",
            dir.path().join("flare.db").display()
        ))
        .args(["--endpoint", &app.url])
        .env("FLARE_ENDPOINT_SECRET", SECRET)
        .env("FLARE_DEMO", "false")
        .env("RUST_LOG", "info")
        .current_dir(dir.path());
    let mut flare = Proc::spawn("flare serve", command);
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let get = |path: String| {
        let request = http.get(format!("{base}{path}"));
        async move {
            let answer = request.send().await.ok()?;
            answer.status().is_success().then_some(())?;
            answer.json::<Value>().await.ok()
        }
    };

    let mut wait = Wait::new("flare serve answers /healthz", 20);
    while get("/healthz".into()).await.is_none() {
        wait.tick("no answer", &mut flare, &app).await;
    }
    let (first, first_event) = example.first;
    let (second, second_event) = example.second;
    let mut wait = Wait::new("GET /api/jobs lists the endpoint's jobs", 20);
    loop {
        let jobs = get("/api/jobs".into()).await.unwrap_or_default();
        let ids: Vec<&str> = jobs["jobs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|job| job["id"].as_str())
            .collect();
        if ids.contains(&first) && ids.contains(&second) {
            break;
        }
        wait.tick(&jobs.to_string(), &mut flare, &app).await;
    }

    let sent = http
        .post(format!("{base}/trigger"))
        .json(&json!({"event": first_event, "payload": example.payload()}))
        .send()
        .await
        .expect("POST /trigger");
    assert_eq!(sent.status(), 200, "POST /trigger");
    let sent: Value = sent.json().await.expect("JSON");
    let event_id = sent["result"]["id"]
        .as_str()
        .expect("result.id")
        .to_string();

    // The first job's run succeeds and chains an event, whose run of the second job succeeds.
    let mut wait = Wait::new("both runs succeed", 30);
    let (run, child, child_run) = loop {
        let event = get(format!("/api/events/{event_id}"))
            .await
            .unwrap_or_default();
        let mut seen = format!("event: {event}");
        let run = find(&event["runs"], "jobId", first);
        let child = run.and_then(|run| {
            event["children"]
                .as_array()?
                .iter()
                .find(|child| child["parentRunId"] == run["id"] && child["name"] == second_event)
        });
        let mut child_run = None;
        if let Some(child) = child {
            let child_id = child["id"].as_str().unwrap_or_default();
            let detail = get(format!("/api/events/{child_id}"))
                .await
                .unwrap_or_default();
            seen.push_str(&format!("\nchained event: {detail}"));
            child_run = find(&detail["runs"], "jobId", second).cloned();
        }
        if let (Some(run), Some(child), Some(child_run)) = (run, child, &child_run) {
            if run["status"] == "succeeded" && child_run["status"] == "succeeded" {
                break (run.clone(), child.clone(), child_run.clone());
            }
        }
        for status in [run, child_run.as_ref()].map(|r| r.map(|r| &r["status"])) {
            assert!(
                status.is_none_or(|s| s != "failed" && s != "cancelled"),
                "a run ended as {status:?}; {seen}\n{}",
                outputs(&flare, &app)
            );
        }
        wait.tick(&seen, &mut flare, &app).await;
    };

    let run_id = run["id"].as_str().expect("run id");
    let chained_id = if example.stepped {
        format!("{run_id}-{}-0", example.key)
    } else {
        format!("{run_id}-{}", example.key)
    };
    assert_eq!(
        child["id"],
        json!(chained_id),
        "the chained event's id is <run id>-<key> (a sendEvent step's: <run id>-<step key>-0)"
    );
    assert_eq!(child["source"], json!(format!("job:{run_id}")));
    assert!(run["output"].is_object(), "{run}");
    assert!(child_run["output"].is_object(), "{child_run}");
    let detail = get(format!("/api/runs/{run_id}"))
        .await
        .expect("GET /api/runs/{id}");
    assert!(
        log_messages(&detail).any(|m| m.contains(example.logged)),
        "the run has the endpoint's log line {:?}: {detail}",
        example.logged
    );
}

/// The element of array `list` whose `field` is `value`.
fn find<'a>(list: &'a Value, field: &str, value: &str) -> Option<&'a Value> {
    list.as_array()?.iter().find(|item| item[field] == value)
}

/// A bounded wait for something to show up, which fails with what was seen last.
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

    /// Sleeps a little; panics when a process died or the time is up.
    async fn tick(&mut self, seen: &str, flare: &mut Proc, app: &App) {
        flare.assert_running();
        assert!(
            Instant::now() < self.until,
            "timed out waiting until {}; last seen: {seen}\n{}",
            self.what,
            outputs(flare, app)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Both processes' output, for a failure message.
fn outputs(flare: &Proc, app: &App) -> String {
    format!(
        "--- flare serve ---\n{}\n--- {} ---\n{}",
        flare.output(),
        app.proc.what,
        app.proc.output()
    )
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn unix_now() -> i64 {
    chrono::Utc::now().timestamp()
}
