//! Smoke test of `flare bench waiters` at a tiny N: runs wait for events on distinct keys, and
//! events of another name, non-matching and matching ones are sent beside them (each matching
//! one resumes a waiter: the scenario checks it), on SQLite and on a fresh PostgreSQL database
//! of the local server (skipped without one, except under `CI`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use clap::Parser;
use flare::bench::{Args, Figure};
use support::{Backend, TestDb};

const WAITERS: usize = 200;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: Args,
}

fn check(figures: &[Figure], stores: &[&str]) {
    assert_eq!(figures.len(), stores.len(), "{figures:?}");
    for (f, store) in figures.iter().zip(stores) {
        assert_eq!(f.scenario, "waiters");
        assert_eq!(f.settings["store"], *store);
        assert_eq!(f.median["waiters"], WAITERS as f64);
        for rate in [
            "no_waiters_events_per_s",
            "other_name_events_per_s",
            "non_matching_events_per_s",
            "matching_events_per_s",
            "matching_ratio",
            "into_wait_per_s",
        ] {
            assert!(f.median[rate] > 0.0, "{rate}: {f:?}");
        }
        // Every matching event resumed one waiter (checked by the scenario), some were sent.
        assert!(f.median["matched"] > 0.0, "{f:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn senders_beside_waiting_runs_on_both_stores() {
    let waiters = WAITERS.to_string();
    let mut args = Cli::parse_from([
        "bench",
        "waiters",
        "--reps",
        "1",
        "--waiters",
        &waiters,
        "--send-secs",
        "0.3",
        "--e2e-senders",
        "4",
        "--json",
    ])
    .args;
    // `--database-url` also reads DATABASE_URL: the test decides.
    args.database_url = None;
    let Some(db) = TestDb::new_or_skip(Backend::Postgres).await else {
        check(&flare::bench::run(args).await.unwrap(), &["sqlite"]);
        return;
    };
    // The scenario creates (and drops) its own database on the server of this URL.
    args.database_url = Some(db.url.clone());
    check(
        &flare::bench::run(args).await.unwrap(),
        &["sqlite", "postgres"],
    );
}
