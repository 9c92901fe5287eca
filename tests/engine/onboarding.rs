//! Issue 27's "done means": the onboarding workflow of `examples/onboarding/jobs.rs` (create the
//! account, wait up to three days for `user.verified` of this user, else remind; invoke
//! `send-tips` for each team; alert on failure), on each store, the engine restarted in the middle
//! of each wait, and the run page showing it; without the verification it reminds after three
//! days; a team that cannot be reached fails it for good, and the failure handler alerts.

use std::time::Duration;

use flare::store::EventQuery;
use flare::{Client, RunStatus, StepStatus};
use serde_json::{json, Value};

use crate::backend_tests;
use crate::support::http::{call, json_request};
use crate::support::{sample, settled, test_config, wait_for, TestDb};

#[path = "../../examples/onboarding/jobs.rs"]
mod jobs;

/// A node running the workflow's jobs: with `tips` false it does not run `send-tips`, so the
/// children it starts stay queued.
async fn node(client: &Client, tips: bool) {
    client.register_job(jobs::onboarding()).await.unwrap();
    if tips {
        client.register_job(jobs::send_tips()).await.unwrap();
    }
}

/// Waits until run `id` is suspended on a wait for an event named `name`.
async fn suspended_on(client: &Client, id: &str, name: &str) {
    wait_for(&format!("the run to wait for {name}"), || async {
        let d = client.store().run_detail(id).await.unwrap()?;
        let waits =
            d.run.status == RunStatus::Queued && d.wait.as_ref().is_some_and(|w| w.event == name);
        waits.then_some(())
    })
    .await;
}

fn teams(names: &[&str]) -> Vec<Value> {
    names.iter().map(|n| json!({ "name": n })).collect()
}

async fn the_workflow_survives_a_restart_in_each_wait_and_is_shown(db: TestDb) {
    let (first, clock) = db.client().await;
    node(&first, true).await;
    let five = teams(&["a", "b", "c", "d", "e"]);
    let created = first
        .send_event("user.created", &json!({ "userId": "u_1", "teams": five }))
        .await
        .unwrap();
    let run = created.run_ids[0].clone();
    suspended_on(&first, &run, "user.verified").await;
    first.shutdown().await;

    // Restarted in the wait for the verification; this node does not run `send-tips`.
    let second = db.client_on(&clock, test_config()).await;
    node(&second, false).await;
    second
        .send_event("user.verified", &json!({ "userId": "someone-else" }))
        .await
        .unwrap();
    // Resumed in the insert's transaction or not at all: another user's event left it waiting.
    let d = second.store().run_detail(&run).await.unwrap().unwrap();
    assert_eq!(d.wait.map(|w| w.event).as_deref(), Some("user.verified"));
    let verified = second
        .send_event("user.verified", &json!({ "userId": "u_1" }))
        .await
        .unwrap();
    suspended_on(&second, &run, "flare/job.invoked").await;
    let d = second.store().run_detail(&run).await.unwrap().unwrap();
    assert_eq!(d.children.len(), 5, "{:?}", d.children);
    assert!(d.children.iter().all(|c| c.status == RunStatus::Queued));
    second.shutdown().await;

    // Restarted in the wait for the five children.
    let third = db.client_on(&clock, test_config()).await;
    node(&third, true).await;
    let d = settled(&third, &created.id).await;
    assert_eq!(d.runs[0].status, RunStatus::Succeeded, "{:?}", d.runs[0]);
    assert_eq!(
        d.runs[0].output,
        Some(json!({ "account": "acct-u_1", "verified": true, "teams": 5 }))
    );
    let d = third.store().run_detail(&run).await.unwrap().unwrap();
    assert!(d.steps.iter().all(|s| s.key != "remind"), "no reminder");
    let got = d.steps.iter().find(|s| s.key == "verified").unwrap();
    assert_eq!(got.output.as_ref().unwrap()["id"], json!(verified.id));
    assert_eq!(
        d.steps
            .iter()
            .filter(|s| s.key.starts_with("tips:"))
            .count(),
        5
    );
    assert!(d.steps.iter().all(|s| s.status == StepStatus::Succeeded));
    assert!(d.children.iter().all(|c| c.status == RunStatus::Succeeded));
    assert!(d.logs.iter().any(|l| l.message == "tips sent to 5 teams"));

    let app = sample::router(&third, db.url.clone(), None);
    let page = call(&app, json_request("GET", &format!("/runs/{run}"), None)).await;
    assert_eq!(page.status, axum::http::StatusCode::OK);
    for shown in ["onboarding", "verified", "tips:4", "send-tips", "acct-u_1"] {
        assert!(page.text.contains(shown), "the run page shows {shown}");
    }
    third.shutdown().await;
}

async fn without_verification_it_reminds_and_a_failure_is_alerted(db: TestDb) {
    let (client, clock) = db.client().await;
    node(&client, true).await;
    let created = client
        .send_event(
            "user.created",
            &json!({ "userId": "u_2", "teams": [{ "name": "a" }, { "name": "z", "fail": true }] }),
        )
        .await
        .unwrap();
    let run = created.run_ids[0].clone();
    suspended_on(&client, &run, "user.verified").await;
    clock.advance(Duration::from_secs(3 * 86_400));
    client.engine().wake();
    // Reminded, then each attempt's fan-out has a team that cannot be reached: the run's retries
    // (a second apart, doubling) are moved through on the clock until it fails for good.
    let failed = wait_for("the run to fail for good", || async {
        let d = client.store().run_detail(&run).await.unwrap()?;
        if d.run.status == RunStatus::Failed {
            return Some(d);
        }
        clock.advance(Duration::from_secs(10));
        client.engine().wake();
        None
    })
    .await;
    assert!(failed
        .steps
        .iter()
        .any(|s| s.key == "remind" && s.output == Some(json!("reminded u_2"))));
    let error = failed.run.error.clone().unwrap_or_default();
    assert!(error.contains("cannot be reached"), "{error}");
    // The alert: one `flare/run.failed` for the run, whose handler ran.
    let sent = client
        .store()
        .events_list(EventQuery {
            name: Some("flare/run.failed".into()),
            ..EventQuery::default()
        })
        .await
        .unwrap()
        .items;
    let ours: Vec<_> = sent
        .iter()
        .filter(|s| s.event.payload["runId"] == json!(run))
        .collect();
    assert_eq!(ours.len(), 1, "one failure event for the run");
    let handled = settled(&client, &ours[0].event.id).await;
    assert_eq!(handled.runs.len(), 1);
    assert_eq!(handled.runs[0].job_id, "onboarding-on-failure");
    assert_eq!(handled.runs[0].status, RunStatus::Succeeded);
    let d = client
        .store()
        .run_detail(&handled.runs[0].id)
        .await
        .unwrap()
        .unwrap();
    assert!(
        d.logs.iter().any(|l| l
            .message
            .starts_with(&format!("onboarding run {run} failed"))),
        "{:?}",
        d.logs
    );
}

backend_tests!(
    the_workflow_survives_a_restart_in_each_wait_and_is_shown,
    without_verification_it_reminds_and_a_failure_is_alerted,
);
