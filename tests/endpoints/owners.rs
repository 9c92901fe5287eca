//! One job id, one owner (issue 25): a job defined in code displaces a stored endpoint job with
//! the same id (a warning, a note on the jobs page, every node stops calling the endpoint for it,
//! its runs run the code); the endpoint's index of that id is refused while a live node defines
//! it in code, and takes it back, noted, once none does.

use std::time::Duration;

use flare::endpoints::Registry;
use flare::{Client, RunStatus};
use serde_json::{json, Value};

use crate::backend_tests;
use crate::fixture::{job, json_answer, run_of, serving, App, SECRET};
use crate::support::{wait_for, TestDb};

/// The placement of job `id` as the jobs list shows it.
async fn placement(client: &Client, id: &str) -> flare::store::JobPlacement {
    let now = chrono::DateTime::from_timestamp_millis(client.clock().now_ms()).unwrap();
    let jobs = client.store().jobs_list(now).await.unwrap();
    jobs.into_iter()
        .find(|j| j.job.id == id)
        .unwrap_or_else(|| panic!("no job {id}"))
        .placement
}

/// Whether `client`'s engine defines job `id`.
fn defines(client: &Client, id: &str) -> bool {
    client.engine().job_ids().iter().any(|j| j == id)
}

async fn a_job_defined_in_code_displaces_a_stale_endpoint_job(db: TestDb) {
    let app = App::start(serving(
        vec![job("send-welcome-email", "user.created")],
        |_| json_answer(json!({"output": "from the endpoint"})),
    ))
    .await;
    let (first, clock) = db.client().await;
    let first_registry = Registry::new(first.clone());
    first_registry
        .add(&app.url, Some(SECRET.into()))
        .await
        .unwrap();
    // Another node runs the endpoint's jobs, as every node does.
    let other = db.client_on(&clock, crate::support::test_config()).await;
    let other_registry = Registry::new(other.clone());
    other_registry.start(Vec::new()).await.unwrap();
    wait_for("the other node to run the endpoint's job", || async {
        defines(&other, "send-welcome-email").then_some(())
    })
    .await;
    // The application goes away; a node with the same job in its code starts.
    app.stop();
    first_registry.stop();
    first.shutdown().await;
    let rust = db.client_on(&clock, crate::support::test_config()).await;
    rust.register_job(
        flare::Job::new("send-welcome-email", "Send the welcome email", "2.0.0")
            .trigger(flare::event_trigger("user.created"))
            .run(|_: Value, _| async { Ok(json!("from the code")) }),
    )
    .await
    .unwrap();
    rust.engine().beat().await.unwrap();
    let rust_registry = Registry::new(rust.clone());
    rust_registry.start(Vec::new()).await.unwrap();

    let placed = placement(&rust, "send-welcome-email").await;
    assert!(placed.endpoint.is_none(), "{placed:?}");
    let note = placed.owner_note.expect("the change of owner is noted");
    assert!(
        note.message.contains("displaced") && note.message.contains(&app.url),
        "{note:?}"
    );
    // Every node stops calling the endpoint for it.
    wait_for(
        "the other node to stop running the endpoint's job",
        || async { (!defines(&other, "send-welcome-email")).then_some(()) },
    )
    .await;
    assert!(defines(&rust, "send-welcome-email"));
    other_registry.stop();
    other.shutdown().await;

    let sender = db.sender(&clock).await;
    let sent = sender
        .send_event("user.created", &json!({"email": "ada@example.com"}))
        .await
        .unwrap();
    let run = run_of(&sender, &sent.id, "send-welcome-email").await;
    assert_eq!(run.run.status, RunStatus::Succeeded, "{:?}", run.run.error);
    assert_eq!(run.run.output, Some(json!("from the code")));

    // An endpoint serving the job (registered anew: the application came back on another
    // port) is refused while the code's node is live…
    let again = App::start(serving(
        vec![job("send-welcome-email", "user.created")],
        |_| json_answer(json!({"output": "from the endpoint"})),
    ))
    .await;
    let err = rust_registry
        .add(&again.url, Some(SECRET.into()))
        .await
        .expect_err("a live node defines it in code");
    assert!(err.to_string().contains("defined in the code"), "{err}");

    // …and taken back, noted, once no live node defines it.
    rust_registry.stop();
    rust.shutdown().await;
    clock.advance(Duration::from_secs(30));
    let last = db.sender(&clock).await;
    let registry = Registry::new(last.clone());
    registry.add(&again.url, Some(SECRET.into())).await.unwrap();
    let placed = placement(&last, "send-welcome-email").await;
    assert_eq!(placed.endpoint.as_ref().unwrap().url, again.url);
    let note = placed.owner_note.expect("noted");
    assert!(note.message.contains("took over"), "{note:?}");
}

backend_tests!(a_job_defined_in_code_displaces_a_stale_endpoint_job);
