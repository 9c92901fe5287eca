//! The dashboard through the router (no socket, no browser): every page with real events (a job
//! that logs, one that fails, a chain, a scheduled event), escaping, filters in the URL, keyset
//! pages, the login / session cookie / logout rules and the origin check on actions, and the HTTP
//! job endpoints (added, re-indexed and removed through the forms against a small in-test
//! application) with the jobs page saying where each job runs.
//! `tests/dashboard_browser.rs` drives the same pages in headless Chromium.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::Router;
use flare::http::auth::SESSION_TTL_MS;
use flare::http::dashboard::url_encode;
use flare::model::Source;
use flare::{event_trigger, Client, Delay, Io, Job, ManualClock, RunStatus, SendEvent};
use serde_json::{json, Value};
use support::db::client_at;
use support::endpoint_app::{job, EndpointApp};
use support::{http, sample, wait_for, Backend, TestDb};
use tower::ServiceExt;

/// 2024-05-01T12:00:00Z.
const T0: i64 = 1_714_564_800_000;
const KEY: &str = "dashboard-test-key-0123456789";
const HOST: &str = "flare.test";
const ORIGIN: &str = "http://flare.test";
/// The secret the dashboard tests register endpoints with.
const APP_SECRET: &str = "whsec_ZGFzaGJvYXJkLXRlc3QtZW5kcG9pbnQtc2VjcmV0";

struct Fixture {
    _db: TestDb,
    url: String,
    client: Client,
    clock: ManualClock,
    app: Router,
    user: String,
    order: String,
    upload: String,
    child: String,
    later: String,
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl From<http::Answer> for Answer {
    fn from(a: http::Answer) -> Answer {
        Answer {
            status: a.status,
            headers: a.headers,
            body: a.text,
        }
    }
}

impl Answer {
    fn location(&self) -> &str {
        self.headers
            .get("location")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

async fn fixture() -> Fixture {
    let db = TestDb::new(Backend::Sqlite).await;
    let url = db.url.clone();
    let (client, clock) = client_at(&url, T0).await;
    sample::define_jobs(&client);
    let mut ids = Vec::new();
    for send in [
        SendEvent::new("user.created", &json!({"email": "ada@example.com"})),
        SendEvent::new("order.placed", &json!({"orderId": "o-1"})),
        SendEvent::new("file.uploaded", &json!({"file": "a.png"})),
        SendEvent::new("reminder.send", &json!({"userId": "u1"})).delay(Delay::hours(1)),
    ] {
        clock.advance(Duration::from_secs(60));
        let inserted = client.send_inserted(send, Source::Api).await.expect("send");
        ids.push(inserted.event.id);
        sample::settle(&client).await;
    }
    let detail = client
        .store()
        .event_detail(&ids[2])
        .await
        .expect("detail")
        .expect("upload event");
    let child = detail.children[0].id.clone();
    let app = sample::router(&client, url.clone(), Some(KEY));
    Fixture {
        _db: db,
        url,
        user: ids[0].clone(),
        order: ids[1].clone(),
        upload: ids[2].clone(),
        later: ids[3].clone(),
        child,
        client,
        clock,
        app,
    }
}

enum Auth<'a> {
    None,
    Bearer,
    Cookie(&'a str),
}

impl Fixture {
    async fn request(
        &self,
        method: &str,
        uri: &str,
        auth: Auth<'_>,
        origin: Option<&str>,
        form: Option<&str>,
    ) -> Answer {
        let mut req = Request::builder()
            .method(method)
            .uri(uri)
            .header("host", HOST);
        match auth {
            Auth::None => {}
            Auth::Bearer => req = req.header("authorization", format!("Bearer {KEY}")),
            Auth::Cookie(c) => req = req.header("cookie", format!("flare_session={c}")),
        }
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        let body = match form {
            Some(f) => {
                req = req.header("content-type", "application/x-www-form-urlencoded");
                Body::from(f.to_string())
            }
            None => Body::empty(),
        };
        http::call(&self.app, req.body(body).expect("request"))
            .await
            .into()
    }

    /// A page read with the API key; must be 200 HTML.
    async fn page(&self, uri: &str) -> String {
        let a = self.request("GET", uri, Auth::Bearer, None, None).await;
        assert_eq!(a.status, StatusCode::OK, "{uri}: {}", a.body);
        let ct = a.headers.get("content-type").and_then(|v| v.to_str().ok());
        assert_eq!(ct, Some("text/html; charset=utf-8"), "{uri}");
        a.body
    }

    /// Signs in and returns the session cookie's value.
    async fn login(&self) -> String {
        let a = self
            .request(
                "POST",
                "/login",
                Auth::None,
                Some(ORIGIN),
                Some(&format!("key={KEY}&next=%2Fruns")),
            )
            .await;
        assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
        assert_eq!(a.location(), "/runs");
        let cookie = a
            .headers
            .get("set-cookie")
            .and_then(|v| v.to_str().ok())
            .expect("set-cookie")
            .to_string();
        let value = cookie
            .strip_prefix("flare_session=")
            .and_then(|c| c.split(';').next())
            .expect("cookie value");
        value.to_string()
    }

    async fn run_of(&self, event: &str) -> flare::Run {
        let d = self
            .client
            .store()
            .event_detail(event)
            .await
            .expect("detail")
            .expect("event");
        d.runs[0].clone()
    }

    async fn event_count(&self) -> usize {
        let page = self
            .client
            .store()
            .events_list(flare::store::query::EventQuery {
                limit: 500,
                ..Default::default()
            })
            .await
            .expect("list");
        page.items.len()
    }
}

fn rows(html: &str, attr: &str) -> Vec<String> {
    html.split(&format!("{attr}=\""))
        .skip(1)
        .filter_map(|s| s.split('"').next().map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_shows_what_happened_to_the_events() {
    let f = fixture().await;
    let overview = f.page("/").await;
    assert!(overview.contains("<svg class=\"chart\""), "charts drawn");
    assert!(
        overview.contains("data-job=\"explode\""),
        "explode in the job rates"
    );
    assert!(overview.contains("card declined"), "recent failure listed");
    assert!(f.page("/?window=24h").await.contains("Last 24 hours"));

    let events = f.page("/events").await;
    for id in [&f.user, &f.order, &f.upload, &f.child, &f.later] {
        assert!(rows(&events, "data-event-id").contains(id), "{id} listed");
    }
    assert!(
        events.contains("badge st-failed"),
        "the failed order shows as failed"
    );
    assert!(
        events.contains("badge st-scheduled"),
        "the delayed reminder is scheduled"
    );
    assert!(events.contains("1 failed"), "run counts per state");

    // Chaining both ways: the upload lists its run and the event it sent; the child names the run.
    let user = f.page(&format!("/events/{}", f.user)).await;
    assert!(
        user.contains("welcome ada@example.com"),
        "its runs' logs, inline"
    );
    let upload = f.page(&format!("/events/{}", f.upload)).await;
    assert!(upload.contains("data-job=\"upload\""));
    assert!(rows(&upload, "data-event-id").contains(&f.child));
    let child = f.page(&format!("/events/{}", f.child)).await;
    let parent_run = f.run_of(&f.upload).await;
    assert!(
        child.contains(&format!("/runs/{}", parent_run.id)),
        "sent by the upload's run"
    );
    assert!(
        child.contains(&format!("/events/{}", f.upload)),
        "while handling the upload"
    );

    // A failed run: its error, its attempt, the retry button.
    let failed = f.run_of(&f.order).await;
    let run = f.page(&format!("/runs/{}", failed.id)).await;
    assert!(run.contains("card declined"));
    assert!(run.contains("id=\"retry\""));
    assert!(run.contains("<svg class=\"timeline\""));
    // A millisecond attempt still shows on the timeline: its bar has a visible width.
    let timeline = &run[run.find("<svg class=\"timeline\"").expect("timeline")..];
    let timeline = &timeline[..timeline.find("</svg>").expect("end")];
    let widths: Vec<f64> = timeline
        .split("width=\"")
        .skip(1)
        .filter_map(|w| w.split('"').next()?.parse().ok())
        .collect();
    assert!(!widths.is_empty(), "{timeline}");
    assert!(
        widths
            .iter()
            .all(|w| *w >= flare::http::dashboard::charts::MIN_SPAN_WIDTH),
        "{widths:?}"
    );
    // The retry says what the run gets: one attempt more than it used (1 of 1 → 2 of 2).
    assert!(run.contains("queues it again: attempt 2 of 2"), "{run}");
    // A run's logs, output and the payload it ran with.
    let greet = f.run_of(&f.user).await;
    let run = f.page(&format!("/runs/{}", greet.id)).await;
    assert!(run.contains("welcome ada@example.com"));
    let payload = &run[run.find("id=\"run-payload\"").expect("a payload section")..];
    let payload = &payload[..payload.find("</section>").expect("end")];
    assert!(
        payload.contains("&quot;email&quot;: &quot;ada@example.com&quot;")
            || payload.contains("ada@example.com"),
        "{payload}"
    );
    assert!(
        payload.contains(&format!("/events/{}", f.user)),
        "{payload}"
    );
    let node = f.client.engine().node_id();
    assert!(
        run.contains(&format!("id=\"node\">{node}<")),
        "the run page names the node that ran it"
    );
    assert!(run.contains("&quot;sent&quot;: true") || run.contains("\"sent\": true"));
    assert!(
        !run.contains("id=\"retry\""),
        "a succeeded run cannot be retried"
    );
    // The upload's run lists the event it sent, and its send as a step, on the timeline too.
    let run = f.page(&format!("/runs/{}", parent_run.id)).await;
    assert!(run.contains(&format!("/events/{}", f.child)));
    assert!(
        run.contains("data-step-key=\"event:0\""),
        "the send is a step"
    );
    assert!(run.contains("step event:0 (event): succeeded"));

    let runs = f.page("/runs?jobId=explode&status=failed").await;
    assert_eq!(rows(&runs, "data-run-id"), vec![failed.id.clone()]);
    let jobs = f.page("/jobs").await;
    assert!(jobs.contains("data-job=\"explode\"") && jobs.contains("2.1.0"));
    assert!(jobs.contains("order.placed"), "the trigger is shown");
    assert!(f
        .page("/webhooks")
        .await
        .contains("No delivery received yet"));
    // A scheduled event offers cancel.
    assert!(f
        .page(&format!("/events/{}", f.later))
        .await
        .contains("id=\"cancel\""));
}

/// A run suspended on `io.wait`: its page badges it waiting, lists its steps with the wait's due
/// time, and draws each step on the timeline under its key; when due it finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_run_shows_its_steps_and_its_wait() {
    let f = fixture().await;
    f.client
        .define_job(
            Job::new("napper", "Napper", "1.0.0")
                .trigger(event_trigger("nap.start"))
                .run(|_p: Value, io: Io| async move {
                    io.run_task("prepare", || async { Ok(json!({"ready": true})) })
                        .await?;
                    io.wait("nap", Duration::from_secs(3600)).await;
                    Ok(json!("rested"))
                }),
        )
        .expect("define");
    let ev = f
        .client
        .send_event("nap.start", &json!({}))
        .await
        .expect("send");
    let run_id = ev.run_ids[0].clone();
    wait_for("the run to wait", || async {
        let d = f
            .client
            .store()
            .run_detail(&run_id)
            .await
            .expect("detail")?;
        (d.run.status == RunStatus::Queued && d.steps.len() == 2).then_some(())
    })
    .await;
    let page = f.page(&format!("/runs/{run_id}")).await;
    assert!(
        page.contains("st-waiting\">waiting</span>") && page.contains("on step <code>nap</code>"),
        "badged waiting, on its step"
    );
    assert!(page.contains("data-step-key=\"prepare\"") && page.contains("data-step-key=\"nap\""));
    assert!(
        page.contains("{&quot;ready&quot;:true}"),
        "the task's output"
    );
    assert!(
        page.contains("step nap (wait): waiting until "),
        "on the timeline"
    );
    assert!(
        page.contains(">nap</text>"),
        "a timeline row named by the key"
    );

    f.clock.advance(Duration::from_secs(3600));
    f.client.engine().wake();
    wait_for("the run to finish", || async {
        let d = f
            .client
            .store()
            .run_detail(&run_id)
            .await
            .expect("detail")?;
        (d.run.status == RunStatus::Succeeded).then_some(())
    })
    .await;
    let page = f.page(&format!("/runs/{run_id}")).await;
    assert!(
        !page.contains("on step <code>nap</code>"),
        "no longer waiting"
    );
    assert!(page.contains("step nap (wait): succeeded"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payloads_and_names_are_escaped() {
    let f = fixture().await;
    let evil = json!({"html": "<script>alert(1)</script>", "q": "\"><img src=x>"});
    let e = f
        .client
        .send_inserted(SendEvent::new("user.created", &evil), Source::Api)
        .await
        .expect("send");
    for uri in ["/events".to_string(), format!("/events/{}", e.event.id)] {
        let html = f.page(&uri).await;
        assert!(!html.contains("<script>alert"), "{uri}");
        assert!(!html.contains("<img src=x>"), "{uri}");
        assert!(html.contains("&lt;script&gt;"), "{uri}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_live_in_the_url_and_bad_ones_are_explained() {
    let f = fixture().await;
    let failed = f.page("/events?status=failed").await;
    assert_eq!(rows(&failed, "data-event-id"), vec![f.order.clone()]);
    let by_name = f.page("/events?name=file.processed&source=job").await;
    assert_eq!(rows(&by_name, "data-event-id"), vec![f.child.clone()]);
    let search = f.page("/events?q=ADA%40example").await;
    assert_eq!(rows(&search, "data-event-id"), vec![f.user.clone()]);
    // The form shows the filters back, so the URL and the page agree.
    assert!(search.contains("value=\"ADA@example\""));
    let later = chrono::DateTime::from_timestamp_millis(T0 + 150_000).expect("t");
    let from = f
        .page(&format!(
            "/events?from={}",
            later.format("%Y-%m-%dT%H:%M:%S")
        ))
        .await;
    assert_eq!(
        rows(&from, "data-event-id").len(),
        3,
        "upload, its child, reminder"
    );

    for (uri, named) in [
        ("/events?status=bogus", "status"),
        ("/events?from=yesterday", "from"),
        ("/events?cursor=nope", "cursor"),
        ("/runs?status=done", "status"),
        ("/?window=7d", "window"),
    ] {
        let a = f.request("GET", uri, Auth::Bearer, None, None).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{uri}");
        assert!(
            a.body.contains(&format!("invalid {named}")),
            "{uri}: {}",
            a.body
        );
        assert!(a.body.starts_with("<!DOCTYPE html>"), "an HTML page");
    }
    // A payload search without a start covers the last hour, says so, and links to wider spans.
    f.clock.advance(Duration::from_secs(2 * 3600));
    let recent = f.page("/events?q=ada%40example").await;
    assert!(
        rows(&recent, "data-event-id").is_empty(),
        "older than an hour"
    );
    assert!(recent.contains("id=\"search-window\"") && recent.contains("within=all"));
    // The two wider spans are two links with words between them, not one run of text.
    let window = &recent[recent.find("id=\"search-window\"").expect("note")..];
    let window = &window[..window.find("</p>").expect("end")];
    assert!(
        window.contains("the last 24 hours</a> or <a"),
        "the links are apart: {window}"
    );
    assert!(
        window.contains("all time</a> instead, or set From."),
        "{window}"
    );
    let all = f.page("/events?q=ada%40example&within=all").await;
    assert_eq!(rows(&all, "data-event-id"), vec![f.user.clone()]);
    let day = f.page("/events?q=ada%40example&within=24h").await;
    assert_eq!(rows(&day, "data-event-id"), vec![f.user.clone()]);
    let a = f
        .request("GET", "/events?q=x&within=week", Auth::Bearer, None, None)
        .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);

    // Each ingest route has its source, offered by the filter and matched by it.
    let inngest = f
        .client
        .send_inserted(
            SendEvent::new("app/user.created", &json!({"via": "inngest"})),
            Source::Inngest,
        )
        .await
        .expect("send");
    let listed = f.page("/events").await;
    for source in ["trigger.dev", "inngest", "webhook:payments", "webhook:auth"] {
        assert!(
            listed.contains(&format!("option value=\"{source}\"")),
            "{source} offered"
        );
    }
    let by_source = f.page("/events?source=inngest").await;
    assert_eq!(
        rows(&by_source, "data-event-id"),
        vec![inngest.event.id.clone()]
    );
    assert!(by_source.contains("app/user.created"));
    let a = f
        .request("GET", "/events/nope", Auth::Bearer, None, None)
        .await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    assert!(a.body.contains("event &quot;nope&quot; not found"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_page_by_cursor_without_gaps_or_repeats() {
    let f = fixture().await;
    for i in 0..60 {
        f.client
            .send_inserted(SendEvent::new("page.test", &json!({"i": i})), Source::Api)
            .await
            .expect("send");
    }
    let first = f.page("/events?name=page.test").await;
    let mut seen = rows(&first, "data-event-id");
    assert_eq!(seen.len(), 50);
    let older = first
        .split("class=\"older\" href=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .expect("an Older link")
        .replace("&amp;", "&");
    assert!(older.contains("name=page.test") && older.contains("cursor="));
    let second = f.page(&older).await;
    seen.extend(rows(&second, "data-event-id"));
    assert!(!second.contains("class=\"older\""), "last page");
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 60);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browsers_without_a_credential_are_sent_to_login_and_the_api_stays_json() {
    let f = fixture().await;
    let a = f
        .request("GET", "/events?name=a.b", Auth::None, None, None)
        .await;
    assert_eq!(a.status, StatusCode::SEE_OTHER);
    assert_eq!(a.location(), "/login?next=%2Fevents%3Fname%3Da.b");
    let a = f
        .request("GET", "/api/events", Auth::None, None, None)
        .await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED);
    assert!(a.body.starts_with("{\"error\""));
    for open in ["/login", "/assets/dashboard.css", "/assets/dashboard.js"] {
        let a = f.request("GET", open, Auth::None, None, None).await;
        assert_eq!(a.status, StatusCode::OK, "{open}");
    }
    let a = f
        .request("GET", "/events", Auth::Cookie("forged.00"), None, None)
        .await;
    assert_eq!(
        a.status,
        StatusCode::SEE_OTHER,
        "a forged cookie is no credential"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_trades_the_key_for_a_session_that_logout_and_time_end() {
    let f = fixture().await;
    let wrong = f
        .request(
            "POST",
            "/login",
            Auth::None,
            Some(ORIGIN),
            Some("key=nope&next=%2F"),
        )
        .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert!(wrong.headers.get("set-cookie").is_none());
    assert!(wrong.body.contains("That is not the API key."));

    let a = f
        .request(
            "POST",
            "/login",
            Auth::None,
            Some(ORIGIN),
            Some(&format!("key={KEY}&next=%2Fruns")),
        )
        .await;
    let set = a
        .headers
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .expect("cookie");
    assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict") && set.contains("Path=/"));
    assert!(!set.contains(KEY), "the cookie never holds the key");
    let cookie = f.login().await;
    let page = f
        .request("GET", "/events", Auth::Cookie(&cookie), None, None)
        .await;
    assert_eq!(page.status, StatusCode::OK);
    let api = f
        .request("GET", "/api/events", Auth::Cookie(&cookie), None, None)
        .await;
    assert_eq!(
        api.status,
        StatusCode::UNAUTHORIZED,
        "the JSON API wants the key"
    );
    // An open redirect is refused.
    let a = f
        .request(
            "POST",
            "/login",
            Auth::None,
            Some(ORIGIN),
            Some(&format!("key={KEY}&next=%2F%2Fevil.example")),
        )
        .await;
    assert_eq!(a.location(), "/");

    let out = f
        .request("POST", "/logout", Auth::Cookie(&cookie), Some(ORIGIN), None)
        .await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    assert_eq!(out.location(), "/login");
    let cleared = out
        .headers
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    assert!(cleared.contains("Max-Age=0"));
    let after = f
        .request("GET", "/events", Auth::Cookie(&cookie), None, None)
        .await;
    assert_eq!(after.status, StatusCode::SEE_OTHER, "logged out");

    let cookie = f.login().await;
    f.clock
        .advance(Duration::from_millis(SESSION_TTL_MS as u64 - 1_000));
    let ok = f
        .request("GET", "/jobs", Auth::Cookie(&cookie), None, None)
        .await;
    assert_eq!(ok.status, StatusCode::OK);
    f.clock.advance(Duration::from_secs(2));
    let expired = f
        .request("GET", "/jobs", Auth::Cookie(&cookie), None, None)
        .await;
    assert_eq!(expired.status, StatusCode::SEE_OTHER, "expired");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_login_next_only_goes_to_a_path_on_this_site() {
    let f = fixture().await;
    // `next` as the form sends it (URL-encoded) → where the sign-in redirects.
    for (next, expected) in [
        ("%2Fevents%3Fname%3Da", "/events?name=a"),
        ("%2F%09%2Fevil.com", "/"),
        ("%2F%2Fevil.com", "/"),
        ("//evil.com", "/"),
        ("%2F%5Cevil.com", "/"),
        ("%252F%252Fevil.com", "/"),
        ("%2F%0A%2Fevil.com", "/"),
        ("%2Fevents%0D%0ASet-Cookie%3A+x%3D1", "/"),
        ("https%3A%2F%2Fevil.com", "/"),
        ("%2F+%2Fevil.com", "/"),
        ("%2F%FF", "/"),
        ("%2F%00", "/"),
    ] {
        let a = f
            .request(
                "POST",
                "/login",
                Auth::None,
                Some(ORIGIN),
                Some(&format!("key={KEY}&next={next}")),
            )
            .await;
        assert_eq!(a.status, StatusCode::SEE_OTHER, "{next}: {}", a.body);
        assert_eq!(a.location(), expected, "{next}");
        let form = f
            .request(
                "GET",
                &format!("/login?next={next}"),
                Auth::None,
                None,
                None,
            )
            .await;
        assert_eq!(form.status, StatusCode::OK, "{next}");
        let hidden = format!(r#"name="next" value="{expected}""#);
        assert!(form.body.contains(&hidden), "{next}: {}", form.body);
    }
}

/// `POST /login` with `key` from the peer `from` (as the server's `ConnectInfo` gives it).
async fn login_from(f: &Fixture, from: Option<&str>, key: &str) -> Answer {
    let mut req = Request::builder()
        .method("POST")
        .uri("/login")
        .header("host", HOST)
        .header("origin", ORIGIN)
        .header("content-type", "application/x-www-form-urlencoded");
    if let Some(addr) = from {
        let addr: std::net::SocketAddr = addr.parse().expect("address");
        req = req.extension(axum::extract::ConnectInfo(addr));
    }
    let req = req
        .body(Body::from(format!("key={key}&next=%2Fruns")))
        .expect("request");
    http::call(&f.app, req).await.into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_keys_lock_a_client_out_for_a_minute() {
    let f = fixture().await;
    let a = Some("203.0.113.1:5000");
    for n in 1..=5 {
        let wrong = login_from(&f, a, "nope").await;
        assert_eq!(wrong.status, StatusCode::UNAUTHORIZED, "wrong key {n}");
    }
    // Locked: wrong keys get a 429 ...
    let locked = login_from(&f, a, "nope").await;
    assert_eq!(locked.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        locked
            .headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("60")
    );
    assert!(locked.headers.get("set-cookie").is_none());
    assert!(
        locked.body.contains("Too many wrong keys"),
        "{}",
        locked.body
    );
    // ... and the right key still signs in: whoever shares the address (a reverse proxy) with
    // a guesser is not locked out with it.
    let right = login_from(&f, a, KEY).await;
    assert_eq!(right.status, StatusCode::SEE_OTHER, "{}", right.body);
    assert!(right.headers.get("set-cookie").is_some());
    // Another port of the same host is the same client; another host is not.
    let same = login_from(&f, Some("203.0.113.1:5001"), "nope").await;
    assert_eq!(same.status, StatusCode::TOO_MANY_REQUESTS);
    let other = login_from(&f, Some("203.0.113.2:5000"), "nope").await;
    assert_eq!(other.status, StatusCode::UNAUTHORIZED);

    f.clock.advance(Duration::from_secs(30));
    let later = login_from(&f, a, "nope").await;
    assert_eq!(
        later
            .headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("30")
    );
    f.clock.advance(Duration::from_secs(30));
    let after = login_from(&f, a, "nope").await;
    assert_eq!(
        after.status,
        StatusCode::UNAUTHORIZED,
        "the minute has passed"
    );

    // A right key does not clear the count (a guesser could otherwise ride on the requests of
    // a client holding the key): 4 wrong, right, 1 wrong locks.
    let b = Some("198.51.100.1:5000");
    for _ in 0..4 {
        assert_eq!(
            login_from(&f, b, "nope").await.status,
            StatusCode::UNAUTHORIZED
        );
    }
    assert_eq!(login_from(&f, b, KEY).await.status, StatusCode::SEE_OTHER);
    assert_eq!(
        login_from(&f, b, "nope").await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        login_from(&f, b, "nope").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );

    // Without a peer address (the router driven in-process) all attempts share one count.
    for _ in 0..5 {
        login_from(&f, None, "nope").await;
    }
    assert_eq!(
        login_from(&f, None, "nope").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        login_from(&f, None, KEY).await.status,
        StatusCode::SEE_OTHER
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions_need_this_origin_and_do_what_they_say() {
    let f = fixture().await;
    let cookie = f.login().await;
    let before = f.event_count().await;
    let replay = format!("/events/{}/replay", f.user);
    for origin in [Some("http://evil.example"), None] {
        let a = f
            .request(
                "POST",
                &replay,
                Auth::Cookie(&cookie),
                origin,
                Some("payload=%7B%7D"),
            )
            .await;
        assert_eq!(a.status, StatusCode::FORBIDDEN, "{origin:?}");
    }
    let a = f
        .request(
            "POST",
            "/logout",
            Auth::Cookie(&cookie),
            Some("http://evil.example"),
            None,
        )
        .await;
    assert_eq!(a.status, StatusCode::FORBIDDEN, "logout too");
    assert_eq!(f.event_count().await, before, "nothing was sent");

    // Invalid JSON: a 400 that says so, nothing sent, and the event page again with the user's
    // edit kept in the form (it was replaced by an error page, losing the edit).
    let a = f
        .request(
            "POST",
            &replay,
            Auth::Cookie(&cookie),
            Some(ORIGIN),
            Some(&form(&[("payload", "{\"email\": \"bob@example.com\",}")])),
        )
        .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.body.contains("id=\"replay-error\""), "{}", a.body);
    assert!(a.body.contains("not valid JSON"));
    let textarea = &a.body[a.body.find("id=\"replay-payload\"").expect("the form")..];
    let textarea = &textarea[..textarea.find("</textarea>").expect("its end")];
    assert!(
        textarea.contains("{&quot;email&quot;: &quot;bob@example.com&quot;,}"),
        "the edit is kept: {textarea}"
    );
    assert!(
        a.body
            .contains(&format!("data-live-url=\"/events/{}\"", f.user)),
        "the live refresh reads the event page, not the POST-only URL"
    );
    assert_eq!(f.event_count().await, before);

    // Replay with an edited payload.
    let a = f
        .request(
            "POST",
            &replay,
            Auth::Cookie(&cookie),
            Some(ORIGIN),
            Some("payload=%7B%22email%22%3A%22bob%40example.com%22%7D"),
        )
        .await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    let new_id = a
        .location()
        .strip_prefix("/events/")
        .expect("to the new event")
        .to_string();
    let new = f
        .client
        .store()
        .event_get(&new_id)
        .await
        .expect("get")
        .expect("new event");
    assert_eq!(new.source, format!("replay:{}", f.user));
    assert_eq!(new.payload, json!({"email": "bob@example.com"}));

    // Retry the failed run: queued again, and this time it succeeds.
    let failed = f.run_of(&f.order).await;
    let a = f
        .request(
            "POST",
            &format!("/runs/{}/retry", failed.id),
            Auth::Cookie(&cookie),
            Some(ORIGIN),
            None,
        )
        .await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    assert_eq!(a.location(), format!("/runs/{}", failed.id));
    sample::settle(&f.client).await;
    let run = f.run_of(&f.order).await;
    assert_eq!(run.status, flare::RunStatus::Succeeded);
    assert_eq!(run.attempt, 2);
    // Retrying a succeeded run is a conflict, shown as a page.
    let a = f
        .request(
            "POST",
            &format!("/runs/{}/retry", failed.id),
            Auth::Cookie(&cookie),
            Some(ORIGIN),
            None,
        )
        .await;
    assert_eq!(a.status, StatusCode::CONFLICT);
    assert!(a.body.starts_with("<!DOCTYPE html>"));

    // Cancel the scheduled event.
    let a = f
        .request(
            "POST",
            &format!("/events/{}/cancel", f.later),
            Auth::Cookie(&cookie),
            Some(ORIGIN),
            None,
        )
        .await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    let later = f
        .client
        .store()
        .event_get(&f.later)
        .await
        .expect("get")
        .expect("event");
    assert!(later.cancelled_at.is_some());
    // The Referer counts when a browser leaves out the Origin.
    let mut req = Request::builder()
        .method("POST")
        .uri(format!("/events/{}/replay", f.order))
        .header("host", HOST)
        .header("referer", format!("{ORIGIN}/events/{}", f.order))
        .header("cookie", format!("flare_session={cookie}"));
    req = req.header("content-type", "application/x-www-form-urlencoded");
    let res = f
        .app
        .clone()
        .oneshot(req.body(Body::from("")).expect("req"))
        .await
        .expect("res");
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
}

/// The part of `html` from the element with `attr="id"` to the end of its table row.
fn row<'a>(html: &'a str, attr: &str, id: &str) -> &'a str {
    let start = html
        .find(&format!("{attr}=\"{id}\""))
        .unwrap_or_else(|| panic!("no row {attr}={id:?}"));
    let rest = &html[start..];
    &rest[..rest.find("</tr>").unwrap_or(rest.len())]
}

/// A form body of `pairs`, encoded.
fn form(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", url_encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

impl Fixture {
    /// A form POST with the session cookie, from `origin`.
    async fn post(&self, uri: &str, cookie: &str, origin: &str, body: &str) -> Answer {
        self.request("POST", uri, Auth::Cookie(cookie), Some(origin), Some(body))
            .await
    }

    async fn endpoints(&self) -> Vec<flare::store::endpoints::StoredEndpoint> {
        self.client
            .store()
            .endpoints_load()
            .await
            .expect("endpoints")
    }

    /// Sends `name` and waits until its one run failed an attempt and waits for its retry.
    async fn failed_once(&self, name: &str) -> flare::Run {
        let sent = self
            .client
            .send_inserted(SendEvent::new(name, &json!({"n": 1})), Source::Api)
            .await
            .expect("send");
        wait_for("the run's first attempt to fail", || async {
            let run = self.run_of(&sent.event.id).await;
            (run.status == RunStatus::Queued && run.error.is_some()).then_some(run)
        })
        .await
    }

    /// The jobs of endpoint `id`'s stored index.
    async fn endpoint_jobs(&self, id: &str) -> Vec<String> {
        let all = self.endpoints().await;
        let endpoint = all.into_iter().find(|e| e.summary.id == id);
        endpoint.expect("stored").summary.jobs
    }

    async fn run_status(&self, id: &str) -> RunStatus {
        let detail = self.client.store().run_detail(id).await.expect("run");
        detail.expect("stored").run.status
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_are_added_listed_reindexed_and_removed_through_the_forms() {
    let f = fixture().await;
    let cookie = f.login().await;
    let app = EndpointApp::start(
        vec![
            job("ep-mail", "mail.requested"),
            job("ep-report", "report.requested"),
        ],
        None,
    )
    .await;
    let page = f.page("/endpoints").await;
    assert!(page.contains("No endpoint is registered yet."));
    assert!(
        page.contains("class=\"active\" href=\"/endpoints\""),
        "in the nav"
    );

    // The form suggests a fresh secret for an application that has none yet.
    let suggested = page
        .split("id=\"endpoint-secret\"")
        .nth(1)
        .and_then(|rest| rest.split("value=\"").nth(1))
        .and_then(|rest| rest.split('"').next())
        .expect("a suggested secret");
    assert!(
        flare::endpoints::validate_secret(suggested).is_ok(),
        "{suggested}"
    );
    assert_ne!(suggested, flare::endpoints::generate_secret());

    // Refused and failed adds store nothing and never echo a secret.
    let add = form(&[("url", &app.url), ("secret", APP_SECRET)]);
    let a = f
        .post("/endpoints", &cookie, "http://evil.example", &add)
        .await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    assert!(
        app.received().is_empty(),
        "a cross-origin post calls nothing"
    );
    for (url, secret, status, says) in [
        (
            "ftp://example.com/flare",
            "",
            StatusCode::BAD_REQUEST,
            "invalid endpoint URL",
        ),
        (
            &app.url,
            "not-a-whsec-secret",
            StatusCode::BAD_REQUEST,
            "invalid endpoint secret",
        ),
        (
            &app.url,
            "",
            StatusCode::BAD_REQUEST,
            "give the secret your application checks",
        ),
        (
            &format!("{}/missing", app.url),
            APP_SECRET,
            StatusCode::UNPROCESSABLE_ENTITY,
            "answered HTTP 404",
        ),
    ] {
        let a = f
            .post(
                "/endpoints",
                &cookie,
                ORIGIN,
                &form(&[("url", url), ("secret", secret)]),
            )
            .await;
        assert_eq!(a.status, status, "{url}: {}", a.body);
        let error = a
            .body
            .split("id=\"add-error\"")
            .nth(1)
            .expect("the error is shown");
        assert!(error.contains(says), "{url}: {error}");
        assert!(
            a.body.contains(&format!("value=\"{url}\"")),
            "the typed URL is kept"
        );
        assert!(
            secret.is_empty() || !a.body.contains(&format!("value=\"{secret}\"")),
            "the secret is not shown back"
        );
        assert!(f.endpoints().await.is_empty(), "nothing stored for {url}");
    }

    // Added: the outcome says what it serves, the secret is stored and never shown.
    let a = f.post("/endpoints", &cookie, ORIGIN, &add).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    let stored = f.endpoints().await;
    assert_eq!(stored.len(), 1);
    let (id, secret) = (stored[0].summary.id.clone(), stored[0].secret.clone());
    assert_eq!(secret, APP_SECRET);
    let added = a
        .body
        .split("id=\"added\"")
        .nth(1)
        .expect("the outcome is shown");
    assert!(added.contains("Flare runs them from now on"), "{added}");
    assert!(!a.body.contains(&secret));
    assert_eq!(rows(&a.body, "data-endpoint"), vec![id.clone()]);
    let page = f.page("/endpoints").await;
    assert!(!page.contains(&secret), "never shown again");
    let listed = row(&page, "data-endpoint", &id);
    assert!(listed.contains(&app.url));
    for job in ["ep-mail", "ep-report"] {
        assert!(
            listed.contains(&format!("href=\"/runs?jobId={job}\"")),
            "{job}"
        );
    }
    assert!(listed.contains("badge health st-ok"), "{listed}");
    assert!(listed.contains("<time"), "indexed and last ok times");
    assert!(page.contains("id=\"endpoints-live\" data-live"));
    let again = f.post("/endpoints", &cookie, ORIGIN, &add).await;
    assert_eq!(again.status, StatusCode::CONFLICT);
    assert!(again.body.contains("registered already"));

    // A secret typed in is the one Flare signs with (this application checks it).
    let key = flare::endpoints::generate_secret();
    let signed = EndpointApp::start(vec![job("ep-signed", "signed.requested")], Some(&key)).await;
    let wrong = flare::endpoints::generate_secret();
    let a = f
        .post(
            "/endpoints",
            &cookie,
            ORIGIN,
            &form(&[("url", &signed.url), ("secret", &wrong)]),
        )
        .await;
    assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", a.body);
    assert!(a.body.contains("answered HTTP 401") && !a.body.contains(&wrong));
    let a = f
        .post(
            "/endpoints",
            &cookie,
            ORIGIN,
            &form(&[("url", &signed.url), ("secret", &key)]),
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert!(!a.body.contains(&key), "the secret is not shown back");

    // A failed call to the endpoint shows among its recent errors, escaped.
    app.set_run_failure(
        "ep-report",
        StatusCode::SERVICE_UNAVAILABLE,
        "report service <b>down</b>",
    );
    let stuck = f.failed_once("report.requested").await;
    let page = f.page("/endpoints").await;
    let errors = row(&page, "data-endpoint-errors", &id);
    assert!(
        errors.contains("report service &lt;b&gt;down&lt;/b&gt;"),
        "{errors}"
    );
    assert!(!page.contains("<b>down</b>"));
    assert!(row(&page, "data-endpoint", &id).contains("badge health st-failing"));

    // Re-index: the job that left the index goes, with its queued run.
    let reindex = format!("/endpoints/{id}/index");
    app.set_jobs(vec![job("ep-mail", "mail.requested")]);
    let a = f.post(&reindex, &cookie, "http://evil.example", "").await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    assert_eq!(f.endpoint_jobs(&id).await.len(), 2, "not re-indexed");
    let a = f.post(&reindex, &cookie, ORIGIN, "").await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    let outcome = a
        .body
        .split("id=\"reindexed\"")
        .nth(1)
        .expect("the outcome");
    assert!(
        outcome.contains("href=\"/runs?jobId=ep-report\""),
        "{outcome}"
    );
    assert!(outcome.contains("1 queued run cancelled"), "{outcome}");
    assert_eq!(f.run_status(&stuck.id).await, RunStatus::Cancelled);
    assert_eq!(f.endpoint_jobs(&id).await, vec!["ep-mail".to_string()]);

    // A failed re-index says why and keeps the previous index.
    app.set_index_answer(
        StatusCode::INTERNAL_SERVER_ERROR,
        json!({"error": "index broken"}),
    );
    let a = f.post(&reindex, &cookie, ORIGIN, "").await;
    assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", a.body);
    let error = a
        .body
        .split("id=\"reindex-error\"")
        .nth(1)
        .expect("the error");
    assert!(
        error.contains("answered HTTP 500") && error.contains("previous index"),
        "{error}"
    );
    assert_eq!(f.endpoint_jobs(&id).await, vec!["ep-mail".to_string()]);
    let unknown = f
        .post("/endpoints/ep_nope/index", &cookie, ORIGIN, "")
        .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);

    // Remove: a confirmation page that counts the queued runs, then the removal.
    app.set_run_answer("ep-mail", json!({"error": "mailer down"}));
    let queued = f.failed_once("mail.requested").await;
    let remove = format!("/endpoints/{id}/remove");
    let confirm = f.page(&remove).await;
    let warning = confirm
        .split("id=\"remove-warning\"")
        .nth(1)
        .expect("a warning");
    assert!(warning.contains("queued runs are cancelled"), "{warning}");
    assert!(
        warning.contains("1 queued run</b> will be cancelled"),
        "{warning}"
    );
    assert!(confirm.contains(&format!("action=\"{remove}\"")));
    assert_eq!(f.endpoints().await.len(), 2, "asking removes nothing");
    let a = f.post(&remove, &cookie, "http://evil.example", "").await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    assert_eq!(f.endpoints().await.len(), 2);
    let a = f.post(&remove, &cookie, ORIGIN, "").await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    let removed = a.body.split("id=\"removed\"").nth(1).expect("the outcome");
    assert!(
        removed.contains(&app.url) && removed.contains("1 queued run cancelled"),
        "{removed}"
    );
    assert_eq!(f.run_status(&queued.id).await, RunStatus::Cancelled);
    let left: Vec<String> = f
        .endpoints()
        .await
        .into_iter()
        .map(|e| e.summary.id)
        .collect();
    assert!(!left.contains(&id));
    assert!(!rows(&f.page("/endpoints").await, "data-endpoint").contains(&id));
    let a = f.post(&remove, &cookie, ORIGIN, "").await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "removed already");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_jobs_page_says_where_each_job_runs_and_flags_the_unserved() {
    let f = fixture().await;
    let app = EndpointApp::start(vec![job("ep-mail", "mail.requested")], None).await;
    let a = f
        .request(
            "POST",
            "/endpoints",
            Auth::Bearer,
            None,
            Some(&form(&[("url", &app.url), ("secret", APP_SECRET)])),
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    let endpoint = f.endpoints().await[0].summary.clone();

    // A job defined by a process that runs nothing (a send-only client): stored, not served.
    let sender = Client::builder(&f.url)
        .clock(Arc::new(f.clock.clone()))
        .workers(false)
        .connect()
        .await
        .expect("sender");
    sender
        .define_job(
            Job::new("orphan", "Orphan", "1.0.0")
                .trigger(event_trigger("orphan.requested"))
                .run(|_: Value, _: Io| async { Ok(json!(null)) }),
        )
        .expect("orphan");
    let now = chrono::DateTime::from_timestamp_millis(f.client.clock().now_ms()).expect("now");
    wait_for("the orphan job to be stored", || async {
        let jobs = f.client.store().jobs_list(now).await.expect("jobs");
        jobs.iter().any(|j| j.job.id == "orphan").then_some(())
    })
    .await;
    sender
        .send_inserted(SendEvent::new("orphan.requested", &json!({})), Source::Api)
        .await
        .expect("send");
    f.client.engine().beat().await.expect("beat");

    let page = f.page("/jobs").await;
    let node = f.client.engine().node_id();
    let greet = row(&page, "data-job", "greet");
    assert!(greet.contains(node), "a Rust job names its node: {greet}");
    assert!(!greet.contains("not served"));
    let mail = row(&page, "data-job", "ep-mail");
    assert!(
        mail.contains(&format!("href=\"/endpoints#{}\"", endpoint.id)),
        "{mail}"
    );
    assert!(
        mail.contains(&app.url) && mail.contains("called by 1 live node"),
        "{mail}"
    );
    assert!(!mail.contains("not served"));
    let orphan = row(&page, "data-job", "orphan");
    assert!(
        orphan.contains("badge st-not_served")
            && orphan.contains("no live node or endpoint runs this job: its runs stay queued"),
        "{orphan}"
    );
    let banner = page.split("id=\"unserved\"").nth(1).expect("a banner");
    let banner = &banner[..banner.find("</div>").unwrap_or(banner.len())];
    assert!(
        banner.contains("/runs?status=queued&amp;jobId=orphan") && banner.contains("(1)"),
        "{banner}"
    );
    assert!(!banner.contains("greet"), "served jobs are not named");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_jobs_page_shows_a_schedule_and_its_next_run() {
    let f = fixture().await;
    f.client
        .register_job(
            Job::new("morning", "Morning report", "1.0.0")
                .trigger(flare::cron_trigger("0 9 * * *").tz("Europe/Paris"))
                .run(|_: Value, _: Io| async { Ok(json!(null)) }),
        )
        .await
        .expect("scheduled job");
    let next = flare::Schedule::cron("0 9 * * *", Some("Europe/Paris"))
        .expect("valid")
        .next_after(flare::Clock::now_ms(&f.clock))
        .expect("a next tick");
    let next = flare::model::ms_to_time(next).format("%Y-%m-%d %H:%M:%S");
    let jobs = f.page("/jobs").await;
    let row = &jobs[jobs.find("data-job=\"morning\"").expect("the job's row")..];
    let row = &row[..row.find("</tr>").expect("row end")];
    assert!(row.contains("cron 0 9 * * * (Europe/Paris)"), "{row}");
    assert!(row.contains("next <time"), "{row}");
    assert!(row.contains(&format!(">{next}</time>")), "{row}");
}

/// The control actions' forms: send an event (kept edits and the error on a mistake), pause and
/// resume a job, cancel a run, and a bulk retry that shows its count before acting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_forms_send_pause_cancel_and_bulk_retry() {
    let f = fixture().await;
    let cookie = f.login().await;
    let before = f.event_count().await;

    // Send: cross-site refused; a bad payload keeps the edit and says why; a good one is sent.
    let body = form(&[
        ("name", "note.added"),
        ("payload", "{\"a\": 1}"),
        ("delay", ""),
    ]);
    let a = f.post("/send", &cookie, "http://evil.example", &body).await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    let page = f
        .request("GET", "/send", Auth::Cookie(&cookie), None, None)
        .await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("id=\"send-payload\""));
    let bad = form(&[
        ("name", "note.added"),
        ("payload", "{\"a\": 1,}"),
        ("delay", ""),
    ]);
    let a = f.post("/send", &cookie, ORIGIN, &bad).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.body.contains("id=\"send-error\""), "{}", a.body);
    assert!(a.body.contains("not valid JSON"));
    assert!(a.body.contains("{&quot;a&quot;: 1,}"), "the edit is kept");
    assert!(a.body.contains("value=\"note.added\""), "the name is kept");
    let bad_delay = form(&[("name", "note.added"), ("payload", "{}"), ("delay", "soon")]);
    let a = f.post("/send", &cookie, ORIGIN, &bad_delay).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.body.contains("delay"), "{}", a.body);
    let bad_name = form(&[
        ("name", "no spaces allowed"),
        ("payload", "{}"),
        ("delay", ""),
    ]);
    let a = f.post("/send", &cookie, ORIGIN, &bad_name).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.body);
    assert_eq!(f.event_count().await, before, "nothing was sent");
    let good = form(&[
        ("name", "note.added"),
        ("payload", "{\"a\": 1}"),
        ("delay", "5m"),
    ]);
    let a = f.post("/send", &cookie, ORIGIN, &good).await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    let id = a
        .location()
        .strip_prefix("/events/")
        .expect("to the event")
        .to_string();
    let sent = f
        .client
        .store()
        .event_get(&id)
        .await
        .expect("get")
        .expect("sent");
    assert_eq!(sent.name, "note.added");
    assert_eq!(sent.payload, json!({"a": 1}));
    assert_eq!(
        sent.deliver_at.map(|t| t.timestamp_millis()),
        Some(flare::Clock::now_ms(&f.clock) + 300_000)
    );

    // Pause: the jobs page shows it and offers Resume; a run of the paused job waits.
    let a = f.post("/jobs/greet/pause", &cookie, ORIGIN, "").await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    let jobs = f
        .request("GET", "/jobs", Auth::Cookie(&cookie), None, None)
        .await;
    let greet = row(&jobs.body, "data-job", "greet");
    assert!(greet.contains("paused"), "{greet}");
    assert!(greet.contains("/jobs/greet/resume"), "{greet}");
    let held = f
        .client
        .send_inserted(
            SendEvent::new("user.created", &json!({"email": "p@example.com"})),
            Source::Api,
        )
        .await
        .expect("send");
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let run = f.run_of(&held.event.id).await;
    assert_eq!(run.status, RunStatus::Queued);

    // Cancel that queued run from its page.
    let run_page = f
        .request(
            "GET",
            &format!("/runs/{}", run.id),
            Auth::Cookie(&cookie),
            None,
            None,
        )
        .await;
    assert!(run_page.body.contains("id=\"cancel-run\""));
    let a = f
        .post(&format!("/runs/{}/cancel", run.id), &cookie, ORIGIN, "")
        .await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    assert_eq!(f.run_status(&run.id).await, RunStatus::Cancelled);
    let a = f.post("/jobs/greet/resume", &cookie, ORIGIN, "").await;
    assert_eq!(a.status, StatusCode::SEE_OTHER);
    let jobs = f
        .request("GET", "/jobs", Auth::Cookie(&cookie), None, None)
        .await;
    assert!(row(&jobs.body, "data-job", "greet").contains("/jobs/greet/pause"));

    // Bulk retry of the failed runs: the count first, then the action.
    let list = f
        .request(
            "GET",
            "/runs?status=failed",
            Auth::Cookie(&cookie),
            None,
            None,
        )
        .await;
    assert!(list.body.contains("data-bulk=\"retry\""), "{}", list.body);
    let ask = form(&[("action", "retry"), ("status", "failed")]);
    let a = f.post("/runs/bulk", &cookie, ORIGIN, &ask).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert!(a.body.contains("data-count=\"1\""), "{}", a.body);
    assert!(a.body.contains("id=\"bulk-confirm\""));
    assert_eq!(
        f.run_of(&f.order).await.status,
        RunStatus::Failed,
        "not yet"
    );
    let confirm = form(&[("action", "retry"), ("status", "failed"), ("confirm", "1")]);
    let a = f.post("/runs/bulk", &cookie, ORIGIN, &confirm).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert!(a.body.contains("data-acted=\"1\""), "{}", a.body);
    sample::settle(&f.client).await;
    assert_eq!(f.run_of(&f.order).await.status, RunStatus::Succeeded);
    let a = f
        .post("/runs/bulk", &cookie, "http://evil.example", &confirm)
        .await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
}
