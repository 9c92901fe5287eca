//! Calls an endpoint: one signed `POST` (Standard Webhooks, with Flare's own signer), an answer
//! bounded in size and time, redirects refused, and only at addresses the [`AllowList`] lets
//! through (the URL as written before each call, the resolved addresses at connect time). Every
//! way a call can fail is a [`CallError`] that says what happened in words an operator can act
//! on; it never quotes the body of an answer that is not JSON (an endpoint URL may point at a
//! service that is no endpoint, whose answer the registering user must not read through Flare).

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderValue, CONTENT_TYPE, LOCATION};
use serde_json::Value;

use super::address::{AllowList, Refused, Resolver};
use crate::webhooks::svix;

/// Largest answer read from an endpoint, in bytes.
pub const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// How long Flare waits for a TCP (and TLS) connection to an endpoint.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How much of a failed answer's body is read: enough for a JSON error, not a whole page.
const ERROR_BODY_BYTES: usize = 16 * 1024;

/// Longest error message of a failed answer's JSON quoted in the error, in bytes.
const QUOTED_BYTES: usize = 200;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// Nothing answered: refused, unreachable, reset.
    #[error("could not reach the endpoint: {0}")]
    Unreachable(String),
    /// The URL's address, or every address its name resolves to, is one Flare does not call.
    #[error("{0}")]
    Refused(#[from] Refused),
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
    /// A status other than 2xx. Only the error message of a JSON answer is quoted.
    #[error("the endpoint answered HTTP {status}{}", said(.message))]
    Status {
        /// The status.
        status: u16,
        /// The answer's `error` or `message`, when it is a JSON object with one (cut).
        message: Option<String>,
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

fn said(message: &Option<String>) -> String {
    message
        .as_ref()
        .map(|m| format!(": {m}"))
        .unwrap_or_default()
}

/// An HTTP client for endpoints: one connection pool shared by every endpoint of the process.
#[derive(Clone, Debug)]
pub struct Caller {
    http: reqwest::Client,
    allow: Arc<AllowList>,
}

impl Default for Caller {
    fn default() -> Self {
        Self::new()
    }
}

impl Caller {
    /// A client that refuses redirects, gives up connecting after [`CONNECT_TIMEOUT`], and
    /// calls no link-local, metadata or unspecified address.
    pub fn new() -> Self {
        Self::with_allow(Arc::default())
    }

    /// [`Caller::new`], also calling the addresses and names `allow` lets through.
    pub fn with_allow(allow: Arc<AllowList>) -> Self {
        Self::with_resolver(Resolver::new(Arc::clone(&allow)), allow)
    }

    /// A client resolving names with `resolver` (tests: names that resolve to chosen
    /// addresses), which should check what it resolves against `allow` as [`Resolver::new`]'s does.
    pub fn with_resolver(resolver: Resolver, allow: Arc<AllowList>) -> Self {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("flare/", env!("CARGO_PKG_VERSION")))
            .dns_resolver(Arc::new(resolver))
            .build()
            .unwrap_or_default();
        Self { http, allow }
    }

    /// What this client calls besides the default.
    pub fn allow(&self) -> &AllowList {
        &self.allow
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
        if let Ok(parsed) = reqwest::Url::parse(url) {
            self.allow.check_url(&parsed)?;
        }
        let exchange = async {
            let mut request = self
                .http
                .post(url)
                .header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            for (name, value) in headers {
                request = request.header(*name, value);
            }
            let mut answer = request.body(bytes).send().await.map_err(failed)?;
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
            if !status.is_success() {
                // The status is the outcome: read only what a JSON error needs, and stop at
                // that bound (or at a broken body) rather than fail on the rest.
                let mut buf = Vec::new();
                let mut whole = true;
                while let Ok(Some(chunk)) = answer.chunk().await {
                    if buf.len() + chunk.len() > ERROR_BODY_BYTES {
                        whole = false;
                        break;
                    }
                    buf.extend_from_slice(&chunk);
                }
                return Err(CallError::Status {
                    status: status.as_u16(),
                    message: if whole { error_message(&buf) } else { None },
                });
            }
            if answer
                .content_length()
                .is_some_and(|n| n > MAX_ANSWER_BYTES as u64)
            {
                return Err(CallError::TooLarge);
            }
            let content_type = answer
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("no content type")
                .chars()
                .take(100)
                .collect::<String>();
            let mut buf = Vec::new();
            while let Some(chunk) = answer.chunk().await.map_err(failed)? {
                if buf.len() + chunk.len() > MAX_ANSWER_BYTES {
                    return Err(CallError::TooLarge);
                }
                buf.extend_from_slice(&chunk);
            }
            serde_json::from_slice(&buf).map_err(|e| {
                CallError::NotJson(format!(
                    "{e}; {} bytes of {content_type}, not shown",
                    buf.len()
                ))
            })
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(result) => result,
            Err(_) => Err(CallError::Timeout(timeout)),
        }
    }
}

/// The `error` or `message` of a JSON object answer (a string, or an object's `message`), cut
/// to [`QUOTED_BYTES`]. Nothing for any other answer: its body is not shown.
fn error_message(body: &[u8]) -> Option<String> {
    let answer: Value = serde_json::from_slice(body).ok()?;
    let field = |name: &str| match answer.get(name)? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("message")?.as_str().map(str::to_string),
        _ => None,
    };
    let mut text = field("error").or_else(|| field("message"))?;
    if text.len() > QUOTED_BYTES {
        let mut end = QUOTED_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    Some(text)
}

/// A request that got no answer: refused by the resolver (a name that resolves only to refused
/// addresses), or unreachable.
fn failed(e: reqwest::Error) -> CallError {
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        if let Some(refused) = cause.downcast_ref::<Refused>() {
            return CallError::Refused(refused.clone());
        }
        source = cause.source();
    }
    CallError::Unreachable(error_chain(&e))
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::net::IpAddr;

    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    use serde_json::json;

    use super::*;

    /// A server on a free loopback port answering every POST with `answer`; its base URL.
    async fn serve(answer: (StatusCode, &'static str, Vec<u8>)) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free port");
        let port = listener.local_addr().expect("bound").port();
        let router = axum::Router::new().fallback(move || {
            let (status, content_type, body) = answer.clone();
            async move { (status, [(CONTENT_TYPE, content_type)], body).into_response() }
        });
        tokio::spawn(async move { axum::serve(listener, router).await });
        format!("http://127.0.0.1:{port}/flare")
    }

    async fn call(caller: &Caller, url: &str) -> Result<Value, CallError> {
        caller
            .post(url, &[], b"{}".to_vec(), Duration::from_secs(5))
            .await
    }

    #[tokio::test]
    async fn a_failed_status_is_reported_whatever_the_size_of_its_body() {
        let huge = vec![b'x'; 20 * 1024 * 1024];
        let url = serve((StatusCode::INTERNAL_SERVER_ERROR, "text/plain", huge)).await;
        let err = call(&Caller::new(), &url).await.expect_err("a 500");
        assert!(
            matches!(
                err,
                CallError::Status {
                    status: 500,
                    message: None
                }
            ),
            "{err:?}"
        );
        assert_eq!(err.to_string(), "the endpoint answered HTTP 500");
    }

    #[tokio::test]
    async fn only_a_json_error_message_is_quoted() {
        let page = b"<html><h1>Internal admin</h1>AKIAIOSFODNN7EXAMPLE</html>".to_vec();
        let url = serve((StatusCode::BAD_GATEWAY, "text/html", page.clone())).await;
        let err = call(&Caller::new(), &url).await.expect_err("a 502");
        assert_eq!(err.to_string(), "the endpoint answered HTTP 502");

        // A 2xx that is not JSON: the error says so, with the size and type, not the body.
        let url = serve((StatusCode::OK, "text/html", page)).await;
        let err = call(&Caller::new(), &url)
            .await
            .expect_err("not JSON")
            .to_string();
        assert!(
            err.contains("not JSON") && err.contains("text/html"),
            "{err}"
        );
        assert!(!err.contains("AKIA") && !err.contains("admin"), "{err}");

        // A JSON error says what is wrong: its message is shown (cut), nothing else.
        let body = json!({"error": "no webhook-signature entry matches", "secret": "s3cr3t"});
        let url = serve((
            StatusCode::UNAUTHORIZED,
            "application/json",
            body.to_string().into_bytes(),
        ))
        .await;
        let err = call(&Caller::new(), &url)
            .await
            .expect_err("a 401")
            .to_string();
        assert_eq!(
            err,
            "the endpoint answered HTTP 401: no webhook-signature entry matches"
        );
        let long = json!({"message": "é".repeat(300)}).to_string().into_bytes();
        let url = serve((StatusCode::FORBIDDEN, "application/json", long)).await;
        let err = call(&Caller::new(), &url)
            .await
            .expect_err("a 403")
            .to_string();
        assert!(err.ends_with('…') && err.len() < 260, "{err}");
    }

    #[tokio::test]
    async fn refused_addresses_are_not_called_and_private_ones_are() {
        let err = call(&Caller::new(), "http://169.254.169.254/latest/meta-data/")
            .await
            .expect_err("refused");
        assert!(matches!(err, CallError::Refused(_)), "{err:?}");
        assert!(err.to_string().contains("cloud metadata"), "{err}");
        let err = call(&Caller::new(), "http://metadata.google.internal/")
            .await
            .expect_err("refused");
        assert!(matches!(err, CallError::Refused(_)), "{err:?}");

        let url = serve((StatusCode::OK, "application/json", b"{\"ok\":1}".to_vec())).await;
        let port = url.split(':').nth(2).and_then(|p| p.split('/').next());
        let port = port.expect("a port");
        let hosts: HashMap<String, Vec<IpAddr>> = [
            ("evil.test", vec!["169.254.169.254".parse().expect("ip")]),
            ("app.test", vec!["127.0.0.1".parse().expect("ip")]),
            (
                "both.test",
                vec![
                    "fe80::1".parse().expect("ip"),
                    "127.0.0.1".parse().expect("ip"),
                ],
            ),
            ("linklocal.test", vec!["fe80::1".parse().expect("ip")]),
        ]
        .into_iter()
        .map(|(n, ips)| (n.to_string(), ips))
        .collect();
        let caller = |allow: &[&str]| {
            let allow = Arc::new(AllowList::parse(allow).expect("valid"));
            Caller::with_resolver(
                Resolver::with_hosts(Arc::clone(&allow), hosts.clone()),
                allow,
            )
        };
        // A name that resolves to a metadata address is refused at connect time.
        let err = call(&caller(&[]), &format!("http://evil.test:{port}/flare"))
            .await
            .expect_err("refused");
        assert!(matches!(err, CallError::Refused(_)), "{err:?}");
        assert!(
            err.to_string()
                .contains("evil.test (it resolves to 169.254.169.254) is a cloud metadata service"),
            "{err}"
        );
        // Names of loopback (and private) addresses are called; a refused address beside an
        // allowed one is left out.
        for name in ["app.test", "both.test"] {
            let answer = call(&caller(&[]), &format!("http://{name}:{port}/flare")).await;
            assert_eq!(answer.expect(name), json!({"ok": 1}));
        }
        // Allowed: the connection is tried (an unscoped link-local address cannot be reached,
        // so it fails as unreachable, not refused).
        let err = call(&caller(&[]), &format!("http://linklocal.test:{port}/"))
            .await
            .expect_err("refused");
        assert!(matches!(err, CallError::Refused(_)), "{err:?}");
        let err = call(
            &caller(&["fe80::/10"]),
            &format!("http://linklocal.test:{port}/"),
        )
        .await
        .expect_err("unreachable");
        assert!(matches!(err, CallError::Unreachable(_)), "{err:?}");
        let err = call(&caller(&["fe80::1"]), "http://[fe80::1]:9/")
            .await
            .expect_err("unreachable");
        assert!(matches!(err, CallError::Unreachable(_)), "{err:?}");
    }
}
