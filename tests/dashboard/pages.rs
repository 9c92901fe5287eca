//! What the pages show: every page after the fixture's events, a waiting run's steps, escaping,
//! filters kept in the URL, and keyset pages.

use std::time::Duration;

use axum::http::StatusCode;
use flare::model::Source;
use flare::{event_trigger, Io, Job, RunStatus, SendEvent};
use serde_json::{json, Value};

use crate::fixture::{fixture, rows, Auth, T0};
use crate::support::wait_for;

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
    // The suspended attempt is the one shown, though a wait does not count one.
    assert!(
        attempt_shown(&page).starts_with("1 of ") && attempt_shown(&page).contains("suspended"),
        "attempt 1, suspended: {}",
        attempt_shown(&page)
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
    assert!(
        attempt_shown(&page).starts_with("1 of ") && !attempt_shown(&page).contains("suspended"),
        "{}",
        attempt_shown(&page)
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
    // A time as the tables print it ("… UTC", a space before the clock) filters the same way, and
    // the form shows it back in that format.
    let printed = format!("{} UTC", later.format("%Y-%m-%d %H:%M:%S"));
    let copied = f
        .page(&format!("/events?from={}", printed.replace(' ', "+")))
        .await;
    assert_eq!(rows(&copied, "data-event-id"), rows(&from, "data-event-id"));
    assert!(
        copied.contains(&format!("value=\"{}\"", later.format("%Y-%m-%d %H:%M:%S"))),
        "the From input shows the time as the table prints it"
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

/// The text of the run page's attempt (`#attempt`), tags left out.
fn attempt_shown(page: &str) -> String {
    let start = page.find("id=\"attempt\">").expect("the attempt") + "id=\"attempt\">".len();
    let end = start + page[start..].find("</dd>").expect("its end");
    let mut text = String::new();
    let mut in_tag = false;
    for c in page[start..end].chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    text
}
