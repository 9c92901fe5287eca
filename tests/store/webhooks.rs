//! Behaviour suite: verified webhook deliveries in the store, on every backend — dedupe per
//! provider, all-or-nothing writes, the same delivery arriving at several nodes at once,
//! retention, and the webhook routes answering alike on both stores for text PostgreSQL cannot
//! hold (a NUL character).

use flare::store::{NewEvent, NewWebhookDelivery, Store};
use flare::Clock;
use futures::future::join_all;
use serde_json::{json, Value};

use crate::backend_tests;
use crate::support::server::settings;
use crate::support::{self, http, TestDb};

fn delivery(provider: &str, id: &str, n: usize, at: i64) -> NewWebhookDelivery {
    NewWebhookDelivery {
        provider: provider.into(),
        delivery_id: id.into(),
        event_type: "thing.happened".into(),
        raw_body: format!("{{\"id\":\"{id}\"}}").into_bytes(),
        received_at: at,
        events: (0..n)
            .map(|i| NewEvent {
                id: format!("{provider}:{id}:{i}"),
                name: "thing.happened".into(),
                payload: json!({"i": i}),
                context: None,
                source: format!("webhook:{provider}"),
                parent_run_id: None,
                deliver_at: None,
                now: at,
            })
            .collect(),
    }
}

async fn deliveries_dedupe_per_provider_and_list_newest_first(db: TestDb) {
    let store = Store::open(&db.url).await.unwrap();
    let first = store
        .webhook_record(delivery("payments", "evt_1", 2, 1000))
        .await
        .unwrap();
    assert!(!first.duplicate);
    assert_eq!(first.event_ids, ["payments:evt_1:0", "payments:evt_1:1"]);
    assert_eq!(first.events.len(), 2);

    // Same delivery again, even with other events: nothing new, the original ids.
    let again = store
        .webhook_record(delivery("payments", "evt_1", 3, 2000))
        .await
        .unwrap();
    assert!(again.duplicate);
    assert_eq!(again.event_ids, first.event_ids);
    assert!(again.events.is_empty());
    assert!(store.event_get("payments:evt_1:2").await.unwrap().is_none());

    // The same id from another provider is another delivery.
    let other = store
        .webhook_record(delivery("auth", "evt_1", 1, 3000))
        .await
        .unwrap();
    assert!(!other.duplicate);

    let all = store.webhook_deliveries_list(None, 10).await.unwrap();
    assert_eq!(
        all.iter().map(|d| d.provider.as_str()).collect::<Vec<_>>(),
        ["auth", "payments"]
    );
    assert_eq!(all[1].raw_body, "{\"id\":\"evt_1\"}");
    assert_eq!(all[1].outcome, "accepted");
    let payments = store
        .webhook_deliveries_list(Some("payments"), 10)
        .await
        .unwrap();
    assert_eq!(payments.len(), 1);
    assert_eq!(
        store.webhook_deliveries_list(None, 1).await.unwrap().len(),
        1
    );
}

async fn a_failed_write_records_neither_the_delivery_nor_its_events(db: TestDb) {
    let store = Store::open(&db.url).await.unwrap();
    store.health_fail_writes(true).await.unwrap();
    let err = store
        .webhook_record(delivery("payments", "evt_9", 2, 1000))
        .await
        .expect_err("storage is down");
    assert!(err.is_unavailable(), "{err}");
    store.health_fail_writes(false).await.unwrap();
    assert!(store
        .webhook_deliveries_list(None, 10)
        .await
        .unwrap()
        .is_empty());
    assert!(store.event_get("payments:evt_9:0").await.unwrap().is_none());
}

async fn one_delivery_reaching_several_nodes_at_once_is_recorded_once(db: TestDb) {
    let mut stores = Vec::new();
    for _ in 0..4 {
        stores.push(Store::open(&db.url).await.unwrap());
    }
    let outcomes = join_all(
        stores
            .iter()
            .map(|s| s.webhook_record(delivery("payments", "evt_7", 2, 1000))),
    )
    .await;
    let outcomes: Vec<_> = outcomes.into_iter().map(|o| o.unwrap()).collect();
    assert_eq!(outcomes.iter().filter(|o| !o.duplicate).count(), 1);
    for o in &outcomes {
        assert_eq!(o.event_ids, ["payments:evt_7:0", "payments:evt_7:1"]);
    }
    assert_eq!(
        stores[0]
            .webhook_deliveries_list(None, 10)
            .await
            .unwrap()
            .len(),
        1
    );
}

/// The pruner deletes deliveries (raw bodies included) received before the retention, as it does
/// finished events, and keeps younger ones.
async fn the_pruner_deletes_deliveries_past_the_retention(db: TestDb) {
    let day = std::time::Duration::from_secs(86_400);
    let config = flare::EngineConfig {
        retention: Some(7 * day),
        ..support::test_config()
    };
    let (client, clock) = db.client_with(config).await;
    let store = client.store();
    let now = clock.now_ms();
    store
        .webhook_record(delivery("payments", "evt_old", 1, now))
        .await
        .unwrap();
    store
        .webhook_record(delivery("auth", "msg_old", 1, now))
        .await
        .unwrap();
    clock.advance(6 * day);
    store
        .webhook_record(delivery("payments", "evt_new", 1, clock.now_ms()))
        .await
        .unwrap();
    let pruner = client.engine().maintenance();
    pruner.prune_once().await.unwrap();
    assert_eq!(
        store.webhook_deliveries_list(None, 10).await.unwrap().len(),
        3
    );

    clock.advance(2 * day);
    pruner.prune_once().await.unwrap();
    let left: Vec<String> = store
        .webhook_deliveries_list(None, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.delivery_id)
        .collect();
    assert_eq!(
        left,
        ["evt_new"],
        "the deliveries past the retention are pruned"
    );
    assert!(
        store
            .event_get("payments:evt_old:0")
            .await
            .unwrap()
            .is_none(),
        "with the events they produced"
    );
    // Pruning in batches walks past any number of old deliveries.
    for i in 0..5 {
        store
            .webhook_record(delivery("auth", &format!("msg_{i}"), 0, clock.now_ms()))
            .await
            .unwrap();
    }
    assert_eq!(
        store
            .webhook_deliveries_prune(clock.now_ms() + 1, 2)
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        store
            .webhook_deliveries_prune(clock.now_ms() + 1, 100)
            .await
            .unwrap(),
        4
    );
    assert!(store
        .webhook_deliveries_list(None, 10)
        .await
        .unwrap()
        .is_empty());
}

const STRIPE_SECRET: &str = "whsec_test_stripe_secret_0123456789";
/// `whsec_` + base64 of 24 bytes.
const CLERK_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// Signed deliveries through the real routes on `db`: answers `(status, body)`.
struct Routes {
    router: axum::Router,
    now_s: i64,
}

impl Routes {
    async fn new(db: &TestDb) -> (Routes, flare::Client) {
        let (client, clock) = db.client().await;
        let config = flare::config::RawServe {
            stripe_secrets: Some(STRIPE_SECRET.into()),
            clerk_secrets: Some(CLERK_SECRET.into()),
            ..settings(&db.url)
        }
        .validate()
        .unwrap();
        let router = flare::http::app(flare::http::AppState::new(client.clone(), config));
        let routes = Routes {
            router,
            now_s: clock.now_ms() / 1000,
        };
        (routes, client)
    }

    async fn send(&self, path: &str, headers: Vec<(String, String)>, body: &[u8]) -> (u16, Value) {
        let mut req = axum::http::Request::post(path)
            .header("host", "127.0.0.1:3000")
            .header("content-type", "application/json");
        for (name, value) in headers {
            req = req.header(name, value);
        }
        let req = req.body(axum::body::Body::from(body.to_vec())).unwrap();
        let answer = http::call(&self.router, req).await;
        (answer.status.as_u16(), answer.json)
    }

    async fn stripe(&self, body: &Value) -> (u16, Value) {
        let body = body.to_string().into_bytes();
        let signature = flare::webhooks::stripe::sign(STRIPE_SECRET, self.now_s, &body);
        let headers = vec![("stripe-signature".to_string(), signature)];
        self.send("/webhooks/payments", headers, &body).await
    }

    async fn clerk(&self, id: &str, body: &Value) -> (u16, Value) {
        let body = body.to_string().into_bytes();
        let signature = flare::webhooks::svix::sign(CLERK_SECRET, id, self.now_s, &body).unwrap();
        let headers = vec![
            ("svix-id".to_string(), id.to_string()),
            ("svix-timestamp".to_string(), self.now_s.to_string()),
            ("svix-signature".to_string(), signature),
        ];
        self.send("/webhooks/auth", headers, &body).await
    }
}

/// PostgreSQL's `text` cannot hold a NUL character (error 22021) while SQLite's can, so a signed
/// delivery whose `type` held one was stored on SQLite and answered 503 on PostgreSQL, which
/// the provider retries for days. On both stores now: a 400 naming the field (the provider
/// stops), nothing stored; a NUL inside the payload is stored (escaped JSON) on both.
async fn a_delivery_whose_stored_text_holds_nul_is_refused_alike(db: TestDb) {
    let (routes, client) = Routes::new(&db).await;
    let object = json!({"id": "in_1", "amount_paid": 100});
    for (body, field) in [
        (
            json!({"id": "evt_nul_type", "type": "invoice.paid\u{0}x", "data": {"object": object}}),
            "`type`",
        ),
        (
            json!({"id": "evt_nul\u{0}id", "type": "invoice.paid", "data": {"object": object}}),
            "`id`",
        ),
    ] {
        let (status, answer) = routes.stripe(&body).await;
        assert_eq!(status, 400, "{body}: {answer}");
        let error = answer["error"].as_str().unwrap();
        assert!(error.contains(field) && error.contains("NUL"), "{error}");
    }
    let user = json!({"id": "user_1", "email_addresses": []});
    let (status, answer) = routes
        .clerk(
            "msg_nul",
            &json!({"type": "user.created\u{0}", "data": user, "object": "event"}),
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    let error = answer["error"].as_str().unwrap();
    assert!(error.contains("`type`") && error.contains("NUL"), "{error}");
    let store = client.store();
    assert!(store
        .webhook_deliveries_list(None, 10)
        .await
        .unwrap()
        .is_empty());
    assert!(store.event_get("auth:msg_nul:0").await.unwrap().is_none());
    assert!(store
        .event_get("payments:evt_nul_type:0")
        .await
        .unwrap()
        .is_none());

    // Text inside the payload is stored as JSON, where a NUL is escaped: kept on both stores.
    let odd = json!({"id": "in_2", "description": "a\u{0}b"});
    let body = json!({"id": "evt_nul_payload", "type": "invoice.paid", "data": {"object": odd}});
    let (status, answer) = routes.stripe(&body).await;
    assert_eq!(status, 200, "{answer}");
    let raw = store
        .event_get("payments:evt_nul_payload:1")
        .await
        .unwrap()
        .expect("stored");
    assert_eq!(raw.payload["object"]["description"], "a\u{0}b");
    assert_eq!(
        store.webhook_deliveries_list(None, 10).await.unwrap().len(),
        1
    );
}

backend_tests!(
    a_delivery_whose_stored_text_holds_nul_is_refused_alike,
    the_pruner_deletes_deliveries_past_the_retention,
    deliveries_dedupe_per_provider_and_list_newest_first,
    a_failed_write_records_neither_the_delivery_nor_its_events,
    one_delivery_reaching_several_nodes_at_once_is_recorded_once,
);
