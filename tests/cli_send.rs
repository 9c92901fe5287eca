//! `flare send` against a real server: the built binary, spawned as a user would run it.

mod support;

use std::process::Output;
use std::time::Duration;

use flare::Client;
use serde_json::{json, Value};
use support::process;
use support::server::Server;

const KEY: &str = "cli-send-test-key-0123456789";

async fn serve(api_key: Option<&str>) -> Server {
    Server::on_sqlite(|settings| {
        settings.api_key = api_key.map(str::to_string);
        settings.demo = true; // the seed's jobs: the events sent here start their runs
    })
    .await
}

async fn flare_send(args: &[&str], key: Option<&str>) -> Output {
    let mut cmd = tokio::process::Command::from(process::flare(&["send"]));
    cmd.args(args).env_remove("FLARE_URL");
    match key {
        Some(k) => cmd.env("FLARE_API_KEY", k),
        None => cmd.env_remove("FLARE_API_KEY"),
    };
    tokio::time::timeout(Duration::from_secs(60), cmd.kill_on_drop(true).output())
        .await
        .expect("flare send finished in time")
        .expect("flare send runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_with_payload_id_delay_deliver_at_and_context_and_prints_the_result() {
    let server = serve(Some(KEY)).await;
    let out = flare_send(
        &[
            "user.created",
            "--payload",
            r#"{"userId":"u-cli","email":"cli@example.com"}"#,
            "--url",
            &server.url,
        ],
        Some(KEY),
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let printed: Value = serde_json::from_slice(&out.stdout).expect("prints JSON");
    assert_eq!(printed["success"], json!(true));
    let id = printed["result"]["id"].as_str().expect("id").to_string();

    let delayed = flare_send(
        &["reminder.send", "--delay", "2h", "--url", &server.url],
        Some(KEY),
    )
    .await;
    assert!(delayed.status.success(), "{}", stderr(&delayed));
    let printed: Value = serde_json::from_slice(&delayed.stdout).expect("prints JSON");
    let delayed_id = printed["result"]["id"].as_str().expect("id").to_string();

    let at_time = chrono::DateTime::from_timestamp(chrono::Utc::now().timestamp() + 86_400, 0)
        .expect("tomorrow");
    let at = at_time.to_rfc3339();
    let at = at.as_str();
    let keyed = flare_send(
        &[
            "order.placed",
            "--id",
            "order-cli-1",
            "--deliver-at",
            at,
            "--context",
            r#"{"requestId":"req-cli"}"#,
            "--url",
            &server.url,
        ],
        Some(KEY),
    )
    .await;
    assert!(keyed.status.success(), "{}", stderr(&keyed));
    let printed: Value = serde_json::from_slice(&keyed.stdout).expect("prints JSON");
    assert_eq!(printed["result"]["id"], json!("order-cli-1"));
    assert_eq!(printed["duplicate"], json!(false));
    // The same id again with another payload: the stored event, flagged, and a warning.
    let again = flare_send(
        &[
            "order.placed",
            "--id",
            "order-cli-1",
            "--payload",
            "{\"n\": 2}",
            "--url",
            &server.url,
        ],
        Some(KEY),
    )
    .await;
    // A distinct exit status, so a script can tell (documented in `flare send --help`).
    assert_eq!(
        again.status.code(),
        Some(i32::from(flare::app::SEND_CONFLICT_EXIT)),
        "{}",
        stderr(&again)
    );
    let printed: Value = serde_json::from_slice(&again.stdout).expect("prints JSON");
    assert_eq!(printed["duplicate"], json!(true));
    assert_eq!(printed["conflictingFields"], json!(["payload"]));
    assert!(stderr(&again).contains("warning"), "{}", stderr(&again));

    let reader = Client::builder(&server.db_url)
        .workers(false)
        .connect()
        .await
        .expect("reader");
    let sent = reader.event(&id).await.expect("read").expect("stored");
    assert_eq!(sent.payload["email"], json!("cli@example.com"));
    assert_eq!(sent.source, "http");
    assert_eq!(sent.run_ids.len(), 2);
    let later = reader
        .event(&delayed_id)
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(later.payload, Value::Null);
    let delay = later.deliver_at.expect("scheduled") - later.timestamp;
    assert_eq!(delay.num_seconds(), 7200);
    let keyed = reader
        .event("order-cli-1")
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(keyed.deliver_at, Some(at_time));
    assert_eq!(keyed.context, Some(json!({"requestId": "req-cli"})));
    assert_eq!(keyed.payload, Value::Null);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_one_clear_line_and_a_failure_exit() {
    let server = serve(Some(KEY)).await;
    let cases: [(&[&str], Option<&str>, &str); 6] = [
        (&["user.created"], None, "401"),
        (&["Bad Name"], Some(KEY), "invalid event name"),
        (&["a.b", "--delay", "2y"], Some(KEY), "unknown unit"),
        (
            &["a.b", "--payload", "{oops"],
            Some(KEY),
            "--payload is not valid JSON",
        ),
        (
            &["a.b", "--context", "nope"],
            Some(KEY),
            "--context is not valid JSON",
        ),
        (&["a.b", "--deliver-at", "tomorrow"], Some(KEY), "RFC 3339"),
    ];
    for (args, key, needle) in cases {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--url", &server.url]);
        let out = flare_send(&all, key).await;
        assert!(!out.status.success(), "{args:?} should fail");
        let err = stderr(&out);
        let line = err
            .lines()
            .find(|l| l.starts_with("flare: "))
            .unwrap_or_else(|| panic!("no error line in {err:?}"));
        assert!(line.contains(needle), "{args:?}: {line}");
        assert!(!err.contains(KEY), "the key is never printed");
        assert!(out.stdout.is_empty());
    }
    // A delay and a delivery time exclude each other: a usage error before anything is sent.
    let both = flare_send(
        &[
            "a.b",
            "--delay",
            "1h",
            "--deliver-at",
            "2030-01-01T00:00:00Z",
            "--url",
            &server.url,
        ],
        Some(KEY),
    )
    .await;
    assert!(!both.status.success());
    assert!(
        stderr(&both).contains("cannot be used with"),
        "{}",
        stderr(&both)
    );
    server.stop().await;

    let unreachable = flare_send(&["a.b", "--url", "http://127.0.0.1:1"], None).await;
    assert!(!unreachable.status.success());
    assert!(stderr(&unreachable).contains("cannot reach the Flare server"));
    assert!(stderr(&unreachable).contains("is `flare serve` running?"));
}
