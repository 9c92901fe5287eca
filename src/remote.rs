//! Talking to a running Flare server over HTTP: what `flare send` does (and, in [`webhook`],
//! `flare webhook send` and `flare webhook fixtures`).
//!
//! [`send`] posts `{"event", "payload", "id"?, "delay"?, "deliverAt"?, "context"?}` to
//! `<url>/trigger` with the API key as a Bearer
//! token and returns the server's JSON answer. Every failure is one [`Error`] whose message is a
//! single clear line (the key never appears in it).

pub mod webhook;

use std::time::Duration;

use serde_json::{json, Value};

/// How long to wait for the server.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Why a send through the server failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `--payload` is not JSON.
    #[error("--payload is not valid JSON: {0}")]
    Payload(serde_json::Error),
    /// `--context` is not JSON.
    #[error("--context is not valid JSON: {0}")]
    Context(serde_json::Error),
    /// The URL is not an http(s) URL.
    #[error("invalid --url {0:?}: expected something like http://127.0.0.1:3000")]
    Url(String),
    /// The server could not be reached or did not answer.
    #[error("cannot reach the Flare server at {url}: {reason}")]
    Connect {
        /// The URL tried.
        url: String,
        /// What went wrong.
        reason: String,
    },
    /// The server answered with an error.
    #[error("the server refused the event ({status}): {message}")]
    Refused {
        /// HTTP status.
        status: u16,
        /// The server's `error` message (or its body).
        message: String,
    },
    /// The server's answer is not JSON.
    #[error("the server's answer is not JSON ({0})")]
    Answer(String),
}

/// An event to send through a server.
#[derive(Debug, Clone)]
pub struct SendRequest {
    /// Event name.
    pub name: String,
    /// Payload as JSON text (`None` sends `null`).
    pub payload: Option<String>,
    /// Idempotency id: sending it again answers the stored event and starts nothing.
    pub id: Option<String>,
    /// Delay such as `2h` (the server validates it).
    pub delay: Option<String>,
    /// Delivery time, RFC 3339 (the server validates it).
    pub deliver_at: Option<String>,
    /// Context as JSON text, stored with the event.
    pub context: Option<String>,
    /// The program sending it (`flare`, or an application's binary), named in the hint when
    /// the server cannot be reached.
    pub program: String,
}

/// Sends `request` to the server at `base_url` (`http://127.0.0.1:3000`) and returns its answer.
pub async fn send(
    base_url: &str,
    api_key: Option<&str>,
    request: &SendRequest,
) -> Result<Value, Error> {
    let payload: Value = match &request.payload {
        Some(text) => serde_json::from_str(text).map_err(Error::Payload)?,
        None => Value::Null,
    };
    let context: Option<Value> = match &request.context {
        Some(text) => Some(serde_json::from_str(text).map_err(Error::Context)?),
        None => None,
    };
    let base = base_url.trim_end_matches('/');
    if !(base.starts_with("http://") || base.starts_with("https://")) {
        return Err(Error::Url(base_url.to_string()));
    }
    let url = format!("{base}/trigger");
    let mut body = json!({ "event": request.name, "payload": payload });
    if let Some(id) = &request.id {
        body["id"] = Value::String(id.clone());
    }
    if let Some(delay) = &request.delay {
        body["delay"] = Value::String(delay.clone());
    }
    if let Some(at) = &request.deliver_at {
        body["deliverAt"] = Value::String(at.clone());
    }
    if let Some(context) = context {
        body["context"] = context;
    }
    let client = reqwest::Client::builder()
        .timeout(TIMEOUT)
        .build()
        .map_err(|e| Error::Connect {
            url: url.clone(),
            reason: e.to_string(),
        })?;
    let mut req = client.post(&url).json(&body);
    // Trimmed as the server trims it (a key read from a file often ends with a newline).
    if let Some(key) = api_key.map(str::trim).filter(|k| !k.is_empty()) {
        req = req.bearer_auth(key);
    }
    let res = req.send().await.map_err(|e| Error::Connect {
        url: url.clone(),
        reason: connect_reason(&e, &request.program),
    })?;
    let status = res.status();
    let text = res.text().await.map_err(|e| Error::Connect {
        url: url.clone(),
        reason: connect_reason(&e, &request.program),
    })?;
    let parsed: Result<Value, _> = serde_json::from_str(&text);
    if !status.is_success() {
        let message = parsed
            .ok()
            .and_then(|v| v.get("error").and_then(Value::as_str).map(str::to_string))
            .unwrap_or_else(|| text.trim().chars().take(200).collect());
        return Err(Error::Refused {
            status: status.as_u16(),
            message,
        });
    }
    parsed.map_err(|e| Error::Answer(e.to_string()))
}

fn connect_reason(e: &reqwest::Error, program: &str) -> String {
    if e.is_timeout() {
        "timed out".into()
    } else if e.is_connect() {
        format!("connection refused or unreachable (is `{program} serve` running?)")
    } else {
        e.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_unreachable_server_hint_names_the_program() {
        let request = SendRequest {
            name: "a.b".into(),
            payload: None,
            id: None,
            delay: None,
            deliver_at: None,
            context: None,
            program: "my-app".into(),
        };
        // Nothing listens on port 1.
        let e = send("http://127.0.0.1:1", None, &request)
            .await
            .expect_err("unreachable");
        assert!(e.to_string().contains("is `my-app serve` running?"), "{e}");
    }
}
