//! Calls an endpoint: one signed `POST` (Standard Webhooks, with Flare's own signer), an answer
//! bounded in size and time, redirects refused. Every way a call can fail is a [`CallError`]
//! that says what happened in words an operator can act on.

use std::time::Duration;

use reqwest::header::{HeaderValue, CONTENT_TYPE, LOCATION};
use serde_json::Value;

use crate::webhooks::svix;

/// Largest answer read from an endpoint, in bytes.
pub const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// How long Flare waits for a TCP (and TLS) connection to an endpoint.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How much of a failed answer's body is quoted in the error.
const QUOTED_BYTES: usize = 200;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// Nothing answered: refused, unreachable, reset.
    #[error("could not reach the endpoint: {0}")]
    Unreachable(String),
    /// No whole answer in time.
    #[error("the endpoint did not answer within {0:?}")]
    Timeout(Duration),
    /// A 3xx: Flare does not follow redirects (it only calls URLs an operator registered).
    #[error("the endpoint answered {status} redirecting to {location:?}; Flare does not follow redirects: register the final URL")]
    Redirect {
        /// The status.
        status: u16,
        /// Where it pointed.
        location: String,
    },
    /// A status other than 2xx.
    #[error("the endpoint answered HTTP {status}: {body}")]
    Status {
        /// The status.
        status: u16,
        /// The start of the body.
        body: String,
    },
    /// More than [`MAX_ANSWER_BYTES`].
    #[error("the endpoint's answer is larger than {MAX_ANSWER_BYTES} bytes")]
    TooLarge,
    /// The answer is not JSON.
    #[error("the endpoint's answer is not JSON ({0})")]
    NotJson(String),
    /// The endpoint's secret cannot sign (checked at registration; kept for completeness).
    #[error("cannot sign the request: {0}")]
    Sign(#[from] crate::webhooks::VerifyError),
}

/// An HTTP client for endpoints: one connection pool shared by every endpoint of the process.
#[derive(Clone, Debug)]
pub struct Caller {
    http: reqwest::Client,
}

impl Default for Caller {
    fn default() -> Self {
        Self::new()
    }
}

impl Caller {
    /// A client that refuses redirects and gives up connecting after [`CONNECT_TIMEOUT`].
    pub fn new() -> Self {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("flare/", env!("CARGO_PKG_VERSION")))
            .build()
            .unwrap_or_default();
        Self { http }
    }

    /// POSTs `body` to `url`, signed with `secret`, and reads the JSON answer within `timeout`.
    pub async fn call(
        &self,
        url: &str,
        secret: &str,
        body: &Value,
        timeout: Duration,
    ) -> Result<Value, CallError> {
        let bytes = serde_json::to_vec(body).map_err(|e| CallError::NotJson(e.to_string()))?;
        let id = format!("msg_{}", uuid::Uuid::now_v7().simple());
        let timestamp = chrono::Utc::now().timestamp();
        let signature = svix::sign(secret, &id, timestamp, &bytes)?;
        let headers = [
            ("webhook-id", id),
            ("webhook-timestamp", timestamp.to_string()),
            ("webhook-signature", signature),
        ];
        self.post(url, &headers, bytes, timeout).await
    }

    /// POSTs the JSON `bytes` to `url` with `headers`, and reads the JSON answer within
    /// `timeout` (bounded in size, no redirects). The Trigger.dev v2 protocol calls it with its
    /// `x-trigger-*` headers instead of a signature.
    pub async fn post(
        &self,
        url: &str,
        headers: &[(&str, String)],
        bytes: Vec<u8>,
        timeout: Duration,
    ) -> Result<Value, CallError> {
        let exchange = async {
            let mut request = self
                .http
                .post(url)
                .header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            for (name, value) in headers {
                request = request.header(*name, value);
            }
            let mut answer = request
                .body(bytes)
                .send()
                .await
                .map_err(|e| CallError::Unreachable(error_chain(&e)))?;
            let status = answer.status();
            if status.is_redirection() {
                let location = answer
                    .headers()
                    .get(LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                return Err(CallError::Redirect {
                    status: status.as_u16(),
                    location,
                });
            }
            if answer
                .content_length()
                .is_some_and(|n| n > MAX_ANSWER_BYTES as u64)
            {
                return Err(CallError::TooLarge);
            }
            let mut buf = Vec::new();
            while let Some(chunk) = answer
                .chunk()
                .await
                .map_err(|e| CallError::Unreachable(error_chain(&e)))?
            {
                if !status.is_success() && buf.len() >= QUOTED_BYTES {
                    break;
                }
                if buf.len() + chunk.len() > MAX_ANSWER_BYTES {
                    return Err(CallError::TooLarge);
                }
                buf.extend_from_slice(&chunk);
            }
            if !status.is_success() {
                return Err(CallError::Status {
                    status: status.as_u16(),
                    body: quote(&buf),
                });
            }
            serde_json::from_slice(&buf)
                .map_err(|e| CallError::NotJson(format!("{e}; it starts with {:?}", quote(&buf))))
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(result) => result,
            Err(_) => Err(CallError::Timeout(timeout)),
        }
    }
}

/// The first bytes of a body, as text.
fn quote(body: &[u8]) -> String {
    let end = body.len().min(QUOTED_BYTES);
    let mut text = String::from_utf8_lossy(&body[..end]).into_owned();
    if body.len() > QUOTED_BYTES {
        text.push('…');
    }
    text
}

/// The error with its causes ("error sending request: connection refused").
fn error_chain(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
