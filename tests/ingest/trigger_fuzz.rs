//! `POST /trigger` fuzzed with `proptest`: arbitrary bytes and arbitrary JSON values go through the
//! router, and each answer is checked against what was stored. The cases share one application
//! (one SQLite database), so their number is kept modest.

use std::cell::RefCell;
use std::collections::HashMap;

use axum::body::Body;
use axum::http::Request;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Map, Value};

use crate::app::{start, TestApp};

/// Cases per property: each one is a request and an SQLite transaction.
const CASES: u32 = 300;

/// Any JSON value, a few levels deep, with any strings (NUL and astral characters included).
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from), // NaN and infinities become null
        any::<String>().prop_map(Value::from),
        "[a-z.]{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::btree_map(any::<String>(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Mostly valid event names (some the demo jobs listen to), sometimes anything.
fn event_field() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => "[a-z0-9_-]{1,10}(\\.[a-z0-9_-]{1,10}){0,3}".prop_map(Value::from),
        1 => prop::sample::select(vec!["user.created", "file.uploaded", "payment.succeeded", "audit.noted"])
            .prop_map(Value::from),
        1 => "[a-zA-Z0-9._ -]{0,12}".prop_map(Value::from),
        1 => "[a-z]{190,210}".prop_map(Value::from),
        1 => json_value(),
    ]
}

/// Delays in every form the route knows, and some it must refuse.
fn delay_field() -> impl Strategy<Value = Value> {
    let unit = prop_oneof![
        (0.0..100.0_f64).prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        json_value(),
    ];
    prop_oneof![
        "[0-9]{1,4}(s|m|h|d)".prop_map(Value::from),
        "([0-9]{1,3}[smhd]){1,3}".prop_map(Value::from),
        "([0-9]{15,20}[smhd]){1,3}".prop_map(Value::from),
        any::<String>().prop_map(Value::from),
        prop::collection::btree_map(
            prop::sample::select(vec!["seconds", "minutes", "hours", "days", "weeks"]),
            unit,
            0..3,
        )
        .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        json_value(),
    ]
}

/// RFC 3339 times around the test clock (2030), and other text.
fn deliver_at_field() -> impl Strategy<Value = Value> {
    prop_oneof![
        (1_800_000_000..1_950_000_000_i64).prop_map(|secs| {
            let at = chrono::DateTime::from_timestamp(secs, 0).expect("in range");
            Value::from(at.to_rfc3339())
        }),
        any::<String>().prop_map(Value::from),
        json_value(),
    ]
}

/// Idempotency ids: short ones that repeat across cases, long ones, anything.
fn id_field() -> impl Strategy<Value = Value> {
    prop_oneof![
        "id-[0-9]{1,2}".prop_map(Value::from),
        any::<String>().prop_map(Value::from),
        "[a-z]{250,260}".prop_map(Value::from),
        json_value(),
    ]
}

/// A `/trigger` body: an object with some of the known fields (and now and then an unknown one),
/// or any JSON value at all.
fn trigger_body() -> impl Strategy<Value = Value> {
    let field = |s: BoxedStrategy<Value>| prop::option::weighted(0.5, s);
    let object = (
        prop::option::weighted(0.9, event_field()),
        field(json_value().boxed()),
        field(id_field().boxed()),
        prop::option::weighted(0.2, delay_field()),
        prop::option::weighted(0.2, deliver_at_field()),
        field(json_value().boxed()),
        prop::option::weighted(0.1, ("[a-zA-Z_]{1,10}", json_value())),
    )
        .prop_map(
            |(event, payload, id, delay, deliver_at, context, unknown)| {
                let mut body = Map::new();
                let known = [
                    ("event", event),
                    ("payload", payload),
                    ("id", id),
                    ("delay", delay),
                    ("deliverAt", deliver_at),
                    ("context", context),
                ];
                for (key, value) in known {
                    if let Some(value) = value {
                        body.insert(key.into(), value);
                    }
                }
                if let Some((key, value)) = unknown {
                    body.insert(key, value);
                }
                Value::Object(body)
            },
        );
    prop_oneof![4 => object, 1 => json_value()]
}

/// A byte-level change to a serialized body.
#[derive(Debug, Clone)]
enum Damage {
    Flip(Index, u8),
    Insert(Index, u8),
    Remove(Index),
    Truncate(Index),
}

/// Raw bodies: arbitrary bytes, or a generated body's JSON text with a few bytes damaged.
fn raw_body() -> impl Strategy<Value = Vec<u8>> {
    let damage = prop_oneof![
        (any::<Index>(), 0..8_u8).prop_map(|(i, b)| Damage::Flip(i, b)),
        (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Damage::Insert(i, b)),
        any::<Index>().prop_map(Damage::Remove),
        any::<Index>().prop_map(Damage::Truncate),
    ];
    let damaged =
        (trigger_body(), prop::collection::vec(damage, 0..3)).prop_map(|(body, damage)| {
            let mut bytes = body.to_string().into_bytes();
            for d in damage {
                let len = bytes.len();
                match d {
                    Damage::Flip(i, bit) if len > 0 => bytes[i.index(len)] ^= 1 << bit,
                    Damage::Insert(i, b) => bytes.insert(i.index(len + 1), b),
                    Damage::Remove(i) if len > 0 => {
                        bytes.remove(i.index(len));
                    }
                    Damage::Truncate(i) => bytes.truncate(i.index(len + 1)),
                    _ => {}
                }
            }
            bytes
        });
    prop_oneof![
        1 => prop::collection::vec(any::<u8>(), 0..512),
        3 => damaged,
    ]
}

/// Content types: JSON ones the route accepts, none, and others it refuses.
fn content_type() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        6 => Just(Some("application/json".to_owned())),
        1 => Just(Some("application/cloudevents+json; charset=utf-8".to_owned())),
        1 => Just(None),
        1 => Just(Some("text/plain".to_owned())),
        1 => "[ -~]{0,30}".prop_map(Some),
    ]
}

/// The application under test, what it stored, and the first event stored under each id.
struct Harness {
    app: TestApp,
    runtime: tokio::runtime::Runtime,
    by_id: RefCell<HashMap<String, (String, Value)>>,
}

impl Harness {
    fn new() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let app = runtime.block_on(start(|_| {}));
        Self {
            app,
            runtime,
            by_id: RefCell::default(),
        }
    }

    /// Events stored from HTTP. Not all events: the demo jobs send some of their own, at any time.
    fn stored_events(&self) -> i64 {
        let path = self.app._dir.path().join("flare.db");
        let conn = rusqlite::Connection::open(path).expect("open the database");
        conn.query_row(
            "SELECT count(*) FROM events WHERE source = 'http'",
            [],
            |row| row.get(0),
        )
        .expect("count events")
    }

    /// Posts `body` and checks the answer against the database:
    /// - never a 5xx;
    /// - a 4xx is JSON `{"error": "<message>"}` and stores nothing;
    /// - a 2xx stores one event (none when its `id` was stored before) whose name and payload are
    ///   the body's (the first event's when the `id` repeats), and answers with it.
    fn check(&self, content_type: Option<&str>, body: Vec<u8>) -> Result<(), TestCaseError> {
        let parsed: Option<Value> = serde_json::from_slice(&body).ok();
        let mut req = Request::post("/trigger");
        if let Some(ct) = content_type {
            req = req.header("content-type", ct);
        }
        let req = req.body(Body::from(body)).expect("request");
        let before = self.stored_events();
        let res = self.runtime.block_on(self.app.call(req));
        let after = self.stored_events();
        let status = res.status;
        prop_assert!(!status.is_server_error(), "{status}: {}", res.text);
        if status.is_client_error() {
            let ct = res
                .headers
                .get("content-type")
                .and_then(|v| v.to_str().ok());
            prop_assert_eq!(ct, Some("application/json"), "{}", res.text);
            prop_assert!(res.json["error"].is_string(), "{status}: {}", res.text);
            prop_assert_eq!(res.json.as_object().map(Map::len), Some(1), "{}", res.text);
            prop_assert_eq!(after, before, "a {} stored an event", status);
            return Ok(());
        }
        prop_assert!(status.is_success(), "{status}: {}", res.text);
        let body =
            parsed.ok_or_else(|| TestCaseError::fail("a 2xx for a body that is not JSON"))?;
        let name = body["event"]
            .as_str()
            .ok_or_else(|| TestCaseError::fail(format!("a 2xx without an event name: {body}")))?;
        let payload = body.get("payload").cloned().unwrap_or(Value::Null);
        let id = res.json["result"]["id"]
            .as_str()
            .ok_or_else(|| TestCaseError::fail(format!("no result.id in {}", res.text)))?
            .to_owned();
        let earlier = body["id"]
            .as_str()
            .and_then(|id| self.by_id.borrow().get(id).cloned());
        let (name, payload) = match earlier {
            Some(first) => {
                prop_assert_eq!(after, before, "a repeated id stored a second event");
                first
            }
            None => {
                prop_assert_eq!(after, before + 1, "a 2xx stored no new event");
                if let Some(given) = body["id"].as_str() {
                    prop_assert_eq!(&id, given);
                }
                self.by_id
                    .borrow_mut()
                    .insert(id.clone(), (name.to_owned(), payload.clone()));
                (name.to_owned(), payload)
            }
        };
        let stored = self
            .runtime
            .block_on(self.app.client.event(&id))
            .expect("read the event")
            .ok_or_else(|| TestCaseError::fail(format!("{id} was answered but not stored")))?;
        prop_assert_eq!(&stored.name, &name);
        prop_assert_eq!(&stored.payload, &payload);
        prop_assert_eq!(&res.json["result"]["name"], &Value::from(name));
        prop_assert_eq!(&res.json["result"]["payload"], &payload);
        Ok(())
    }
}

fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    })
}

/// Any JSON value posted as `application/json` never gets a 5xx; a 4xx is a JSON error and stores
/// nothing; a 2xx means the event is stored with the body's name and payload.
#[test]
fn any_json_body_is_stored_as_given_or_refused_with_a_json_error() {
    let harness = Harness::new();
    runner()
        .run(&trigger_body(), |body| {
            harness.check(Some("application/json"), body.to_string().into_bytes())
        })
        .expect("property holds");
}

/// Arbitrary and damaged bytes under any content type (or none) never get a 5xx; a 4xx is a JSON
/// error and stores nothing; a 2xx means the event is stored with the body's name and payload.
#[test]
fn any_bytes_are_stored_as_given_or_refused_with_a_json_error() {
    let harness = Harness::new();
    runner()
        .run(&(content_type(), raw_body()), |(ct, body)| {
            harness.check(ct.as_deref(), body)
        })
        .expect("property holds");
}
