//! Version 2 of the protocol: durable steps over HTTP, with a scripted endpoint playing an SDK
//! (it reads the request's stored steps and answers the next step it reaches). Steps stored at
//! once and sent back, several in one answer; a sleep that holds no slot and resumes when due;
//! events sent once per step; a failed step retried with the steps before it kept; a step answered
//! twice stored once; a key answered as another kind failing the run; a bad step refused
//! naming its field; version-1 requests unchanged. (`invoke`: `invoke.rs`;
//! `callback`: `callbacks.rs`.)

use std::sync::{Arc, Mutex};
use std::time::Duration;

use flare::model::{StepKind, StepStatus};
use flare::RunStatus;
use serde_json::{json, Value};

use crate::backend_tests;
use crate::fixture::{json_answer, registry, run_of, Answer, App, SECRET};
use crate::support::{wait_for, TestDb};

/// An index answer of protocol version 2 with `jobs`, and `run` answered by `run`.
pub fn serving_v2(
    jobs: Vec<Value>,
    run: impl Fn(&Value) -> Answer + Send + Sync + 'static,
) -> impl Fn(&Value) -> Answer + Send + Sync + 'static {
    move |req: &Value| {
        if req["action"] == "index" {
            json_answer(json!({ "protocol": 2, "jobs": jobs }))
        } else {
            run(req)
        }
    }
}

pub fn job(id: &str, event: &str, max_attempts: u32) -> Value {
    json!({"id": id, "name": id, "version": "1.0.0", "trigger": {"event": event},
           "retry": {"maxAttempts": max_attempts, "minDelayMs": 1000, "maxDelayMs": 1000}})
}

fn done(req: &Value, key: &str) -> Option<Value> {
    req["steps"].get(key).and_then(|s| s.get("output")).cloned()
}

async fn steps_sleep_and_events_run_durably(db: TestDb) {
    let app = App::start(serving_v2(vec![job("onboard", "user.created", 3)], |req| {
        assert_eq!(req["protocol"], json!(2));
        let Some(a) = done(req, "a") else {
            // Two steps that do not suspend, in one answer.
            return json_answer(json!({"steps": [
                {"key": "a", "op": "run", "output": 1},
                {"key": "b", "op": "run", "output": 2}
            ], "logs": [{"message": "did a and b"}]}));
        };
        let b = done(req, "b").expect("b is stored with a");
        if req["steps"].get("nap").is_none() {
            return json_answer(
                json!({"steps": [{"key": "nap", "op": "sleep", "durationMs": 3_600_000}]}),
            );
        }
        if req["steps"].get("notify").is_none() {
            return json_answer(json!({"steps": [{"key": "notify", "op": "sendEvent",
                "events": [{"name": "user.onboarded", "payload": {"n": 1}}]}]}));
        }
        json_answer(
            json!({"output": {"sum": a.as_i64().unwrap() + b.as_i64().unwrap(),
                                      "sent": done(req, "notify")}}),
        )
    }))
    .await;
    let (client, clock, registry) = registry(&db).await;
    registry.add(&app.url, Some(SECRET.into())).await.unwrap();
    let sent = client.send_event("user.created", &json!({})).await.unwrap();
    let run_id = sent.run_ids[0].clone();

    // The sleep: the run is back in the queue, due in an hour, its wait stored, no slot held.
    let waiting = wait_for("the run to sleep", || async {
        let d = client.store().run_detail(&run_id).await.unwrap()?;
        (d.run.status == RunStatus::Queued && d.steps.iter().any(|s| s.key == "nap")).then_some(d)
    })
    .await;
    let keys: Vec<&str> = waiting.steps.iter().map(|s| s.key.as_str()).collect();
    assert_eq!(keys, ["a", "b", "nap"]);
    assert_eq!(waiting.steps[0].output, Some(json!(1)));
    assert_eq!(waiting.steps[2].status, StepStatus::Waiting);
    assert_eq!(app.runs_seen().len(), 2, "steps a and b came in one answer");
    assert!(app.runs_seen()[0]["steps"].as_object().unwrap().is_empty());

    clock.advance(Duration::from_secs(3601));
    client.engine().wake();
    let run = run_of(&client, &sent.id, "onboard").await;
    assert_eq!(run.run.status, RunStatus::Succeeded, "{run:?}");
    assert_eq!(run.run.attempt, 1, "a sleep does not count as an attempt");
    let event_id = format!("{run_id}-notify-0");
    assert_eq!(
        run.run.output,
        Some(json!({"sum": 3, "sent": {"ids": [event_id]}}))
    );
    let kinds: Vec<(&str, StepKind, StepStatus)> = run
        .steps
        .iter()
        .map(|s| (s.key.as_str(), s.kind, s.status))
        .collect();
    assert_eq!(
        kinds,
        [
            ("a", StepKind::Task, StepStatus::Succeeded),
            ("b", StepKind::Task, StepStatus::Succeeded),
            ("nap", StepKind::Wait, StepStatus::Succeeded),
            ("notify", StepKind::Event, StepStatus::Succeeded),
        ]
    );
    assert_eq!(run.logs[0].message, "did a and b");
    // The resumed execution told the endpoint the sleep was over.
    let last = app.runs_seen().pop().unwrap();
    assert_eq!(last["steps"]["nap"], json!({"output": null}));
    assert_eq!(last["steps"]["a"], json!({"output": 1}));
    let event = client.store().event_get(&event_id).await.unwrap().unwrap();
    assert_eq!(event.name, "user.onboarded");
    client.shutdown().await;
}

async fn a_failed_step_is_retried_and_the_steps_before_it_are_not(db: TestDb) {
    let charged = Arc::new(Mutex::new(0u32));
    let counter = Arc::clone(&charged);
    let app = App::start(serving_v2(vec![job("pay", "order.placed", 3)], move |req| {
        if done(req, "charge").is_none() {
            *counter.lock().unwrap() += 1;
            return json_answer(json!({"steps": [{"key": "charge", "op": "run", "output": "ch_1"}]}));
        }
        if req["run"]["attempt"] == 1 {
            return json_answer(json!({
                "steps": [{"key": "ship", "op": "run", "error": "carrier down"}],
                "error": "carrier down"
            }));
        }
        // The failed step is sent with its error: the SDK runs it again.
        assert_eq!(req["steps"]["ship"], json!({"error": "carrier down"}));
        json_answer(json!({"steps": [{"key": "ship", "op": "run", "output": "shipped"}], "output": "ok"}))
    }))
    .await;
    let (client, clock, registry) = registry(&db).await;
    registry.add(&app.url, Some(SECRET.into())).await.unwrap();
    let sent = client.send_event("order.placed", &json!({})).await.unwrap();
    let run_id = sent.run_ids[0].clone();
    let first = wait_for("the first attempt to fail", || async {
        let d = client.store().run_detail(&run_id).await.unwrap()?;
        (!d.attempts.is_empty() && d.run.status == RunStatus::Queued).then_some(d)
    })
    .await;
    assert_eq!(first.attempts[0].error.as_deref(), Some("carrier down"));
    let ship = first.steps.iter().find(|s| s.key == "ship").unwrap();
    assert_eq!(ship.status, StepStatus::Failed);
    assert_eq!(ship.error.as_deref(), Some("carrier down"));
    clock.advance(Duration::from_secs(2));
    client.engine().wake();
    let run = run_of(&client, &sent.id, "pay").await;
    assert_eq!(run.run.status, RunStatus::Succeeded);
    assert_eq!(run.run.attempt, 2);
    assert_eq!(*charged.lock().unwrap(), 1, "the completed step ran once");
    let ship = run.steps.iter().find(|s| s.key == "ship").unwrap();
    assert_eq!(ship.status, StepStatus::Succeeded);
    assert_eq!(ship.output, Some(json!("shipped")));
    client.shutdown().await;
}

async fn a_step_answered_twice_is_stored_once_and_changed_code_fails_the_run(db: TestDb) {
    let app = App::start(serving_v2(
        vec![job("twice", "a.twice", 1), job("changed", "a.changed", 3)],
        |req| {
            let calls = req["steps"].as_object().unwrap().len();
            match (req["job"]["id"].as_str().unwrap(), calls) {
                // An endpoint that answers "a" again (its first answer was in fact stored).
                ("twice", 0) => json_answer(json!({"steps": [{"key": "a", "op": "run", "output": 1}]})),
                ("twice", _) => json_answer(
                    json!({"steps": [{"key": "a", "op": "run", "output": 2}], "output": done(req, "a")}),
                ),
                // Code deployed in between: "a" is now a sleep.
                ("changed", 0) => json_answer(json!({"steps": [{"key": "a", "op": "run", "output": 1}]})),
                _ => json_answer(json!({"steps": [{"key": "a", "op": "sleep", "durationMs": 10}]})),
            }
        },
    ))
    .await;
    let (client, _clock, registry) = registry(&db).await;
    registry.add(&app.url, Some(SECRET.into())).await.unwrap();
    let sent = client.send_event("a.twice", &json!({})).await.unwrap();
    let run = run_of(&client, &sent.id, "twice").await;
    assert_eq!(run.run.status, RunStatus::Succeeded);
    assert_eq!(run.run.output, Some(json!(1)));
    assert_eq!(run.steps.len(), 1);
    assert_eq!(
        run.steps[0].output,
        Some(json!(1)),
        "the first result stays"
    );

    let sent = client.send_event("a.changed", &json!({})).await.unwrap();
    let run = run_of(&client, &sent.id, "changed").await;
    assert_eq!(run.run.status, RunStatus::Failed);
    assert_eq!(run.run.attempt, 1, "no retry fixes changed code");
    let error = run.run.error.unwrap_or_default();
    assert!(
        error.contains("stored as a run step and answered now as a sleep step")
            && error.contains("code changed"),
        "{error}"
    );
    client.shutdown().await;
}

async fn events_answered_twice_are_sent_once_and_an_answer_must_make_progress(db: TestDb) {
    let app = App::start(serving_v2(
        vec![job("send", "a.send", 1), job("stuck", "a.stuck", 1)],
        |req| {
            let send = json!({"steps": [{"key": "notify", "op": "sendEvent",
                "events": [{"name": "a.sent", "payload": {"n": 1}, "key": "k"}]}]});
            let steps = &req["steps"];
            match (req["job"]["id"].as_str().unwrap(), steps.get("notify"), steps.get("a")) {
                ("send", Some(sent), Some(_)) => json_answer(json!({"output": sent["output"]})),
                // Answers the stored sendEvent again (with another payload) after a new step.
                ("send", Some(_), None) => json_answer(json!({"steps": [
                    {"key": "a", "op": "run", "output": 1},
                    {"key": "notify", "op": "sendEvent", "events": [{"name": "a.sent", "payload": {"n": 2}, "key": "k"}]}
                ]})),
                ("send", None, _) => json_answer(send),
                // An endpoint that never returns stored results answers the same step forever.
                _ => json_answer(json!({"steps": [{"key": "a", "op": "run", "output": 1}]})),
            }
        },
    ))
    .await;
    let (client, _clock, registry) = registry(&db).await;
    registry.add(&app.url, Some(SECRET.into())).await.unwrap();
    let sent = client.send_event("a.send", &json!({})).await.unwrap();
    let run = run_of(&client, &sent.id, "send").await;
    assert_eq!(run.run.status, RunStatus::Succeeded, "{run:?}");
    let id = format!("{}-notify-k", run.run.id);
    assert_eq!(run.run.output, Some(json!({"ids": [id]})));
    let event = client.store().event_get(&id).await.unwrap().unwrap();
    assert_eq!(event.payload, json!({"n": 1}), "sent once, the first time");
    assert_eq!(app.runs_seen().len(), 3);

    let sent = client.send_event("a.stuck", &json!({})).await.unwrap();
    let run = run_of(&client, &sent.id, "stuck").await;
    assert_eq!(run.run.status, RunStatus::Failed);
    let error = run.run.error.unwrap_or_default();
    assert!(error.contains("does not return stored results"), "{error}");
    let stuck_calls = app
        .runs_seen()
        .iter()
        .filter(|r| r["job"]["id"] == "stuck")
        .count();
    assert_eq!(
        stuck_calls, 2,
        "it stops at the first answer without progress"
    );
    client.shutdown().await;
}

async fn a_sleep_until_a_time_waits_until_then_and_one_passed_does_not_wait(db: TestDb) {
    let (client, clock, registry) = registry(&db).await;
    let start = flare::Clock::now_ms(&clock);
    let at = |ms: i64| flare::clock::ms_to_time(start + ms).to_rfc3339();
    let (past, future) = (at(-60_000), at(600_000));
    let app = App::start(serving_v2(vec![job("until", "a.until", 1)], move |req| {
        let steps = &req["steps"];
        if steps.get("passed").is_none() {
            json_answer(json!({"steps": [{"key": "passed", "op": "sleep", "until": past}]}))
        } else if steps.get("later").is_none() {
            json_answer(json!({"steps": [{"key": "later", "op": "sleep", "until": future}]}))
        } else {
            json_answer(json!({"output": "done"}))
        }
    }))
    .await;
    registry.add(&app.url, Some(SECRET.into())).await.unwrap();
    let sent = client.send_event("a.until", &json!({})).await.unwrap();
    let run_id = sent.run_ids[0].clone();
    let waiting = wait_for("the run to sleep until the future time", || async {
        let d = client.store().run_detail(&run_id).await.unwrap()?;
        (d.run.status == RunStatus::Queued && d.steps.len() == 2).then_some(d)
    })
    .await;
    let step = |key: &str| waiting.steps.iter().find(|s| s.key == key).unwrap().clone();
    assert_eq!(
        step("passed").status,
        StepStatus::Succeeded,
        "a passed time does not wait"
    );
    assert_eq!(step("later").status, StepStatus::Waiting);
    assert_eq!(
        step("later").wait_until.map(|t| t.timestamp_millis()),
        Some(start + 600_000)
    );
    clock.advance(Duration::from_secs(599));
    client.engine().wake();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let still = client.store().run_detail(&run_id).await.unwrap().unwrap();
    assert_eq!(still.run.status, RunStatus::Queued, "not before its time");
    clock.advance(Duration::from_secs(2));
    client.engine().wake();
    let run = run_of(&client, &sent.id, "until").await;
    assert_eq!(run.run.status, RunStatus::Succeeded);
    assert_eq!(run.run.output, Some(json!("done")));
    client.shutdown().await;
}

async fn a_bad_step_fails_with_a_clear_error(db: TestDb) {
    let app = App::start(serving_v2(vec![job("wait", "a.wait", 1)], |_| {
        json_answer(json!({"steps": [{"key": "w", "op": "invoke", "job": "x"}]}))
    }))
    .await;
    let (client, _clock, registry) = registry(&db).await;
    registry.add(&app.url, Some(SECRET.into())).await.unwrap();
    let sent = client.send_event("a.wait", &json!({})).await.unwrap();
    let run = run_of(&client, &sent.id, "wait").await;
    assert_eq!(run.run.status, RunStatus::Failed);
    let error = run.run.error.unwrap_or_default();
    assert!(
        error.contains("step \"w\": \"timeoutMs\" must be a whole number of ms"),
        "{error}"
    );
    client.shutdown().await;
}

async fn version_one_requests_carry_no_steps(db: TestDb) {
    let app = App::start(crate::fixture::serving(
        vec![crate::fixture::job("plain", "a.plain")],
        |_| json_answer(json!({"output": 1})),
    ))
    .await;
    let (client, _clock, registry) = registry(&db).await;
    registry.add(&app.url, Some(SECRET.into())).await.unwrap();
    let sent = client.send_event("a.plain", &json!({})).await.unwrap();
    let run = run_of(&client, &sent.id, "plain").await;
    assert_eq!(run.run.status, RunStatus::Succeeded);
    let request = app.runs_seen().pop().unwrap();
    assert!(request.get("steps").is_none() && request.get("protocol").is_none());
    client.shutdown().await;
}

backend_tests!(
    steps_sleep_and_events_run_durably,
    a_failed_step_is_retried_and_the_steps_before_it_are_not,
    a_step_answered_twice_is_stored_once_and_changed_code_fails_the_run,
    events_answered_twice_are_sent_once_and_an_answer_must_make_progress,
    a_sleep_until_a_time_waits_until_then_and_one_passed_does_not_wait,
    a_bad_step_fails_with_a_clear_error,
    version_one_requests_carry_no_steps,
);
