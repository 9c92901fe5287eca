//! Behaviour suite: `io.wait_for_event` — a run waits (holding no slot) for the first matching
//! event sent after it reached the wait, matched by a payload field or a CEL condition; every
//! matching waiter gets it; the timeout resumes it with nothing; an event committed while runs
//! are on their way into the wait is never missed (concurrent senders).

use std::time::Duration;

use flare::store::RunDetail;
use flare::{
    event_trigger, Client, Clock, Io, Job, RunStatus, SendEvent, StepKind, StepStatus, StoredEvent,
    WaitFor,
};
use serde_json::{json, Value};

use crate::backend_tests;
use crate::support::http::{call, json_request};
use crate::support::{insert_alone, sample, settled, wait_for, Backend, TestDb};

const DAY: Duration = Duration::from_secs(86_400);

/// Waits for `invoice.paid` of its invoice (and, when the payload says so, a CEL condition);
/// outputs the id of the event it got, or null.
fn payer() -> Job {
    Job::new("payer", "Payer", "1.0.0")
        .trigger(event_trigger("invoice.created"))
        .run(|p: Value, io: Io| async move {
            let mut wait = WaitFor::timeout(3 * DAY);
            if p["byAmount"] == json!(true) {
                wait = wait.condition("async.payload.amount >= event.payload.amount");
            } else {
                wait = wait.matching("payload.invoiceId");
            }
            let paid = io.wait_for_event("paid", "invoice.paid", wait).await?;
            Ok(json!({ "paid": paid.map(|e| e.id) }))
        })
}

/// Waits until `run_id` waits for its event, holding no slot.
async fn waiting(client: &Client, run_id: &str) -> RunDetail {
    wait_for("the run to wait for its event", || async {
        let d = client.store().run_detail(run_id).await.unwrap()?;
        let waiting = d
            .steps
            .iter()
            .any(|s| s.kind == StepKind::EventWait && s.status == StepStatus::Waiting);
        (waiting && d.run.status == RunStatus::Queued).then_some(d)
    })
    .await
}

async fn output(client: &Client, event_id: &str) -> Value {
    let d = settled(client, event_id).await;
    assert_eq!(d.runs[0].status, RunStatus::Succeeded, "{:?}", d.runs[0]);
    d.runs[0].output.clone().unwrap_or(Value::Null)["paid"].clone()
}

async fn a_matching_event_resumes_the_waiting_run_and_others_do_not(db: TestDb) {
    let (client, clock) = db.client().await;
    client.define_job(payer()).unwrap();
    let a = client
        .send_event("invoice.created", &json!({ "invoiceId": "in_a" }))
        .await
        .unwrap();
    let b = client
        .send_event("invoice.created", &json!({ "invoiceId": "in_b" }))
        .await
        .unwrap();
    waiting(&client, &a.run_ids[0]).await;
    waiting(&client, &b.run_ids[0]).await;
    assert_eq!(client.engine().in_flight(), 0, "waiting runs hold no slot");

    // Another invoice's payment and another event name resume nothing.
    client
        .send_event("invoice.paid", &json!({ "invoiceId": "in_c" }))
        .await
        .unwrap();
    client
        .send_event("invoice.sent", &json!({ "invoiceId": "in_b" }))
        .await
        .unwrap();
    let paid = client
        .send_event("invoice.paid", &json!({ "invoiceId": "in_b" }))
        .await
        .unwrap();
    assert_eq!(output(&client, &b.id).await, json!(paid.id));
    let d = waiting(&client, &a.run_ids[0]).await;
    assert_eq!(d.run.status, RunStatus::Queued, "in_a still waits");
    let step = &client
        .store()
        .run_detail(&b.run_ids[0])
        .await
        .unwrap()
        .unwrap()
        .steps[0];
    assert_eq!(step.status, StepStatus::Succeeded);
    assert_eq!(
        step.output.as_ref().unwrap()["payload"]["invoiceId"],
        "in_b"
    );

    // Its timeout: resumed with nothing, three days after it reached the wait.
    clock.advance(3 * DAY - Duration::from_secs(1));
    client.engine().wake();
    tokio::time::sleep(Duration::from_millis(100)).await;
    waiting(&client, &a.run_ids[0]).await;
    clock.advance(Duration::from_secs(1));
    client.engine().wake();
    assert_eq!(output(&client, &a.id).await, Value::Null);

    // A payment after the timeout changes nothing.
    client
        .send_event("invoice.paid", &json!({ "invoiceId": "in_a" }))
        .await
        .unwrap();
    assert_eq!(output(&client, &a.id).await, Value::Null);
}

/// A wait on a match path no earlier wait of its event name used is found by the next event
/// of that name (PostgreSQL's event writer looks waits up by the paths it read last time, and
/// must look again when it reads one it did not know), and the event lists the run it resumed.
async fn a_wait_on_a_new_match_path_is_found_by_the_next_event(db: TestDb) {
    let (client, clock) = db.client().await;
    client.define_job(payer()).unwrap();
    client.define_job(shipper()).unwrap();
    // The name sent while no run waits for it: no path known.
    client
        .send_event(
            "invoice.paid",
            &json!({ "invoiceId": "in_a", "orderId": "o_1" }),
        )
        .await
        .unwrap();
    // Later than it: a wait resumes with events sent since it was reached.
    clock.advance(Duration::from_secs(1));
    for (start, key, paid) in [
        (
            "invoice.created",
            "invoiceId",
            json!({ "invoiceId": "in_a" }),
        ),
        ("order.created", "orderId", json!({ "orderId": "o_1" })),
    ] {
        let ev = client.send_event(start, &paid).await.unwrap();
        waiting(&client, &ev.run_ids[0]).await;
        let sent = client.send_event("invoice.paid", &paid).await.unwrap();
        assert_eq!(output(&client, &ev.id).await, json!(sent.id), "{key}");
        let d = client
            .store()
            .event_detail(&sent.id)
            .await
            .unwrap()
            .unwrap();
        let resumed: Vec<&str> = d.resumed_runs.iter().map(|r| r.run_id.as_str()).collect();
        assert_eq!(resumed, vec![ev.run_ids[0].as_str()], "{key}");
    }
}

/// A client whose payer waits for `in_a`, and a send-only second process (a second writer on
/// the database) whose writer has read the waits of `invoice.paid` as they are then; the clock
/// a second past, so that waits reached from now on are later than what it sent.
async fn waits_read_by_another_process(db: &TestDb) -> (Client, Client, StoredEvent) {
    let (client, clock) = db.client().await;
    let sender = db.sender(&clock).await;
    client.define_job(payer()).unwrap();
    let first = client
        .send_event("invoice.created", &json!({ "invoiceId": "in_a" }))
        .await
        .unwrap();
    waiting(&client, &first.run_ids[0]).await;
    let other = sender
        .send_event("invoice.paid", &json!({ "invoiceId": "in_z" }))
        .await
        .unwrap();
    assert!(other.run_ids.is_empty());
    clock.advance(Duration::from_secs(1));
    (client, sender, first)
}

/// A wait registered by one process is found by an event another process sends, also when that
/// other process already knew the waits of that name (SQLite: its writer's set of the values
/// waited for learns of the others' waits from `wait_log`).
async fn a_wait_registered_by_another_process_is_found_by_its_events(db: TestDb) {
    let (client, sender, first) = waits_read_by_another_process(&db).await;
    for key in ["in_b", "in_c"] {
        let ev = client
            .send_event("invoice.created", &json!({ "invoiceId": key }))
            .await
            .unwrap();
        waiting(&client, &ev.run_ids[0]).await;
        let paid = sender
            .send_event("invoice.paid", &json!({ "invoiceId": key }))
            .await
            .unwrap();
        assert_eq!(output(&client, &ev.id).await, json!(paid.id), "{key}");
    }
    let paid = sender
        .send_event("invoice.paid", &json!({ "invoiceId": "in_a" }))
        .await
        .unwrap();
    assert_eq!(output(&client, &first.id).await, json!(paid.id));
}

/// SQLite's writer keeps the values waited for (read from `wait_log` as other processes
/// register waits); when the log's entries past what it holds were trimmed, it reads the waits
/// again instead of missing those.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_wait_whose_log_entry_was_trimmed_is_still_found() {
    let db = TestDb::new(Backend::Sqlite).await;
    let (client, sender, _first) = waits_read_by_another_process(&db).await;
    let mut created = Vec::new();
    for key in ["in_b", "in_c"] {
        let ev = client
            .send_event("invoice.created", &json!({ "invoiceId": key }))
            .await
            .unwrap();
        waiting(&client, &ev.run_ids[0]).await;
        created.push(ev);
    }
    // The front of what the sender has not read is trimmed; the last entry stays, as a trim
    // leaves it.
    db.execute("DELETE FROM wait_log WHERE match_value = 'in_b'")
        .await;
    for (key, ev) in ["in_b", "in_c"].into_iter().zip(&created) {
        let paid = sender
            .send_event("invoice.paid", &json!({ "invoiceId": key }))
            .await
            .unwrap();
        assert_eq!(output(&client, &ev.id).await, json!(paid.id), "{key}");
    }
}

/// Waits for `invoice.paid` matching `payload.orderId` (the payer's matches `payload.invoiceId`):
/// one name, two match paths.
fn shipper() -> Job {
    Job::new("shipper", "Shipper", "1.0.0")
        .trigger(event_trigger("order.created"))
        .run(|_p: Value, io: Io| async move {
            let wait = WaitFor::timeout(3 * DAY).matching("payload.orderId");
            let paid = io.wait_for_event("paid", "invoice.paid", wait).await?;
            Ok(json!({ "paid": paid.map(|e| e.id) }))
        })
}

/// Events inserted together are looked up together (on PostgreSQL: one batch's keys in one
/// statement, the event writer's concurrent sends too), yet each resumes only the waits of its
/// own keys: here each crossed event carries the other wait's value under its own path.
async fn events_inserted_together_resume_only_the_waits_of_their_own_keys(db: TestDb) {
    let (client, _clock) = db.client().await;
    client.define_job(payer()).unwrap();
    client.define_job(shipper()).unwrap();
    let invoice = client
        .send_event("invoice.created", &json!({ "invoiceId": "in_a" }))
        .await
        .unwrap();
    let order = client
        .send_event("order.created", &json!({ "orderId": "o_1" }))
        .await
        .unwrap();
    waiting(&client, &invoice.run_ids[0]).await;
    waiting(&client, &order.run_ids[0]).await;
    let paid = |field: &str, value: &str| SendEvent::new("invoice.paid", &json!({ field: value }));
    let crossed = [("invoiceId", "o_1"), ("orderId", "in_a")];
    // In one transaction, then as concurrent sends (batched by the writer as they come).
    let mut sent: Vec<String> = client
        .send_batch(
            crossed.iter().map(|(f, v)| paid(f, v)).collect(),
            flare::model::Source::Api,
        )
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.event.id)
        .collect();
    let (a, b) = tokio::join!(
        client.send_event_with(paid(crossed[0].0, crossed[0].1)),
        client.send_event_with(paid(crossed[1].0, crossed[1].1)),
    );
    sent.extend([a.unwrap().id, b.unwrap().id]);
    for id in &sent {
        let d = client.store().event_detail(id).await.unwrap().unwrap();
        assert!(d.resumed_runs.is_empty(), "{:?}", d.resumed_runs);
    }
    waiting(&client, &invoice.run_ids[0]).await;
    waiting(&client, &order.run_ids[0]).await;
    let (a, b) = tokio::join!(
        client.send_event_with(paid("invoiceId", "in_a")),
        client.send_event_with(paid("orderId", "o_1")),
    );
    assert_eq!(output(&client, &invoice.id).await, json!(a.unwrap().id));
    assert_eq!(output(&client, &order.id).await, json!(b.unwrap().id));
}

/// Waits for `invoice.paid` matching the path `payload.invoiceId x` (a field name with a space).
fn spacer() -> Job {
    Job::new("spacer", "Spacer", "1.0.0")
        .trigger(event_trigger("order.created"))
        .run(|_p: Value, io: Io| async move {
            let wait = WaitFor::timeout(3 * DAY).matching("payload.invoiceId x");
            let paid = io.wait_for_event("paid", "invoice.paid", wait).await?;
            Ok(json!({ "paid": paid.map(|e| e.id) }))
        })
}

/// Two waits whose (name, path, value) keys join to the same text: `payload.invoiceId` = `x y`
/// and `payload.invoiceId x` = `y` (on PostgreSQL the lookup's hash index holds the key joined by
/// spaces, so it finds both). Each event resumes only the wait of its own key, inserted alone
/// (the store's batch insert) or by the event writer.
async fn keys_that_join_alike_resume_only_their_own_waits(db: TestDb) {
    let (client, _clock) = db.client().await;
    client.define_job(payer()).unwrap();
    client.define_job(spacer()).unwrap();
    let invoice = client
        .send_event("invoice.created", &json!({ "invoiceId": "x y" }))
        .await
        .unwrap();
    let order = client
        .send_event("order.created", &json!({ "invoiceId x": "y" }))
        .await
        .unwrap();
    waiting(&client, &invoice.run_ids[0]).await;
    waiting(&client, &order.run_ids[0]).await;
    let first = insert_alone(&client, "invoice.paid", &json!({ "invoiceId": "x y" })).await;
    assert_eq!(output(&client, &invoice.id).await, json!(first));
    let d = client.store().event_detail(&first).await.unwrap().unwrap();
    assert_eq!(d.resumed_runs.len(), 1, "{:?}", d.resumed_runs);
    waiting(&client, &order.run_ids[0]).await;
    let second = client
        .send_event("invoice.paid", &json!({ "invoiceId x": "y" }))
        .await
        .unwrap();
    assert_eq!(output(&client, &order.id).await, json!(second.id));
    let d = client
        .store()
        .event_detail(&second.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(d.resumed_runs.len(), 1, "{:?}", d.resumed_runs);
}

async fn every_matching_waiter_gets_the_event(db: TestDb) {
    let (client, _clock) = db.client().await;
    client.define_job(payer()).unwrap();
    let mut runs = Vec::new();
    for _ in 0..3 {
        runs.push(
            client
                .send_event("invoice.created", &json!({ "invoiceId": "in_1" }))
                .await
                .unwrap(),
        );
    }
    // One waits on a CEL condition instead: paid at least its amount.
    let by_amount = client
        .send_event(
            "invoice.created",
            &json!({ "byAmount": true, "amount": 50 }),
        )
        .await
        .unwrap();
    for ev in runs.iter().chain([&by_amount]) {
        waiting(&client, &ev.run_ids[0]).await;
    }
    let paid = client
        .send_event(
            "invoice.paid",
            &json!({ "invoiceId": "in_1", "amount": 70 }),
        )
        .await
        .unwrap();
    for ev in runs.iter().chain([&by_amount]) {
        assert_eq!(output(&client, &ev.id).await, json!(paid.id));
    }
}

async fn a_condition_that_does_not_hold_keeps_the_run_waiting(db: TestDb) {
    let (client, _clock) = db.client().await;
    client.define_job(payer()).unwrap();
    let ev = client
        .send_event(
            "invoice.created",
            &json!({ "byAmount": true, "amount": 50 }),
        )
        .await
        .unwrap();
    waiting(&client, &ev.run_ids[0]).await;
    client
        .send_event("invoice.paid", &json!({ "amount": 20 }))
        .await
        .unwrap();
    client
        .send_event("invoice.paid", &json!({ "amount": "lots" }))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    waiting(&client, &ev.run_ids[0]).await;
    let paid = client
        .send_event("invoice.paid", &json!({ "amount": 50 }))
        .await
        .unwrap();
    assert_eq!(output(&client, &ev.id).await, json!(paid.id));
}

async fn an_event_sent_before_the_wait_was_reached_does_not_resume_it(db: TestDb) {
    let (client, clock) = db.client().await;
    client.define_job(payer()).unwrap();
    client
        .send_event("invoice.paid", &json!({ "invoiceId": "in_early" }))
        .await
        .unwrap();
    clock.advance(Duration::from_secs(1));
    let ev = client
        .send_event("invoice.created", &json!({ "invoiceId": "in_early" }))
        .await
        .unwrap();
    waiting(&client, &ev.run_ids[0]).await;
}

async fn a_malformed_match_or_condition_fails_the_run_for_good(db: TestDb) {
    let (client, _clock) = db.client().await;
    client
        .define_job(
            Job::new("bad", "Bad", "1.0.0")
                .trigger(event_trigger("bad.wait"))
                .run(|p: Value, io: Io| async move {
                    let mut wait = WaitFor::timeout(DAY);
                    if let Some(m) = p["match"].as_str() {
                        wait = wait.matching(m);
                    }
                    if let Some(c) = p["if"].as_str() {
                        wait = wait.condition(c);
                    }
                    io.wait_for_event("w", "x.y", wait).await?;
                    Ok(json!(null))
                }),
        )
        .unwrap();
    for (payload, says) in [
        (json!({ "match": "invoiceId" }), "payload."),
        (json!({ "match": "payload.none" }), "has no"),
        (json!({ "if": "async.payload.n >" }), "not CEL"),
    ] {
        let ev = client.send_event("bad.wait", &payload).await.unwrap();
        let d = settled(&client, &ev.id).await;
        assert_eq!(d.runs[0].status, RunStatus::Failed);
        assert_eq!(d.runs[0].attempt, 1, "fatal: not retried");
        let error = d.runs[0].error.clone().unwrap_or_default();
        assert!(error.contains(says), "{error}");
    }
}

/// Runs on their way into the wait while the events they wait for are sent by other tasks at
/// the same moment: each wait is registered either before the event's insert (which resumes
/// it) or after (and then finds the event), never missed in between.
async fn events_sent_while_runs_enter_the_wait_are_never_missed(db: TestDb) {
    let (client, clock) = db.client().await;
    let sender = db.sender(&clock).await;
    const RUNS: usize = 40;
    client
        .define_job(
            Job::new("racer", "Racer", "1.0.0")
                .trigger(event_trigger("order.created"))
                // A cluster-wide limit: suspensions free its slot while resumptions make its runs
                // due again, at the same moment.
                .concurrency(RUNS as u32)
                .run(move |p: Value, io: Io| {
                    let sender = sender.clone();
                    async move {
                        let k = p["orderId"].as_str().unwrap_or_default().to_string();
                        // Sent by another task while this execution suspends on its wait.
                        tokio::spawn(async move {
                            let _ = sender
                                .send_event_with(
                                    SendEvent::new("order.paid", &json!({ "orderId": k }))
                                        .id(format!("paid-{k}")),
                                )
                                .await;
                        });
                        let paid = io
                            .wait_for_event(
                                "paid",
                                "order.paid",
                                WaitFor::timeout(DAY).matching("payload.orderId"),
                            )
                            .await?;
                        Ok(json!({ "paid": paid.map(|e| e.id) }))
                    }
                }),
        )
        .unwrap();
    let mut sent = Vec::new();
    for i in 0..RUNS {
        sent.push(
            client
                .send_event("order.created", &json!({ "orderId": format!("o{i}") }))
                .await
                .unwrap(),
        );
    }
    for (i, ev) in sent.iter().enumerate() {
        assert_eq!(
            output(&client, &ev.id).await,
            json!(format!("paid-o{i}")),
            "run {i} got its payment"
        );
    }
}

async fn the_api_and_the_run_page_show_what_a_run_waits_for(db: TestDb) {
    let (client, clock) = db.client().await;
    client.define_job(payer()).unwrap();
    let t0 = clock.now_ms();
    let ev = client
        .send_event("invoice.created", &json!({ "invoiceId": "in_9" }))
        .await
        .unwrap();
    let run_id = &ev.run_ids[0];
    waiting(&client, run_id).await;
    let app = sample::router(&client, db.url.clone(), None);
    let api = call(
        &app,
        json_request("GET", &format!("/api/runs/{run_id}"), None),
    )
    .await;
    assert_eq!(api.status, axum::http::StatusCode::OK, "{}", api.text);
    let w = &api.json["wait"];
    assert_eq!(w["event"], "invoice.paid");
    assert_eq!(w["match"], "payload.invoiceId");
    assert_eq!(w["matchValue"], "in_9");
    assert_eq!(w["stepKey"], "paid");
    let until = chrono::DateTime::parse_from_rfc3339(w["until"].as_str().unwrap()).unwrap();
    assert_eq!(until.timestamp_millis(), t0 + 3 * 86_400_000);
    let page = call(&app, json_request("GET", &format!("/runs/{run_id}"), None)).await;
    assert!(page.text.contains("Waiting for an event"), "{}", page.text);
    assert!(page.text.contains("payload.invoiceId"));

    client
        .send_event("invoice.paid", &json!({ "invoiceId": "in_9" }))
        .await
        .unwrap();
    settled(&client, &ev.id).await;
    let api = call(
        &app,
        json_request("GET", &format!("/api/runs/{run_id}"), None),
    )
    .await;
    assert_eq!(api.json["wait"], Value::Null);
}

async fn a_scheduled_event_resumes_waits_when_it_is_delivered(db: TestDb) {
    let (client, clock) = db.client().await;
    client.define_job(payer()).unwrap();
    let ev = client
        .send_event("invoice.created", &json!({ "invoiceId": "in_later" }))
        .await
        .unwrap();
    waiting(&client, &ev.run_ids[0]).await;
    let paid = client
        .send_event_with(
            SendEvent::new("invoice.paid", &json!({ "invoiceId": "in_later" }))
                .delay(flare::Delay::hours(1)),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    waiting(&client, &ev.run_ids[0]).await;
    clock.advance(Duration::from_secs(3600));
    // Delivered by this call or by the engine's own scheduler, whichever comes first.
    client.engine().maintenance().schedule_once().await.unwrap();
    client.engine().wake();
    assert_eq!(output(&client, &ev.id).await, json!(paid.id));
}

backend_tests!(
    a_scheduled_event_resumes_waits_when_it_is_delivered,
    the_api_and_the_run_page_show_what_a_run_waits_for,
    a_matching_event_resumes_the_waiting_run_and_others_do_not,
    every_matching_waiter_gets_the_event,
    events_inserted_together_resume_only_the_waits_of_their_own_keys,
    keys_that_join_alike_resume_only_their_own_waits,
    a_wait_on_a_new_match_path_is_found_by_the_next_event,
    a_wait_registered_by_another_process_is_found_by_its_events,
    a_condition_that_does_not_hold_keeps_the_run_waiting,
    an_event_sent_before_the_wait_was_reached_does_not_resume_it,
    a_malformed_match_or_condition_fails_the_run_for_good,
    events_sent_while_runs_enter_the_wait_are_never_missed,
);
