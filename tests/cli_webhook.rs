//! `flare webhook send` and `flare webhook fixtures` against a real server: the built binary signs
//! each bundled fixture as its provider would and the server turns it into its events (issue 29).

mod support;

use std::process::Output;
use std::time::Duration;

use serde_json::json;
use support::process;
use support::server::Server;

async fn flare_webhook(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = tokio::process::Command::from(process::flare(&["webhook"]));
    cmd.args(args)
        .env_remove("FLARE_URL")
        .env_remove("FLARE_API_KEY")
        .env_remove("FLARE_WEBHOOK_SECRET")
        .env_remove("STRIPE_WEBHOOK_SECRET");
    for (k, v) in env {
        cmd.env(k, v);
    }
    tokio::time::timeout(Duration::from_secs(60), cmd.kill_on_drop(true).output())
        .await
        .expect("flare webhook finished in time")
        .expect("flare webhook runs")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_preset_is_testable_from_the_command_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("sources.json");
    std::fs::write(
        &file,
        json!([{"id": "shop", "preset": "shopify", "secret": "shpss_cli"}]).to_string(),
    )
    .expect("write");
    let path = file.to_string_lossy().to_string();
    let server = Server::on_sqlite(|s| {
        s.stripe_secrets = Some("whsec_cli_test".into());
        s.webhook_sources = Some(path);
    })
    .await;
    let client = reqwest::Client::new();
    for source in [
        json!({"id": "github", "preset": "github", "secret": "gh_cli"}),
        json!({"id": "db", "preset": "database", "secret": "db_cli"}),
        json!({"id": "paddle", "preset": "paddle", "secret": "pdl_cli"}),
        json!({"id": "slack", "preset": "slack", "secret": "slack_cli"}),
        json!({"id": "resend", "preset": "standard-webhooks", "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}),
    ] {
        let res = client
            .post(format!("{}/api/webhook-sources", server.url))
            .json(&source)
            .send()
            .await
            .expect("create");
        assert_eq!(res.status().as_u16(), 201);
    }

    let out = flare_webhook(
        &[
            "fixtures",
            "--dir",
            &dir.path().join("fx").to_string_lossy(),
        ],
        &[],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out));
    let fx = |p: &str| dir.path().join("fx").join(p).to_string_lossy().to_string();

    let cases: &[(&str, String, &str, &str)] = &[
        (
            "payments",
            fx("stripe/payment_intent.succeeded.json"),
            "",
            "payment.succeeded",
        ),
        (
            "github",
            fx("github/issues.opened.json"),
            "gh_cli",
            "github.issues.opened",
        ),
        (
            "shop",
            fx("shopify/orders.create.json"),
            "shpss_cli",
            "shopify.orders.create",
        ),
        (
            "db",
            fx("database/orders.insert.json"),
            "db_cli",
            "orders.created",
        ),
        (
            "paddle",
            fx("paddle/transaction.completed.json"),
            "pdl_cli",
            "paddle.transaction.completed",
        ),
        (
            "slack",
            fx("slack/app_mention.json"),
            "slack_cli",
            "slack.app_mention",
        ),
        (
            "resend",
            fx("standard-webhooks/email.sent.json"),
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "resend.email.sent",
        ),
    ];
    for (source, file, secret, event) in cases {
        let mut args = vec!["send", source, file.as_str(), "--url", &server.url];
        if !secret.is_empty() {
            args.extend(["--secret", secret]);
        }
        let out = flare_webhook(&args, &[("STRIPE_WEBHOOK_SECRET", "whsec_cli_test")]).await;
        let printed = text(&out);
        assert!(out.status.success(), "{source}: {printed}");
        assert!(printed.starts_with("200 "), "{source}: {printed}");
        assert!(printed.contains(event), "{source}: {printed}");
    }

    // A wrong secret is refused, printed, and fails the command.
    let out = flare_webhook(
        &[
            "send",
            "github",
            &fx("github/issues.opened.json"),
            "--secret",
            "wrong",
            "--url",
            &server.url,
        ],
        &[],
    )
    .await;
    assert!(!out.status.success());
    assert!(text(&out).starts_with("400 "), "{}", text(&out));
    // No secret at all says where to give one.
    let out = flare_webhook(
        &[
            "send",
            "github",
            &fx("github/issues.opened.json"),
            "--url",
            &server.url,
        ],
        &[],
    )
    .await;
    assert!(!out.status.success());
    assert!(text(&out).contains("--secret"), "{}", text(&out));
    server.stop().await;
}
