//! Dashboard polish from a new user's trial (issue 25): `/send` in the navigation, times that say
//! their zone, chained event ids labelled as events, `/webhooks` saying when a provider's secret is not set, and an endpoint job's run
//! page not pointing at the Rust API.

use axum::http::StatusCode;
use serde_json::json;

use crate::fixture::{fixture, form, Auth, APP_SECRET};
use crate::support::endpoint_app::{job, EndpointApp};
use crate::support::wait_for;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_navigation_has_send_and_times_say_their_zone() {
    let f = fixture().await;
    let page = f.page("/events").await;
    let nav = page.split("<nav").nth(1).expect("a navigation");
    let nav = &nav[..nav.find("</nav>").unwrap_or(nav.len())];
    assert!(nav.contains("href=\"/send\""), "{nav}");
    let run = f
        .client
        .store()
        .event_detail(&f.user)
        .await
        .expect("read")
        .expect("event")
        .runs[0]
        .id
        .clone();
    let page = f.page(&format!("/runs/{run}")).await;
    assert!(
        page.contains("<span class=\"tz\"> UTC</span></time>"),
        "{page}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_say_when_a_providers_secret_is_not_set() {
    let f = fixture().await;
    let page = f.page("/webhooks").await;
    for (variable, route) in [
        ("STRIPE_WEBHOOK_SECRET", "/webhooks/payments"),
        ("CLERK_WEBHOOK_SECRET", "/webhooks/auth"),
    ] {
        assert!(
            page.contains(&format!(
                "<code>{variable}</code> is not set: <code>{route}</code> refuses every delivery"
            )),
            "{page}"
        );
    }
    let page = f.page("/webhooks?provider=auth").await;
    assert!(
        !page.contains("STRIPE_WEBHOOK_SECRET"),
        "only the one shown"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_jobs_run_page_does_not_point_at_the_rust_api() {
    let f = fixture().await;
    let app = EndpointApp::start(vec![job("ep-mail", "mail.requested")], None).await;
    let a = f
        .request(
            "POST",
            "/endpoints",
            Auth::Bearer,
            None,
            Some(&form(&[("url", &app.url), ("secret", APP_SECRET)])),
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    let sent = f
        .client
        .send_event("mail.requested", &json!({}))
        .await
        .expect("sent");
    let run = sent.run_ids[0].clone();
    wait_for("the endpoint's run to finish", || async {
        let d = f.client.store().run_detail(&run).await.ok()??;
        d.run.status.is_terminal().then_some(())
    })
    .await;
    let page = f.page(&format!("/runs/{run}")).await;
    assert!(
        page.contains("this run's endpoint recorded no tasks"),
        "{page}"
    );
    assert!(!page.contains("io.run_task"), "no Rust API named");
}
