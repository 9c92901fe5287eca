//! The examples as processes: started on a free port once what they need is there (built from
//! the tree), and called as Flare calls them (signed requests; version 2's loop of calls).

use std::process::Command;
use std::time::{Duration, Instant};

use flare::webhooks::svix;
use serde_json::{json, Value};

use crate::support::process::{free_port, Proc};
use crate::{only_fields, root, unix_now, Example, SECRET};

/// A running example.
pub(crate) struct App {
    pub(crate) proc: Proc,
    /// Its endpoint URL.
    pub(crate) url: String,
}

impl App {
    /// Starts `example` on a free port; `None`, after saying why, when what it needs is missing.
    pub(crate) async fn start(example: &Example) -> Option<App> {
        let program = example.program();
        if missing(example, &program) {
            return None;
        }
        let port = free_port();
        let mut command = Command::new(&program);
        command
            .arg(root().join(example.script))
            .env("PORT", port.to_string())
            .env("HOST", "127.0.0.1")
            .env("FLARE_ENDPOINT_SECRET", SECRET)
            // The Python example on this tree's SDK, whatever is installed.
            .env("PYTHONPATH", root().join("sdk/python/src"))
            .env("PYTHONUNBUFFERED", "1");
        let mut proc = Proc::spawn(example.script, command);
        let until = Instant::now() + Duration::from_secs(15);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            proc.assert_running();
            assert!(
                Instant::now() < until,
                "{} does not listen on port {port}:\n{}",
                proc.what,
                proc.output()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Some(App {
            proc,
            url: format!("http://127.0.0.1:{port}/flare"),
        })
    }

    /// Runs the job of the `run` request `body` as Flare does. Version 1: one call. Version 2:
    /// calls again with the steps answered so far (a `sendEvent` step's events collected, keyed
    /// by the step) until the answer has an outcome; returns it shaped as a version-1 answer.
    pub(crate) async fn run(&self, example: &Example, mut body: Value) -> Value {
        if !example.stepped {
            return self.call(&body).await;
        }
        body["protocol"] = json!(2);
        let mut stored = serde_json::Map::new();
        let (mut logs, mut events) = (Vec::new(), Vec::new());
        for _ in 0..20 {
            body["steps"] = Value::Object(stored.clone());
            let mut answer = self.call(&body).await;
            only_fields(&answer, &["steps", "output", "error", "retry", "logs"]);
            logs.extend(answer["logs"].as_array().cloned().unwrap_or_default());
            for step in answer["steps"].as_array().into_iter().flatten() {
                let key = step["key"].as_str().expect("a step key");
                let output = match step["op"].as_str() {
                    Some("run") if step.get("error").is_some() => continue,
                    Some("run") => step["output"].clone(),
                    Some("sleep") => Value::Null,
                    Some("sendEvent") => {
                        let sent = step["events"].as_array().expect("events");
                        let ids: Vec<String> = (0..sent.len())
                            .map(|i| format!("{}-{key}-{i}", body["run"]["id"]))
                            .collect();
                        events.extend(sent.iter().map(|e| {
                            let mut e = e.clone();
                            e["key"] = json!(key);
                            e
                        }));
                        json!({ "ids": ids })
                    }
                    other => panic!("unknown step op {other:?}: {answer}"),
                };
                stored.insert(key.to_string(), json!({ "output": output }));
            }
            if answer.get("output").is_some() || answer.get("error").is_some() {
                let fields = answer.as_object_mut().expect("an object");
                fields.remove("steps");
                fields.insert("logs".into(), Value::Array(logs));
                if !events.is_empty() {
                    fields.insert("events".into(), Value::Array(events));
                }
                return answer;
            }
        }
        panic!("{body}: no outcome after 20 calls");
    }

    /// Sends `body` as Flare does; the answer must be 200 with a JSON body.
    pub(crate) async fn call(&self, body: &Value) -> Value {
        let (status, text) = Signed::new(body, SECRET, unix_now()).send(&self.url).await;
        assert_eq!(
            status,
            200,
            "{body} was answered {text}\n{}",
            self.proc.output()
        );
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{body}: not JSON ({e}): {text}"))
    }
}

/// One request as Flare signs it; tests change a field to forge a bad one.
#[derive(Clone)]
pub(crate) struct Signed {
    pub(crate) body: Vec<u8>,
    pub(crate) id: String,
    pub(crate) timestamp: i64,
    pub(crate) signature: String,
}

impl Signed {
    pub(crate) fn new(body: &Value, secret: &str, timestamp: i64) -> Self {
        let body = serde_json::to_vec(body).expect("JSON");
        let id = format!("msg_{:016x}", rand::random::<u64>());
        let signature = svix::sign(secret, &id, timestamp, &body).expect("sign");
        Self {
            body,
            id,
            timestamp,
            signature,
        }
    }

    /// POSTs it with Flare's headers; returns the status and the body.
    pub(crate) async fn send(&self, url: &str) -> (u16, String) {
        let answer = reqwest::Client::new()
            .post(url)
            .header("content-type", "application/json")
            .header("user-agent", "flare/endpoint-examples-test")
            .header("webhook-id", &self.id)
            .header("webhook-timestamp", self.timestamp.to_string())
            .header("webhook-signature", &self.signature)
            .body(self.body.clone())
            .send()
            .await
            .expect("the example answers");
        let status = answer.status().as_u16();
        if status == 200 {
            let content_type = answer.headers().get("content-type");
            assert!(
                content_type.is_some_and(|v| v.as_bytes().starts_with(b"application/json")),
                "content-type {content_type:?}"
            );
        }
        (status, answer.text().await.expect("a body"))
    }
}

impl Example {
    pub(crate) fn payload(&self) -> Value {
        serde_json::from_str(self.payload).expect("the example's payload is JSON")
    }

    /// The interpreter to run: Python is the SDK tests' one when `FLARE_SDK_PYTHON` is set.
    fn program(&self) -> String {
        match std::env::var("FLARE_SDK_PYTHON") {
            Ok(python) if self.program == "python3" && !python.is_empty() => python,
            _ => self.program.to_string(),
        }
    }
}

/// True, after saying why, when `example` cannot run here (its interpreter, packages or modules
/// are missing); panics instead when `CI` is set. Otherwise builds its packages (once per test
/// process), so the example runs the SDK as it is in the tree.
fn missing(example: &Example, program: &str) -> bool {
    let runs = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .output()
            .is_ok_and(|out| out.status.success())
    };
    let why = if !runs(program, &["--version"]) {
        Some(format!("`{program}` is not installed"))
    } else if let Some(dir) = example
        .npm
        .iter()
        .find(|dir| !root().join(dir).join("node_modules").exists())
    {
        Some(format!(
            "{dir}/node_modules is missing (run `npm ci --prefix {dir}`)"
        ))
    } else if !example.modules.is_empty()
        && !runs(
            program,
            &["-c", &format!("import {}", example.modules.join(", "))],
        )
    {
        Some(format!(
            "`{program}` lacks {} (`pip install -r examples/endpoint-python/requirements.txt`, or set FLARE_SDK_PYTHON)",
            example.modules.join(" or ")
        ))
    } else {
        None
    };
    if let Some(why) = why {
        crate::support::skip::skip(&why);
        return true;
    }
    example.npm.iter().for_each(|dir| build(dir));
    false
}

/// `npm run build` in `dir`, once per test process.
fn build(dir: &'static str) {
    static BUILT: std::sync::Mutex<Vec<&str>> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if built.contains(&dir) {
        return;
    }
    let out = Command::new("npm")
        .args(["run", "--silent", "build"])
        .current_dir(root().join(dir))
        .output()
        .unwrap_or_else(|e| panic!("npm run build in {dir}: {e}"));
    assert!(
        out.status.success(),
        "npm run build in {dir} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    built.push(dir);
}
