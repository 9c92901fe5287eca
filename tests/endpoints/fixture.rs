//! The suite's fixture: the test application (answers as each test tells it, after checking
//! Flare's signature; records what it verified; stops when told), the index answers it serves, and
//! the Flare side: a registry over a client, a job defined in code, and a run's detail once its
//! event settled.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use flare::endpoints::Registry;
use flare::webhooks::svix::{SvixHeaders, SvixVerifier};
use flare::{Client, ManualClock};
use serde_json::{json, Value};

use crate::support::{settled, TestDb};

pub const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// What the test application answers to one request: status, extra headers, body.
pub type Answer = (StatusCode, Vec<(&'static str, String)>, Vec<u8>);
pub type Behaviour = Arc<dyn Fn(&Value) -> Answer + Send + Sync>;

/// The test application: answers with `behaviour`, after checking Flare's signature; records
/// every request it verified. An answer with the header `x-test-delay-ms` is sent that late.
#[derive(Clone)]
pub struct App {
    pub behaviour: Arc<Mutex<Behaviour>>,
    pub seen: Arc<Mutex<Vec<Value>>>,
    pub url: String,
    pub stop: tokio_util::sync::CancellationToken,
}

pub fn json_answer(v: Value) -> Answer {
    (StatusCode::OK, vec![], v.to_string().into_bytes())
}

pub async fn handle(State(app): State<App>, headers: HeaderMap, body: Bytes) -> Response {
    let h = SvixHeaders::from_lookup(|n| headers.get(n).and_then(|v| v.to_str().ok()));
    let verified = h.and_then(|h| {
        SvixVerifier::new(vec![SECRET.into()])?.verify(&h, &body, chrono::Utc::now().timestamp())
    });
    if let Err(e) = verified {
        return (StatusCode::UNAUTHORIZED, e.to_string()).into_response();
    }
    let request: Value = serde_json::from_slice(&body).expect("Flare sends JSON");
    app.seen.lock().unwrap().push(request.clone());
    let behaviour = app.behaviour.lock().unwrap().clone();
    let (status, extra, bytes) = behaviour(&request);
    let mut res = (status, bytes).into_response();
    res.headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    for (k, v) in extra {
        if k == "x-test-delay-ms" {
            tokio::time::sleep(Duration::from_millis(v.parse().unwrap())).await;
            continue;
        }
        res.headers_mut().insert(k, v.parse().unwrap());
    }
    res
}

impl App {
    pub async fn start(behaviour: impl Fn(&Value) -> Answer + Send + Sync + 'static) -> App {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = App {
            behaviour: Arc::new(Mutex::new(Arc::new(behaviour))),
            seen: Arc::default(),
            url: format!("http://{addr}/flare"),
            stop: tokio_util::sync::CancellationToken::new(),
        };
        let router = axum::Router::new()
            .route("/flare", axum::routing::post(handle))
            .with_state(app.clone());
        let stop = app.stop.clone();
        tokio::spawn(async move {
            axum::serve(listener, router)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await
                .unwrap();
        });
        app
    }

    pub fn set(&self, behaviour: impl Fn(&Value) -> Answer + Send + Sync + 'static) {
        *self.behaviour.lock().unwrap() = Arc::new(behaviour);
    }

    pub fn runs_seen(&self) -> Vec<Value> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r["action"] == "run")
            .cloned()
            .collect()
    }

    /// Stops listening and closes its idle connections: the application went away.
    pub fn stop(&self) {
        self.stop.cancel();
    }
}

pub fn job(id: &str, event: &str) -> Value {
    json!({"id": id, "name": format!("Job {id}"), "version": "1.0.0", "trigger": {"event": event}})
}

/// An index answer with `jobs`, and `run` answered by `run`.
pub fn serving(
    jobs: Vec<Value>,
    run: impl Fn(&Value) -> Answer + Send + Sync + 'static,
) -> impl Fn(&Value) -> Answer + Send + Sync + 'static {
    move |req: &Value| {
        if req["action"] == "index" {
            json_answer(json!({ "jobs": jobs }))
        } else {
            run(req)
        }
    }
}

pub async fn registry(db: &TestDb) -> (Client, ManualClock, Arc<Registry>) {
    let (client, clock) = db.client().await;
    let registry = Registry::new(client.clone());
    (client, clock, registry)
}

pub async fn run_of(client: &Client, event_id: &str, job: &str) -> flare::store::RunDetail {
    let detail = settled(client, event_id).await;
    let run = detail
        .runs
        .iter()
        .find(|r| r.job_id == job)
        .unwrap_or_else(|| panic!("no run of {job}: {:?}", detail.runs));
    client.store().run_detail(&run.id).await.unwrap().unwrap()
}

/// Defines a job in `client`'s own code and says so at once (a node beat).
pub async fn define_in_code(client: &Client, id: &str, event: &str) {
    client
        .register_job(
            flare::Job::new(id, id, "1.0.0")
                .trigger(flare::event_trigger(event))
                .run(|_: Value, _| async { Ok(json!(1)) }),
        )
        .await
        .unwrap();
    client.engine().beat().await.unwrap();
}
