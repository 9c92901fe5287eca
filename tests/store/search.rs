//! Behaviour suite: the payload search over all time and the per-minute event counts, on every
//! backend. SQLite indexes events behind a watermark (`store/sqlite/search.rs`), so a search must
//! find events on both sides of it; pruning must take events out of the index; the statistics
//! read the event counts, which pruning must keep true (the suite's drift check after each test
//! compares them, and the index, with the rows). A search longer than
//! [`MAX_SEARCH_CHARS`] is refused by the store and so by every HTTP entry point.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use flare::store::query::{EventQuery, StatsQuery, StatsWindow, MAX_SEARCH_CHARS};
use flare::store::{NewEvent, Store};
use flare::ManualClock;
use serde_json::{json, Value};

use crate::backend_tests;
use crate::support::{self, http, TestDb};

const HOUR: i64 = 3_600_000;

fn event(id: &str, payload: Value, now: i64) -> NewEvent {
    NewEvent {
        id: id.into(),
        name: "user.created".into(),
        payload,
        context: None,
        source: "api".into(),
        parent_run_id: None,
        deliver_at: None,
        now,
    }
}

async fn insert(store: &Store, id: &str, payload: Value, now: i64) {
    store
        .event_insert_many(vec![event(id, payload, now)])
        .await
        .expect("insert");
}

/// Indexes until the index caught up; returns how many events it added.
async fn index_all(store: &Store) -> usize {
    let mut total = 0;
    loop {
        let n = store.search_index(2).await.expect("index");
        total += n;
        if n < 2 {
            return total;
        }
    }
}

async fn search(store: &Store, text: &str) -> Vec<String> {
    let page = store
        .events_list(EventQuery {
            q: Some(text.into()),
            limit: 50,
            ..EventQuery::default()
        })
        .await
        .expect("search");
    page.items.into_iter().map(|s| s.event.id).collect()
}

fn now() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

async fn search_finds_indexed_and_not_yet_indexed_events(db: TestDb) {
    let store = Store::open(&db.url).await.expect("open");
    let t = now();
    insert(
        &store,
        "evt_old",
        json!({"email": "ada@example.com", "n": "50%"}),
        t,
    )
    .await;
    insert(&store, "evt_other", json!({"email": "bob@example.com"}), t).await;
    insert(&store, "evt_mid", json!({"email": "Ada@Example.com"}), t).await;
    let indexed = index_all(&store).await;
    insert(&store, "evt_new", json!({"email": "ADA@example.COM"}), t).await;
    if db.backend == support::Backend::Sqlite {
        assert_eq!(indexed, 3);
        assert_eq!(store.search_backlog().await.expect("backlog"), 1);
    }
    // Newest first across the tail and the index, ASCII case folded as before.
    assert_eq!(
        search(&store, "ada@example.com").await,
        ["evt_new", "evt_mid", "evt_old"]
    );
    // Wildcards are text; a term too short for the index is scanned.
    assert_eq!(search(&store, "\"50%\"").await, ["evt_old"]);
    assert_eq!(search(&store, "50").await, ["evt_old"]);
    assert!(search(&store, "nobody@").await.is_empty());
    // Pages continue from the tail into the index.
    let first = store
        .events_list(EventQuery {
            q: Some("example".into()),
            limit: 2,
            ..EventQuery::default()
        })
        .await
        .expect("page");
    let ids: Vec<_> = first.items.iter().map(|s| s.event.id.as_str()).collect();
    assert_eq!(ids, ["evt_new", "evt_mid"]);
    let next = store
        .events_list(EventQuery {
            q: Some("example".into()),
            limit: 2,
            cursor: first.next_cursor,
            ..EventQuery::default()
        })
        .await
        .expect("page");
    let ids: Vec<_> = next.items.iter().map(|s| s.event.id.as_str()).collect();
    assert_eq!(ids, ["evt_other", "evt_old"]);
    index_all(&store).await;
    assert_eq!(store.search_backlog().await.expect("backlog"), 0);
    assert_eq!(
        search(&store, "ada@example.com").await,
        ["evt_new", "evt_mid", "evt_old"]
    );
}

async fn pruned_events_leave_the_search_index(db: TestDb) {
    let store = Store::open(&db.url).await.expect("open");
    let t = now();
    insert(&store, "evt_a", json!({"tag": "needle"}), t - 3 * HOUR).await;
    insert(&store, "evt_b", json!({"tag": "needle"}), t - 3 * HOUR).await;
    index_all(&store).await;
    assert_eq!(store.events_prune(t - HOUR, 100).await.expect("prune"), 2);
    assert!(search(&store, "needle").await.is_empty());
    // Every event is gone, so SQLite hands the next one the first seq again: it must count as
    // not indexed, and indexing it must not meet the pruned events' index rows.
    insert(&store, "evt_c", json!({"tag": "needle"}), t).await;
    assert_eq!(search(&store, "needle").await, ["evt_c"]);
    index_all(&store).await;
    assert_eq!(search(&store, "needle").await, ["evt_c"]);
    assert!(store.rollups_drift().await.expect("drift").is_empty());
}

async fn statistics_count_events_from_the_rollup_that_pruning_keeps(db: TestDb) {
    let store = Store::open(&db.url).await.expect("open");
    let t = now();
    for i in 0..3 {
        insert(&store, &format!("evt_{i}"), json!({"i": i}), t - 3 * HOUR).await;
    }
    insert(&store, "evt_recent", json!({}), t).await;
    let day = || async {
        store
            .stats(StatsQuery {
                window: StatsWindow::Day,
                now: flare::model::ms_to_time(t),
            })
            .await
            .expect("stats")
            .events
    };
    assert_eq!(day().await, 4);
    assert!(store.rollups_drift().await.expect("drift").is_empty());
    assert_eq!(store.events_prune(t - HOUR, 100).await.expect("prune"), 3);
    assert_eq!(day().await, 1);
    assert!(store.rollups_drift().await.expect("drift").is_empty());
}

/// One request to `app` from the dashboard's own origin: the status and the body's text.
async fn call(
    app: &axum::Router,
    method: &str,
    uri: &str,
    body: Option<(&str, String)>,
) -> (StatusCode, String) {
    let mut req = Request::builder()
        .method(method)
        .uri(uri)
        .header("host", "127.0.0.1:3000")
        .header("origin", "http://127.0.0.1:3000");
    let body = match body {
        Some((content_type, text)) => {
            req = req.header("content-type", content_type);
            Body::from(text)
        }
        None => Body::empty(),
    };
    let answer = http::call(app, req.body(body).expect("request")).await;
    (answer.status, answer.text)
}

/// The limit is in characters, one more is refused: by the store, and so by the API's list and
/// bulk replay (a JSON 400) and the dashboard's list and bulk form (a 400 page saying why).
async fn a_search_longer_than_the_limit_is_refused_everywhere(db: TestDb) {
    let client = db.sender(&ManualClock::new(now())).await;
    let store = client.store();
    insert(store, "evt_long", json!({ "t": "é".repeat(300) }), now()).await;
    index_all(store).await;
    // Counted in characters: the longest term, two bytes each, is searched.
    let longest = "é".repeat(MAX_SEARCH_CHARS);
    assert_eq!(search(store, &longest).await, ["evt_long"]);
    let over = "é".repeat(MAX_SEARCH_CHARS + 1);
    let err = store
        .events_list(EventQuery {
            q: Some(over.clone()),
            ..EventQuery::default()
        })
        .await
        .expect_err("too long");
    assert!(matches!(err, flare::store::Error::Invalid(_)), "{err:?}");

    let app = support::sample::router(&client, db.url.clone(), None);
    let encoded = "%C3%A9".repeat(MAX_SEARCH_CHARS + 1);
    let said = format!("at most {MAX_SEARCH_CHARS}");
    let (status, body) = call(&app, "GET", &format!("/api/events?q={encoded}"), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let error: Value = serde_json::from_str(&body).expect("JSON");
    assert!(
        error["error"].as_str().expect("error").contains(&said),
        "{body}"
    );
    let replay = json!({"action": "replay", "dryRun": true, "filter": {"q": over}});
    let (status, body) = call(
        &app,
        "POST",
        "/api/events/bulk",
        Some(("application/json", replay.to_string())),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let error: Value = serde_json::from_str(&body).expect("JSON");
    assert!(
        error["error"].as_str().expect("error").contains(&said),
        "{body}"
    );
    let (status, page) = call(&app, "GET", &format!("/events?q={encoded}"), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        page.contains("error-message") && page.contains(&said),
        "{page}"
    );
    let form = format!("action=replay&q={encoded}");
    let (status, page) = call(
        &app,
        "POST",
        "/events/bulk",
        Some(("application/x-www-form-urlencoded", form)),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        page.contains("error-message") && page.contains(&said),
        "{page}"
    );

    // The longest term passes everywhere.
    let encoded = "%C3%A9".repeat(MAX_SEARCH_CHARS);
    let (status, body) = call(&app, "GET", &format!("/api/events?q={encoded}"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("evt_long"));
    let (status, page) = call(&app, "GET", &format!("/events?q={encoded}"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("evt_long"));
    // The form says so before anything is sent.
    assert!(page.contains(&format!("maxlength=\"{MAX_SEARCH_CHARS}\"")));
}

backend_tests!(
    a_search_longer_than_the_limit_is_refused_everywhere,
    search_finds_indexed_and_not_yet_indexed_events,
    pruned_events_leave_the_search_index,
    statistics_count_events_from_the_rollup_that_pruning_keeps,
);
