//! The dashboard's layout in headless Chromium at 1400 px (issue 25): the jobs and runs tables fit
//! their container and a cron trigger's cell does not break into fragments. Needs Chromium and
//! chromedriver (`scripts/install-browser.sh`); without them it says SKIPPED, and fails under CI.

mod support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client as Browser, ClientBuilder};
use serde_json::{json, Value};
use support::process::free_port;
use support::server::Server;

fn find(env: &str, candidates: &[&str]) -> Option<PathBuf> {
    if let Ok(p) = std::env::var(env) {
        return Some(PathBuf::from(p));
    }
    candidates.iter().map(PathBuf::from).find(|p| p.exists())
}

/// chromedriver, killed when dropped.
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn browser() -> Option<(Driver, Browser, tempfile::TempDir)> {
    let chromium = find(
        "CHROME_BIN",
        &["/usr/bin/chromium", "/usr/bin/chromium-browser"],
    );
    let driver = find("CHROMEDRIVER", &["/usr/bin/chromedriver"]);
    let (Some(chromium), Some(driver)) = (chromium, driver) else {
        support::skip::skip("headless Chromium / chromedriver not installed");
        return None;
    };
    let port = free_port();
    let child = Command::new(&driver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn chromedriver");
    let guard = Driver(child);
    let profile = tempfile::tempdir().expect("profile dir");
    let Value::Object(caps) = json!({
        "goog:chromeOptions": {
            "binary": chromium.display().to_string(),
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--window-size=1400,900",
                format!("--user-data-dir={}", profile.path().display()),
            ]
        }
    }) else {
        unreachable!()
    };
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        match ClientBuilder::new(connector)
            .capabilities(caps.clone())
            .connect(&url)
            .await
        {
            Ok(b) => return Some((guard, b, profile)),
            Err(e) if Instant::now() > deadline => panic!("chromedriver did not start: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// How far `table` reaches past its container (px; 0 when it fits).
async fn overflow(b: &Browser, table: &str) -> f64 {
    let script = format!(
        "const t = document.querySelector('{table}'); \
         const m = document.querySelector('main'); \
         const r = t.getBoundingClientRect(), c = m.getBoundingClientRect(); \
         const pad = parseFloat(getComputedStyle(m).paddingRight); \
         return Math.max(0, r.right - (c.right - pad), t.scrollWidth - t.clientWidth);"
    );
    b.execute(&script, vec![])
        .await
        .expect("script")
        .as_f64()
        .expect("a number")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_jobs_and_runs_tables_fit_at_1400_px() {
    let Some((_driver, b, _profile)) = browser().await else {
        return;
    };
    let server = Server::on_sqlite(|s| s.demo = true).await;
    // A scheduled job with a long cron trigger, stored by a process that runs nothing.
    let sender = flare::Client::builder(&server.db_url)
        .workers(false)
        .connect()
        .await
        .expect("sender");
    sender
        .register_job(
            flare::Job::new("weekday-digest", "Weekday digest", "1.0.0")
                .trigger(flare::cron_trigger("30 8 * * 1-5").tz("Europe/Paris"))
                .run(|_: Value, _: flare::Io| async { Ok(json!(null)) }),
        )
        .await
        .expect("stored");
    for i in 0..5 {
        reqwest::Client::new()
            .post(format!("{}/trigger", server.url))
            .json(&json!({"event": "user.created", "payload": {"userId": format!("u-{i}"), "email": "a@example.com"}}))
            .send()
            .await
            .expect("sent");
    }
    b.goto(&format!("{}/jobs", server.url)).await.expect("jobs");
    let over = overflow(&b, "table.jobs").await;
    assert!(over <= 1.0, "the jobs table overflows by {over} px");
    let fragments = b
        .execute(
            "return document.querySelector(\"tr[data-job='weekday-digest'] td.trigger .schedule code\").getClientRects().length;",
            vec![],
        )
        .await
        .expect("script");
    assert_eq!(fragments, json!(1), "the cron trigger is on one line");
    b.goto(&format!("{}/runs", server.url)).await.expect("runs");
    let over = overflow(&b, "main table").await;
    assert!(over <= 1.0, "the runs table overflows by {over} px");

    b.close().await.expect("close");
    server.stop().await;
}
