//! `POST /webhooks/payments` (Stripe) and `POST /webhooks/auth` (Clerk / Svix) through the real
//! routes, with the fixture bodies signed by the crate's own signers.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use flare::http::webhooks::Provider;
use flare::webhooks::{stripe, svix};
use flare::RunStatus;
use serde_json::{json, Value};

use crate::app::{start, TestApp, START_MS};
use crate::support::http::Answer;

const STRIPE_SECRET: &str = "whsec_test_stripe_secret_0123456789";
/// `whsec_` + base64 of 24 bytes.
const CLERK_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const NOW_S: i64 = START_MS / 1000;

fn fixture(path: &str) -> Vec<u8> {
    let full = format!("{}/fixtures/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&full).unwrap_or_else(|e| panic!("{full}: {e}"))
}

async fn configured() -> TestApp {
    let app = start(|raw| {
        raw.stripe_secrets = Some(STRIPE_SECRET.into());
        raw.clerk_secrets = Some(CLERK_SECRET.into());
    })
    .await;
    let catch = |id: &str, event: &str| {
        flare::Job::new(id, id, "1.0.0")
            .trigger(flare::event_trigger(event))
            .run(|_: Value, _io: flare::Io| async move { Ok(json!({"ok": true})) })
    };
    for (id, event) in [
        ("test-payment-failed", "payment.failed"),
        ("test-checkout", "checkout.completed"),
        ("test-invoice", "invoice.paid"),
        ("test-subscription", "subscription.updated"),
        ("test-session", "session.created"),
    ] {
        app.client.define_job(catch(id, event)).expect("define");
    }
    app
}

async fn post_stripe(app: &TestApp, body: &[u8], signature: Option<String>) -> Answer {
    let mut req = Request::post("/webhooks/payments").header("content-type", "application/json");
    if let Some(sig) = signature {
        req = req.header("Stripe-Signature", sig);
    }
    app.call(req.body(Body::from(body.to_vec())).expect("request"))
        .await
}

async fn post_clerk(app: &TestApp, body: &[u8], headers: &[(&str, String)]) -> Answer {
    let mut req = Request::post("/webhooks/auth").header("content-type", "application/json");
    for (name, value) in headers {
        req = req.header(*name, value);
    }
    app.call(req.body(Body::from(body.to_vec())).expect("request"))
        .await
}

fn svix_headers(id: &str, t: i64, body: &[u8], prefix: &str) -> Vec<(String, String)> {
    let sig = svix::sign(CLERK_SECRET, id, t, body).expect("sign");
    vec![
        (format!("{prefix}-id"), id.to_string()),
        (format!("{prefix}-timestamp"), t.to_string()),
        (format!("{prefix}-signature"), sig),
    ]
}

fn as_refs(h: &[(String, String)]) -> Vec<(&str, String)> {
    h.iter().map(|(n, v)| (n.as_str(), v.clone())).collect()
}

async fn assert_runs_succeed(app: &TestApp, event_id: &str, jobs: &[&str]) {
    let detail = app
        .client
        .store()
        .event_detail(event_id)
        .await
        .expect("read")
        .expect("event");
    let mut got: Vec<&str> = detail.runs.iter().map(|r| r.job_id.as_str()).collect();
    got.sort_unstable();
    assert_eq!(got, jobs, "runs of {event_id}");
    for run in &detail.runs {
        assert_eq!(
            app.wait_run(&run.id).await,
            RunStatus::Succeeded,
            "{}",
            run.job_id
        );
    }
}

#[tokio::test]
async fn every_stripe_fixture_becomes_its_events_and_runs() {
    let cases: [(&str, &str, &str, (&str, Value)); 5] = [
        (
            "payment_intent.succeeded",
            "payment.succeeded",
            "record-payment-succeeded",
            ("amount", json!(2000)),
        ),
        (
            "payment_intent.payment_failed",
            "payment.failed",
            "test-payment-failed",
            ("failureCode", json!("card_declined")),
        ),
        (
            "checkout.session.completed",
            "checkout.completed",
            "test-checkout",
            ("customerEmail", json!("stripe@example.com")),
        ),
        (
            "invoice.paid",
            "invoice.paid",
            "test-invoice",
            ("amountPaid", json!(2000)),
        ),
        (
            "customer.subscription.updated",
            "subscription.updated",
            "test-subscription",
            ("status", json!("active")),
        ),
    ];
    for (file, domain, job, (field, value)) in cases {
        // Every fixture has the same (zeroed) Stripe id: a fresh store each, or dedupe kicks in.
        let app = configured().await;
        let body = fixture(&format!("stripe/{file}.json"));
        let sig = stripe::sign(STRIPE_SECRET, NOW_S, &body);
        let res = post_stripe(&app, &body, Some(sig)).await;
        assert_eq!(res.status, StatusCode::OK, "{file}: {}", res.text);
        assert_eq!(res.json["received"], json!(true));
        assert_eq!(res.json["duplicate"], json!(false));
        let evt = "evt_000000000000000000000000";
        assert_eq!(
            res.json["eventIds"],
            json!([format!("payments:{evt}:0"), format!("payments:{evt}:1")]),
            "{file}"
        );
        let first = app
            .client
            .event(&format!("payments:{evt}:0"))
            .await
            .expect("read")
            .expect("domain event");
        assert_eq!(first.name, domain);
        assert_eq!(first.source, "webhook:payments");
        assert_eq!(first.payload["stripeEventId"], json!(evt));
        assert_eq!(first.payload[field], value, "{file}: {field}");
        assert_eq!(
            first.context.as_ref().expect("context")["webhook"]["deliveryId"],
            json!(evt)
        );
        let raw = app
            .client
            .event(&format!("payments:{evt}:1"))
            .await
            .expect("read")
            .expect("raw event");
        assert_eq!(raw.name, format!("stripe.{file}"));
        let envelope: Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(raw.payload["object"], envelope["data"]["object"]);
        assert_runs_succeed(&app, &first.id, &[job]).await;

        let deliveries = app
            .client
            .store()
            .webhook_deliveries_list(Some("payments"), 10)
            .await
            .expect("list");
        assert_eq!(deliveries.len(), 1);
        assert_eq!(deliveries[0].delivery_id, evt);
        assert_eq!(deliveries[0].event_type, file);
        assert_eq!(
            deliveries[0].raw_body.as_bytes(),
            &body[..],
            "raw bytes kept"
        );
    }
}

#[tokio::test]
async fn every_clerk_fixture_becomes_its_events_and_runs() {
    type Case<'a> = (&'a str, &'a str, &'a [&'a str], (&'a str, Value));
    let cases: [Case; 2] = [
        (
            "user.created.docs",
            "user.created",
            &["send-welcome-email", "track-signup"],
            ("email", json!("example@example.org")),
        ),
        (
            "session.created.catalog",
            "session.created",
            &["test-session"],
            ("status", json!("active")),
        ),
    ];
    let app = configured().await;
    for (n, (file, domain, jobs, (field, value))) in cases.into_iter().enumerate() {
        let body = fixture(&format!("clerk/{file}.json"));
        let id = format!("msg_fixture_{n}");
        // The unbranded Standard Webhooks names work as well as the svix-* ones.
        let prefix = if n == 0 { "svix" } else { "webhook" };
        let headers = svix_headers(&id, NOW_S, &body, prefix);
        let res = post_clerk(&app, &body, &as_refs(&headers)).await;
        assert_eq!(res.status, StatusCode::OK, "{file}: {}", res.text);
        assert_eq!(
            res.json["eventIds"],
            json!([format!("auth:{id}:0"), format!("auth:{id}:1")])
        );
        let first = app
            .client
            .event(&format!("auth:{id}:0"))
            .await
            .expect("read")
            .expect("event");
        assert_eq!(first.name, domain);
        assert_eq!(first.source, "webhook:auth");
        assert_eq!(first.payload[field], value);
        let raw = app
            .client
            .event(&format!("auth:{id}:1"))
            .await
            .expect("read")
            .expect("event");
        assert_eq!(raw.name, format!("clerk.{domain}"));
        let envelope: Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(raw.payload, envelope["data"]);
        assert_runs_succeed(&app, &first.id, jobs).await;
    }
    assert_eq!(
        app.client
            .store()
            .webhook_deliveries_list(None, 10)
            .await
            .expect("list")
            .len(),
        2
    );
}

#[tokio::test]
async fn a_duplicate_delivery_answers_the_original_ids_and_starts_nothing() {
    let app = configured().await;
    let body = fixture("stripe/payment_intent.succeeded.json");
    let first = post_stripe(&app, &body, Some(stripe::sign(STRIPE_SECRET, NOW_S, &body))).await;
    assert_eq!(first.status, StatusCode::OK);
    // Stripe retries later with a fresh signature.
    app.clock.advance(std::time::Duration::from_secs(120));
    let retry = post_stripe(
        &app,
        &body,
        Some(stripe::sign(STRIPE_SECRET, NOW_S + 120, &body)),
    )
    .await;
    assert_eq!(retry.status, StatusCode::OK, "{}", retry.text);
    assert_eq!(retry.json["duplicate"], json!(true));
    assert_eq!(retry.json["eventIds"], first.json["eventIds"]);
    let detail = app
        .client
        .store()
        .event_detail("payments:evt_000000000000000000000000:0")
        .await
        .expect("read")
        .expect("event");
    assert_eq!(detail.runs.len(), 1, "no second run");
    assert_eq!(
        app.client
            .store()
            .webhook_deliveries_list(None, 10)
            .await
            .expect("list")
            .len(),
        1
    );

    let clerk = fixture("clerk/user.created.docs.json");
    let headers = svix_headers("msg_dup", NOW_S + 120, &clerk, "svix");
    let a = post_clerk(&app, &clerk, &as_refs(&headers)).await;
    let b = post_clerk(&app, &clerk, &as_refs(&headers)).await;
    assert_eq!(a.json["duplicate"], json!(false));
    assert_eq!(b.json["duplicate"], json!(true));
    assert_eq!(a.json["eventIds"], b.json["eventIds"]);
}

async fn assert_rejected(
    app: &TestApp,
    res: &Answer,
    status: StatusCode,
    needle: &str,
    provider: Provider,
) {
    assert_eq!(res.status, status, "{}", res.text);
    assert!(
        res.error().contains(needle),
        "{:?} should mention {needle:?}",
        res.error()
    );
    let counts = app.client.store().run_counts().await.expect("counts");
    assert!(counts.is_empty(), "nothing started: {counts:?}");
    assert!(app
        .client
        .store()
        .webhook_deliveries_list(None, 10)
        .await
        .expect("list")
        .is_empty());
    let last = &app.state.webhooks.rejections(provider)[0];
    assert_eq!(last.status, status.as_u16());
    assert_eq!(last.reason, res.error());
}

#[tokio::test]
async fn stripe_rejections_store_nothing() {
    let app = configured().await;
    let body = fixture("stripe/payment_intent.succeeded.json");
    let p = Provider::Payments;

    let res = post_stripe(&app, &body, None).await;
    assert_rejected(
        &app,
        &res,
        StatusCode::BAD_REQUEST,
        "missing required header Stripe-Signature",
        p,
    )
    .await;

    let wrong = stripe::sign("whsec_some_other_secret", NOW_S, &body);
    let res = post_stripe(&app, &body, Some(wrong)).await;
    assert_rejected(
        &app,
        &res,
        StatusCode::BAD_REQUEST,
        "no signature matches",
        p,
    )
    .await;

    let mut tampered = body.clone();
    tampered.extend_from_slice(b" ");
    let res = post_stripe(
        &app,
        &tampered,
        Some(stripe::sign(STRIPE_SECRET, NOW_S, &body)),
    )
    .await;
    assert_rejected(
        &app,
        &res,
        StatusCode::BAD_REQUEST,
        "no signature matches",
        p,
    )
    .await;

    let stale = stripe::sign(STRIPE_SECRET, NOW_S - 301, &body);
    let res = post_stripe(&app, &body, Some(stale)).await;
    assert_rejected(
        &app,
        &res,
        StatusCode::BAD_REQUEST,
        "outside the tolerance",
        p,
    )
    .await;

    let res = post_stripe(&app, &body, Some("t=abc".into())).await;
    assert_rejected(&app, &res, StatusCode::BAD_REQUEST, "timestamp", p).await;

    let not_json = b"{not json".to_vec();
    let res = post_stripe(
        &app,
        &not_json,
        Some(stripe::sign(STRIPE_SECRET, NOW_S, &not_json)),
    )
    .await;
    assert_rejected(&app, &res, StatusCode::BAD_REQUEST, "not valid JSON", p).await;

    let no_type = br#"{"id":"evt_1","data":{"object":{}}}"#.to_vec();
    let res = post_stripe(
        &app,
        &no_type,
        Some(stripe::sign(STRIPE_SECRET, NOW_S, &no_type)),
    )
    .await;
    assert_rejected(&app, &res, StatusCode::BAD_REQUEST, "`type`", p).await;

    assert_eq!(app.state.webhooks.rejections(p).len(), 7);
    assert!(app.state.webhooks.rejections(Provider::Auth).is_empty());
}

#[tokio::test]
async fn clerk_rejections_store_nothing() {
    let app = configured().await;
    let body = fixture("clerk/user.created.docs.json");
    let p = Provider::Auth;
    let good = svix_headers("msg_1", NOW_S, &body, "svix");

    let res = post_clerk(&app, &body, &[]).await;
    assert_rejected(
        &app,
        &res,
        StatusCode::BAD_REQUEST,
        "missing required header svix-id",
        p,
    )
    .await;

    let mut no_sig = as_refs(&good);
    no_sig.pop();
    let res = post_clerk(&app, &body, &no_sig).await;
    assert_rejected(&app, &res, StatusCode::BAD_REQUEST, "svix-signature", p).await;

    let other = svix::sign(
        "whsec_b3RoZXItc2VjcmV0LW90aGVyLXNlY3JldA==",
        "msg_1",
        NOW_S,
        &body,
    )
    .expect("sign");
    let mut wrong = as_refs(&good);
    wrong[2].1 = other;
    let res = post_clerk(&app, &body, &wrong).await;
    assert_rejected(
        &app,
        &res,
        StatusCode::BAD_REQUEST,
        "no signature matches",
        p,
    )
    .await;

    // The id is signed: changing it breaks the signature.
    let mut other_id = as_refs(&good);
    other_id[0].1 = "msg_2".into();
    let res = post_clerk(&app, &body, &other_id).await;
    assert_rejected(
        &app,
        &res,
        StatusCode::BAD_REQUEST,
        "no signature matches",
        p,
    )
    .await;

    let stale = svix_headers("msg_1", NOW_S - 301, &body, "svix");
    let res = post_clerk(&app, &body, &as_refs(&stale)).await;
    assert_rejected(
        &app,
        &res,
        StatusCode::BAD_REQUEST,
        "outside the tolerance",
        p,
    )
    .await;

    let future = svix_headers("msg_1", NOW_S + 301, &body, "svix");
    let res = post_clerk(&app, &body, &as_refs(&future)).await;
    assert_rejected(
        &app,
        &res,
        StatusCode::BAD_REQUEST,
        "outside the tolerance",
        p,
    )
    .await;

    let bad = br#"{"type": "user.created"}"#.to_vec();
    let res = post_clerk(
        &app,
        &bad,
        &as_refs(&svix_headers("msg_3", NOW_S, &bad, "svix")),
    )
    .await;
    assert_rejected(&app, &res, StatusCode::BAD_REQUEST, "`data`", p).await;

    let rejections = app.state.webhooks.rejections(p);
    assert_eq!(rejections.len(), 7);
    assert!(rejections.iter().all(|r| !r.reason.contains("whsec_")));
}

#[tokio::test]
async fn unconfigured_secrets_are_503_with_a_clear_error() {
    let app = start(|_| {}).await;
    let body = fixture("stripe/payment_intent.succeeded.json");
    let res = post_stripe(&app, &body, Some(stripe::sign(STRIPE_SECRET, NOW_S, &body))).await;
    assert_rejected(
        &app,
        &res,
        StatusCode::SERVICE_UNAVAILABLE,
        "set STRIPE_WEBHOOK_SECRET",
        Provider::Payments,
    )
    .await;
    let clerk = fixture("clerk/user.created.docs.json");
    let headers = svix_headers("msg_1", NOW_S, &clerk, "svix");
    let res = post_clerk(&app, &clerk, &as_refs(&headers)).await;
    assert_rejected(
        &app,
        &res,
        StatusCode::SERVICE_UNAVAILABLE,
        "set CLERK_WEBHOOK_SECRET",
        Provider::Auth,
    )
    .await;
}

#[tokio::test]
async fn storage_down_is_503_and_the_retry_then_succeeds() {
    let app = configured().await;
    let body = fixture("stripe/payment_intent.succeeded.json");
    let sig = stripe::sign(STRIPE_SECRET, NOW_S, &body);
    app.client
        .store()
        .health_fail_writes(true)
        .await
        .expect("switch");
    let res = post_stripe(&app, &body, Some(sig.clone())).await;
    assert_eq!(res.status, StatusCode::SERVICE_UNAVAILABLE, "{}", res.text);
    assert!(res.error().contains("storage"));
    app.client
        .store()
        .health_fail_writes(false)
        .await
        .expect("switch");
    assert!(app
        .client
        .store()
        .webhook_deliveries_list(None, 10)
        .await
        .expect("list")
        .is_empty());
    assert!(app
        .client
        .event("payments:evt_000000000000000000000000:0")
        .await
        .expect("read")
        .is_none());
    // The provider retries; nothing was lost and nothing is duplicated.
    let retry = post_stripe(&app, &body, Some(sig)).await;
    assert_eq!(retry.status, StatusCode::OK);
    assert_eq!(retry.json["duplicate"], json!(false));
}

#[tokio::test]
async fn a_webhook_body_over_the_limit_is_a_json_413() {
    let app = start(|raw| {
        raw.stripe_secrets = Some(STRIPE_SECRET.into());
        raw.max_body_bytes = Some(1024);
    })
    .await;
    let body = fixture("stripe/payment_intent.succeeded.json");
    assert!(body.len() > 1024);
    let res = post_stripe(&app, &body, Some(stripe::sign(STRIPE_SECRET, NOW_S, &body))).await;
    assert_rejected(
        &app,
        &res,
        StatusCode::PAYLOAD_TOO_LARGE,
        "larger",
        Provider::Payments,
    )
    .await;
}
