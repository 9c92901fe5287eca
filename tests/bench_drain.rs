//! Smoke test of `flare bench drain` at a tiny N: the scenario seeds its events with the workers
//! off, starts them and counts every run succeeded (it fails with `Stalled` otherwise), on SQLite
//! and on a fresh PostgreSQL database of the local server (skipped without one, except under `CI`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use clap::Parser;
use flare::bench::{Args, Figure};
use support::{Backend, TestDb};

const EVENTS: usize = 200;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: Args,
}

fn args(database_url: Option<String>) -> Args {
    let events = EVENTS.to_string();
    let mut args = Cli::parse_from([
        "bench", "drain", "--reps", "1", "--events", &events, "--json",
    ])
    .args;
    // `--database-url` also reads DATABASE_URL: the test decides.
    args.database_url = database_url;
    args
}

fn check(figure: &Figure, store: &str) {
    assert_eq!(figure.scenario, "drain");
    assert_eq!(figure.settings["store"], store);
    assert_eq!(figure.median["events"], EVENTS as f64);
    assert!(figure.median["runs_per_s"] > 0.0, "{figure:?}");
    assert!(figure.median["seed_events_per_s"] > 0.0, "{figure:?}");
    // What the repetition left stored, read back from its database before it was removed.
    assert!(figure.median["stored_mb"] > 0.0, "{figure:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_runs_every_queued_event_on_sqlite() {
    let figures = flare::bench::run(args(None)).await.unwrap();
    assert_eq!(figures.len(), 1, "{figures:?}");
    check(&figures[0], "sqlite");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_drain_runs_every_queued_event() {
    let mut a = args(None);
    a.keys = 50;
    let figures = flare::bench::run(a).await.unwrap();
    assert_eq!(figures.len(), 1, "{figures:?}");
    check(&figures[0], "sqlite");
    assert_eq!(figures[0].settings["keys"], 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_runs_every_queued_event_on_postgres() {
    let Some(db) = TestDb::new_or_skip(Backend::Postgres).await else {
        return;
    };
    // The scenario creates (and drops) its own database on the server of this URL.
    let figures = flare::bench::run(args(Some(db.url.clone()))).await.unwrap();
    assert_eq!(figures.len(), 2, "{figures:?}");
    check(&figures[0], "sqlite");
    check(&figures[1], "postgres");
}
