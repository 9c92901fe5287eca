//! Named nodes and a paused start (issue 25): `--node-name` is the node's id everywhere (its beat
//! with version, concurrency and load, its runs), a name a live node holds is refused, and
//! `--paused` pauses every job before anything is claimed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use flare::{event_trigger, Client, Clock, EngineConfig, Io, Job, ManualClock, RunStatus};
use serde_json::{json, Value};

use crate::backend_tests;
use crate::support::{test_config, wait_for, TestDb};

fn named(name: &str) -> EngineConfig {
    EngineConfig {
        node_name: Some(name.to_string()),
        ..test_config()
    }
}

fn counting(id: &str, ran: &Arc<AtomicUsize>) -> Job {
    let ran = Arc::clone(ran);
    Job::new(id, id, "1.0.0")
        .trigger(event_trigger("node.todo"))
        .run(move |_: Value, _: Io| {
            let ran = Arc::clone(&ran);
            async move {
                ran.fetch_add(1, Ordering::SeqCst);
                Ok(json!("done"))
            }
        })
}

async fn a_named_node_is_known_by_its_name_and_keeps_it_to_itself(db: TestDb) {
    let clock = ManualClock::new(chrono::Utc::now().timestamp_millis());
    let web = db.client_on(&clock, named("web-a")).await;
    assert_eq!(web.engine().node_id(), "web-a");
    let ran = Arc::new(AtomicUsize::new(0));
    web.register_job(counting("named", &ran)).await.unwrap();
    web.engine().beat().await.unwrap();
    let nodes = web.store().nodes_list(clock.now_ms()).await.unwrap();
    let me = nodes.iter().find(|n| n.id == "web-a").expect("its beat");
    assert!(me.live);
    assert_eq!(me.version, env!("CARGO_PKG_VERSION"));
    assert_eq!((me.concurrency, me.running), (16, 0));
    assert_eq!(me.jobs, ["named"]);

    let sent = web.send_event("node.todo", &json!({})).await.unwrap();
    let run_id = sent.run_ids[0].clone();
    let run = wait_for("the run", || async {
        let d = web.store().run_detail(&run_id).await.unwrap()?;
        (d.run.status == RunStatus::Succeeded).then_some(d)
    })
    .await;
    assert_eq!(run.run.node.as_deref(), Some("web-a"));

    // A second process with the same name is refused while the first is live.
    let err = Client::builder(&db.url)
        .clock(Arc::new(clock.clone()))
        .config(named("web-a"))
        .connect()
        .await
        .expect_err("the name is taken");
    assert!(err.to_string().contains("taken by a live process"), "{err}");
    // Without a name: the host name and the process id.
    let other = db.client_on(&clock, test_config()).await;
    assert!(
        other
            .engine()
            .node_id()
            .contains(&std::process::id().to_string()),
        "{}",
        other.engine().node_id()
    );
    other.shutdown().await;
    web.shutdown().await;
}

async fn a_paused_start_claims_nothing_until_a_job_is_resumed(db: TestDb) {
    let clock = ManualClock::new(chrono::Utc::now().timestamp_millis());
    // The original: a job and a run waiting for it (a sender runs nothing).
    let original = db.sender(&clock).await;
    let ran = Arc::new(AtomicUsize::new(0));
    original
        .register_job(counting("copied", &ran))
        .await
        .unwrap();
    let sent = original.send_event("node.todo", &json!({})).await.unwrap();
    // The copy opened with --paused.
    let copy = Client::builder(&db.url)
        .clock(Arc::new(clock.clone()))
        .config(test_config())
        .paused(true)
        .connect()
        .await
        .unwrap();
    copy.register_job(counting("copied", &ran)).await.unwrap();
    let now = chrono::DateTime::from_timestamp_millis(clock.now_ms()).unwrap();
    let jobs = copy.store().jobs_list(now).await.unwrap();
    assert!(jobs.iter().all(|j| j.job.paused), "{jobs:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let run_id = sent.run_ids[0].clone();
    let status = copy.store().run_detail(&run_id).await.unwrap().unwrap();
    assert_eq!(status.run.status, RunStatus::Queued);
    assert_eq!(ran.load(Ordering::SeqCst), 0);

    copy.store().job_pause("copied", false).await.unwrap();
    wait_for("the resumed job's run", || async {
        let d = copy.store().run_detail(&run_id).await.unwrap()?;
        (d.run.status == RunStatus::Succeeded).then_some(())
    })
    .await;
    copy.shutdown().await;
}

/// `flare_runs_waiting{reason}`'s counts (issue 25): a run on an `io.wait`, one in a retry's
/// backoff, one of a paused job, one due with nothing to claim it.
async fn queued_runs_are_counted_by_what_they_wait_for(db: TestDb) {
    let (client, clock) = db.client().await;
    client
        .register_job(
            Job::new("napper", "napper", "1.0.0")
                .trigger(event_trigger("wait.todo"))
                .run(|_: Value, io: Io| async move {
                    io.wait("nap", Duration::from_secs(3600)).await;
                    Ok(json!(1))
                }),
        )
        .await
        .unwrap();
    client
        .register_job(
            Job::new("flaky", "flaky", "1.0.0")
                .trigger(event_trigger("wait.todo"))
                .retry(
                    flare::RetryPolicy::default()
                        .max_attempts(3)
                        .delays(Duration::from_secs(60), Duration::from_secs(60))
                        .jitter(false),
                )
                .run(|_: Value, _: Io| async move { Err::<Value, _>("not yet".into()) }),
        )
        .await
        .unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    client.register_job(counting("held", &ran)).await.unwrap();
    client.store().job_pause("held", true).await.unwrap();
    // A job stored by a process that runs nothing: its run is due, and waits for a worker.
    let sender = db.sender(&clock).await;
    sender
        .register_job(
            Job::new("elsewhere", "elsewhere", "1.0.0")
                .trigger(event_trigger("wait.todo"))
                .run(|_: Value, _: Io| async move { Ok(json!(1)) }),
        )
        .await
        .unwrap();
    client.send_event("node.todo", &json!({})).await.unwrap();
    client.send_event("wait.todo", &json!({})).await.unwrap();
    let now = || chrono::DateTime::from_timestamp_millis(clock.now_ms()).unwrap();
    let waiting = wait_for("the runs to settle into waiting", || async {
        let w = client.store().runs_waiting(now()).await.unwrap();
        (w.wait == 1 && w.retry == 1).then_some(w)
    })
    .await;
    assert_eq!(
        (waiting.worker, waiting.wait, waiting.retry, waiting.paused),
        (1, 1, 1, 1),
        "{waiting:?}"
    );
    sender.shutdown().await;
    client.shutdown().await;
}

backend_tests!(
    a_named_node_is_known_by_its_name_and_keeps_it_to_itself,
    a_paused_start_claims_nothing_until_a_job_is_resumed,
    queued_runs_are_counted_by_what_they_wait_for,
);
