//! `/metrics` for an operator's alerts (issue 25): readable with `FLARE_METRICS_TOKEN` (and only
//! `/metrics` with it), HTTP requests counted by route pattern and status, queued runs by what
//! they wait for.

use axum::http::StatusCode;

use crate::support::server::Server;

const KEY: &str = "metrics-test-api-key-0123456789";
const TOKEN: &str = "metrics-scrape-token-0123456789";

async fn get(url: &str, bearer: Option<&str>) -> (StatusCode, String) {
    let mut req = reqwest::Client::new().get(url);
    if let Some(b) = bearer {
        req = req.bearer_auth(b);
    }
    let res = req.send().await.expect("answer");
    let status = StatusCode::from_u16(res.status().as_u16()).expect("status");
    (status, res.text().await.expect("body"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_read_with_their_own_token_and_count_requests_by_route() {
    let server = Server::on_sqlite(|s| {
        s.api_key = Some(KEY.into());
        s.metrics_token = Some(TOKEN.into());
    })
    .await;
    let base = &server.url;
    // A run id the API does not know: its route pattern is the label, not the id.
    let (status, _) = get(&format!("{base}/api/runs/run_nope_123"), Some(KEY)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let (status, text) = get(&format!("{base}/metrics"), Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    for needle in [
        r#"flare_http_requests_total{method="GET",route="/api/runs/{id}",status="404"}"#,
        r#"flare_runs_waiting{reason="worker"} 0"#,
        r#"flare_runs_waiting{reason="paused"} 0"#,
    ] {
        assert!(text.contains(needle), "missing {needle} in\n{text}");
    }
    assert!(!text.contains("run_nope_123"), "ids never become labels");

    // The token reads the metrics and nothing else; the metrics still need a credential.
    let (status, _) = get(&format!("{base}/api/events"), Some(TOKEN)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = get(&format!("{base}/metrics"), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = get(&format!("{base}/metrics"), Some(KEY)).await;
    assert_eq!(status, StatusCode::OK);
    server.stop().await;
}
