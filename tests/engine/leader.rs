//! Behaviour suite: several nodes on one database. One leader runs maintenance (scheduler,
//! rescuer, pruner) and another takes over when it stops or dies; delayed events are delivered
//! once whichever nodes run the scheduler; each node claims only runs of the jobs it defined, and
//! fans out to jobs defined on the others.

use std::time::Duration;

use flare::engine::maintenance::{Pass, LEADER};
use flare::store::{ClaimGroup, ClaimParams};
use flare::{
    event_trigger, Client, Clock, Delay, EngineConfig, Io, Job, ManualClock, RunStatus, SendEvent,
};
use serde_json::{json, Value};

use crate::backend_tests;
use crate::support::{settled, test_config, wait_for, TestDb};

/// A node: a client with workers on `db`, sharing `clock` with the other nodes.
async fn node(db: &TestDb, clock: &ManualClock, config: EngineConfig) -> Client {
    db.client_on(clock, config).await
}

/// Settings where the background maintenance loop never ticks during the test (its first pass
/// is an hour after start): the test drives every pass by hand.
fn manual_maintenance() -> EngineConfig {
    EngineConfig {
        poll_interval: Duration::from_secs(3600),
        retention: Some(Duration::from_secs(86_400)),
        leader_ttl: Duration::from_secs(10),
        ..test_config()
    }
}

/// Two nodes, `first` leading: it took the lease first.
async fn two_nodes(db: &TestDb, clock: &ManualClock, config: EngineConfig) -> (Client, Client) {
    let first = node(db, clock, config.clone()).await;
    let second = node(db, clock, config).await;
    assert!(first.engine().maintenance().lead().await.unwrap());
    assert!(first.engine().is_leader());
    (first, second)
}

fn parked(id: &str, event: &str) -> Job {
    Job::new(id, id, "1.0.0")
        .trigger(event_trigger(event))
        .run(|p: Value, _io: Io| async move { Ok(p) })
}

async fn only_the_leader_delivers_rescues_and_prunes(db: TestDb) {
    let clock = ManualClock::new(chrono::Utc::now().timestamp_millis());
    let (leader, follower) = two_nodes(&db, &clock, manual_maintenance()).await;
    assert_ne!(leader.engine().node_id(), follower.engine().node_id());
    // Jobs defined only on a send-only client: no node runs them, their runs stay put.
    let sender = db.sender(&clock).await;
    sender
        .register_job(parked("parked", "work.todo"))
        .await
        .unwrap();
    let old = sender
        .send_event("nobody.listens", &json!({}))
        .await
        .unwrap();
    let delayed = sender
        .send_event_with(SendEvent::new("work.todo", &json!({"d": 1})).delay(Delay::hours(1)))
        .await
        .unwrap();
    let claimed_ev = sender
        .send_event("work.todo", &json!({"c": 1}))
        .await
        .unwrap();
    let now = clock.now_ms();
    let claimed = sender
        .store()
        .runs_claim(ClaimParams {
            node: None,
            now,
            lease_until: now + 30_000,
            groups: vec![ClaimGroup {
                jobs: vec!["parked".into()],
                limit: 10,
                flow: None,
            }],
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1, "a worker that will die holds the run");

    // Two days later: the delayed event is due, the lease expired, the old event is past
    // retention. The leader renews its lease on its tick; the follower finds it held.
    clock.advance(Duration::from_secs(2 * 86_400));
    assert!(leader.engine().maintenance().lead().await.unwrap());
    assert_eq!(
        follower.engine().maintenance().lead_once().await.unwrap(),
        None,
        "the follower does no maintenance"
    );
    assert!(!follower.engine().is_leader());
    let store = sender.store();
    assert!(store
        .event_get(&delayed.id)
        .await
        .unwrap()
        .unwrap()
        .delivered_at
        .is_none());
    assert!(store.event_get(&old.id).await.unwrap().is_some());
    let run = store.run_detail(&claimed[0].id).await.unwrap().unwrap();
    assert_eq!(run.run.status, RunStatus::Running);

    let pass = leader.engine().maintenance().lead_once().await.unwrap();
    assert_eq!(
        pass,
        Some(Pass {
            delivered: 1,
            fired: 0,
            rescued: 1,
            pruned: 1
        })
    );
    let delivered = store.event_get(&delayed.id).await.unwrap().unwrap();
    assert!(delivered.delivered_at.is_some());
    assert_eq!(delivered.run_ids.len(), 1);
    assert!(store.event_get(&old.id).await.unwrap().is_none(), "pruned");
    let run = store.run_detail(&claimed[0].id).await.unwrap().unwrap();
    assert_eq!(run.run.status, RunStatus::Queued, "rescued");
    assert!(store.event_get(&claimed_ev.id).await.unwrap().is_some());
}

async fn a_dead_leader_is_replaced_once_its_lease_expires(db: TestDb) {
    let clock = ManualClock::new(chrono::Utc::now().timestamp_millis());
    let config = manual_maintenance();
    let ttl = config.leader_ttl;
    let (leader, follower) = two_nodes(&db, &clock, config).await;
    // The leader dies: it stops renewing (its loop sleeps for an hour; nothing renews it).
    clock.advance(ttl - Duration::from_millis(1));
    assert_eq!(
        follower.engine().maintenance().lead_once().await.unwrap(),
        None,
        "the lease still holds one millisecond before it expires"
    );
    clock.advance(Duration::from_millis(1));
    assert!(
        follower
            .engine()
            .maintenance()
            .lead_once()
            .await
            .unwrap()
            .is_some(),
        "the follower takes over once the lease expired"
    );
    assert!(follower.engine().is_leader());
    // The old leader comes back: it finds the lease taken and stands down.
    assert!(!leader.engine().maintenance().lead().await.unwrap());
    assert!(!leader.engine().is_leader());
    assert_eq!(
        leader.engine().maintenance().lead_once().await.unwrap(),
        None
    );
}

async fn a_leader_that_shuts_down_hands_over_at_once(db: TestDb) {
    let clock = ManualClock::new(chrono::Utc::now().timestamp_millis());
    let (leader, follower) = two_nodes(&db, &clock, manual_maintenance()).await;
    assert_eq!(
        follower.engine().maintenance().lead_once().await.unwrap(),
        None
    );
    leader.shutdown().await;
    assert!(
        follower
            .engine()
            .maintenance()
            .lead_once()
            .await
            .unwrap()
            .is_some(),
        "released at shutdown: no need to wait for the lease to expire"
    );
}

async fn background_maintenance_fails_over_to_a_live_node(db: TestDb) {
    let clock = ManualClock::new(chrono::Utc::now().timestamp_millis());
    let sender = db.sender(&clock).await;
    sender
        .register_job(parked("parked", "work.todo"))
        .await
        .unwrap();
    // A node took the lease for 5 s and was killed: it never renews nor releases it.
    assert!(sender
        .store()
        .leader_acquire(LEADER, "node-killed", clock.now_ms(), 5_000)
        .await
        .unwrap());
    let live = node(&db, &clock, test_config()).await;
    let ev = sender
        .send_event_with(SendEvent::new("work.todo", &json!({})).delay(Delay::seconds(1)))
        .await
        .unwrap();
    clock.advance(Duration::from_secs(2));
    // Due, but the dead leader's lease holds: the live node's loop (ticking every 20 ms) must not
    // deliver. Give it many ticks to do the wrong thing.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!live.engine().is_leader());
        let e = sender.event(&ev.id).await.unwrap().unwrap();
        assert!(
            e.delivered_at.is_none(),
            "delivered by a node that does not lead"
        );
    }
    clock.advance(Duration::from_secs(3));
    wait_for("the live node to take over and deliver", || async {
        let e = sender.event(&ev.id).await.unwrap()?;
        e.delivered_at.is_some().then_some(e)
    })
    .await;
    assert!(live.engine().is_leader());
}

async fn delayed_events_are_delivered_once_across_nodes(db: TestDb) {
    let clock = ManualClock::new(chrono::Utc::now().timestamp_millis());
    let (a, b) = two_nodes(&db, &clock, manual_maintenance()).await;
    let sender = db.sender(&clock).await;
    sender
        .register_job(parked("parked", "work.todo"))
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..300 {
        let ev = sender
            .send_event_with(
                SendEvent::new("work.todo", &json!({ "i": i })).delay(Delay::seconds(1 + i % 7)),
            )
            .await
            .unwrap();
        ids.push(ev.id);
    }
    clock.advance(Duration::from_secs(10));
    // Both nodes run the scheduler at once, bypassing leadership, several times over.
    let (sa, sb) = (a.engine().maintenance(), b.engine().maintenance());
    let mut delivered = 0;
    for _ in 0..3 {
        let (x, y) = tokio::join!(sa.schedule_once(), sb.schedule_once());
        delivered += x.unwrap() + y.unwrap();
    }
    assert_eq!(delivered, 300, "each due event counted once");
    for id in &ids {
        let ev = sender.event(id).await.unwrap().unwrap();
        assert!(ev.delivered_at.is_some());
        assert_eq!(ev.run_ids.len(), 1, "{id}: one run, not one per node");
    }
}

async fn each_node_claims_only_the_jobs_it_defined(db: TestDb) {
    let clock = ManualClock::new(chrono::Utc::now().timestamp_millis());
    let a = node(&db, &clock, test_config()).await;
    let b = node(&db, &clock, test_config()).await;
    let on = |id: &str, who: &'static str| {
        Job::new(id, id, "1.0.0")
            .trigger(event_trigger("split.work"))
            .run(move |_p: Value, _io: Io| async move { Ok(json!({ "node": who })) })
    };
    a.register_job(on("a-job", "a")).await.unwrap();
    b.register_job(on("b-job", "b")).await.unwrap();
    let mut ids = Vec::new();
    for i in 0..40 {
        // Alternate the sending node: each fans out to the job the other one defined too.
        let sender = if i % 2 == 0 { &a } else { &b };
        let ev = sender
            .send_event("split.work", &json!({ "i": i }))
            .await
            .unwrap();
        assert_eq!(ev.run_ids.len(), 2, "fan-out reaches both nodes' jobs");
        ids.push(ev.id);
    }
    for id in &ids {
        let detail = settled(&a, id).await;
        for run in &detail.runs {
            let (who, ran_on) = if run.job_id == "a-job" {
                ("a", &a)
            } else {
                ("b", &b)
            };
            assert_eq!(run.status, RunStatus::Succeeded);
            assert_eq!(
                run.node.as_deref(),
                Some(ran_on.engine().node_id()),
                "{}: the run records the node that claimed it",
                run.job_id
            );
            assert_eq!(run.output, Some(json!({ "node": who })), "{}", run.job_id);
            assert_eq!(
                run.attempt, 1,
                "{}: never claimed by the node that lacks the job",
                run.job_id
            );
        }
    }
}

backend_tests!(
    only_the_leader_delivers_rescues_and_prunes,
    a_dead_leader_is_replaced_once_its_lease_expires,
    a_leader_that_shuts_down_hands_over_at_once,
    background_maintenance_fails_over_to_a_live_node,
    delayed_events_are_delivered_once_across_nodes,
    each_node_claims_only_the_jobs_it_defined,
);
