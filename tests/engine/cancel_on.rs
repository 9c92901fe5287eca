//! Behaviour suite: cancel on an event (`cancel_on`) — an event cancels the job's runs it
//! matches in each state (queued, running, waiting on a sleep, on an event, on a child), in its
//! own transaction, recorded with a link to it (`cancelledBy`, the event's `cancelledRuns`), with
//! `flare/run.cancelled` and the invoked children cancelled too; an event that does not match,
//! or comes after the entry's timeout, cancels nothing; an event lists the waits it resumed.

use std::time::Duration;

use flare::store::{ClaimGroup, ClaimParams, Completion, EventQuery, Finish, Lease, NewEvent};
use flare::{
    event_trigger, CancelOn, Client, Clock, Io, Job, ManualClock, RunStatus, StepStatus,
    StoredEvent, WaitFor,
};
use serde_json::{json, Value};

use crate::backend_tests;
use crate::support::{insert_alone, settled, wait_for, TestDb};

const DAY: Duration = Duration::from_secs(86_400);

/// Where the manual clock of the tests without workers starts.
const START: i64 = 1_800_000_000_000;

/// `fulfil` on `order.placed`, cancelled by `order.cancelled` of the same `orderId` unless its
/// `reason` is "test", its body `body`.
fn fulfil<F, Fut>(body: F) -> Job
where
    F: Fn(Value, Io) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Value, flare::JobError>> + Send + 'static,
{
    Job::new("fulfil", "Fulfil", "1.0.0")
        .trigger(event_trigger("order.placed"))
        .cancel_on(
            CancelOn::event("order.cancelled")
                .matching("payload.orderId")
                .condition("!has(async.payload.reason) || async.payload.reason != 'test'"),
        )
        .run(body)
}

/// A `fulfil` that naps a day, then ships.
fn napper() -> Job {
    fulfil(|_p: Value, io: Io| async move {
        io.wait("nap", DAY).await;
        Ok(json!("shipped"))
    })
}

async fn place(client: &Client, order: &str) -> String {
    let ev = client
        .send_event("order.placed", &json!({ "orderId": order }))
        .await
        .unwrap();
    ev.run_ids[0].clone()
}

async fn cancel(client: &Client, payload: Value) -> StoredEvent {
    client
        .send_event("order.cancelled", &payload)
        .await
        .unwrap()
}

async fn status(client: &Client, run: &str) -> RunStatus {
    client
        .store()
        .run_detail(run)
        .await
        .unwrap()
        .unwrap()
        .run
        .status
}

async fn named(client: &Client, name: &str) -> Vec<StoredEvent> {
    client
        .store()
        .events_list(EventQuery {
            name: Some(name.to_string()),
            ..EventQuery::default()
        })
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|s| s.event)
        .collect()
}

/// The `flare/run.cancelled` events sent for `run`.
async fn cancelled_events(client: &Client, run: &str) -> usize {
    named(client, "flare/run.cancelled")
        .await
        .iter()
        .filter(|e| e.payload["runId"] == json!(run))
        .count()
}

async fn waiting(client: &Client, run: &str) {
    wait_for("the run to wait", || async {
        let d = client.store().run_detail(run).await.unwrap()?;
        (d.run.status == RunStatus::Queued
            && d.steps.iter().any(|s| s.status == StepStatus::Waiting))
        .then_some(())
    })
    .await;
}

async fn an_event_cancels_the_queued_run_it_matches_and_is_linked_to_it(db: TestDb) {
    let clock = ManualClock::new(START);
    // No workers: the runs stay queued.
    let sender = db.sender(&clock).await;
    sender.define_job(napper()).unwrap();
    let o1 = place(&sender, "o1").await;
    let o2 = place(&sender, "o2").await;
    let ev = cancel(&sender, json!({ "orderId": "o1" })).await;
    assert!(ev.run_ids.is_empty(), "it starts no run of fulfil");
    let d = sender.store().run_detail(&o1).await.unwrap().unwrap();
    assert_eq!(d.run.status, RunStatus::Cancelled);
    // The API's run shows the link.
    let shown = serde_json::to_value(&d).unwrap();
    assert_eq!(shown["cancelledBy"]["eventId"], json!(ev.id));
    assert_eq!(shown["cancelledBy"]["eventName"], "order.cancelled");
    let by = d.cancelled_by.expect("the event that cancelled it");
    assert_eq!(
        (by.event_id.as_str(), by.event_name.as_str()),
        (ev.id.as_str(), "order.cancelled")
    );
    assert_eq!(
        d.run.error,
        Some(format!("cancelled by event order.cancelled ({})", ev.id))
    );
    assert_eq!(status(&sender, &o2).await, RunStatus::Queued);
    let detail = sender.store().event_detail(&ev.id).await.unwrap().unwrap();
    let cancelled: Vec<(&str, RunStatus)> = detail
        .cancelled_runs
        .iter()
        .map(|r| (r.run_id.as_str(), r.status))
        .collect();
    assert_eq!(cancelled, vec![(o1.as_str(), RunStatus::Cancelled)]);
    assert!(detail.resumed_runs.is_empty());
    // Its failure event, once, committed with it.
    assert_eq!(cancelled_events(&sender, &o1).await, 1);
    let sent = named(&sender, "flare/run.cancelled").await;
    assert_eq!(sent[0].payload["jobId"], json!("fulfil"));
    // A second cancel of the same order finds nothing left to cancel.
    let again = cancel(&sender, json!({ "orderId": "o1" })).await;
    let detail = sender
        .store()
        .event_detail(&again.id)
        .await
        .unwrap()
        .unwrap();
    assert!(detail.cancelled_runs.is_empty());
    assert_eq!(cancelled_events(&sender, &o1).await, 1, "never twice");
    let d = sender.store().run_detail(&o1).await.unwrap().unwrap();
    assert_eq!(
        d.cancelled_by.unwrap().event_id,
        ev.id,
        "the first one cancelled it"
    );
}

async fn an_event_that_does_not_match_cancels_nothing(db: TestDb) {
    let clock = ManualClock::new(START);
    let sender = db.sender(&clock).await;
    sender.define_job(napper()).unwrap();
    let o1 = place(&sender, "o1").await;
    for (name, payload) in [
        ("order.cancelled", json!({ "orderId": "o2" })),
        ("order.cancelled", json!({ "orderId": 1 })),
        ("order.cancelled", json!({})),
        (
            "order.cancelled",
            json!({ "orderId": "o1", "reason": "test" }),
        ),
        ("order.refunded", json!({ "orderId": "o1" })),
    ] {
        let ev = sender.send_event(name, &payload).await.unwrap();
        assert_eq!(
            status(&sender, &o1).await,
            RunStatus::Queued,
            "{name} {payload}"
        );
        let d = sender.store().event_detail(&ev.id).await.unwrap().unwrap();
        assert!(d.cancelled_runs.is_empty(), "{name} {payload}");
    }
    assert!(named(&sender, "flare/run.cancelled").await.is_empty());
    // A number matches a number.
    let seven = sender
        .send_event("order.placed", &json!({ "orderId": 7 }))
        .await
        .unwrap()
        .run_ids[0]
        .clone();
    cancel(&sender, json!({ "orderId": 7 })).await;
    assert_eq!(status(&sender, &seven).await, RunStatus::Cancelled);
    assert_eq!(status(&sender, &o1).await, RunStatus::Queued);
    assert_eq!(named(&sender, "flare/run.cancelled").await.len(), 1);
}

async fn the_entry_disarms_after_its_timeout_counted_from_each_run(db: TestDb) {
    let clock = ManualClock::new(START);
    let sender = db.sender(&clock).await;
    sender
        .define_job(
            Job::new("fulfil", "Fulfil", "1.0.0")
                .trigger(event_trigger("order.placed"))
                .cancel_on(
                    CancelOn::event("order.cancelled")
                        .matching("payload.orderId")
                        .timeout(Duration::from_secs(60)),
                )
                .run(|_p: Value, _io: Io| async move { Ok(json!(null)) }),
        )
        .unwrap();
    let old = place(&sender, "o1").await;
    clock.advance(Duration::from_secs(30));
    let young = place(&sender, "o1").await;
    clock.advance(Duration::from_secs(31));
    let ev = cancel(&sender, json!({ "orderId": "o1" })).await;
    assert_eq!(
        status(&sender, &old).await,
        RunStatus::Queued,
        "61 s after it was created: disarmed"
    );
    assert_eq!(status(&sender, &young).await, RunStatus::Cancelled);
    let d = sender.store().event_detail(&ev.id).await.unwrap().unwrap();
    assert_eq!(d.cancelled_runs.len(), 1);
    assert_eq!(d.cancelled_runs[0].run_id, young);
}

/// A job on `order.held` cancelled by `order.cancelled` matching the field `orderId x`: its key
/// and `fulfil`'s for an order `x y` join to the same text (`payload.orderId x y`), which is what
/// PostgreSQL's lookup finds them by (a hash index on the three joined by spaces).
fn holder() -> Job {
    Job::new("hold", "Hold", "1.0.0")
        .trigger(event_trigger("order.held"))
        .cancel_on(CancelOn::event("order.cancelled").matching("payload.orderId x"))
        .run(|_p: Value, _io: Io| async move { Ok(json!(null)) })
}

/// Two runs whose cancel keys join alike: each event cancels only the run of its own key,
/// inserted alone (the store's batch insert) or by the event writer.
async fn keys_that_join_alike_cancel_only_their_own_runs(db: TestDb) {
    let clock = ManualClock::new(START);
    let sender = db.sender(&clock).await;
    sender.define_job(napper()).unwrap();
    sender.define_job(holder()).unwrap();
    let placed = place(&sender, "x y").await;
    let held = sender
        .send_event("order.held", &json!({ "orderId x": "y" }))
        .await
        .unwrap()
        .run_ids[0]
        .clone();
    let first = insert_alone(&sender, "order.cancelled", &json!({ "orderId": "x y" })).await;
    assert_eq!(status(&sender, &placed).await, RunStatus::Cancelled);
    assert_eq!(status(&sender, &held).await, RunStatus::Queued);
    let d = sender.store().event_detail(&first).await.unwrap().unwrap();
    assert_eq!(d.cancelled_runs.len(), 1, "{:?}", d.cancelled_runs);
    let second = cancel(&sender, json!({ "orderId x": "y" })).await;
    assert_eq!(status(&sender, &held).await, RunStatus::Cancelled);
    let d = sender
        .store()
        .event_detail(&second.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(d.cancelled_runs.len(), 1, "{:?}", d.cancelled_runs);
    assert_eq!(d.cancelled_runs[0].run_id, held);
}

/// Events inserted together (one transaction; on PostgreSQL one statement): each cancels the
/// runs started by the events before it, as if they were sent one by one.
async fn in_one_batch_an_event_cancels_the_runs_started_before_it(db: TestDb) {
    let clock = ManualClock::new(START);
    let sender = db.sender(&clock).await;
    sender.define_job(napper()).unwrap();
    let event = |id: &str, name: &str| NewEvent {
        id: id.into(),
        name: name.into(),
        payload: json!({ "orderId": "o1" }),
        context: None,
        source: "api".into(),
        parent_run_id: None,
        deliver_at: None,
        now: START,
    };
    let inserted = sender
        .store()
        .event_insert_many(vec![
            event("b1", "order.placed"),
            event("b2", "order.cancelled"),
            event("b3", "order.placed"),
        ])
        .await
        .unwrap();
    let before = inserted[0].event.run_ids[0].clone();
    let after = inserted[2].event.run_ids[0].clone();
    assert_eq!(status(&sender, &before).await, RunStatus::Cancelled);
    assert_eq!(status(&sender, &after).await, RunStatus::Queued);
    let d = sender.store().event_detail("b2").await.unwrap().unwrap();
    assert_eq!(d.cancelled_runs.len(), 1);
    assert_eq!(d.cancelled_runs[0].run_id, before);
}

/// The store's rules with a claimed run: the event removes its lease (the heartbeat reports it
/// lost), its completion is refused, and the attempt counts as cancelled.
async fn a_running_run_is_cancelled_and_its_completion_refused(db: TestDb) {
    let clock = ManualClock::new(START);
    let sender = db.sender(&clock).await;
    sender.define_job(napper()).unwrap();
    let run_id = place(&sender, "o1").await;
    let now = clock.now_ms();
    let claimed = sender
        .store()
        .runs_claim(ClaimParams {
            node: None,
            now,
            lease_until: now + 30_000,
            groups: vec![ClaimGroup {
                jobs: vec!["fulfil".into()],
                limit: 10,
                flow: None,
            }],
        })
        .await
        .unwrap();
    let run = claimed[0].clone();
    assert_eq!(run.id, run_id);
    let lease = Lease {
        run_id: run.id.clone(),
        token: run.token,
    };
    let ev = cancel(&sender, json!({ "orderId": "o1" })).await;
    let lost = sender
        .store()
        .runs_heartbeat(vec![lease], now + 60_000)
        .await
        .unwrap();
    assert_eq!(lost, vec![run.id.clone()], "its lease is gone");
    let held = sender
        .store()
        .runs_complete(vec![Completion {
            run_id: run.id.clone(),
            job_id: run.job_id.clone(),
            token: run.token,
            attempt: run.attempt,
            started_at: now,
            finished_at: now + 20,
            finish: Finish::Succeeded(json!("shipped anyway")),
            logs: vec![],
        }])
        .await
        .unwrap();
    assert_eq!(held, vec![false], "the late success is refused");
    let d = sender.store().run_detail(&run.id).await.unwrap().unwrap();
    assert_eq!(d.run.status, RunStatus::Cancelled);
    assert_eq!(d.run.output, None);
    assert_eq!(d.cancelled_by.unwrap().event_id, ev.id);
    let outcomes: Vec<&str> = d.attempts.iter().map(|a| a.outcome.as_str()).collect();
    assert_eq!(outcomes, vec!["cancelled"]);
    assert_eq!(cancelled_events(&sender, &run.id).await, 1);
}

async fn a_run_waiting_on_a_sleep_is_cancelled_and_never_resumes(db: TestDb) {
    let (client, clock) = db.client().await;
    client.define_job(napper()).unwrap();
    let run = place(&client, "o1").await;
    waiting(&client, &run).await;
    let ev = cancel(&client, json!({ "orderId": "o1" })).await;
    assert_eq!(status(&client, &run).await, RunStatus::Cancelled);
    clock.advance(DAY + Duration::from_secs(1));
    client.engine().wake();
    // A run of another order, due at once, shows the workers went round.
    let other = place(&client, "o2").await;
    waiting(&client, &other).await;
    let d = client.store().run_detail(&run).await.unwrap().unwrap();
    assert_eq!(d.run.status, RunStatus::Cancelled);
    assert_eq!(d.run.output, None, "the nap never ended in a shipment");
    assert_eq!(d.cancelled_by.unwrap().event_id, ev.id);
    assert_eq!(d.wait, None);
    assert_eq!(cancelled_events(&client, &run).await, 1);
    client.shutdown().await;
}

async fn a_run_waiting_for_an_event_is_cancelled_and_the_event_lists_what_it_resumed(db: TestDb) {
    let (client, _clock) = db.client().await;
    client
        .define_job(fulfil(|_p: Value, io: Io| async move {
            let paid = io
                .wait_for_event(
                    "paid",
                    "invoice.paid",
                    WaitFor::timeout(DAY).matching("payload.orderId"),
                )
                .await?;
            Ok(json!({ "paid": paid.is_some() }))
        }))
        .unwrap();
    let o1 = place(&client, "o1").await;
    let o2 = place(&client, "o2").await;
    waiting(&client, &o1).await;
    waiting(&client, &o2).await;
    let ev = cancel(&client, json!({ "orderId": "o1" })).await;
    assert_eq!(status(&client, &o1).await, RunStatus::Cancelled);
    // Its wait ended with it: the event it waited for resumes nothing.
    let paid1 = client
        .send_event("invoice.paid", &json!({ "orderId": "o1" }))
        .await
        .unwrap();
    let d = client
        .store()
        .event_detail(&paid1.id)
        .await
        .unwrap()
        .unwrap();
    assert!(d.resumed_runs.is_empty(), "{:?}", d.resumed_runs);
    assert_eq!(status(&client, &o1).await, RunStatus::Cancelled);
    // The other order's run is resumed, and its event says so.
    let paid2 = client
        .send_event("invoice.paid", &json!({ "orderId": "o2" }))
        .await
        .unwrap();
    let d = client
        .store()
        .event_detail(&paid2.id)
        .await
        .unwrap()
        .unwrap();
    let resumed: Vec<&str> = d.resumed_runs.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(resumed, vec![o2.as_str()]);
    assert!(d.cancelled_runs.is_empty());
    wait_for("o2 to succeed", || async {
        (status(&client, &o2).await == RunStatus::Succeeded).then_some(())
    })
    .await;
    let d = client.store().run_detail(&o1).await.unwrap().unwrap();
    assert_eq!(d.cancelled_by.unwrap().event_id, ev.id);
    client.shutdown().await;
}

async fn a_run_waiting_on_its_child_is_cancelled_with_the_child(db: TestDb) {
    let (client, _clock) = db.client().await;
    client
        .define_job(
            Job::new("pack", "Pack", "1.0.0")
                .trigger(event_trigger("never.sent"))
                .run(|_p: Value, io: Io| async move {
                    io.wait("slowly", DAY).await;
                    Ok(json!("packed"))
                }),
        )
        .unwrap();
    client
        .define_job(fulfil(|_p: Value, io: Io| async move {
            let packed: Value = io.invoke("pack", "pack", &json!({}), DAY).await?;
            Ok(packed)
        }))
        .unwrap();
    let parent = place(&client, "o1").await;
    let child = wait_for("the child to wait", || async {
        let d = client.store().run_detail(&parent).await.unwrap()?;
        let c = d.children.first()?.run_id.clone();
        let cd = client.store().run_detail(&c).await.unwrap()?;
        (d.wait.is_some() && cd.steps.iter().any(|s| s.status == StepStatus::Waiting)).then_some(c)
    })
    .await;
    let d = client.store().run_detail(&parent).await.unwrap().unwrap();
    assert_eq!(d.children.len(), 1);
    assert_eq!(d.children[0].job_id, "pack");
    assert_eq!(d.children[0].step_key.as_deref(), Some("pack"));
    assert_eq!(d.children[0].status, RunStatus::Queued);
    let cd = client.store().run_detail(&child).await.unwrap().unwrap();
    assert_eq!(cd.parent_run_id.as_deref(), Some(parent.as_str()));
    let ev = cancel(&client, json!({ "orderId": "o1" })).await;
    assert_eq!(status(&client, &parent).await, RunStatus::Cancelled);
    assert_eq!(status(&client, &child).await, RunStatus::Cancelled);
    let d = client.store().run_detail(&parent).await.unwrap().unwrap();
    assert_eq!(d.children[0].status, RunStatus::Cancelled);
    let cd = client.store().run_detail(&child).await.unwrap().unwrap();
    assert_eq!(cd.cancelled_by.unwrap().event_id, ev.id);
    assert_eq!(cancelled_events(&client, &parent).await, 1);
    // An invoked run's end goes to its caller, not to an event (its event is `flare/…`).
    assert_eq!(cancelled_events(&client, &child).await, 0);
    let e = client.store().event_detail(&ev.id).await.unwrap().unwrap();
    let mut runs: Vec<&str> = e.cancelled_runs.iter().map(|r| r.run_id.as_str()).collect();
    runs.sort_unstable();
    let mut both = vec![parent.as_str(), child.as_str()];
    both.sort_unstable();
    assert_eq!(runs, both);
    client.shutdown().await;
}

/// A running run on a worker: the event cancels it in the store, the worker learns it at its
/// next heartbeat and drops the execution; the run stays cancelled.
async fn a_running_job_is_told_at_its_next_heartbeat(db: TestDb) {
    let (client, _clock) = db
        .client_with(flare::EngineConfig {
            lease: Duration::from_millis(300),
            ..crate::support::test_config()
        })
        .await;
    client
        .define_job(fulfil(|_p: Value, io: Io| async move {
            io.cancelled().await;
            Ok(json!("saw the cancel"))
        }))
        .unwrap();
    let placed = client
        .send_event("order.placed", &json!({ "orderId": "o1" }))
        .await
        .unwrap();
    let run = placed.run_ids[0].clone();
    wait_for("the run to start", || async {
        (status(&client, &run).await == RunStatus::Running).then_some(())
    })
    .await;
    cancel(&client, json!({ "orderId": "o1" })).await;
    wait_for("the execution to end", || async {
        (client.engine().in_flight() == 0).then_some(())
    })
    .await;
    // Give the completer its turn: the refused success must not land.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let ev = settled(&client, &placed.id).await;
    assert_eq!(ev.runs[0].status, RunStatus::Cancelled);
    assert_eq!(ev.runs[0].output, None);
    client.shutdown().await;
}

backend_tests!(
    an_event_cancels_the_queued_run_it_matches_and_is_linked_to_it,
    an_event_that_does_not_match_cancels_nothing,
    the_entry_disarms_after_its_timeout_counted_from_each_run,
    in_one_batch_an_event_cancels_the_runs_started_before_it,
    keys_that_join_alike_cancel_only_their_own_runs,
    a_running_run_is_cancelled_and_its_completion_refused,
    a_run_waiting_on_a_sleep_is_cancelled_and_never_resumes,
    a_run_waiting_for_an_event_is_cancelled_and_the_event_lists_what_it_resumed,
    a_run_waiting_on_its_child_is_cancelled_with_the_child,
    a_running_job_is_told_at_its_next_heartbeat,
);
