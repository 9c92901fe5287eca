//! The HTTP error: one enum for every handler, turned into `{"error": "..."}` with the right status.
//! 4xx messages say exactly what is wrong; 5xx messages never show internals (those are logged).
//!
//! A storage failure says whether anything could have been stored: [`ApiError::Storage`] answers
//! "nothing was stored" by default, and [`storage_reads`] (a middleware keyed on the method)
//! turns the answer to a `GET` or `HEAD`, which stores nothing, into "could not read".

use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::client;
use crate::store;

/// An error answer.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400: the request is wrong; the message says how.
    #[error("{0}")]
    BadRequest(String),
    /// 401: missing or wrong credentials.
    #[error("{0}")]
    Unauthorized(String),
    /// 403: not allowed (e.g. a cross-origin form post).
    #[error("{0}")]
    Forbidden(String),
    /// 404: no such resource.
    #[error("{0}")]
    NotFound(String),
    /// 421: this server does not serve the name the request was sent to (without an API key,
    /// only loopback names; see [`super::guard`]).
    #[error("{0}")]
    Misdirected(String),
    /// 409: the resource is in the wrong state.
    #[error("{0}")]
    Conflict(String),
    /// 408: the request (its body) did not arrive in time.
    #[error("{0}")]
    RequestTimeout(String),
    /// 413: the body is too large.
    #[error("{0}")]
    PayloadTooLarge(String),
    /// 429: too many wrong API keys from this client; `Retry-After` says when to try again.
    #[error("{message}")]
    TooManyRequests {
        /// What to tell the client.
        message: String,
        /// Seconds until it may try again.
        retry_after_secs: u64,
    },
    /// 415: wrong content type.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// 422: the request was understood but what it names cannot be used (an HTTP job endpoint
    /// whose index failed or was refused).
    #[error("{0}")]
    Unprocessable(String),
    /// 503: a needed secret or service is unavailable; try again later.
    #[error("{0}")]
    Unavailable(String),
    /// 501: a feature of a compatible API that Flare does not have; the message names it.
    #[error("{0}")]
    NotImplemented(String),
    /// 503: storage failed (the cause is logged where the error is made); try again later.
    #[error("{}", .0.message())]
    Storage(Access),
    /// 500: a bug. The cause is logged, not shown.
    #[error("internal error")]
    Internal(String),
}

impl ApiError {
    /// The status code.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Misdirected(_) => StatusCode::MISDIRECTED_REQUEST,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::RequestTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::Unavailable(_) | ApiError::Storage(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::NotImplemented(_) => StatusCode::NOT_IMPLEMENTED,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let message = match &self {
            ApiError::Internal(cause) => {
                tracing::error!(%cause, "internal error");
                "internal error".to_string()
            }
            other => other.to_string(),
        };
        let mut res = (status, Json(json!({ "error": message }))).into_response();
        if let ApiError::Storage(Access::Write) = self {
            res.extensions_mut().insert(StorageFailure {
                read_answer: || ApiError::Storage(Access::Read).into_response(),
            });
        }
        if let ApiError::TooManyRequests {
            retry_after_secs, ..
        } = self
        {
            res.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(retry_after_secs),
            );
        }
        if status == StatusCode::UNAUTHORIZED {
            res.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        res
    }
}

/// What a request that met a storage failure was doing, which decides what its answer says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Reading only (`GET`, `HEAD`): nothing was to be stored.
    Read,
    /// Anything else: it may have meant to store something, and nothing was stored.
    Write,
}

impl Access {
    /// What the 503 answer says.
    pub fn message(self) -> &'static str {
        match self {
            Access::Read => "storage is unavailable: could not read what was asked for; try again",
            Access::Write => "storage is unavailable; nothing was stored, try again",
        }
    }
}

/// Marks an answer to a storage failure that says "nothing was stored"; carries how to answer
/// the same failure for a request that only read. Set by [`ApiError`] and by the dashboard's
/// error pages, used by [`storage_reads`].
#[derive(Clone, Copy)]
pub struct StorageFailure {
    /// Builds the answer for a `GET` or `HEAD` (same status and format, "could not read").
    pub read_answer: fn() -> Response,
}

/// Middleware (`axum::middleware::map_response`): the answer to a `GET` or `HEAD` that met a
/// storage failure says it could not read, not that nothing was stored. Other answers pass as
/// they are.
pub async fn storage_reads(method: Method, res: Response) -> Response {
    if method != Method::GET && method != Method::HEAD {
        return res;
    }
    match res.extensions().get::<StorageFailure>() {
        Some(failure) => (failure.read_answer)(),
        None => res,
    }
}

/// Logs a storage failure an answer reports, through `throttle` (the process's storage failures'
/// throttle: during an outage every request fails the same way, 16,040 ERROR lines in 12 s once,
/// so the first is logged, then one per 10 s with the count).
fn log_storage_failure(
    throttle: &crate::log_throttle::LogThrottle,
    error: &store::Error,
    now_ms: i64,
) {
    if let Some(suppressed) = throttle.admit("http:storage", now_ms) {
        tracing::error!(%error, suppressed, "storage failure; requests answer 503");
    }
}

impl From<store::Error> for ApiError {
    fn from(e: store::Error) -> Self {
        match e {
            store::Error::NotFound { .. } => ApiError::NotFound(e.to_string()),
            store::Error::Conflict(msg) => ApiError::Conflict(msg),
            store::Error::Invalid(msg) => ApiError::BadRequest(msg),
            other => {
                log_storage_failure(
                    crate::log_throttle::storage(),
                    &other,
                    crate::log_throttle::storage_now_ms(),
                );
                ApiError::Storage(Access::Write)
            }
        }
    }
}

impl From<client::Error> for ApiError {
    fn from(e: client::Error) -> Self {
        match e {
            client::Error::Storage(inner) => inner.into(),
            client::Error::NotFound(msg) => ApiError::NotFound(msg),
            client::Error::Conflict(msg) => ApiError::Conflict(msg),
            client::Error::NoDefaultClient | client::Error::SchemaTooNew(_) => {
                ApiError::Internal(e.to_string())
            }
            other => ApiError::BadRequest(other.to_string()),
        }
    }
}

impl From<crate::endpoints::Error> for ApiError {
    fn from(e: crate::endpoints::Error) -> Self {
        use crate::endpoints::Error;
        match e {
            Error::Url { .. } | Error::Secret(_) => ApiError::BadRequest(e.to_string()),
            Error::Index { .. } => ApiError::Unprocessable(e.to_string()),
            Error::Store(inner) => inner.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_outage_logs_a_line_then_a_summary_per_ten_seconds() {
        let throttle = crate::log_throttle::LogThrottle::default();
        let lines = crate::log_throttle::logged(|| {
            for ms in 0..12_000 {
                super::log_storage_failure(&throttle, &crate::store::Error::Closed, ms);
            }
        });
        assert_eq!(lines.len(), 2, "{lines:#?}");
        assert!(lines[0].contains("suppressed=0"), "{}", lines[0]);
        assert!(lines[1].contains("suppressed=9999"), "{}", lines[1]);
    }
}
