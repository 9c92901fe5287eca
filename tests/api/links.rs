//! What a run and an event link to (issue 27): `GET /api/runs/{id}` shows the event that
//! cancelled the run (`cancelledBy`), the run that invoked it (`parentRunId`) and the runs it
//! invoked with their states (`children`), and a callback's URL and deadline; `GET
//! /api/events/{id}` shows the runs the event resumed (`resumedRuns`) and cancelled
//! (`cancelledRuns`).

use std::time::Duration;

use flare::{event_trigger, CancelOn, Io, Job, RunStatus, WaitFor};
use serde_json::{json, Value};

use crate::backend_tests;
use crate::fixture::fixture;
use crate::support::{wait_for, TestDb};

const DAY: Duration = Duration::from_secs(86_400);

async fn runs_and_events_show_what_cancelled_resumed_and_invoked_them(db: TestDb) {
    let f = fixture(db).await;
    f.client
        .define_job(
            Job::new("pack", "Pack", "1.0.0")
                .trigger(event_trigger("never.sent"))
                .run(|_p: Value, io: Io| async move {
                    let approval = io.callback("approve", DAY).await?;
                    io.wait_for_callback(&approval).await?;
                    Ok(json!("packed"))
                }),
        )
        .expect("ok");
    f.client
        .define_job(
            Job::new("fulfil", "Fulfil", "1.0.0")
                .trigger(event_trigger("order.made"))
                .cancel_on(CancelOn::event("order.cancelled").matching("payload.orderId"))
                .run(|_p: Value, io: Io| async move {
                    let paid = io
                        .wait_for_event(
                            "paid",
                            "invoice.paid",
                            WaitFor::timeout(DAY).matching("payload.orderId"),
                        )
                        .await?;
                    if paid.is_none() {
                        return Ok(json!("unpaid"));
                    }
                    let packed: Vec<Value> = io
                        .invoke_all("pack", "pack", &[json!({}), json!({})], DAY)
                        .await?;
                    Ok(json!(packed))
                }),
        )
        .expect("ok");
    let made = f
        .client
        .send_event("order.made", &json!({ "orderId": "o1" }))
        .await
        .expect("ok");
    let parent = made.run_ids[0].clone();
    let run_waits = |id: String| {
        let f = &f;
        async move {
            let d = f.client.store().run_detail(&id).await.expect("detail")?;
            (d.run.status == RunStatus::Queued && d.wait.is_some()).then_some(d)
        }
    };
    wait_for("the order to wait for its invoice", || {
        run_waits(parent.clone())
    })
    .await;
    let paid = f
        .client
        .send_event("invoice.paid", &json!({ "orderId": "o1" }))
        .await
        .expect("ok");
    let event = f.get(&format!("/api/events/{}", paid.id)).await;
    assert_eq!(event["resumedRuns"][0]["runId"], json!(parent));
    assert_eq!(event["resumedRuns"][0]["jobId"], "fulfil");
    assert!(event["resumedRuns"][0]["at"].is_string());
    assert_eq!(event["cancelledRuns"], json!([]));

    // The order waits on its two packs, each waiting on a callback.
    let d = wait_for("the order to wait for its packs", || async {
        let d = run_waits(parent.clone()).await?;
        (d.children.len() == 2).then_some(d)
    })
    .await;
    let first = d.children[0].run_id.clone();
    let pack = wait_for("a pack to wait for its callback", || {
        run_waits(first.clone())
    })
    .await;
    let run = f.get(&format!("/api/runs/{parent}")).await;
    assert_eq!(run["children"][0]["runId"], json!(first));
    assert_eq!(run["children"][0]["jobId"], "pack");
    assert_eq!(run["children"][0]["stepKey"], "pack:0");
    assert_eq!(run["children"][1]["stepKey"], "pack:1");
    assert_eq!(run["children"][0]["status"], "queued");
    assert_eq!(run["wait"]["event"], "flare/job.invoked");
    assert_eq!(run["cancelledBy"], Value::Null);
    let child = f.get(&format!("/api/runs/{first}")).await;
    assert_eq!(child["parentRunId"], json!(parent));
    let token = pack.wait.expect("wait").match_value.expect("token");
    assert_eq!(child["wait"]["callbackUrl"], format!("/callbacks/{token}"));
    assert!(child["wait"]["until"].is_string(), "its deadline");

    // Cancelled by its order's cancellation, with its packs.
    let cancelled = f
        .client
        .send_event("order.cancelled", &json!({ "orderId": "o1" }))
        .await
        .expect("ok");
    let run = f.get(&format!("/api/runs/{parent}")).await;
    assert_eq!(run["status"], "cancelled");
    assert_eq!(run["cancelledBy"]["eventId"], json!(cancelled.id));
    assert_eq!(run["cancelledBy"]["eventName"], "order.cancelled");
    assert_eq!(run["children"][0]["status"], "cancelled");
    assert_eq!(run["children"][1]["status"], "cancelled");
    assert_eq!(run["wait"], Value::Null);
    let event = f.get(&format!("/api/events/{}", cancelled.id)).await;
    let runs = event["cancelledRuns"].as_array().expect("runs");
    assert_eq!(runs.len(), 3, "the order and its two packs: {runs:?}");
    assert!(runs.iter().all(|r| r["status"] == "cancelled"));
    // A pack's callback is refused now: its run is over.
    let (status, _) = f
        .call(
            "POST",
            &format!("/callbacks/{token}"),
            Some(json!({ "ok": true })),
        )
        .await;
    assert_eq!(status.as_u16(), 404);
}

backend_tests!(runs_and_events_show_what_cancelled_resumed_and_invoked_them);
