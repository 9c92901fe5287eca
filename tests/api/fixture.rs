//! The suite's fixture: the sample jobs and ten events one minute apart on a manual clock, the
//! router over them, and the requests (`request`, `Fixture::call`), one per backend.

use std::time::Duration;

use axum::http::StatusCode;
use axum::Router;
use chrono::{DateTime, Utc};
use flare::model::Source;
use flare::{event_trigger, Client, Delay, Io, Job, ManualClock, SendEvent};
use serde_json::{json, Value};

use crate::support::db::client_at;
use crate::support::{http, sample, TestDb};

/// 2024-05-01T12:00:00Z.
pub const T0: i64 = 1_714_564_800_000;
pub const MINUTE: Duration = Duration::from_secs(60);

pub struct Fixture {
    pub client: Client,
    pub clock: ManualClock,
    pub app: Router,
    pub users: Vec<String>,
    pub order: String,
    pub upload: String,
    pub child: String,
    /// `flare/run.failed` of the order's run (explode fails for good).
    pub failure: String,
    pub audit: String,
    pub hook: String,
    pub later: String,
    /// Last, so the database outlives the client (fields drop in order).
    _db: TestDb,
}

pub fn time(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .expect("time")
        .to_rfc3339()
}

/// Sends the fixture's events one minute apart, each settled before the next:
/// 5 × `user.created` (greet succeeds and logs), `order.placed` (explode fails on its first
/// call; later calls succeed), `file.uploaded` (upload sends `file.processed`, which processed
/// handles), `audit.noted` over http and `stripe.ping` from a webhook (no jobs), and a
/// `reminder.send` delayed by an hour.
pub async fn fixture(db: TestDb) -> Fixture {
    let url = db.url.clone();
    let (client, clock) = client_at(&url, T0).await;
    sample::define_jobs(&client);
    client
        .define_job(
            Job::new("processed", "File processed", "1.0.0")
                .trigger(event_trigger("file.processed"))
                .run(|_: Value, _io: Io| async move { Ok(Value::Null) }),
        )
        .expect("processed");

    let mut ids = Vec::new();
    let sends: Vec<(SendEvent, Source)> = (0..5)
        .map(|i| {
            (
                SendEvent::new(
                    "user.created",
                    &json!({"email": format!("user{i}@example.com")}),
                ),
                Source::Api,
            )
        })
        .chain([
            (
                SendEvent::new(
                    "order.placed",
                    &json!({"orderId": "o-1", "note": "50% off_sale"}),
                )
                .context(json!({"requestId": "req-9"})),
                Source::Api,
            ),
            (
                SendEvent::new("file.uploaded", &json!({"file": "a.png"})),
                Source::Api,
            ),
            (
                SendEvent::new("audit.noted", &json!({"who": "ada"})),
                Source::Http,
            ),
            (
                SendEvent::new("stripe.ping", &json!({"type": "ping"})),
                Source::Webhook("payments".into()),
            ),
            (
                SendEvent::new("reminder.send", &json!({"userId": "u1"})).delay(Delay::hours(1)),
                Source::Api,
            ),
        ])
        .collect();
    for (i, (send, source)) in sends.into_iter().enumerate() {
        if i > 0 {
            clock.advance(MINUTE);
        }
        let inserted = client.send_inserted(send, source).await.expect("send");
        ids.push(inserted.event.id);
        sample::settle(&client).await;
    }
    let upload = ids[6].clone();
    let detail = client
        .store()
        .event_detail(&upload)
        .await
        .expect("detail")
        .expect("upload event");
    let child = detail.children[0].id.clone();
    let order = client
        .store()
        .event_detail(&ids[5])
        .await
        .expect("detail")
        .expect("order event");
    let failure = order.children[0].id.clone();
    let app = sample::router(&client, url, None);
    Fixture {
        _db: db,
        users: ids[0..5].to_vec(),
        order: ids[5].clone(),
        upload,
        child,
        failure,
        audit: ids[7].clone(),
        hook: ids[8].clone(),
        later: ids[9].clone(),
        client,
        clock,
        app,
    }
}

impl Fixture {
    pub async fn call(&self, method: &str, uri: &str, body: Option<Value>) -> (StatusCode, Value) {
        let (status, text) = self.call_text(method, uri, body).await;
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    }

    pub async fn call_text(
        &self,
        method: &str,
        uri: &str,
        body: Option<Value>,
    ) -> (StatusCode, String) {
        request_text(&self.app, method, uri, body).await
    }

    pub async fn get(&self, uri: &str) -> Value {
        let (status, body) = self.call("GET", uri, None).await;
        assert_eq!(status, StatusCode::OK, "GET {uri}: {body}");
        body
    }

    /// The ids of the events listed at `uri`.
    pub async fn event_ids(&self, uri: &str) -> Vec<String> {
        ids(&self.get(uri).await["events"])
    }

    /// Every event, newest first, as the fixture sent them.
    pub fn all_newest_first(&self) -> Vec<String> {
        let mut all = self.users.clone();
        all.extend([
            self.order.clone(),
            self.failure.clone(),
            self.upload.clone(),
            self.child.clone(),
            self.audit.clone(),
            self.hook.clone(),
            self.later.clone(),
        ]);
        all.reverse();
        all
    }
}

pub fn ids(list: &Value) -> Vec<String> {
    list.as_array()
        .expect("array")
        .iter()
        .map(|e| e["id"].as_str().expect("id").to_string())
        .collect()
}

/// Sends one request to `app`; the answer's status and body (JSON when it is JSON).
pub async fn request(
    app: &Router,
    method: &str,
    uri: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let (status, text) = request_text(app, method, uri, body).await;
    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, value)
}

/// Sends one request to `app` with a loopback `Host` (the app has no key, see
/// `flare::http::guard`), as every HTTP client sends; the answer's status and body text.
pub async fn request_text(
    app: &Router,
    method: &str,
    uri: &str,
    body: Option<Value>,
) -> (StatusCode, String) {
    let answer = http::call(app, http::json_request(method, uri, body)).await;
    (answer.status, answer.text)
}

/// A send-only client on `db` and the app over it.
pub async fn bare_app(db: &TestDb) -> (Client, Router) {
    let clock = ManualClock::new(T0);
    let client = db.sender(&clock).await;
    let app = sample::router(&client, db.url.clone(), None);
    (client, app)
}

pub fn urlencode(s: &str) -> String {
    s.replace('+', "%2B").replace(':', "%3A")
}
