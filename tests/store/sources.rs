//! Webhook sources and their refused deliveries in the store (issue 29), on both backends:
//! create (a taken id is a conflict), read, list, update, delete; secrets kept apart from the
//! settings; the last 100 refusals kept per source.

use flare::store::webhooks::REJECTIONS_STORED;
use flare::store::{Error, Store, StoredWebhookSource, WebhookRejection};
use serde_json::json;

use crate::backend_tests;
use crate::support::TestDb;

fn source(id: &str, at: i64) -> StoredWebhookSource {
    StoredWebhookSource {
        id: id.into(),
        definition: json!({"preset": "github"}),
        secrets: vec!["s1".into(), "s2".into()],
        created_at: at,
        updated_at: at,
    }
}

async fn sources_are_created_once_read_updated_and_deleted(db: TestDb) {
    let store = Store::open(&db.url).await.unwrap();
    store
        .webhook_source_create(source("github", 1))
        .await
        .unwrap();
    store
        .webhook_source_create(source("acme", 2))
        .await
        .unwrap();
    let again = store.webhook_source_create(source("github", 3)).await;
    assert!(matches!(again, Err(Error::Conflict(_))), "{again:?}");
    let got = store.webhook_source_get("github").await.unwrap().unwrap();
    assert_eq!(got, source("github", 1), "the first one kept");
    assert!(!format!("{got:?}").contains("s1"), "Debug hides secrets");
    let ids: Vec<String> = store
        .webhook_sources_list()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(ids, ["acme", "github"]);

    let mut changed = source("github", 1);
    changed.definition = json!({"preset": "github", "eventName": "gh.{payload.action}"});
    changed.secrets = vec!["s3".into()];
    changed.updated_at = 9;
    store.webhook_source_update(changed.clone()).await.unwrap();
    assert_eq!(
        store.webhook_source_get("github").await.unwrap(),
        Some(changed)
    );
    let missing = store.webhook_source_update(source("nope", 1)).await;
    assert!(
        matches!(missing, Err(Error::NotFound { .. })),
        "{missing:?}"
    );

    assert!(store.webhook_source_delete("github").await.unwrap());
    assert!(!store.webhook_source_delete("github").await.unwrap());
    assert_eq!(store.webhook_source_get("github").await.unwrap(), None);
    assert_eq!(store.webhook_source_get("a\0b").await.unwrap(), None);
    assert!(!store.webhook_source_delete("a\0b").await.unwrap());
}

async fn the_last_hundred_rejections_are_kept_per_source(db: TestDb) {
    let store = Store::open(&db.url).await.unwrap();
    for n in 0..(REJECTIONS_STORED as i64 + 20) {
        for source in ["github", "shopify"] {
            store
                .webhook_rejection_record(WebhookRejection {
                    source: source.into(),
                    at: flare::clock::ms_to_time(n * 1000),
                    status: 400,
                    reason: format!("r{n}"),
                })
                .await
                .unwrap();
        }
    }
    let kept = store.webhook_rejections_list("github", 1000).await.unwrap();
    assert_eq!(kept.len(), REJECTIONS_STORED);
    assert_eq!(
        kept[0].reason,
        format!("r{}", REJECTIONS_STORED + 19),
        "newest first"
    );
    assert_eq!(kept.last().unwrap().reason, "r20");
    assert_eq!(
        store
            .webhook_rejections_list("shopify", 5)
            .await
            .unwrap()
            .len(),
        5
    );
    assert!(store
        .webhook_rejections_list("nope", 5)
        .await
        .unwrap()
        .is_empty());
}

backend_tests!(
    sources_are_created_once_read_updated_and_deleted,
    the_last_hundred_rejections_are_kept_per_source,
);
