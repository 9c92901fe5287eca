//! A debounced job (issue 26) from Rust: refused at definition when its debounce is bad, and
//! shown where a user looks: its window on the jobs page and in `GET /api/jobs`, the earlier
//! events of a burst linking to the run they were folded into (API and event page), and the
//! run saying when it starts (API and run page); then it runs once, with the last payload.

use std::time::Duration;

use flare::model::Source;
use flare::{event_trigger, Clock, Debounce, Io, Job, RunStatus, SendEvent};
use serde_json::{json, Value};

use crate::fixture::{fixture, row, Auth};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debounced_burst_shows_its_run_on_every_page_and_runs_once() {
    let f = fixture().await;
    let bad = f.client.define_job(
        Job::new("bad-debounce", "Bad", "1.0.0")
            .trigger(event_trigger("doc.edited"))
            .debounce(Debounce::new(Duration::from_secs(5)).timeout(Duration::from_secs(1)))
            .run(|_: Value, _: Io| async { Ok(json!(null)) }),
    );
    let err = bad.expect_err("refused").to_string();
    assert!(err.contains("debounce.timeoutMs"), "{err}");
    f.client
        .define_job(
            Job::new("reindex", "Reindex", "1.0.0")
                .trigger(event_trigger("doc.edited"))
                .debounce(
                    Debounce::new(Duration::from_secs(5))
                        .key("event.payload.doc")
                        .timeout(Duration::from_secs(60)),
                )
                .run(|payload: Value, _: Io| async move { Ok(payload) }),
        )
        .expect("define");
    let mut ids = Vec::new();
    for n in 0..3 {
        f.clock.advance(Duration::from_secs(1));
        let sent = f
            .client
            .send_inserted(
                SendEvent::new("doc.edited", &json!({"doc": "d1", "n": n})),
                Source::Api,
            )
            .await
            .expect("send");
        ids.push(sent.event.id);
    }
    let get = |uri: String| {
        let f = &f;
        async move {
            let a = f.request("GET", &uri, Auth::Bearer, None, None).await;
            serde_json::from_str::<Value>(&a.body).expect("json")
        }
    };
    let first = get(format!("/api/events/{}", ids[0])).await;
    assert_eq!(first["runs"], json!([]), "{first}");
    assert_eq!(first["debounced"][0]["jobId"], "reindex", "{first}");
    let run = first["debounced"][0]["runId"]
        .as_str()
        .expect("run")
        .to_string();
    let last = get(format!("/api/events/{}", ids[2])).await;
    assert_eq!(last["runs"][0]["id"], json!(run), "{last}");
    assert_eq!(last["debounced"], json!([]));
    let starts = chrono::DateTime::from_timestamp_millis(f.clock.now_ms() + 5_000)
        .expect("time")
        .format("%H:%M:%S")
        .to_string();
    let waiting = format!("debounced: starts at {starts} unless another event comes");
    let detail = get(format!("/api/runs/{run}")).await;
    assert_eq!(detail["waitingFor"], json!(waiting), "{detail}");
    let page = f.page(&format!("/events/{}", ids[1])).await;
    assert!(
        page.contains("Folded into a later event's run (1)"),
        "{page}"
    );
    assert!(page.contains("data-debounced=\"reindex\""), "{page}");
    assert!(page.contains(&format!("/runs/{run}")), "{page}");
    let page = f.page(&format!("/runs/{run}")).await;
    assert!(page.contains(&waiting), "{page}");
    let jobs = f.page("/jobs").await;
    let limits = row(&jobs, "data-job", "reindex");
    assert!(
        limits.contains("debounced 5 s per <code>event.payload.doc</code> (at most 60 s)"),
        "{limits}"
    );
    let listed = get("/api/jobs".into()).await;
    let job = listed["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .find(|j| j["id"] == "reindex")
        .expect("listed");
    assert_eq!(
        job["debounce"],
        json!({"periodMs": 5000, "key": "event.payload.doc", "timeoutMs": 60000})
    );
    // Its start comes: one run, with the last event's payload.
    f.clock.advance(Duration::from_secs(5));
    f.client.engine().wake();
    let done = crate::support::settled(&f.client, &ids[2]).await;
    assert_eq!(done.runs.len(), 1);
    assert_eq!(done.runs[0].status, RunStatus::Succeeded);
    assert_eq!(done.runs[0].output, Some(json!({"doc": "d1", "n": 2})));
}
