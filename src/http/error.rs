//! The HTTP error: one enum for every handler, turned into `{"error": "..."}` with the right status.
//! 4xx messages say exactly what is wrong; 5xx messages never show internals (those are logged).

use axum::http::StatusCode;
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
    /// 413: the body is too large.
    #[error("{0}")]
    PayloadTooLarge(String),
    /// 415: wrong content type.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// 422: the request was understood but what it names cannot be used (an HTTP job endpoint
    /// whose index failed or was refused).
    #[error("{0}")]
    Unprocessable(String),
    /// 503: storage or a needed secret is unavailable; try again later.
    #[error("{0}")]
    Unavailable(String),
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
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
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
        if status == StatusCode::UNAUTHORIZED {
            res.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        res
    }
}

impl From<store::Error> for ApiError {
    fn from(e: store::Error) -> Self {
        match e {
            store::Error::NotFound { .. } => ApiError::NotFound(e.to_string()),
            store::Error::Conflict(msg) => ApiError::Conflict(msg),
            other => {
                tracing::error!(error = %other, "storage failure");
                ApiError::Unavailable(
                    "storage is unavailable; nothing was stored, try again".into(),
                )
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
            client::Error::NoDefaultClient => ApiError::Internal(e.to_string()),
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
