//! Indexes: a bad one refused whole, a re-index removing vanished jobs and cancelling their queued
//! runs, `cancelOn` checked and arming the jobs' runs, job ids as one namespace with the jobs
//! defined in code, and a job's debounce checked and listed.

use std::sync::Arc;

use axum::http::StatusCode;
use flare::endpoints::Error as EndpointError;
use flare::store::endpoints::EndpointHealth;
use flare::RunStatus;
use serde_json::json;

use crate::backend_tests;
use crate::fixture::{
    define_in_code, job, json_answer, registry, run_of, serving, Answer, App, SECRET,
};
use crate::support::{wait_for, TestDb};

async fn a_bad_index_is_refused_whole_and_stores_nothing(db: TestDb) {
    let cases: Vec<(Answer, &str)> = vec![
        (
            json_answer(json!({"jobs": [job("a", "x.y"), job("a", "x.z")]})),
            "used twice",
        ),
        (
            json_answer(json!({"jobs": [job("Bad", "x.y")]})),
            "invalid job id",
        ),
        (
            json_answer(
                json!({"jobs": [{"id": "a", "name": "A", "version": "v1", "trigger": {"event": "x.y"}}]}),
            ),
            "invalid version",
        ),
        (
            json_answer(
                json!({"jobs": [{"id": "a", "name": "A", "version": "1.0.0", "trigger": {"event": "x.y", "filter": {"n": [{"$near": 1}]}}}]}),
            ),
            "$near",
        ),
        ((StatusCode::OK, vec![], b"nope".to_vec()), "not JSON"),
        (
            (
                StatusCode::MOVED_PERMANENTLY,
                vec![("location", "https://x.test/".into())],
                vec![],
            ),
            "redirect",
        ),
        (
            (StatusCode::NOT_FOUND, vec![], b"no such page".to_vec()),
            "HTTP 404",
        ),
    ];
    let app = App::start(|_| json_answer(json!({}))).await;
    let (client, _clock, registry) = registry(&db).await;
    for (answer, text) in cases {
        let answer = Arc::new(answer);
        let a = Arc::clone(&answer);
        app.set(move |_| (*a).clone());
        let err = registry
            .add(&app.url, Some(SECRET.into()))
            .await
            .expect_err(text);
        assert!(matches!(err, EndpointError::Index { .. }), "{err}");
        assert!(err.to_string().contains(text), "{text}: {err}");
        assert!(client.store().endpoints_load().await.unwrap().is_empty());
        assert!(client
            .store()
            .jobs_list(chrono::Utc::now())
            .await
            .unwrap()
            .is_empty());
    }
    // Nothing listens: refused.
    let err = registry
        .add("http://127.0.0.1:9/flare", Some(SECRET.into()))
        .await
        .expect_err("refused");
    assert!(err.to_string().contains("could not reach"), "{err}");
    // Bad URL and secret are refused before any call.
    assert!(matches!(
        registry.add("ftp://x/", None).await,
        Err(EndpointError::Url { .. })
    ));
    assert!(matches!(
        registry.add(&app.url, Some("whsec_!!".into())).await,
        Err(EndpointError::Secret(_))
    ));
    let err = registry.add(&app.url, None).await.expect_err("no secret");
    assert!(
        err.to_string().contains("for example a new one: whsec_"),
        "{err}"
    );
    // A wrong secret: the application refuses Flare's signature, and says so.
    app.set(serving(vec![job("a", "x.y")], |_| {
        json_answer(json!({"output": 1}))
    }));
    let err = registry
        .add(&app.url, Some("whsec_c2VjcmV0LXRoYXQtaXMtd3Jvbmc=".into()))
        .await
        .expect_err("wrong secret");
    assert!(err.to_string().contains("HTTP 401"), "{err}");
    assert!(client.store().endpoints_load().await.unwrap().is_empty());
    client.shutdown().await;
}

async fn reindex_removes_vanished_jobs_and_cancels_their_queued_runs(db: TestDb) {
    let app = App::start(serving(
        vec![
            job("keep", "k.k"),
            json!({"id": "drop", "name": "Drop", "version": "1.0.0", "trigger": {"event": "d.d"},
                   "retry": {"maxAttempts": 3, "minDelayMs": 3600000, "maxDelayMs": 3600000}}),
        ],
        |req| match req["job"]["id"].as_str() {
            Some("drop") => json_answer(json!({"error": "not yet"})),
            _ => json_answer(json!({"output": "ok"})),
        },
    ))
    .await;
    let (client, _clock, registry) = registry(&db).await;
    let summary = registry.add(&app.url, Some(SECRET.into())).await.unwrap();
    let sent = client.send_event("d.d", &json!({})).await.unwrap();
    let run_id = sent.run_ids[0].clone();
    wait_for("the first attempt to fail and wait an hour", || async {
        let d = client.store().run_detail(&run_id).await.unwrap()?;
        (!d.attempts.is_empty() && d.run.status == RunStatus::Queued).then_some(())
    })
    .await;

    // The new index drops "drop" and changes "keep".
    app.set(serving(
        vec![
            json!({"id": "keep", "name": "Keep", "version": "1.1.0", "trigger": {"event": "k.k"}}),
        ],
        |_| json_answer(json!({"output": "v2"})),
    ));
    let (after, applied) = registry.reindex(&summary.id).await.unwrap();
    assert_eq!(after.jobs, ["keep"]);
    assert_eq!(applied.removed, ["drop"]);
    assert_eq!(applied.cancelled_runs, 1);
    let run = client.store().run_detail(&run_id).await.unwrap().unwrap();
    assert_eq!(run.run.status, RunStatus::Cancelled);
    assert!(
        run.run
            .error
            .as_deref()
            .unwrap_or("")
            .contains("was removed from the endpoint"),
        "{:?}",
        run.run.error
    );
    let again = client.send_event("d.d", &json!({})).await.unwrap();
    assert!(
        again.run_ids.is_empty(),
        "a removed job is no longer triggered"
    );
    let kept = client.send_event("k.k", &json!({})).await.unwrap();
    let run = run_of(&client, &kept.id, "keep").await;
    assert_eq!(run.run.job_version, "1.1.0");
    assert_eq!(run.run.output, Some(json!("v2")));

    // A failed re-index keeps the index and is recorded on the endpoint.
    app.set(|_| {
        let answer = json!({"error": "deploying"}).to_string().into_bytes();
        (StatusCode::BAD_GATEWAY, vec![], answer)
    });
    let err = registry.reindex(&summary.id).await.expect_err("502");
    assert!(err.to_string().contains("HTTP 502: deploying"), "{err}");
    let failing = registry.get(&summary.id).await.unwrap();
    assert_eq!(failing.jobs, ["keep"]);
    assert_eq!(failing.health, EndpointHealth::Failing);
    assert!(failing.recent_errors[0]
        .message
        .contains("HTTP 502: deploying"));
    let still = client.send_event("k.k", &json!({})).await.unwrap();
    assert_eq!(still.run_ids.len(), 1);

    // Removing the endpoint stops its jobs.
    app.set(serving(vec![job("keep", "k.k")], |_| {
        json_answer(json!({"output": 1}))
    }));
    let removed = registry.remove(&summary.id).await.unwrap();
    assert_eq!(removed.removed, ["keep"]);
    assert!(client
        .send_event("k.k", &json!({}))
        .await
        .unwrap()
        .run_ids
        .is_empty());
    assert!(registry.list().await.unwrap().is_empty());
    assert!(matches!(
        registry.reindex(&summary.id).await,
        Err(EndpointError::Store(flare::store::Error::NotFound { .. }))
    ));
    client.shutdown().await;
}

/// `cancelOn` in an index: a bad entry refuses the index naming the field; a good one arms the
/// endpoint job's runs, which a matching event then cancels.
async fn cancel_on_in_an_index_is_checked_and_cancels_the_jobs_runs(db: TestDb) {
    let ship = |cancel_on: serde_json::Value| {
        json!({"id": "ship", "name": "Ship", "version": "1.0.0", "trigger": {"event": "order.placed"},
               "retry": {"maxAttempts": 3, "minDelayMs": 3600000, "maxDelayMs": 3600000},
               "cancelOn": cancel_on})
    };
    let (client, _clock, registry) = registry(&db).await;
    for (bad, field) in [
        (
            json!([{"event": "order.cancelled", "match": "orderId"}]),
            "cancelOn[0].match",
        ),
        (
            json!([{"event": "order.cancelled", "if": "async.payload.id =="}]),
            "cancelOn[0].if",
        ),
        (
            json!([{"event": "order.cancelled", "timeoutMs": 10}]),
            "cancelOn[0].timeoutMs",
        ),
        (json!({"event": "order.cancelled"}), "cancelOn: a list"),
        (json!([{"match": "payload.orderId"}]), "cancelOn[0].event"),
        (
            json!([{"event": "order.cancelled", "after": 1}]),
            "cancelOn[0].after",
        ),
    ] {
        let app = App::start(serving(vec![ship(bad.clone())], |_| {
            json_answer(json!({"output": 1}))
        }))
        .await;
        let err = registry
            .add(&app.url, Some(SECRET.into()))
            .await
            .expect_err("refused");
        assert!(err.to_string().contains(field), "{bad}: {err}");
        assert!(client.store().endpoints_load().await.unwrap().is_empty());
    }
    let app = App::start(serving(
        vec![ship(json!([
            {"event": "order.cancelled", "match": "payload.orderId", "timeoutMs": 86_400_000},
            {"event": "order.refunded", "if": "async.payload.total >= 100"}
        ]))],
        |_| json_answer(json!({"error": "no truck yet"})),
    ))
    .await;
    registry.add(&app.url, Some(SECRET.into())).await.unwrap();
    let placed = client
        .send_event("order.placed", &json!({"orderId": "o1"}))
        .await
        .unwrap();
    let run_id = placed.run_ids[0].clone();
    wait_for("the first attempt to fail and wait an hour", || async {
        let d = client.store().run_detail(&run_id).await.unwrap()?;
        (!d.attempts.is_empty() && d.run.status == RunStatus::Queued).then_some(())
    })
    .await;
    let other = client
        .send_event("order.cancelled", &json!({"orderId": "o2"}))
        .await
        .unwrap();
    assert_eq!(
        client
            .store()
            .run_detail(&run_id)
            .await
            .unwrap()
            .unwrap()
            .run
            .status,
        RunStatus::Queued,
        "another order's cancel ({}) leaves it",
        other.id
    );
    client
        .send_event("order.refunded", &json!({"total": 99}))
        .await
        .unwrap();
    assert_eq!(
        client
            .store()
            .run_detail(&run_id)
            .await
            .unwrap()
            .unwrap()
            .run
            .status,
        RunStatus::Queued,
        "a refund under its condition leaves it"
    );
    let cancel = client
        .send_event("order.cancelled", &json!({"orderId": "o1"}))
        .await
        .unwrap();
    let run = client.store().run_detail(&run_id).await.unwrap().unwrap();
    assert_eq!(run.run.status, RunStatus::Cancelled);
    assert_eq!(run.cancelled_by.unwrap().event_id, cancel.id);
    client.shutdown().await;
}

async fn job_ids_are_one_namespace(db: TestDb) {
    let one = App::start(serving(vec![job("shared", "s.s")], |_| {
        json_answer(json!({"output": 1}))
    }))
    .await;
    let two = App::start(serving(vec![job("shared", "s.s")], |_| {
        json_answer(json!({"output": 2}))
    }))
    .await;
    let (client, _clock, registry) = registry(&db).await;
    registry.add(&one.url, Some(SECRET.into())).await.unwrap();
    let err = registry
        .add(&two.url, Some(SECRET.into()))
        .await
        .expect_err("conflict");
    assert!(
        err.to_string().contains("already served by the endpoint"),
        "{err}"
    );
    assert_eq!(
        registry.list().await.unwrap().len(),
        1,
        "nothing of the second was stored"
    );
    let err = registry
        .add(&one.url, Some(SECRET.into()))
        .await
        .expect_err("twice");
    assert!(err.to_string().contains("registered already"), "{err}");

    // A job a live process defines in Rust cannot be taken by an endpoint.
    define_in_code(&client, "rusty", "r.r").await;
    let three = App::start(serving(vec![job("rusty", "r.r")], |_| {
        json_answer(json!({"output": 3}))
    }))
    .await;
    let err = registry
        .add(&three.url, Some(SECRET.into()))
        .await
        .expect_err("rust job");
    assert!(err.to_string().contains("defined in the code"), "{err}");
    client.shutdown().await;
}

/// A job's `debounce` (issue 26): a bad one refuses the index, naming the field, and stores
/// nothing; a good one is stored and listed by `GET /api/jobs`.
async fn a_debounce_is_checked_and_listed(db: TestDb) {
    let debounced = |debounce: serde_json::Value| {
        let mut j = job("digest", "doc.edited");
        j["debounce"] = debounce;
        j
    };
    let app = App::start(|_| json_answer(json!({}))).await;
    let (client, _clock, registry) = registry(&db).await;
    for (bad, field) in [
        (json!({"periodMs": 500}), "debounce.periodMs"),
        (
            json!({"periodMs": 5000, "timeoutMs": 1000}),
            "debounce.timeoutMs",
        ),
        (
            json!({"periodMs": 5000, "key": "payload.docId"}),
            "debounce.key",
        ),
        (
            json!({"periodMs": 5000, "key": "event.payload.("}),
            "debounce.key",
        ),
        (json!({"periodMs": 5000, "every": 1}), "debounce.every"),
        (json!(5000), "debounce"),
    ] {
        app.set(serving(vec![debounced(bad.clone())], |_| {
            json_answer(json!({}))
        }));
        let err = registry
            .add(&app.url, Some(SECRET.into()))
            .await
            .expect_err("refused");
        assert!(err.to_string().contains(field), "{bad}: {err}");
        assert!(client
            .store()
            .jobs_list(chrono::Utc::now())
            .await
            .unwrap()
            .is_empty());
    }
    let good = json!({"periodMs": 5000, "key": "event.payload.docId", "timeoutMs": 60000});
    app.set(serving(vec![debounced(good.clone())], |_| {
        json_answer(json!({}))
    }));
    registry.add(&app.url, Some(SECRET.into())).await.unwrap();
    let router = crate::support::sample::router(&client, db.url.clone(), None);
    let jobs = crate::support::http::call(
        &router,
        crate::support::http::json_request("GET", "/api/jobs", None),
    )
    .await;
    assert_eq!(jobs.status, StatusCode::OK);
    assert_eq!(jobs.json["jobs"][0]["id"], "digest", "{}", jobs.json);
    assert_eq!(jobs.json["jobs"][0]["debounce"], good);
    client.shutdown().await;
}

backend_tests!(
    cancel_on_in_an_index_is_checked_and_cancels_the_jobs_runs,
    a_bad_index_is_refused_whole_and_stores_nothing,
    reindex_removes_vanished_jobs_and_cancels_their_queued_runs,
    job_ids_are_one_namespace,
    a_debounce_is_checked_and_listed,
);
