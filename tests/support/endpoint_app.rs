//! A small application serving jobs at one URL, as an HTTP job endpoint does (see
//! `crate::endpoints`): it answers the `index` action with the jobs it is given and the `run`
//! action with a fixed answer per job, on `127.0.0.1` and a free port. The suites change its
//! answers while it runs (a job leaves the index, the index breaks) and read what Flare sent it.
//! With a secret it checks every request's Standard Webhooks signature and answers 401 otherwise.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use flare::webhooks::svix::{SvixHeaders, SvixVerifier};
use serde_json::{json, Value};

#[derive(Default)]
struct Answers {
    /// The status and body of the `index` answer.
    index: Option<(StatusCode, Value)>,
    /// The status and body of the `run` answer per job id (default: 200
    /// `{"output": {"ok": true}}`).
    runs: HashMap<String, (StatusCode, String)>,
    /// Every request body received, in order.
    received: Vec<Value>,
}

#[derive(Clone)]
struct AppState {
    answers: Arc<Mutex<Answers>>,
    verifier: Option<SvixVerifier>,
}

/// The running application; stops when dropped.
pub struct EndpointApp {
    /// Where it serves its jobs (`http://127.0.0.1:<port>/flare`).
    pub url: String,
    answers: Arc<Mutex<Answers>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for EndpointApp {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A job definition as an index lists it: `id` on `event`, one attempt and a retry a minute away
/// (so a failed attempt stays queued under a manual clock).
pub fn job(id: &str, event: &str) -> Value {
    json!({
        "id": id,
        "name": format!("{id} (endpoint)"),
        "version": "1.0.0",
        "trigger": {"event": event},
        "retry": {"maxAttempts": 3, "minDelayMs": 60000},
        "timeoutMs": 10000
    })
}

impl EndpointApp {
    /// Serves `jobs` (definitions such as [`job`] makes); checks signatures with `secret` if given.
    pub async fn start(jobs: Vec<Value>, secret: Option<&str>) -> EndpointApp {
        let answers = Arc::new(Mutex::new(Answers {
            index: Some((StatusCode::OK, json!({ "jobs": jobs }))),
            ..Answers::default()
        }));
        let verifier = secret.map(|s| SvixVerifier::new(vec![s.to_string()]).expect("secret"));
        let app = Router::new()
            .route("/flare", post(serve))
            .with_state(AppState {
                answers: Arc::clone(&answers),
                verifier,
            });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/flare", listener.local_addr().expect("addr"));
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("endpoint app");
        });
        EndpointApp { url, answers, task }
    }

    /// From now on the index lists `jobs`.
    pub fn set_jobs(&self, jobs: Vec<Value>) {
        self.answers.lock().expect("lock").index = Some((StatusCode::OK, json!({ "jobs": jobs })));
    }

    /// From now on the index answers `status` with `body`.
    pub fn set_index_answer(&self, status: StatusCode, body: Value) {
        self.answers.lock().expect("lock").index = Some((status, body));
    }

    /// From now on a run of `job` is answered with `answer` (`{"output": …}` or `{"error": …}`:
    /// the endpoint works, the job succeeds or fails).
    pub fn set_run_answer(&self, job: &str, answer: Value) {
        self.set_run_failure(job, StatusCode::OK, &answer.to_string());
    }

    /// From now on a run of `job` is answered with `status` and the text `body` (with a status
    /// other than 2xx: the endpoint fails, which its health and recent errors show).
    pub fn set_run_failure(&self, job: &str, status: StatusCode, body: &str) {
        self.answers
            .lock()
            .expect("lock")
            .runs
            .insert(job.to_string(), (status, body.to_string()));
    }

    /// The bodies of the requests received so far.
    pub fn received(&self) -> Vec<Value> {
        self.answers.lock().expect("lock").received.clone()
    }
}

async fn serve(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    if let Some(verifier) = &state.verifier {
        let checked =
            SvixHeaders::from_lookup(|name| headers.get(name).and_then(|v| v.to_str().ok()))
                .and_then(|h| verifier.verify(&h, &body, chrono::Utc::now().timestamp()));
        if let Err(e) = checked {
            return (StatusCode::UNAUTHORIZED, format!("bad signature: {e}")).into_response();
        }
    }
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, "not JSON").into_response();
    };
    let mut answers = state.answers.lock().expect("lock");
    answers.received.push(request.clone());
    match request["action"].as_str() {
        Some("index") => match &answers.index {
            Some((status, body)) => (*status, Json(body.clone())).into_response(),
            None => StatusCode::NOT_FOUND.into_response(),
        },
        Some("run") => {
            let job = request["job"]["id"].as_str().unwrap_or_default();
            match answers.runs.get(job) {
                Some((status, body)) => (
                    *status,
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    body.clone(),
                )
                    .into_response(),
                None => Json(json!({"output": {"ok": true}})).into_response(),
            }
        }
        _ => (StatusCode::BAD_REQUEST, "unknown action").into_response(),
    }
}
