//! The dashboard in a real browser: headless Chromium driven over WebDriver (chromedriver, spawned
//! here on a free port) against `flare::server::run` on port 0 with an API key and a Stripe secret.
//!
//! One browser session walks the operator's questions in order: sign in with the key (a wrong key
//! first), see the events sent over HTTP (a failed run, a chain, a signed webhook), watch a new
//! event appear without a reload, filter through the form (the URL keeps the filters), follow the
//! chain both ways, replay with an edited payload, retry a failed run, read the overview, add two
//! HTTP job endpoints through the form (with the secret it suggests), watch one's failure
//! appear among its recent errors, re-index one, see where each job runs on the jobs page, remove
//! an endpoint after its confirmation page, read the webhooks page, and log out.
//!
//! Without Chromium or chromedriver the test skips with a message, unless `CI` is set: then it
//! fails. `scripts/install-browser.sh` installs both. With `FLARE_SCREENSHOT_DIR=docs/screenshots`
//! it also saves screenshots of the main pages there (how `docs/screenshots/*.png` are made).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client as Browser, ClientBuilder, Locator};
use flare::config::RawServe;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;
use support::endpoint_app::{job, EndpointApp};
use support::process::free_port;
use support::server::{self, settings};
use support::{Backend, TestDb};

const KEY: &str = "browser-test-key-0123456789";
const STRIPE_SECRET: &str = "whsec_browser_test";

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

async fn start_browser() -> Option<(Driver, Browser, tempfile::TempDir)> {
    let chromium = find(
        "CHROME_BIN",
        &["/usr/bin/chromium", "/usr/bin/chromium-browser"],
    );
    let driver = find("CHROMEDRIVER", &["/usr/bin/chromedriver"]);
    let (Some(chromium), Some(driver)) = (chromium, driver) else {
        let why = "headless Chromium / chromedriver not installed (run scripts/install-browser.sh)";
        if std::env::var_os("CI").is_some() {
            panic!("CI is set but {why}");
        }
        eprintln!("SKIPPED dashboard browser test: {why}");
        return None;
    };
    let port = free_port();
    let child = Command::new(&driver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn chromedriver");
    let driver_guard = Driver(child);
    let profile = tempfile::tempdir().expect("profile dir");
    let caps = json!({
        "goog:chromeOptions": {
            "binary": chromium.display().to_string(),
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-quic", "--no-first-run", "--window-size=1280,900",
                format!("--user-data-dir={}", profile.path().display()),
            ]
        }
    });
    let caps = match caps {
        Value::Object(m) => m,
        _ => unreachable!(),
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
            Ok(browser) => return Some((driver_guard, browser, profile)),
            Err(e) if Instant::now() > deadline => panic!("chromedriver did not start: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// The server under test, and a client to it.
struct Server {
    base: String,
    http: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    _db: TestDb,
}

async fn start_server() -> Server {
    let db = TestDb::new(Backend::Sqlite).await;
    let config = RawServe {
        api_key: Some(KEY.into()),
        stripe_secrets: Some(STRIPE_SECRET.into()),
        concurrency: 10,
        retention_days: 7,
        shutdown_grace_secs: 2,
        demo: true, // the seed's jobs: the events sent here start their runs
        ..settings(&db.url)
    }
    .validate()
    .expect("config");
    let server::Server {
        url, stop, task, ..
    } = server::Server::start(config).await;
    Server {
        base: url,
        http: reqwest::Client::new(),
        stop,
        task,
        _db: db,
    }
}

impl Server {
    async fn send(&self, name: &str, payload: Value) -> String {
        let res: Value = self
            .http
            .post(format!("{}/trigger", self.base))
            .bearer_auth(KEY)
            .json(&json!({"event": name, "payload": payload}))
            .send()
            .await
            .expect("send")
            .json()
            .await
            .expect("json");
        res["result"]["id"].as_str().expect("id").to_string()
    }

    async fn api(&self, path: &str) -> Value {
        self.http
            .get(format!("{}{path}", self.base))
            .bearer_auth(KEY)
            .send()
            .await
            .expect("get")
            .json()
            .await
            .expect("json")
    }

    /// Waits until every run of the event is finished; returns the event's detail.
    async fn settled(&self, id: &str) -> Value {
        wait("runs to finish", || async {
            let d = self.api(&format!("/api/events/{id}")).await;
            let runs = d["runs"].as_array()?;
            runs.iter()
                .all(|r| {
                    ["succeeded", "failed", "cancelled"]
                        .contains(&r["status"].as_str().unwrap_or(""))
                })
                .then_some(d)
        })
        .await
    }

    async fn stripe_webhook(&self) -> Value {
        let body = std::fs::read("fixtures/stripe/payment_intent.succeeded.json").expect("fixture");
        let t = chrono::Utc::now().timestamp();
        let mut mac = Hmac::<Sha256>::new_from_slice(STRIPE_SECRET.as_bytes()).expect("mac");
        mac.update(format!("{t}.").as_bytes());
        mac.update(&body);
        let sig = hex::encode(mac.finalize().into_bytes());
        self.http
            .post(format!("{}/webhooks/payments", self.base))
            .header("Stripe-Signature", format!("t={t},v1={sig}"))
            .header("Content-Type", "application/json")
            .body(body)
            .send()
            .await
            .expect("webhook")
            .json()
            .await
            .expect("json")
    }
}

/// Polls `check` for up to 15 s of real time (asynchronous outcomes only, never a delay).
async fn wait<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The text of `css`, waiting for it to be on the page. A form posted back to its own path, or a
/// region the live refresh replaces every 2 s, can make an element missing for a moment, or gone
/// between the moment it is found and the moment its text is read ("stale element reference").
async fn text(b: &Browser, css: &str) -> String {
    wait(&format!("the text of {css}"), || async {
        b.find(Locator::Css(css)).await.ok()?.text().await.ok()
    })
    .await
}

/// Attribute `name` of every element matching `css`, or `None` when the page changed under the
/// read (the live refresh): for [`wait`] loops.
async fn attr_all(b: &Browser, css: &str, name: &str) -> Option<Vec<String>> {
    let mut values = Vec::new();
    for element in b.find_all(Locator::Css(css)).await.ok()? {
        values.push(element.attr(name).await.ok()?.unwrap_or_default());
    }
    Some(values)
}

async fn page_text(b: &Browser) -> String {
    text(b, "body").await
}

async fn path(b: &Browser) -> String {
    let url = b.current_url().await.expect("url");
    match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_string(),
    }
}

/// Clicks `css` and waits until the browser is on a page whose path satisfies `arrived`.
/// A stale element (replaced by the live refresh after it was found) is found again.
async fn click_to(b: &Browser, css: &str, arrived: impl Fn(&str) -> bool) -> String {
    let mut attempts = 0;
    loop {
        let element = b
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no {css}: {e}"));
        match element.click().await {
            Ok(_) => break,
            Err(e) if attempts < 5 && e.to_string().contains("stale element") => attempts += 1,
            Err(e) => panic!("click {css}: {e}"),
        }
    }
    wait(&format!("the page after clicking {css}"), || async {
        let p = path(b).await;
        let ready = b
            .execute("return document.readyState", vec![])
            .await
            .ok()
            .and_then(|v| v.as_str().map(str::to_string));
        (arrived(&p) && ready.as_deref() == Some("complete")).then_some(p)
    })
    .await
}

async fn shot(b: &Browser, name: &str) {
    let Some(dir) = std::env::var_os("FLARE_SCREENSHOT_DIR") else {
        return;
    };
    let png = b.screenshot().await.expect("screenshot");
    std::fs::write(Path::new(&dir).join(format!("{name}.png")), png).expect("write screenshot");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_finds_out_what_happened_in_the_browser() {
    let Some((_driver, b, _profile)) = start_browser().await else {
        return;
    };
    let server = start_server().await;
    let base = server.base.clone();

    // Real events over HTTP: a signup, a signup whose payload the jobs reject (two failed runs),
    // an upload whose job sends file.processed (a chain), and a signed Stripe webhook.
    let ada = server
        .send(
            "user.created",
            json!({"userId": "u_1", "email": "ada@example.com", "name": "Ada"}),
        )
        .await;
    let bad = server.send("user.created", json!({"userId": "u_2"})).await;
    let upload = server
        .send(
            "file.uploaded",
            json!({"fileId": "f_1", "filename": "cat.png"}),
        )
        .await;
    let hook = server.stripe_webhook().await;
    assert_eq!(hook["received"], json!(true), "{hook}");
    let forged = server
        .http
        .post(format!("{}/webhooks/payments", server.base))
        .header("Stripe-Signature", "t=1,v1=00")
        .header("Content-Type", "application/json")
        .body("{}")
        .send()
        .await
        .expect("forged webhook");
    assert_eq!(forged.status().as_u16(), 400);
    for id in [&ada, &bad, &upload] {
        server.settled(id).await;
    }
    let upload_detail = server.settled(&upload).await;
    let child = upload_detail["children"][0]["id"]
        .as_str()
        .expect("child")
        .to_string();
    let upload_run = upload_detail["runs"][0]["id"]
        .as_str()
        .expect("run")
        .to_string();
    server.settled(&child).await;
    let bad_detail = server.settled(&bad).await;
    let failed_run = bad_detail["runs"][0]["id"]
        .as_str()
        .expect("run")
        .to_string();

    // Sign in: a page asked for without a session leads to the login form, which keeps `next`.
    b.goto(&format!("{base}/events")).await.expect("goto");
    assert!(
        path(&b).await.starts_with("/login?next="),
        "{}",
        path(&b).await
    );
    shot(&b, "login").await;
    b.find(Locator::Id("key"))
        .await
        .expect("key")
        .send_keys("wrong-key")
        .await
        .expect("type");
    click_to(&b, "#sign-in", |p| p == "/login").await;
    wait("the login error", || async {
        b.find(Locator::Css("#login-error")).await.ok()
    })
    .await;
    assert!(text(&b, "#login-error").await.contains("not the API key"));
    b.find(Locator::Id("key"))
        .await
        .expect("key")
        .send_keys(KEY)
        .await
        .expect("type");
    click_to(&b, "#sign-in", |p| p == "/events").await;
    let cookie_from_js = b
        .execute("return document.cookie", vec![])
        .await
        .expect("js");
    assert!(
        !cookie_from_js
            .as_str()
            .unwrap_or("")
            .contains("flare_session"),
        "HttpOnly"
    );

    // Events: newest first, with outcomes and run counts.
    let events = page_text(&b).await;
    for name in [
        "user.created",
        "file.uploaded",
        "file.processed",
        "payment.succeeded",
    ] {
        assert!(events.contains(name), "{name} listed");
    }
    let bad_row = text(&b, &format!("tr[data-event-id='{bad}']")).await;
    assert!(
        bad_row.contains("failed") && bad_row.contains("2 failed"),
        "{bad_row}"
    );
    shot(&b, "events").await;

    // Live: a new event shows up without a reload.
    b.execute("window.__notReloaded = true", vec![])
        .await
        .expect("mark");
    let live = server
        .send("order.placed", json!({"orderId": "o_live"}))
        .await;
    wait("the new event to appear", || async {
        b.find(Locator::Css(&format!("tr[data-event-id='{live}']")))
            .await
            .ok()
    })
    .await;
    let same_page = b
        .execute("return window.__notReloaded === true", vec![])
        .await
        .expect("js");
    assert_eq!(same_page, json!(true), "no reload happened");

    // Filters go through the form into the URL, and the URL reproduces the view.
    let form = b.form(Locator::Css("form.filters")).await.expect("form");
    form.set_by_name("status", "failed").await.expect("status");
    form.submit().await.expect("submit");
    let filtered = wait("the filtered page", || async {
        let p = path(&b).await;
        p.contains("status=failed").then_some(p)
    })
    .await;
    assert!(filtered.starts_with("/events?"), "{filtered}");
    let rows = wait("only the failed event", || async {
        let ids = attr_all(&b, "tr[data-event-id]", "data-event-id").await?;
        (ids.len() == 1).then_some(ids)
    })
    .await;
    assert_eq!(rows[0], bad);
    b.goto(&format!("{base}/events?q=cat.png"))
        .await
        .expect("goto");
    let found = wait("the search's results", || {
        attr_all(&b, "tr[data-event-id]", "data-event-id")
    })
    .await;
    assert!(
        found.contains(&upload),
        "the search finds the upload: {found:?}"
    );
    assert!(!found.contains(&ada), "and not the signup: {found:?}");

    // The chain both ways: the upload's run and the event it sent; that event names the run.
    b.goto(&format!("{base}/events/{upload}"))
        .await
        .expect("goto");
    let detail = page_text(&b).await;
    assert!(
        detail.contains("process-upload") && detail.contains("succeeded"),
        "{detail}"
    );
    assert!(
        detail.contains("\"filename\": \"cat.png\""),
        "payload pretty-printed"
    );
    shot(&b, "event-detail").await;
    let child_path = format!("/events/{child}");
    click_to(&b, &format!("table.children a[href='{child_path}']"), |p| {
        p == child_path
    })
    .await;
    let parent = text(&b, "#parent").await;
    assert!(
        parent.contains(&upload_run) && parent.contains("process-upload"),
        "{parent}"
    );

    // The webhook's event names its delivery and verification.
    let stripe_event = hook["eventIds"][0].as_str().expect("event id").to_string();
    b.goto(&format!(
        "{base}/events/{}",
        flare::http::dashboard::url_encode(&stripe_event)
    ))
    .await
    .expect("goto");
    assert!(text(&b, "#delivery")
        .await
        .contains("payment_intent.succeeded"));

    // Replay the rejected signup with a fixed payload: a new event whose runs succeed.
    b.goto(&format!("{base}/events/{bad}")).await.expect("goto");
    let editor = b.find(Locator::Id("replay-payload")).await.expect("editor");
    editor.clear().await.expect("clear");
    editor
        .send_keys(r#"{"userId": "u_2", "email": "bo@example.com", "name": "Bo"}"#)
        .await
        .expect("type");
    let bad_path = format!("/events/{bad}");
    click_to(&b, "#replay", |p| {
        p.starts_with("/events/") && p != bad_path
    })
    .await;
    wait("the replay to show succeeded", || async {
        text(&b, "#event-status")
            .await
            .contains("succeeded")
            .then_some(())
    })
    .await;
    assert!(page_text(&b).await.contains(&format!("replay of {bad}")));

    // Retry the failed run: it runs again (and fails again: the payload is still bad).
    b.goto(&format!("{base}/runs/{failed_run}"))
        .await
        .expect("goto");
    assert!(page_text(&b).await.contains("missing field `email`"));
    shot(&b, "run-detail").await;
    let run_path = format!("/runs/{failed_run}");
    click_to(&b, "#retry", |p| p == run_path).await;
    wait("the second attempt", || async {
        text(&b, "#attempt").await.starts_with("2 of").then_some(())
    })
    .await;
    wait("the retried run to finish", || async {
        text(&b, "#run-status")
            .await
            .contains("failed")
            .then_some(())
    })
    .await;

    // Overview: charts, failure rate per job, recent failures. Jobs and webhooks.
    b.goto(&format!("{base}/")).await.expect("goto");
    assert_eq!(
        b.find_all(Locator::Css("svg.chart"))
            .await
            .expect("charts")
            .len(),
        2
    );
    let rate = text(&b, "tr[data-job='send-welcome-email'] td.rate").await;
    assert!(rate.ends_with('%') && rate != "0.0 %", "{rate}");
    assert!(page_text(&b).await.contains("Recent failures"));
    shot(&b, "overview").await;

    // Endpoints: two applications added through the form with the secret it suggests, the
    // second failing its runs.
    let media = EndpointApp::start(
        vec![
            job("resize-image", "image.uploaded"),
            job("send-invoice", "invoice.created"),
        ],
        None,
    )
    .await;
    let crm = EndpointApp::start(vec![job("sync-crm", "customer.updated")], None).await;
    crm.set_run_failure(
        "sync-crm",
        reqwest::StatusCode::SERVICE_UNAVAILABLE,
        r#"{"error": "CRM is under maintenance"}"#, // only a JSON error's message is quoted
    );
    b.goto(&format!("{base}/endpoints")).await.expect("goto");
    assert!(page_text(&b)
        .await
        .contains("No endpoint is registered yet."));
    for app in [&media, &crm] {
        b.find(Locator::Id("endpoint-url"))
            .await
            .expect("url field")
            .send_keys(&app.url)
            .await
            .expect("type");
        click_to(&b, "#add", |p| p == "/endpoints").await;
        wait("the endpoint to be added", || async {
            b.find(Locator::Css("#added")).await.ok()
        })
        .await;
        assert!(text(&b, "#added")
            .await
            .contains("Flare runs them from now on"));
    }
    let endpoints = server.api("/api/endpoints").await;
    let crm_id = endpoints["endpoints"]
        .as_array()
        .expect("endpoints")
        .iter()
        .find(|e| e["url"] == json!(crm.url))
        .and_then(|e| e["id"].as_str())
        .expect("the CRM endpoint")
        .to_string();
    let media_id = flare::endpoints::endpoint_id(&media.url);
    b.goto(&format!("{base}/endpoints")).await.expect("goto");
    assert!(
        !page_text(&b).await.contains("whsec_"),
        "the stored secret is never shown"
    );
    // The failure appears without a reload (the list is live).
    server
        .send("customer.updated", json!({"customerId": "c_1"}))
        .await;
    wait("the endpoint's failure to show", || async {
        let css = format!("tr[data-endpoint-errors='{crm_id}']");
        let errors = b.find(Locator::Css(&css)).await.ok()?.text().await.ok()?;
        errors.contains("CRM is under maintenance").then_some(())
    })
    .await;
    let health = text(&b, &format!("tr[data-endpoint='{crm_id}'] .health")).await;
    assert_eq!(health, "failing");
    shot(&b, "endpoints").await;
    click_to(
        &b,
        &format!("tr[data-endpoint='{media_id}'] button.reindex"),
        |p| p.ends_with("/index"),
    )
    .await;
    assert!(text(&b, "#reindexed").await.contains("it serves 2 jobs"));

    b.goto(&format!("{base}/jobs")).await.expect("goto");
    let jobs = page_text(&b).await;
    assert!(jobs.contains("process-upload") && jobs.contains("1.0.0"));
    let runs_on = text(&b, "tr[data-job='resize-image'] td.placement").await;
    assert!(runs_on.contains("called by 1 live node"), "{runs_on}");
    let title = wait("a link to the endpoint", || async {
        b.find(Locator::Css("tr[data-job='resize-image'] a.endpoint"))
            .await
            .ok()?
            .attr("title")
            .await
            .ok()
    })
    .await;
    assert_eq!(title, Some(media.url.clone()));
    shot(&b, "jobs").await;

    // Remove asks first, then says what it cancelled.
    b.goto(&format!("{base}/endpoints")).await.expect("goto");
    click_to(&b, &format!("tr[data-endpoint='{crm_id}'] a.remove"), |p| {
        p.ends_with("/remove")
    })
    .await;
    assert!(text(&b, "#remove-warning")
        .await
        .contains("1 queued run will be cancelled"));
    click_to(&b, "#remove", |p| p.ends_with("/remove")).await;
    wait("the removal", || async {
        b.find(Locator::Css("#removed")).await.ok()
    })
    .await;
    assert!(text(&b, "#removed")
        .await
        .contains("1 queued run cancelled"));
    b.goto(&format!("{base}/runs?status=failed"))
        .await
        .expect("goto");
    assert!(b
        .find(Locator::Css(&format!("tr[data-run-id='{failed_run}']")))
        .await
        .is_ok());
    shot(&b, "runs").await;
    b.goto(&format!("{base}/webhooks")).await.expect("goto");
    let hooks = page_text(&b).await;
    assert!(
        hooks.contains("payment_intent.succeeded"),
        "the verified delivery"
    );
    assert!(
        hooks.contains("Rejected deliveries to /webhooks/payments (1)"),
        "the forged one, with its reason: {hooks}"
    );
    shot(&b, "webhooks").await;

    // Pause a job from the jobs page, send it an event from the send form (a bad payload first:
    // the error is shown and the edit kept): its run waits; resume: it runs.
    b.goto(&format!("{base}/jobs")).await.expect("goto");
    click_to(&b, "tr[data-job='record-payment'] button.pause", |p| {
        p == "/jobs"
    })
    .await;
    wait("the job to show paused", || async {
        text(&b, "tr[data-job='record-payment'] td.state")
            .await
            .contains("paused")
            .then_some(())
    })
    .await;
    b.goto(&format!("{base}/events")).await.expect("goto");
    click_to(&b, "#send-link", |p| p == "/send").await;
    b.find(Locator::Id("send-name"))
        .await
        .expect("name")
        .send_keys("payment.processed")
        .await
        .expect("type");
    let editor = b.find(Locator::Id("send-payload")).await.expect("editor");
    editor.clear().await.expect("clear");
    editor
        .send_keys(r#"{"amount": 12, "currency": "EUR", "customerId": "c_1",}"#)
        .await
        .expect("type");
    click_to(&b, "#send-submit", |p| p == "/send").await;
    assert!(text(&b, "#send-error").await.contains("not valid JSON"));
    let kept = b
        .find(Locator::Id("send-payload"))
        .await
        .expect("editor")
        .prop("value")
        .await
        .expect("value")
        .unwrap_or_default();
    assert!(
        kept.contains("\"customerId\": \"c_1\","),
        "the edit is kept: {kept}"
    );
    let editor = b.find(Locator::Id("send-payload")).await.expect("editor");
    editor.clear().await.expect("clear");
    editor
        .send_keys(r#"{"amount": 12, "currency": "EUR", "customerId": "c_1"}"#)
        .await
        .expect("type");
    let sent_path = click_to(&b, "#send-submit", |p| p.starts_with("/events/evt")).await;
    shot(&b, "sent-event").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    b.goto(&format!("{base}{sent_path}")).await.expect("goto");
    let waiting = page_text(&b).await;
    assert!(
        text(&b, "#event-status").await.contains("running") && waiting.contains("queued"),
        "the paused job's run waits: {waiting}"
    );
    b.goto(&format!("{base}/jobs")).await.expect("goto");
    click_to(&b, "tr[data-job='record-payment'] button.pause", |p| {
        p == "/jobs"
    })
    .await;
    assert!(!text(&b, "tr[data-job='record-payment'] td.state")
        .await
        .contains("paused"));
    b.goto(&format!("{base}{sent_path}")).await.expect("goto");
    wait("the resumed job's run to succeed", || async {
        text(&b, "#event-status")
            .await
            .contains("succeeded")
            .then_some(())
    })
    .await;

    // Log out: back to the form, and the pages want a session again.
    click_to(&b, "form.logout button", |p| p == "/login").await;
    b.goto(&format!("{base}/jobs")).await.expect("goto");
    assert!(path(&b).await.starts_with("/login?next="));

    b.close().await.expect("close");
    let mut server = server;
    if let Some(stop) = server.stop.take() {
        let _ = stop.send(());
    }
    let _ = tokio::time::timeout(Duration::from_secs(10), &mut server.task).await;
}
