//! Request bodies, with every failure answered as JSON.
//!
//! axum's own extractors answer a bad body with a plain-text rejection. The extractors here turn
//! each failure into an [`ApiError`] instead:
//!
//! - [`JsonBody`]: a JSON body with `Content-Type: application/json` (or `application/*+json`);
//!   another content type → 415, an empty body → 400 ("required fields are missing"), invalid
//!   JSON → 400, a body over the limit → 413.
//! - [`JsonObject`]: the same, and the body must be a JSON object (not an array read as a
//!   struct's fields in order).
//! - [`LenientJsonBody`]: the same, but any content type is accepted (for compatible ingest
//!   routes whose clients, such as `curl -d`, often send a form content type with a JSON body).
//! - [`RawBody`]: the exact bytes, for webhook signatures; only the size limit applies.
//!
//! A struct nested in a body is read with [`object`] (or [`optional_object`], [`objects`]) for
//! the same reason as [`JsonObject`]: an array is not taken as its fields in order.
//!
//! The size limit is axum's [`axum::extract::DefaultBodyLimit`], which [`super::app`] sets from
//! the configuration (1 MiB by default, [`DEFAULT_BODY_LIMIT`]).
//!
//! [`json_errors`] is the safety net for everything else (method not allowed, another module's
//! use of axum's extractors): an error answer that is not JSON is rewritten as `{"error": …}`.

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::de::{DeserializeOwned, Deserializer, Unexpected};
use serde::Deserialize;
use serde_json::Value;

use super::ApiError;

/// Largest request body accepted unless configured otherwise: 1 MiB.
pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;

/// Longest error body the safety net reads back to rewrite as JSON.
const MAX_ERROR_TEXT: usize = 16 * 1024;

/// The raw request body, exactly as received. A body over the limit is a JSON 413.
#[derive(Debug, Clone)]
pub struct RawBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        Bytes::from_request(req, state)
            .await
            .map(RawBody)
            .map_err(|rejection| {
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::PayloadTooLarge(
                        "the request body is larger than the server accepts".into(),
                    )
                } else if timed_out(&rejection) {
                    ApiError::RequestTimeout(
                        "the request body did not arrive in time (--body-timeout-secs)".into(),
                    )
                } else {
                    ApiError::BadRequest(format!(
                        "the request body could not be read: {}",
                        rejection.body_text()
                    ))
                }
            })
    }
}

/// A JSON body that must be sent as `application/json`.
#[derive(Debug, Clone)]
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = json_bytes(req, state).await?;
        parse(&bytes).map(JsonBody)
    }
}

/// A JSON body like [`JsonBody`] that must also be an object: a derived `Deserialize` takes a
/// struct's fields in order from an array too (`["user.created", {…}]`), which no route means.
#[derive(Debug, Clone)]
pub struct JsonObject<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonObject<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = json_bytes(req, state).await?;
        let value = parse(&bytes)?;
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(ApiError::BadRequest(
                "the request body must be a JSON object".into(),
            ));
        }
        Ok(JsonObject(value))
    }
}

/// For `#[serde(deserialize_with = "…")]` on a field holding a struct: the value must be a JSON
/// object (a derived `Deserialize` also reads an array as the fields in order).
pub fn object<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<T, D::Error> {
    from_object(Value::deserialize(d)?)
}

/// [`object`] for an optional field: `null` is `None`.
pub fn optional_object<'de, D: Deserializer<'de>, T: DeserializeOwned>(
    d: D,
) -> Result<Option<T>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        value => from_object(value).map(Some),
    }
}

/// [`object`] for every item of an array.
pub fn objects<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Vec<T>, D::Error> {
    Vec::<Value>::deserialize(d)?
        .into_iter()
        .map(from_object)
        .collect()
}

fn from_object<E: serde::de::Error, T: DeserializeOwned>(value: Value) -> Result<T, E> {
    let unexpected = match &value {
        Value::Object(_) => return T::deserialize(value).map_err(E::custom),
        Value::Array(_) => Unexpected::Seq,
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(_) => Unexpected::Other("number"),
        Value::String(s) => Unexpected::Str(s),
    };
    Err(E::invalid_type(unexpected, &"a JSON object"))
}

/// The body of a request that must be JSON: the content type is checked, the bytes returned.
async fn json_bytes<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
    let content_type = req.headers().get(CONTENT_TYPE).cloned();
    let RawBody(bytes) = RawBody::from_request(req, state).await?;
    if is_blank(&bytes) && content_type.is_none() {
        return Err(missing_body());
    }
    if !content_type.as_ref().is_some_and(is_json_content_type) {
        return Err(ApiError::UnsupportedMediaType(
            "expected a JSON body with `Content-Type: application/json`".into(),
        ));
    }
    Ok(bytes)
}

/// A JSON body, whatever the content type says.
#[derive(Debug, Clone)]
pub struct LenientJsonBody<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for LenientJsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let RawBody(bytes) = RawBody::from_request(req, state).await?;
        parse(&bytes).map(LenientJsonBody)
    }
}

/// Whether reading the body failed because it did not arrive within the body timeout
/// ([`super::connections`]).
fn timed_out(rejection: &axum::extract::rejection::BytesRejection) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(rejection);
    while let Some(e) = source {
        if e.is::<tower_http::timeout::TimeoutError>() {
            return true;
        }
        source = e.source();
    }
    false
}

fn is_blank(bytes: &[u8]) -> bool {
    bytes.iter().all(u8::is_ascii_whitespace)
}

fn missing_body() -> ApiError {
    ApiError::BadRequest("the request body is empty: required fields are missing".into())
}

/// `application/json`, `application/json; charset=utf-8`, `application/cloudevents+json`, …
fn is_json_content_type(value: &HeaderValue) -> bool {
    let Ok(text) = value.to_str() else {
        return false;
    };
    let essence = text.split(';').next().unwrap_or("").trim();
    let Some((kind, subtype)) = essence.split_once('/') else {
        return false;
    };
    kind.eq_ignore_ascii_case("application")
        && (subtype.eq_ignore_ascii_case("json") || subtype.to_ascii_lowercase().ends_with("+json"))
}

/// Parses `bytes` as `T`, telling a syntax error from a shape error.
fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if is_blank(bytes) {
        return Err(missing_body());
    }
    serde_json::from_slice(bytes).map_err(|e| {
        use serde_json::error::Category;
        match e.classify() {
            Category::Data => ApiError::BadRequest(format!("invalid request body: {e}")),
            Category::Syntax | Category::Eof | Category::Io => {
                ApiError::BadRequest(format!("the request body is not valid JSON: {e}"))
            }
        }
    })
}

/// Middleware (`axum::middleware::map_response`): an error answer (4xx/5xx) whose body is not
/// JSON (plain text, or empty) is rewritten as `{"error": "<its text or the status reason>"}`,
/// keeping the status and headers. HTML answers are left alone (pages render their own errors).
pub async fn json_errors(res: Response) -> Response {
    let status = res.status();
    if !(status.is_client_error() || status.is_server_error()) || !needs_rewrite(res.headers()) {
        return res;
    }
    let (mut parts, body) = res.into_parts();
    let text = match axum::body::to_bytes(body, MAX_ERROR_TEXT).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim().to_string(),
        Err(_) => String::new(),
    };
    let message = if text.is_empty() || status.is_server_error() {
        status
            .canonical_reason()
            .unwrap_or("error")
            .to_ascii_lowercase()
    } else {
        text
    };
    let json = serde_json::json!({ "error": message }).to_string();
    parts.headers.remove(CONTENT_LENGTH);
    parts
        .headers
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Response::from_parts(parts, Body::from(json)).into_response()
}

fn needs_rewrite(headers: &HeaderMap) -> bool {
    match headers.get(CONTENT_TYPE) {
        None => true,
        Some(v) => v
            .to_str()
            .map(|t| {
                t.trim_start()
                    .to_ascii_lowercase()
                    .starts_with("text/plain")
            })
            .unwrap_or(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_structs_must_be_objects() {
        #[derive(Debug, Deserialize, PartialEq)]
        struct Inner {
            #[serde(default)]
            a: Option<i64>,
        }
        #[derive(Debug, Deserialize, PartialEq)]
        struct Outer {
            #[serde(deserialize_with = "object")]
            one: Inner,
            #[serde(default, deserialize_with = "optional_object")]
            maybe: Option<Inner>,
            #[serde(default, deserialize_with = "objects")]
            many: Vec<Inner>,
        }
        let read = |v: Value| serde_json::from_value::<Outer>(v);
        let outer = read(serde_json::json!({"one": {"a": 1}, "maybe": null, "many": [{}]}))
            .expect("objects");
        assert_eq!(outer.one, Inner { a: Some(1) });
        assert_eq!(outer.maybe, None);
        assert_eq!(outer.many, [Inner { a: None }]);
        for bad in [
            serde_json::json!({"one": [1]}),
            serde_json::json!({"one": {}, "maybe": [null]}),
            serde_json::json!({"one": {}, "many": [[2]]}),
            serde_json::json!({"one": "a"}),
        ] {
            let err = read(bad.clone()).expect_err("not objects").to_string();
            assert!(err.contains("expected a JSON object"), "{bad}: {err}");
        }
    }

    #[test]
    fn json_content_types_are_recognised() {
        for ok in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/cloudevents+json",
        ] {
            assert!(is_json_content_type(&HeaderValue::from_static(ok)), "{ok}");
        }
        for bad in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "json",
            "application/jsonx",
        ] {
            assert!(
                !is_json_content_type(&HeaderValue::from_static(bad)),
                "{bad}"
            );
        }
    }

    #[tokio::test]
    async fn plain_error_answers_become_json_and_others_are_left_alone() {
        let plain = (StatusCode::BAD_REQUEST, "Failed to parse the request body").into_response();
        let res = json_errors(plain).await;
        assert_eq!(res.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            res.headers().get(CONTENT_TYPE).map(|v| v.as_bytes()),
            Some(&b"application/json"[..])
        );
        let body = axum::body::to_bytes(res.into_body(), 1024)
            .await
            .expect("body");
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&body).expect("json"),
            serde_json::json!({"error": "Failed to parse the request body"})
        );

        let empty = json_errors(StatusCode::METHOD_NOT_ALLOWED.into_response()).await;
        let body = axum::body::to_bytes(empty.into_body(), 1024)
            .await
            .expect("body");
        assert_eq!(&body[..], br#"{"error":"method not allowed"}"#);

        let html = (
            StatusCode::NOT_FOUND,
            [(CONTENT_TYPE, "text/html")],
            "<p>gone</p>",
        )
            .into_response();
        let kept = json_errors(html).await;
        let body = axum::body::to_bytes(kept.into_body(), 1024)
            .await
            .expect("body");
        assert_eq!(&body[..], b"<p>gone</p>");

        let ok = json_errors((StatusCode::OK, "fine").into_response()).await;
        let body = axum::body::to_bytes(ok.into_body(), 1024)
            .await
            .expect("body");
        assert_eq!(&body[..], b"fine");
    }

    #[test]
    fn syntax_and_shape_errors_read_differently() {
        let syntax = parse::<serde_json::Value>(b"{nope").unwrap_err();
        assert!(syntax.to_string().contains("not valid JSON"), "{syntax}");
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct Needs {
            x: u8,
        }
        let shape = parse::<Needs>(br#"{"x": "a"}"#).unwrap_err();
        assert!(
            shape.to_string().starts_with("invalid request body"),
            "{shape}"
        );
        let empty = parse::<Needs>(b"  ").unwrap_err();
        assert!(
            empty.to_string().contains("required fields are missing"),
            "{empty}"
        );
    }
}
