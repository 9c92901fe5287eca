//! Version 2 of the protocol: `waitForEvent` steps, with a scripted endpoint playing an SDK. The
//! wait is the engine's own (`io.wait_for_event`): the run holds no slot, a matching event sent
//! after the wait resumes it and the next call carries the event as the step's output; another
//! invoice's event resumes nothing; the timeout resumes it with `null` (injected clock); a match
//! field the run's event lacks fails the run at once.

use std::time::Duration;

use flare::model::{StepKind, StepStatus};
use flare::{Client, RunStatus};
use serde_json::{json, Value};

use crate::backend_tests;
use crate::fixture::{json_answer, registry, run_of, Answer, SECRET};
use crate::support::{wait_for, TestDb};

const DAY_MS: u64 = 86_400_000;

/// A version-2 endpoint whose job `pay` (on `invoice.created`) runs a step, waits for the
/// invoice's `invoice.paid` (matched on `payload.invoiceId`, and `amount` at least the invoice's)
/// for three days, and returns what it got.
fn payer() -> impl Fn(&Value) -> Answer + Send + Sync + 'static {
    |req: &Value| {
        if req["action"] == "index" {
            return json_answer(json!({"protocol": 2, "jobs": [{"id": "pay", "name": "Pay",
                "version": "1.0.0", "trigger": {"event": "invoice.created"}}]}));
        }
        let steps = &req["steps"];
        if steps.get("paid").and_then(|s| s.get("output")).is_none() {
            // The SDK: a stored step is not reported again; then the wait suspends the run.
            let mut reached = vec![];
            if steps.get("create").is_none() {
                reached.push(json!({"key": "create", "op": "run", "output": "inv"}));
            }
            reached.push(
                json!({"key": "paid", "op": "waitForEvent", "event": "invoice.paid",
                "match": "payload.invoiceId", "if": "async.payload.amount >= event.payload.amount",
                "timeoutMs": 3 * DAY_MS}),
            );
            return json_answer(json!({ "steps": reached }));
        }
        json_answer(json!({"output": {"paid": steps["paid"]["output"]}}))
    }
}

async fn waiting(client: &Client, run_id: &str) {
    wait_for("the run to wait for its event", || async {
        let d = client.store().run_detail(run_id).await.unwrap()?;
        let waits = d.steps.iter().any(|s| {
            s.key == "paid" && s.kind == StepKind::EventWait && s.status == StepStatus::Waiting
        });
        (waits && d.run.status == RunStatus::Queued).then_some(())
    })
    .await;
}

async fn a_matching_event_resumes_the_run_and_another_does_not(db: TestDb) {
    let app = crate::fixture::App::start(payer()).await;
    let (client, _clock, registry) = registry(&db).await;
    registry.add(&app.url, Some(SECRET.into())).await.unwrap();
    let created = client
        .send_event(
            "invoice.created",
            &json!({"invoiceId": "in_1", "amount": 10}),
        )
        .await
        .unwrap();
    let run_id = created.run_ids[0].clone();
    waiting(&client, &run_id).await;
    assert_eq!(
        client.engine().in_flight(),
        0,
        "a waiting run holds no slot"
    );
    let calls = app.runs_seen().len();
    assert_eq!(calls, 1, "the step and the wait came in one answer");

    // Another invoice, and this invoice paid too little: nothing resumes.
    client
        .send_event("invoice.paid", &json!({"invoiceId": "in_2", "amount": 10}))
        .await
        .unwrap();
    client
        .send_event("invoice.paid", &json!({"invoiceId": "in_1", "amount": 5}))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    waiting(&client, &run_id).await;
    assert_eq!(
        app.runs_seen().len(),
        calls,
        "the endpoint was not called again"
    );

    let paid = client
        .send_event("invoice.paid", &json!({"invoiceId": "in_1", "amount": 12}))
        .await
        .unwrap();
    let run = run_of(&client, &created.id, "pay").await;
    assert_eq!(run.run.status, RunStatus::Succeeded, "{run:?}");
    assert_eq!(run.run.attempt, 1, "a wait does not count as an attempt");
    let got = &run.run.output.as_ref().unwrap()["paid"];
    assert_eq!(got["id"], json!(paid.id));
    assert_eq!(got["name"], json!("invoice.paid"));
    assert_eq!(got["payload"], json!({"invoiceId": "in_1", "amount": 12}));
    let step = run.steps.iter().find(|s| s.key == "paid").unwrap();
    assert_eq!(
        (step.kind, step.status),
        (StepKind::EventWait, StepStatus::Succeeded)
    );
    // The resumed call carried the event as the step's output, and the run step's.
    let last = app.runs_seen().pop().unwrap();
    assert_eq!(last["steps"]["paid"]["output"]["id"], json!(paid.id));
    assert_eq!(last["steps"]["create"], json!({"output": "inv"}));
    client.shutdown().await;
}

async fn the_timeout_resumes_the_run_with_null(db: TestDb) {
    let app = crate::fixture::App::start(payer()).await;
    let (client, clock, registry) = registry(&db).await;
    registry.add(&app.url, Some(SECRET.into())).await.unwrap();
    let created = client
        .send_event(
            "invoice.created",
            &json!({"invoiceId": "in_1", "amount": 10}),
        )
        .await
        .unwrap();
    let run_id = created.run_ids[0].clone();
    waiting(&client, &run_id).await;

    // Not yet due: still waiting.
    clock.advance(Duration::from_millis(3 * DAY_MS - 1000));
    client.engine().wake();
    tokio::time::sleep(Duration::from_millis(200)).await;
    waiting(&client, &run_id).await;

    clock.advance(Duration::from_secs(1));
    client.engine().wake();
    let run = run_of(&client, &created.id, "pay").await;
    assert_eq!(run.run.status, RunStatus::Succeeded, "{run:?}");
    assert_eq!(run.run.output, Some(json!({"paid": null})));
    let step = run.steps.iter().find(|s| s.key == "paid").unwrap();
    assert_eq!(
        (step.kind, step.status),
        (StepKind::EventWait, StepStatus::Succeeded)
    );
    let last = app.runs_seen().pop().unwrap();
    assert_eq!(last["steps"]["paid"], json!({"output": null}));

    // A payment after the timeout changes nothing.
    client
        .send_event("invoice.paid", &json!({"invoiceId": "in_1", "amount": 99}))
        .await
        .unwrap();
    let run = run_of(&client, &created.id, "pay").await;
    assert_eq!(run.run.output, Some(json!({"paid": null})));
    client.shutdown().await;
}

async fn a_match_the_run_s_event_lacks_fails_the_run_saying_so(db: TestDb) {
    let app = crate::fixture::App::start(payer()).await;
    let (client, _clock, registry) = registry(&db).await;
    registry.add(&app.url, Some(SECRET.into())).await.unwrap();
    let created = client
        .send_event("invoice.created", &json!({"amount": 10}))
        .await
        .unwrap();
    let run = run_of(&client, &created.id, "pay").await;
    assert_eq!(run.run.status, RunStatus::Failed, "{run:?}");
    let error = run.run.error.unwrap_or_default();
    assert!(
        error.contains("step \"paid\"") && error.contains("payload.invoiceId"),
        "{error}"
    );
    assert_eq!(run.run.attempt, 1, "no retry fixes it");
    client.shutdown().await;
}

backend_tests!(
    a_matching_event_resumes_the_run_and_another_does_not,
    the_timeout_resumes_the_run_with_null,
    a_match_the_run_s_event_lacks_fails_the_run_saying_so,
);
