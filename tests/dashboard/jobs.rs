//! The jobs page: where each job runs (flagging the ones no live node serves), and a scheduled
//! job's schedule and next run.

use std::sync::Arc;

use axum::http::StatusCode;
use flare::model::Source;
use flare::{event_trigger, Client, Io, Job, SendEvent};
use serde_json::{json, Value};

use crate::fixture::{fixture, form, row, Auth, APP_SECRET};
use crate::support::endpoint_app::{job, EndpointApp};
use crate::support::wait_for;

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
    assert!(
        row.contains(&format!(">{next}<span class=\"tz\"> UTC</span></time>")),
        "{row}"
    );
}

/// One job id, one owner: a job defined in code that displaced an endpoint's job says so on its
/// row (issue 25).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_jobs_page_notes_a_job_that_displaced_an_endpoints() {
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
    f.client
        .register_job(
            Job::new("ep-mail", "Mail in Rust", "2.0.0")
                .trigger(event_trigger("mail.requested"))
                .run(|_: Value, _: Io| async { Ok(json!(null)) }),
        )
        .await
        .expect("displaces");
    let page = f.page("/jobs").await;
    let mail = row(&page, "data-job", "ep-mail");
    assert!(
        mail.contains("owner changed") && mail.contains("displaced") && mail.contains(&app.url),
        "{mail}"
    );
    assert!(
        !mail.contains("/endpoints#"),
        "no longer the endpoint's: {mail}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_jobs_page_and_api_show_a_job_concurrency_limits() {
    let f = fixture().await;
    f.client
        .define_job(
            Job::new("sync-crm", "Sync CRM", "1.0.0")
                .trigger(event_trigger("crm.changed"))
                .concurrency_limit(flare::ConcurrencyLimit::key(1, "event.payload.customerId"))
                .concurrency_limit(flare::ConcurrencyLimit::group(10, "crm-api"))
                .throttle(
                    10,
                    std::time::Duration::from_secs(60),
                    Some("event.payload.customerId"),
                    2,
                )
                .run(|_: Value, _: Io| async { Ok(json!(null)) }),
        )
        .expect("define");
    // A bad key is refused when the job is defined, naming the field.
    let bad = f.client.define_job(
        Job::new("bad-key", "Bad", "1.0.0")
            .trigger(event_trigger("crm.changed"))
            .concurrency_limit(flare::ConcurrencyLimit::key(1, "payload.customerId"))
            .run(|_: Value, _: Io| async { Ok(json!(null)) }),
    );
    let err = bad.expect_err("refused").to_string();
    assert!(err.contains("concurrency.key"), "{err}");
    let now = chrono::DateTime::from_timestamp_millis(f.client.clock().now_ms()).expect("now");
    wait_for("the job to be stored", || async {
        let jobs = f.client.store().jobs_list(now).await.expect("jobs");
        jobs.iter().any(|j| j.job.id == "sync-crm").then_some(())
    })
    .await;
    let page = f.page("/jobs").await;
    let limited = row(&page, "data-job", "sync-crm");
    assert!(
        limited.contains("1 at once per <code>event.payload.customerId</code>"),
        "{limited}"
    );
    assert!(
        limited.contains("10 at once in group <code>crm-api</code>"),
        "{limited}"
    );
    assert!(
        limited.contains(
            "throttled to 10 starts per 60 s (burst 2) per <code>event.payload.customerId</code>"
        ),
        "{limited}"
    );
    let api = f
        .request("GET", "/api/jobs", Auth::Bearer, None, None)
        .await;
    let jobs: Value = serde_json::from_str(&api.body).expect("json");
    let job = jobs["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .find(|j| j["id"] == "sync-crm")
        .expect("listed");
    assert_eq!(
        job["concurrencyLimits"],
        json!([{"limit": 1, "key": "event.payload.customerId"}, {"limit": 10, "group": "crm-api"}])
    );
    assert_eq!(job["concurrency"], Value::Null, "no whole-job limit");
    assert_eq!(
        job["throttle"],
        json!({"limit": 10, "periodMs": 60000, "burst": 2, "key": "event.payload.customerId"})
    );
    let stored = f.client.store().jobs_list(now).await.expect("jobs");
    assert!(
        stored.iter().all(|j| j.job.id != "bad-key"),
        "nothing stored"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_jobs_page_and_api_show_a_job_priority() {
    let f = fixture().await;
    f.client
        .register_job(
            Job::new("bill", "Bill", "1.0.0")
                .trigger(event_trigger("plan.changed"))
                .priority("event.payload.rank * 10")
                .run(|_: Value, _: Io| async { Ok(json!(null)) }),
        )
        .await
        .expect("define");
    let page = f.page("/jobs").await;
    let bill = row(&page, "data-job", "bill");
    assert!(
        bill.contains("priority <code>event.payload.rank * 10</code>"),
        "{bill}"
    );
    let api = f
        .request("GET", "/api/jobs", Auth::Bearer, None, None)
        .await;
    let jobs: Value = serde_json::from_str(&api.body).expect("json");
    let listed = jobs["jobs"].as_array().expect("jobs");
    let bill = listed.iter().find(|j| j["id"] == "bill").expect("listed");
    assert_eq!(bill["priority"], json!({"run": "event.payload.rank * 10"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_jobs_page_shows_a_key_at_its_limit_and_its_queued_runs() {
    let f = fixture().await;
    // Each run of `export` holds its key until the test releases it.
    let release = Arc::new(tokio::sync::Notify::new());
    let held = Arc::clone(&release);
    f.client
        .register_job(
            Job::new("export", "Export", "1.0.0")
                .trigger(event_trigger("export.requested"))
                .concurrency_limit(flare::ConcurrencyLimit::key(1, "event.payload.customerId"))
                .run(move |_: Value, _: Io| {
                    let held = Arc::clone(&held);
                    async move {
                        held.notified().await;
                        Ok(json!(null))
                    }
                }),
        )
        .await
        .expect("define");
    for customer in ["cus_1", "cus_1", "cus_1", "cus_2"] {
        f.client
            .send_event("export.requested", &json!({"customerId": customer}))
            .await
            .expect("send");
    }
    wait_for("a run of each customer to start", || async {
        let counts = f.client.store().run_counts().await.expect("counts");
        (counts.get(&flare::RunStatus::Running).copied() == Some(2)).then_some(())
    })
    .await;
    let page = f.page("/jobs").await;
    let export = row(&page, "data-job", "export");
    assert!(export.contains("2 keys at their limit"), "{export}");
    let busiest = export
        .find("<code>cus_1</code>: 1 of 1 running, 2 queued")
        .expect("cus_1 first, with its queued runs");
    let next = export
        .find("<code>cus_2</code>: 1 of 1 running, 0 queued")
        .expect("cus_2 at its limit too");
    assert!(busiest < next, "most queued first: {export}");
    let api = f
        .request("GET", "/api/jobs", Auth::Bearer, None, None)
        .await;
    let jobs: Value = serde_json::from_str(&api.body).expect("json");
    let listed = jobs["jobs"].as_array().expect("jobs");
    let export = listed.iter().find(|j| j["id"] == "export").expect("listed");
    assert_eq!(export["keys"]["atLimit"], 2);
    assert_eq!(
        export["keys"]["top"][0],
        json!({"key": "cus_1", "running": 1, "limit": 1, "queued": 2})
    );
    release.notify_waiters();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_over_a_rate_limit_says_which_job_it_skipped() {
    let f = fixture().await;
    f.client
        .define_job(
            Job::new("digest", "Digest", "1.0.0")
                .trigger(event_trigger("digest.requested"))
                .rate_limit(
                    1,
                    std::time::Duration::from_secs(3600),
                    Some("event.payload.user"),
                )
                .run(|_: Value, _: Io| async { Ok(json!(null)) }),
        )
        .expect("define");
    let bad = f.client.define_job(
        Job::new("too-fast", "Bad", "1.0.0")
            .trigger(event_trigger("digest.requested"))
            .rate_limit(1, std::time::Duration::from_millis(10), None)
            .run(|_: Value, _: Io| async { Ok(json!(null)) }),
    );
    let err = bad.expect_err("refused").to_string();
    assert!(err.contains("rateLimit.periodMs"), "{err}");
    let mut ids = Vec::new();
    for _ in 0..2 {
        let sent = f
            .client
            .send_inserted(
                SendEvent::new("digest.requested", &json!({"user": "u1"})),
                Source::Api,
            )
            .await
            .expect("send");
        ids.push(sent.event.id.clone());
    }
    let api = f
        .request(
            "GET",
            &format!("/api/events/{}", ids[1]),
            Auth::Bearer,
            None,
            None,
        )
        .await;
    let detail: Value = serde_json::from_str(&api.body).expect("json");
    assert_eq!(detail["skipped"][0]["jobId"], "digest", "{detail}");
    assert!(detail["skipped"][0]["reason"]
        .as_str()
        .expect("reason")
        .contains("rate limit"));
    let first = f
        .request(
            "GET",
            &format!("/api/events/{}", ids[0]),
            Auth::Bearer,
            None,
            None,
        )
        .await;
    let first: Value = serde_json::from_str(&first.body).expect("json");
    assert_eq!(first["skipped"], json!([]));
    let page = f.page(&format!("/events/{}", ids[1])).await;
    assert!(page.contains("Jobs it started no run of (1)"), "{page}");
    assert!(page.contains("data-skipped=\"digest\""), "{page}");
    let jobs = f.page("/jobs").await;
    let row = row(&jobs, "data-job", "digest");
    assert!(
        row.contains("at most 1 started per 3600 s per <code>event.payload.user</code>"),
        "{row}"
    );
}
