//! Behaviour suite: scheduled jobs (cron with a time zone, interval). Each tick is one event
//! (`schedule:<job>:<tick ms>`) inserted by the leader's scheduler, so a job runs once per tick
//! across nodes, restarts and catch-up after downtime. Maintenance is driven by hand
//! (`ticks_once`, `lead_once`) and time by the manual clock.

use std::sync::Arc;
use std::time::Duration;

use flare::store::query::{EventQuery, RunQuery};
use flare::store::NewEvent;
use flare::{
    cron_trigger, event_trigger, interval_trigger, Client, Clock, EngineConfig, Io, Job,
    ManualClock, RunStatus, Schedule,
};
use serde_json::{json, Value};

use crate::backend_tests;
use crate::support::{settled, test_config, wait_for, TestDb};

fn at(s: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(s)
        .expect("time")
        .timestamp_millis()
}

/// The background maintenance loop never ticks during a test: passes are driven by hand.
fn manual() -> EngineConfig {
    EngineConfig {
        poll_interval: Duration::from_secs(3600),
        leader_ttl: Duration::from_secs(10),
        ..test_config()
    }
}

async fn node(db: &TestDb, clock: &ManualClock) -> Client {
    Client::builder(&db.url)
        .clock(Arc::new(clock.clone()))
        .config(manual())
        .connect()
        .await
        .expect("connect")
}

/// A job on `trigger` that returns its payload.
fn job(id: &str, trigger: flare::Trigger) -> Job {
    Job::new(id, id, "1.0.0")
        .trigger(trigger)
        .run(|p: Value, _io: Io| async move { Ok(p) })
}

async fn fire(client: &Client) -> usize {
    client.engine().maintenance().ticks_once().await.unwrap()
}

/// The events the schedule of `job` inserted, oldest first.
async fn ticks(client: &Client, job: &str) -> Vec<flare::StoredEvent> {
    let page = client
        .store()
        .events_list(EventQuery {
            name: Some(Schedule::event_name(job)),
            ..EventQuery::default()
        })
        .await
        .unwrap();
    let mut events = Vec::new();
    for e in page.items.iter().rev() {
        events.push(
            client
                .store()
                .event_get(&e.event.id)
                .await
                .unwrap()
                .unwrap(),
        );
    }
    events
}

async fn runs(client: &Client, job: &str) -> usize {
    client
        .store()
        .runs_list(RunQuery {
            job_id: Some(job.into()),
            ..RunQuery::default()
        })
        .await
        .unwrap()
        .items
        .len()
}

async fn next_tick(client: &Client, job: &str) -> Option<i64> {
    client
        .store()
        .schedules_list()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.job_id == job)
        .map(|s| s.next_tick)
}

async fn a_cron_job_runs_once_per_tick_and_not_before(db: TestDb) {
    // Monday 5 January 2026.
    let clock = ManualClock::new(at("2026-01-05T08:58:00Z"));
    let client = node(&db, &clock).await;
    client
        .register_job(job("standup", cron_trigger("0 9 * * 1-5")))
        .await
        .unwrap();
    assert_eq!(fire(&client).await, 0);
    clock.set(at("2026-01-05T08:59:59.999Z"));
    assert_eq!(fire(&client).await, 0, "not before the tick");
    clock.set(at("2026-01-05T09:00:00Z"));
    assert_eq!(fire(&client).await, 1);
    assert_eq!(fire(&client).await, 0, "once per tick");
    let first = ticks(&client, "standup").await;
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].source, "schedule");
    assert_eq!(
        first[0].id,
        format!("schedule:standup:{}", at("2026-01-05T09:00:00Z"))
    );
    assert_eq!(
        first[0].payload,
        json!({"ts": "2026-01-05T09:00:00.000Z", "lastTimestamp": null})
    );
    let done = settled(&client, &first[0].id).await;
    assert_eq!(done.runs.len(), 1);
    assert_eq!(done.runs[0].status, RunStatus::Succeeded);
    // The next weekday's tick, a little late: it fires with the previous tick as lastTimestamp.
    clock.set(at("2026-01-06T09:00:30Z"));
    assert_eq!(fire(&client).await, 1);
    assert_eq!(fire(&client).await, 0);
    let all = ticks(&client, "standup").await;
    assert_eq!(all.len(), 2);
    assert_eq!(
        all[1].payload,
        json!({"ts": "2026-01-06T09:00:00.000Z", "lastTimestamp": "2026-01-05T09:00:00.000Z"})
    );
    settled(&client, &all[1].id).await;
    assert_eq!(runs(&client, "standup").await, 2);
    // Friday's tick is followed by Monday's: no weekend runs.
    clock.set(at("2026-01-09T09:00:00Z"));
    assert_eq!(fire(&client).await, 1);
    assert_eq!(
        next_tick(&client, "standup").await,
        Some(at("2026-01-12T09:00:00Z"))
    );
    client.shutdown().await;
}

async fn an_interval_job_runs_once_per_interval(db: TestDb) {
    let t0 = at("2026-03-01T12:00:00Z");
    let clock = ManualClock::new(t0);
    let client = node(&db, &clock).await;
    client
        .register_job(job("poll", interval_trigger(Duration::from_secs(90))))
        .await
        .unwrap();
    assert_eq!(next_tick(&client, "poll").await, Some(t0 + 90_000));
    clock.set(t0 + 89_999);
    assert_eq!(fire(&client).await, 0, "not before the interval");
    clock.set(t0 + 90_000);
    assert_eq!(fire(&client).await, 1);
    assert_eq!(fire(&client).await, 0);
    clock.set(t0 + 180_000);
    assert_eq!(fire(&client).await, 1);
    let all = ticks(&client, "poll").await;
    assert_eq!(
        all.iter().map(|e| e.id.clone()).collect::<Vec<_>>(),
        vec![
            format!("schedule:poll:{}", t0 + 90_000),
            format!("schedule:poll:{}", t0 + 180_000)
        ]
    );
    for e in &all {
        settled(&client, &e.id).await;
    }
    assert_eq!(runs(&client, "poll").await, 2);
    client.shutdown().await;
}

async fn two_nodes_fire_each_tick_once(db: TestDb) {
    let t0 = at("2026-03-01T12:00:00Z");
    let clock = ManualClock::new(t0);
    let a = node(&db, &clock).await;
    let b = node(&db, &clock).await;
    // Both nodes define the job, as every process of one deployment does.
    for n in [&a, &b] {
        n.register_job(job("sync", interval_trigger(Duration::from_secs(60))))
            .await
            .unwrap();
    }
    for k in 1..=3i64 {
        clock.set(t0 + k * 60_000);
        // Both run the scheduler at once (as two leaders would, one losing its lease late)…
        let (x, y) = tokio::join!(fire(&a), fire(&b));
        assert_eq!(x + y, 1, "tick {k} fired once, not by both nodes");
        // …and through leadership only one of them does.
        let (ma, mb) = (a.engine().maintenance(), b.engine().maintenance());
        let (x, y) = tokio::join!(ma.lead_once(), mb.lead_once());
        let fired: usize = [x.unwrap(), y.unwrap()]
            .into_iter()
            .flatten()
            .map(|p| p.fired)
            .sum();
        assert_eq!(fired, 0, "nothing left to fire");
    }
    let all = ticks(&a, "sync").await;
    assert_eq!(all.len(), 3);
    for e in &all {
        let d = settled(&a, &e.id).await;
        assert_eq!(d.runs.len(), 1, "one run per tick across the nodes");
    }
    a.shutdown().await;
    b.shutdown().await;
}

async fn a_restart_neither_loses_nor_doubles_a_tick(db: TestDb) {
    let t0 = at("2026-03-01T12:00:00Z");
    let clock = ManualClock::new(t0);
    let first = node(&db, &clock).await;
    first
        .register_job(job("report", interval_trigger(Duration::from_secs(60))))
        .await
        .unwrap();
    clock.set(t0 + 60_000);
    assert_eq!(fire(&first).await, 1);
    settled(&first, &Schedule::event_id("report", t0 + 60_000)).await;
    clock.set(t0 + 90_000);
    first.shutdown().await;
    drop(first);
    // Down over the next tick (t0 + 120 s); the process starts again at t0 + 125 s and defines
    // the same job: the stored next tick is kept, so the tick missed while down fires now.
    clock.set(t0 + 125_000);
    let second = node(&db, &clock).await;
    second
        .register_job(job("report", interval_trigger(Duration::from_secs(60))))
        .await
        .unwrap();
    assert_eq!(next_tick(&second, "report").await, Some(t0 + 120_000));
    assert_eq!(
        fire(&second).await,
        1,
        "the tick passed while down is not lost"
    );
    // A scheduler that inserted the next tick's event before crashing (the schedule not yet
    // moved, as a transaction of another leader could leave it): the same tick is one event.
    let tick = t0 + 180_000;
    second
        .store()
        .event_insert(NewEvent {
            id: Schedule::event_id("report", tick),
            name: Schedule::event_name("report"),
            payload: json!({"ts": "earlier", "lastTimestamp": null}),
            context: None,
            source: "schedule".into(),
            parent_run_id: None,
            deliver_at: None,
            now: clock.now_ms(),
        })
        .await
        .unwrap();
    clock.set(tick);
    assert_eq!(fire(&second).await, 1);
    let all = ticks(&second, "report").await;
    assert_eq!(all.len(), 3, "ticks at 60 s, 120 s and 180 s, each once");
    for e in &all {
        let d = settled(&second, &e.id).await;
        assert_eq!(d.runs.len(), 1, "{}", e.id);
    }
    assert_eq!(runs(&second, "report").await, 3);
    second.shutdown().await;
}

async fn catch_up_after_a_long_gap_fires_once(db: TestDb) {
    let clock = ManualClock::new(at("2026-01-05T10:01:00Z"));
    let client = node(&db, &clock).await;
    client
        .register_job(job("five", cron_trigger("*/5 * * * *")))
        .await
        .unwrap();
    // Three hours without a scheduler: 36 ticks missed.
    clock.set(at("2026-01-05T13:02:00Z"));
    assert_eq!(fire(&client).await, 1, "one run for the gap, not a burst");
    assert_eq!(fire(&client).await, 0);
    let all = ticks(&client, "five").await;
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].payload["ts"], json!("2026-01-05T13:00:00.000Z"));
    assert_eq!(
        next_tick(&client, "five").await,
        Some(at("2026-01-05T13:05:00Z")),
        "continues from now"
    );
    settled(&client, &all[0].id).await;
    client.shutdown().await;
}

async fn a_cron_job_follows_its_time_zone(db: TestDb) {
    // Winter: 09:00 in Paris is 08:00 UTC.
    let clock = ManualClock::new(at("2026-01-05T07:00:00Z"));
    let client = node(&db, &clock).await;
    client
        .register_job(job("paris", cron_trigger("0 9 * * *").tz("Europe/Paris")))
        .await
        .unwrap();
    assert_eq!(
        next_tick(&client, "paris").await,
        Some(at("2026-01-05T08:00:00Z"))
    );
    clock.set(at("2026-01-05T07:59:59Z"));
    assert_eq!(fire(&client).await, 0);
    clock.set(at("2026-01-05T08:00:00Z"));
    assert_eq!(fire(&client).await, 1, "09:00 Paris");
    let all = ticks(&client, "paris").await;
    assert_eq!(all[0].payload["ts"], json!("2026-01-05T08:00:00.000Z"));
    settled(&client, &all[0].id).await;
    client.shutdown().await;
}

async fn invalid_schedules_are_clear_errors_at_definition(db: TestDb) {
    let (client, _clock) = db.client().await;
    let cases = [
        (
            cron_trigger("61 * * * *"),
            "invalid cron expression \"61 * * * *\"",
        ),
        (cron_trigger("every day"), "invalid cron expression"),
        (
            cron_trigger("0 9 * * *").tz("Mars/Olympus"),
            "unknown time zone \"Mars/Olympus\"",
        ),
        (
            interval_trigger(Duration::from_millis(100)),
            "at least one second",
        ),
        (
            cron_trigger("0 9 * * *").filter(json!({"a": [1]})),
            "takes no payload filter",
        ),
    ];
    for (trigger, expected) in cases {
        let err = client
            .define_job(job("bad", trigger))
            .expect_err(expected)
            .to_string();
        assert!(err.contains(expected), "{err}");
        assert!(err.starts_with("job bad: "), "{err}");
    }
    assert!(client.store().schedules_list().await.unwrap().is_empty());
    client.shutdown().await;
}

async fn redefining_a_job_moves_or_keeps_its_next_tick(db: TestDb) {
    let t0 = at("2026-03-01T12:00:00Z");
    let clock = ManualClock::new(t0);
    let client = node(&db, &clock).await;
    client
        .register_job(job("flex", interval_trigger(Duration::from_secs(3600))))
        .await
        .unwrap();
    assert_eq!(next_tick(&client, "flex").await, Some(t0 + 3_600_000));
    clock.set(t0 + 300_000);
    // Same schedule again: the next tick stays.
    client
        .register_job(job("flex", interval_trigger(Duration::from_secs(3600))))
        .await
        .unwrap();
    assert_eq!(next_tick(&client, "flex").await, Some(t0 + 3_600_000));
    // Another schedule: counted from the redefinition.
    client
        .register_job(job("flex", interval_trigger(Duration::from_secs(600))))
        .await
        .unwrap();
    assert_eq!(next_tick(&client, "flex").await, Some(t0 + 900_000));
    clock.set(t0 + 900_000);
    assert_eq!(fire(&client).await, 1);
    // An event trigger now: the schedule is gone and nothing fires.
    client
        .register_job(job("flex", event_trigger("flex.requested")))
        .await
        .unwrap();
    assert_eq!(next_tick(&client, "flex").await, None);
    clock.set(t0 + 3_600_000 * 5);
    assert_eq!(fire(&client).await, 0);
    let all = ticks(&client, "flex").await;
    assert_eq!(all.len(), 1);
    settled(&client, &all[0].id).await;
    client.shutdown().await;
}

async fn the_jobs_list_shows_the_schedule_and_next_runs(db: TestDb) {
    let clock = ManualClock::new(at("2026-01-05T07:00:00Z"));
    let client = node(&db, &clock).await;
    client
        .register_job(job("paris", cron_trigger("0 9 * * 1-5").tz("Europe/Paris")))
        .await
        .unwrap();
    client
        .register_job(job("plain", event_trigger("x.y")))
        .await
        .unwrap();
    let jobs = wait_for("the jobs list", || async {
        let jobs = client
            .store()
            .jobs_list(flare::model::ms_to_time(clock.now_ms()))
            .await
            .ok()?;
        (jobs.len() == 2).then_some(jobs)
    })
    .await;
    let json = serde_json::to_value(&jobs).unwrap();
    let paris = &json[0];
    assert_eq!(paris["id"], "paris");
    assert_eq!(paris["event"], "schedule.paris");
    assert_eq!(paris["schedule"]["cron"], "0 9 * * 1-5");
    assert_eq!(paris["schedule"]["timezone"], "Europe/Paris");
    assert_eq!(
        paris["schedule"]["nextRuns"],
        json!([
            "2026-01-05T08:00:00Z",
            "2026-01-06T08:00:00Z",
            "2026-01-07T08:00:00Z"
        ])
    );
    assert_eq!(paris["schedule"]["lastRun"], Value::Null);
    assert_eq!(json[1]["schedule"], Value::Null);
    client.shutdown().await;
}

async fn an_endpoint_index_schedules_its_jobs_and_unschedules_them(db: TestDb) {
    use flare::job::JobSpec;
    use flare::store::endpoints::{EndpointIndex, NewEndpoint, Protocol};
    let t0 = at("2026-03-01T12:00:00Z");
    let clock = ManualClock::new(t0);
    let client = node(&db, &clock).await;
    // What the registry stores for an index (the protocol's parsing is unit-tested).
    let index = |jobs: Value| {
        let specs = jobs
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                let every = d["trigger"]["schedule"]["intervalSeconds"].as_u64();
                JobSpec {
                    id: "ep-poll".into(),
                    name: "Poll".into(),
                    version: d["version"].as_str().unwrap().into(),
                    event: match every {
                        Some(_) => Schedule::event_name("ep-poll"),
                        None => "poll.requested".into(),
                    },
                    filter: None,
                    schedule: every
                        .map(|s| Schedule::interval(Duration::from_secs(s)).expect("valid")),
                    retry: flare::RetryPolicy::default(),
                    timeout: Duration::from_secs(30),
                    concurrency: Default::default(),
                    rate_limit: None,
                    throttle: None,
                    start_timeout: None,
                    debounce: None,
                    priority: None,
                    cancel_on: Vec::new(),
                }
            })
            .collect();
        EndpointIndex {
            jobs: specs,
            raw: jobs,
            skipped: json!([]),
            now: clock.now_ms(),
        }
    };
    let poll = json!({"id": "ep-poll", "name": "Poll", "version": "1.0.0",
        "trigger": {"schedule": {"intervalSeconds": 60}}});
    let store = client.store();
    store
        .endpoint_create(
            NewEndpoint {
                id: "ep_1".into(),
                url: "http://127.0.0.1:9/flare".into(),
                secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
                protocol: Protocol::Flare,
                client_id: None,
                now: t0,
            },
            index(json!([poll])),
        )
        .await
        .unwrap();
    assert_eq!(next_tick(&client, "ep-poll").await, Some(t0 + 60_000));
    clock.set(t0 + 60_000);
    assert_eq!(fire(&client).await, 1);
    // Re-indexed with the job on an event: unscheduled.
    let on_event = json!({"id": "ep-poll", "name": "Poll", "version": "1.0.1",
        "trigger": {"event": "poll.requested"}});
    store
        .endpoint_index("ep_1", index(json!([on_event])))
        .await
        .unwrap();
    assert_eq!(next_tick(&client, "ep-poll").await, None);
    // Scheduled again, then the endpoint removed: unscheduled with its jobs.
    store
        .endpoint_index("ep_1", index(json!([poll])))
        .await
        .unwrap();
    assert_eq!(next_tick(&client, "ep-poll").await, Some(t0 + 120_000));
    store.endpoint_remove("ep_1", clock.now_ms()).await.unwrap();
    assert!(store.schedules_list().await.unwrap().is_empty());
    client.shutdown().await;
}

backend_tests!(
    an_endpoint_index_schedules_its_jobs_and_unschedules_them,
    a_cron_job_runs_once_per_tick_and_not_before,
    an_interval_job_runs_once_per_interval,
    two_nodes_fire_each_tick_once,
    a_restart_neither_loses_nor_doubles_a_tick,
    catch_up_after_a_long_gap_fires_once,
    a_cron_job_follows_its_time_zone,
    invalid_schedules_are_clear_errors_at_definition,
    redefining_a_job_moves_or_keeps_its_next_tick,
    the_jobs_list_shows_the_schedule_and_next_runs,
);
