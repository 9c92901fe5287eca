//! The dashboard's layout in headless Chromium at 1400 px (issue 25): the jobs and runs tables fit
//! their container, a cron trigger's cell does not break into fragments, and the events page's
//! "UTC" date filters take the times its table shows, in a browser whose own zone is not UTC. Needs Chromium and
//! chromedriver (`scripts/install-browser.sh`); without them it says SKIPPED, and fails under CI.

mod support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client as Browser, ClientBuilder, Locator};
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
        // A browser away from UTC: the pages must not depend on its zone.
        .env("TZ", "America/Los_Angeles")
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

/// Types `text` into the events page's filter `name` and submits the form.
async fn filter_by(b: &Browser, url: &str, name: &str, text: &str) -> Vec<String> {
    b.goto(&format!("{url}/events")).await.expect("events");
    let input = b
        .find(Locator::Css(&format!("form.filters input[name='{name}']")))
        .await
        .expect("the filter input");
    input.clear().await.expect("clear");
    input.send_keys(text).await.expect("type");
    b.find(Locator::Css("form.filters button[type='submit']"))
        .await
        .expect("the Filter button")
        .click()
        .await
        .expect("submit");
    // The submit navigates: wait for the filtered page before reading it, not the old one.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let at = b.current_url().await.expect("url");
        if at.query_pairs().any(|(k, _)| k == name) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the filter was not submitted: {at}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    b.wait()
        .for_element(Locator::Css("form.filters"))
        .await
        .expect("the filtered page");
    let shown = b
        .find(Locator::Css(&format!("form.filters input[name='{name}']")))
        .await
        .expect("the filter input after submitting")
        .prop("value")
        .await
        .expect("value")
        .unwrap_or_default();
    assert_eq!(
        shown.trim(),
        text.trim_end_matches(" UTC"),
        "the {name} filter shows the time it was given, as the table prints times"
    );
    let mut ids = Vec::new();
    for row in b
        .find_all(Locator::Css("table.events tr[data-event-id]"))
        .await
        .expect("rows")
    {
        ids.push(
            row.attr("data-event-id")
                .await
                .expect("attr")
                .unwrap_or_default(),
        );
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_utc_date_filters_take_the_times_the_table_shows() {
    let Some((_driver, b, _profile)) = browser().await else {
        return;
    };
    let server = Server::on_sqlite(|s| s.demo = false).await;
    let sent: Value = reqwest::Client::new()
        .post(format!("{}/trigger", server.url))
        .json(&json!({"event": "order.placed", "payload": {"orderId": "o-1"}}))
        .send()
        .await
        .expect("sent")
        .json()
        .await
        .expect("json");
    let id = sent["result"]["id"].as_str().expect("event id").to_string();

    // The time the table prints for the event ("2026-11-25 15:40:12 UTC"), copied as a user would.
    b.goto(&format!("{}/events", server.url))
        .await
        .expect("events");
    let printed = b
        .find(Locator::Css(&format!("tr[data-event-id='{id}'] td time")))
        .await
        .expect("the event's time")
        .text()
        .await
        .expect("text");
    assert!(printed.ends_with(" UTC"), "times say their zone: {printed}");
    let at = chrono::NaiveDateTime::parse_from_str(
        printed.trim_end_matches(" UTC"),
        "%Y-%m-%d %H:%M:%S",
    )
    .expect("the printed time");

    // From that very time: the event is in; to a minute before it: the event is out. Read in the
    // browser's zone (eight hours behind), either would be wrong.
    let from = filter_by(&b, &server.url, "from", &printed).await;
    assert_eq!(
        from,
        vec![id.clone()],
        "from the printed time the event is listed"
    );
    let before = (at - chrono::Duration::minutes(1))
        .format("%Y-%m-%d %H:%M:%S")
        .to_string();
    let to = filter_by(&b, &server.url, "to", &before).await;
    assert!(
        to.is_empty(),
        "up to a minute before the event nothing is listed: {to:?}"
    );

    b.close().await.expect("close");
    server.stop().await;
}
