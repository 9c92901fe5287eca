//! Every HTTP request counted once it is answered (`flare_http_requests_total{route, method,
//! status}`, [`crate::metrics::http_request`]): the route is the matched pattern
//! (`/api/runs/{id}`, so ids never become labels), `unmatched` for a path no route has.

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;

/// Counts the request with the status it was answered.
pub async fn count_requests(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |m| m.as_str().to_string());
    let method = req.method().as_str().to_string();
    let response = next.run(req).await;
    crate::metrics::http_request(&route, &method, response.status().as_u16());
    response
}
