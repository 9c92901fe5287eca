//! The forms that change things: only from this origin, and doing what they say (replay, retry,
//! cancel, send, pause and resume, bulk retry).

use axum::body::Body;
use axum::http::{Request, StatusCode};
use flare::model::Source;
use flare::{RunStatus, SendEvent};
use serde_json::json;
use tower::ServiceExt;

use crate::fixture::{fixture, form, row, Auth, HOST, ORIGIN};
use crate::support::sample;

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
