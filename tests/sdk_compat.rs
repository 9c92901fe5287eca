//! The compatible ingest routes driven by the REAL client SDKs from npm: `@trigger.dev/sdk` 2.x
//! (`sendEvent`, `sendEvents`, `cancelEvent`, `getEvent`) and `inngest` 3.x (`send`), against a
//! real server on 127.0.0.1:0 (`flare::server::run`).
//!
//! Needs `node` and `npm ci --prefix tests/sdk`. Without them the tests skip with a message, or
//! fail when `CI` is set.

mod support;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};
use support::process::wait_healthy;
use support::server::Server;

/// The Trigger.dev SDK only sends keys shaped `tr_<env>_<alphanumerics>`.
const KEY: &str = "tr_dev_flareSdkCompat0123456789";

fn sdk_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sdk")
}

/// `Some(reason)` when the SDKs cannot run here, said as `SKIPPED …` in the test output; panics
/// instead under `CI`.
fn missing_tools() -> Option<String> {
    let reason = if std::process::Command::new("node")
        .arg("--version")
        .output()
        .map(|o| !o.status.success())
        .unwrap_or(true)
    {
        Some("`node` is not installed".to_string())
    } else if !sdk_dir().join("node_modules").is_dir() {
        Some("tests/sdk/node_modules is missing: run `npm ci --prefix tests/sdk`".to_string())
    } else {
        None
    }?;
    support::skip::skip(&reason);
    Some(reason)
}

/// A server with the seed's jobs behind the key, answering.
async fn serve() -> Server {
    let server = Server::on_sqlite(|settings| {
        settings.api_key = Some(KEY.into());
        settings.demo = true; // the seed's jobs: the events sent here start their runs
    })
    .await;
    wait_healthy(server.addr.port()).await;
    server
}

/// Runs `node <script>` in tests/sdk against `server` and parses the JSON it prints.
async fn node(script: &str, server: &Server) -> Value {
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new("node")
            .arg(script)
            .current_dir(sdk_dir())
            .env("FLARE_URL", &server.url)
            .env("FLARE_KEY", KEY)
            .env("INNGEST_DEV", "0")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("node finished in time")
    .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "node {script} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{script} printed {stdout:?}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trigger_dev_v2_sdk_sends_cancels_and_reads_events() {
    if missing_tools().is_some() {
        return;
    }
    let server = serve().await;
    let out = node("trigger.mjs", &server).await;
    let reader = server.reader().await;

    let sent_id = out["sent"]["id"].as_str().expect("id");
    assert_eq!(out["sent"]["name"], json!("user.created"));
    assert_eq!(out["sent"]["context"], json!({"via": "trigger.dev sdk"}));
    assert!(out["sent"]["deliveredAt"].is_string(), "{out}");
    let sent = reader.event(sent_id).await.expect("read").expect("stored");
    assert_eq!(sent.source, "trigger.dev");
    assert_eq!(sent.payload["email"], json!("trigger@example.com"));
    assert_eq!(sent.run_ids.len(), 2, "welcome email and signup tracking");

    assert_eq!(out["scheduled"]["id"], json!("td-scheduled-1"));
    let scheduled = reader
        .event("td-scheduled-1")
        .await
        .expect("read")
        .expect("stored");
    assert!(scheduled.deliver_at.is_some() && scheduled.delivered_at.is_none());
    assert!(scheduled.cancelled_at.is_some(), "cancelEvent cancelled it");
    assert!(out["cancelled"]["cancelledAt"].is_string());
    assert!(out["at"]["deliverAt"].is_string());

    assert_eq!(out["bulk"].as_array().expect("bulk").len(), 2);
    for id in out["bulk"].as_array().expect("bulk") {
        let ev = reader
            .event(id.as_str().expect("id"))
            .await
            .expect("read")
            .expect("stored");
        assert!(ev.name.starts_with("audit."));
    }
    assert_eq!(out["fetched"]["id"], json!(sent_id));
    assert_eq!(out["fetched"]["runs"].as_array().expect("runs").len(), 2);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inngest_v3_sdk_sends_one_and_many_events() {
    if missing_tools().is_some() {
        return;
    }
    let server = serve().await;
    let out = node("inngest.mjs", &server).await;
    let reader = server.reader().await;

    let one = out["one"].as_array().expect("ids");
    assert_eq!(one.len(), 1);
    let user = reader
        .event(one[0].as_str().expect("id"))
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(user.name, "user.created");
    assert_eq!(user.source, "inngest");
    assert_eq!(user.payload["email"], json!("inngest@example.com"));
    assert_eq!(user.run_ids.len(), 2);

    // An Inngest app's event name (a 400 before `/` was allowed).
    let app = reader
        .event(out["app"][0].as_str().expect("the app event's id"))
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(app.name, "app/user.created");

    let many = out["many"].as_array().expect("ids");
    assert_eq!(many.len(), 2);
    assert_eq!(many[0], json!("inngest-fixed-id"));
    let audit = reader
        .event("inngest-fixed-id")
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(audit.payload, json!({"n": 1}));
    let later = reader
        .event(many[1].as_str().expect("id"))
        .await
        .expect("read")
        .expect("stored");
    assert!(
        later.deliver_at.is_some() && later.delivered_at.is_none(),
        "a future ts is delivered later"
    );
    server.stop().await;
}

/// Not a check of its own: the test below runs it in a child process, as skipped.
#[test]
fn skip_probe() {
    if std::env::var_os("FLARE_SKIP_PROBE").is_some() {
        support::skip::skip("the probe's reason");
    }
}

/// A skipped test is visible as skipped in plain `cargo test` output (issue 25): the harness,
/// run without `--nocapture`, shows the skip line, not only an "ok".
#[test]
fn a_skipped_test_says_so_without_flags() {
    let out = std::process::Command::new(std::env::current_exe().expect("this test binary"))
        .args(["--exact", "skip_probe"])
        .env("FLARE_SKIP_PROBE", "1")
        .env_remove("CI")
        .output()
        .expect("runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stderr.contains("SKIPPED skip_probe: the probe's reason"),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    // Under CI the same skip is a failure.
    let ci = std::process::Command::new(std::env::current_exe().expect("this test binary"))
        .args(["--exact", "skip_probe"])
        .env("FLARE_SKIP_PROBE", "1")
        .env("CI", "true")
        .output()
        .expect("runs");
    assert!(!ci.status.success(), "CI fails a skipped test");
}
