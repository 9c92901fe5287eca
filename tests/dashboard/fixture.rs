//! The suite's fixture: the sample jobs and four events (a signup, a failing order, an upload
//! that chains, a reminder an hour away) on a SQLite database and a manual clock, the router
//! behind an API key, and requests as a browser (session cookie, origin, forms) or an API client
//! sends them.

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::Router;
use flare::http::dashboard::url_encode;
use flare::model::Source;
use flare::{Client, Delay, ManualClock, RunStatus, SendEvent};
use serde_json::json;

use crate::support::db::client_at;
use crate::support::{http, sample, wait_for, Backend, TestDb};

/// 2024-05-01T12:00:00Z.
pub const T0: i64 = 1_714_564_800_000;
pub const KEY: &str = "dashboard-test-key-0123456789";
pub const HOST: &str = "flare.test";
pub const ORIGIN: &str = "http://flare.test";
/// The secret the dashboard tests register endpoints with.
pub const APP_SECRET: &str = "whsec_ZGFzaGJvYXJkLXRlc3QtZW5kcG9pbnQtc2VjcmV0";

pub struct Fixture {
    _db: TestDb,
    pub url: String,
    pub client: Client,
    pub clock: ManualClock,
    pub app: Router,
    pub user: String,
    pub order: String,
    pub upload: String,
    pub child: String,
    pub later: String,
}

pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
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
    pub fn location(&self) -> &str {
        self.headers
            .get("location")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

pub async fn fixture() -> Fixture {
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

pub enum Auth<'a> {
    None,
    Bearer,
    Cookie(&'a str),
}

impl Fixture {
    pub async fn request(
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
    pub async fn page(&self, uri: &str) -> String {
        let a = self.request("GET", uri, Auth::Bearer, None, None).await;
        assert_eq!(a.status, StatusCode::OK, "{uri}: {}", a.body);
        let ct = a.headers.get("content-type").and_then(|v| v.to_str().ok());
        assert_eq!(ct, Some("text/html; charset=utf-8"), "{uri}");
        a.body
    }

    /// Signs in and returns the session cookie's value.
    pub async fn login(&self) -> String {
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

    pub async fn run_of(&self, event: &str) -> flare::Run {
        let d = self
            .client
            .store()
            .event_detail(event)
            .await
            .expect("detail")
            .expect("event");
        d.runs[0].clone()
    }

    pub async fn event_count(&self) -> usize {
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

pub fn rows(html: &str, attr: &str) -> Vec<String> {
    html.split(&format!("{attr}=\""))
        .skip(1)
        .filter_map(|s| s.split('"').next().map(str::to_string))
        .collect()
}

/// The part of `html` from the element with `attr="id"` to the end of its table row.
pub fn row<'a>(html: &'a str, attr: &str, id: &str) -> &'a str {
    let start = html
        .find(&format!("{attr}=\"{id}\""))
        .unwrap_or_else(|| panic!("no row {attr}={id:?}"));
    let rest = &html[start..];
    &rest[..rest.find("</tr>").unwrap_or(rest.len())]
}

/// A form body of `pairs`, encoded.
pub fn form(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", url_encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

impl Fixture {
    /// A form POST with the session cookie, from `origin`.
    pub async fn post(&self, uri: &str, cookie: &str, origin: &str, body: &str) -> Answer {
        self.request("POST", uri, Auth::Cookie(cookie), Some(origin), Some(body))
            .await
    }

    pub async fn endpoints(&self) -> Vec<flare::store::endpoints::StoredEndpoint> {
        self.client
            .store()
            .endpoints_load()
            .await
            .expect("endpoints")
    }

    /// Sends `name` and waits until its one run failed an attempt and waits for its retry.
    pub async fn failed_once(&self, name: &str) -> flare::Run {
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
    pub async fn endpoint_jobs(&self, id: &str) -> Vec<String> {
        let all = self.endpoints().await;
        let endpoint = all.into_iter().find(|e| e.summary.id == id);
        endpoint.expect("stored").summary.jobs
    }

    pub async fn run_status(&self, id: &str) -> RunStatus {
        let detail = self.client.store().run_detail(id).await.expect("run");
        detail.expect("stored").run.status
    }
}
