//! The JSON API of endpoints: add, list, re-index and remove, with and without the key.

use axum::http::StatusCode;
use serde_json::{json, Value};

use crate::backend_tests;
use crate::fixture::{job, json_answer, serving, App, SECRET};
use crate::support::{self, http, TestDb};

/// The JSON API of a `flare serve` router, called with or without its key.
struct Api {
    router: axum::Router,
    key: Option<&'static str>,
}

impl Api {
    /// One request: status and JSON body.
    async fn call(&self, method: &str, uri: &str, body: Option<Value>) -> (StatusCode, Value) {
        let mut req = http::json_request(method, uri, body);
        if let Some(key) = self.key {
            let bearer = format!("Bearer {key}").parse().expect("header");
            req.headers_mut().insert("authorization", bearer);
        }
        let answer = http::call(&self.router, req).await;
        (answer.status, answer.json)
    }

    /// One request that must answer `status`; its JSON body.
    async fn expect(
        &self,
        status: StatusCode,
        method: &str,
        uri: &str,
        body: Option<Value>,
    ) -> Value {
        let (got, body) = self.call(method, uri, body).await;
        assert_eq!(got, status, "{method} {uri}: {body}");
        body
    }
}

async fn the_json_api_adds_lists_reindexes_and_removes_endpoints(db: TestDb) {
    let app = App::start(serving(vec![job("api-job", "a.b")], |_| {
        json_answer(json!({"output": 1}))
    }))
    .await;
    let (client, _clock) = db.client().await;
    const KEY: &str = "an-api-key-long-enough";
    let router = support::sample::router(&client, db.url.clone(), Some(KEY));
    let add = json!({"url": app.url, "secret": SECRET});

    // The API key guards registration: nobody without it makes Flare call a URL.
    let anonymous = Api {
        router: router.clone(),
        key: None,
    };
    anonymous
        .expect(
            StatusCode::UNAUTHORIZED,
            "POST",
            "/api/endpoints",
            Some(add.clone()),
        )
        .await;
    assert!(client.store().endpoints_load().await.unwrap().is_empty());

    let api = Api {
        router,
        key: Some(KEY),
    };
    let body = api
        .expect(
            StatusCode::CREATED,
            "POST",
            "/api/endpoints",
            Some(add.clone()),
        )
        .await;
    assert_eq!(body["jobs"], json!(["api-job"]));
    assert_eq!(body["health"], json!("ok"));
    assert!(
        body.get("secret").is_none(),
        "the secret is never shown: {body}"
    );
    let id = body["id"].as_str().unwrap().to_string();
    let one = format!("/api/endpoints/{id}");
    let reindex = format!("/api/endpoints/{id}/index");

    for (body, status) in [
        (add, StatusCode::CONFLICT),
        (json!({"url": "gopher://x"}), StatusCode::BAD_REQUEST),
        (json!({"url": app.url}), StatusCode::BAD_REQUEST),
        (
            json!({"url": app.url, "secret": SECRET, "x": 1}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"url": "http://127.0.0.1:9/none", "secret": SECRET}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
    ] {
        let answer = api
            .expect(status, "POST", "/api/endpoints", Some(body))
            .await;
        assert!(answer["error"].is_string(), "{answer}");
    }

    let listed = api
        .expect(StatusCode::OK, "GET", "/api/endpoints", None)
        .await;
    assert_eq!(listed["endpoints"].as_array().unwrap().len(), 1);
    assert!(
        !listed.to_string().contains(SECRET),
        "the secret is never shown"
    );
    api.expect(StatusCode::OK, "GET", &one, None).await;
    api.expect(StatusCode::NOT_FOUND, "GET", "/api/endpoints/ep_nope", None)
        .await;
    let jobs = api.expect(StatusCode::OK, "GET", "/api/jobs", None).await;
    assert_eq!(
        jobs["jobs"][0]["placement"]["endpoint"]["url"],
        json!(app.url),
        "{jobs}"
    );

    app.set(|_| json_answer(json!({"jobs": []})));
    let body = api.expect(StatusCode::OK, "POST", &reindex, None).await;
    assert_eq!(body["removedJobs"], json!(["api-job"]));
    app.set(|_| json_answer(json!({"jobs": 5})));
    api.expect(StatusCode::UNPROCESSABLE_ENTITY, "POST", &reindex, None)
        .await;

    let body = api.expect(StatusCode::OK, "DELETE", &one, None).await;
    assert_eq!(body["removed"], json!(id));
    api.expect(StatusCode::NOT_FOUND, "DELETE", &one, None)
        .await;

    let nodes = api.expect(StatusCode::OK, "GET", "/api/nodes", None).await;
    let ours = json!(client.engine().node_id());
    assert!(
        nodes["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["id"] == ours),
        "{nodes}"
    );
    client.shutdown().await;
}

backend_tests!(the_json_api_adds_lists_reindexes_and_removes_endpoints,);
