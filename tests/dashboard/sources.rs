//! Webhook sources on the dashboard (issue 29): a GitHub and a Shopify source added through the
//! form on /webhooks, each page with the URL to paste into the provider, a test delivery that
//! becomes `github.issues.opened` / `shopify.orders.create` with its events listed, a refused
//! delivery with its reason, Replay, and a cross-site post refused.

use axum::http::StatusCode;

use crate::fixture::{fixture, form, ORIGIN};

#[tokio::test]
async fn github_and_shopify_sources_are_added_tested_and_replayed_on_the_dashboard() {
    let f = fixture().await;
    let cookie = f.login().await;
    let list = f.page("/webhooks").await;
    assert!(list.contains("Add a source") && list.contains("/webhooks/payments"));

    let add = form(&[
        ("id", "github"),
        ("preset", "github"),
        ("secret", "gh-dash-secret"),
    ]);
    let a = f
        .post("/webhook-sources", &cookie, "http://evil.example", &add)
        .await;
    assert_eq!(
        a.status,
        StatusCode::FORBIDDEN,
        "cross-site posts are refused"
    );
    let a = f.post("/webhook-sources", &cookie, ORIGIN, &add).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert!(
        a.body.contains("http://flare.test/webhooks/github"),
        "the URL to paste"
    );
    assert!(!a.body.contains("gh-dash-secret"), "never shown back");
    let again = f.post("/webhook-sources", &cookie, ORIGIN, &add).await;
    assert_eq!(again.status, StatusCode::CONFLICT);
    assert!(again.body.contains("exists already") && !again.body.contains("gh-dash-secret"));
    let bad = form(&[("id", "shop"), ("preset", "shopify"), ("secret", "")]);
    assert_eq!(
        f.post("/webhook-sources", &cookie, ORIGIN, &bad)
            .await
            .status,
        StatusCode::BAD_REQUEST
    );
    let shop = form(&[
        ("id", "shop"),
        ("preset", "shopify"),
        ("secret", "shpss_dash"),
    ]);
    assert_eq!(
        f.post("/webhook-sources", &cookie, ORIGIN, &shop)
            .await
            .status,
        StatusCode::OK
    );

    for (id, name) in [
        ("github", "github.issues.opened"),
        ("shop", "shopify.orders.create"),
    ] {
        let tested = f
            .post(&format!("/webhook-sources/{id}/test"), &cookie, ORIGIN, "")
            .await;
        assert_eq!(tested.status, StatusCode::OK, "{}", tested.body);
        assert!(
            tested.body.contains("Test delivery answered 200"),
            "{}",
            tested.body
        );
        let deliveries = f
            .client
            .store()
            .webhook_deliveries_list(Some(id), 10)
            .await
            .expect("list");
        assert_eq!(deliveries.len(), 1, "{id}");
        let event = f
            .client
            .event(&deliveries[0].event_ids[0])
            .await
            .expect("read")
            .expect("stored");
        assert_eq!(event.name, name);
        let page = f.page(&format!("/webhook-sources/{id}")).await;
        assert!(
            page.contains(&deliveries[0].event_ids[0]),
            "the delivery's events are listed"
        );

        let replayed = f
            .post(
                &format!(
                    "/webhook-sources/{id}/deliveries/{}/replay",
                    deliveries[0].delivery_id
                ),
                &cookie,
                ORIGIN,
                "",
            )
            .await;
        assert_eq!(replayed.status, StatusCode::OK, "{}", replayed.body);
        assert!(replayed.body.contains("Replayed"));
    }

    // A forged delivery is listed with its reason.
    let forged = f
        .request(
            "POST",
            "/webhooks/github",
            crate::fixture::Auth::None,
            None,
            None,
        )
        .await;
    assert_eq!(forged.status, StatusCode::BAD_REQUEST);
    let page = f.page("/webhook-sources/github").await;
    assert!(page.contains("Refused deliveries (1)"), "{page}");
    assert!(page.contains("x-hub-signature-256"));
    let list = f.page("/webhooks?provider=github").await;
    assert!(list.contains("Rejected deliveries to /webhooks/github (1)"));
    assert_eq!(
        f.request(
            "GET",
            "/webhook-sources/nope",
            crate::fixture::Auth::Bearer,
            None,
            None
        )
        .await
        .status,
        StatusCode::NOT_FOUND
    );
}
