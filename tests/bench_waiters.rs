//! Smoke test of `flare bench waiters` at a tiny N: runs waiting in `io.wait_for_event`, the
//! send rates of events matching none of them and of events each resuming one, beside the rates
//! without waiters (of events starting nothing, and of events each starting one run), and the
//! alternated rounds of events no run waits for and non-matching ones on the waiters' database,
//! on SQLite and on fresh PostgreSQL databases of the local server (skipped
//! without one, except under `CI`). Every matching event resumes its run, and the database with
//! few waiters holds as many events as the other before its matching events are timed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use clap::Parser;
use flare::bench::{Args, Figure};
use support::{Backend, TestDb};

const WAITERS: usize = 300;
const EVENTS: usize = 200;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: Args,
}

fn check(figures: &[Figure], stores: &[&str], keys: &str) {
    assert_eq!(figures.len(), stores.len(), "{figures:?}");
    for (f, store) in figures.iter().zip(stores) {
        assert_eq!(f.scenario, "waiters");
        assert_eq!(f.settings["store"], *store);
        assert_eq!(f.median["waiters"], WAITERS as f64);
        assert_eq!(f.settings["keys"], keys, "{f:?}");
        for rate in [
            "no_waiters_per_s",
            "starting_one_run_per_s",
            "non_matching_per_s",
            "matching_per_s",
            "interleaved_unwaited_per_s",
            "interleaved_non_matching_per_s",
        ] {
            assert!(f.median[rate] > 0.0, "{rate}: {f:?}");
        }
        assert_eq!(
            f.median["resumed"], EVENTS as f64,
            "every match resumed one: {f:?}"
        );
        // The waiting runs' events, the non-matching ones, and the alternated rounds' two names;
        // the database with few waiters held as many (or the scenario fails).
        assert_eq!(
            f.median["events_before_matching"],
            (WAITERS + 3 * EVENTS) as f64,
            "{f:?}"
        );
        assert_eq!(
            f.median["started"], EVENTS as f64,
            "every event of the like-for-like baseline started one run: {f:?}"
        );
    }
}

/// Runs the scenario at the tiny N on SQLite and, when there is a server, PostgreSQL.
async fn run(extra: &[&str], keys: &str) {
    let (waiters, events) = (WAITERS.to_string(), EVENTS.to_string());
    let mut argv = vec![
        "bench",
        "waiters",
        "--reps",
        "1",
        "--waiters",
        &waiters,
        "--events",
        &events,
        "--e2e-senders",
        "8",
        "--json",
    ];
    argv.extend_from_slice(extra);
    let mut args = Cli::parse_from(argv).args;
    // `--database-url` also reads DATABASE_URL: the test decides.
    args.database_url = None;
    let Some(db) = TestDb::new_or_skip(Backend::Postgres).await else {
        check(&flare::bench::run(args).await.unwrap(), &["sqlite"], keys);
        return;
    };
    // The scenario creates (and drops) its own databases on the server of this URL.
    args.database_url = Some(db.url.clone());
    check(
        &flare::bench::run(args).await.unwrap(),
        &["sqlite", "postgres"],
        keys,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_send_rates_with_and_without_waiters_on_both_stores() {
    run(&[], "consecutive").await;
}

/// The waiting runs and the events that match them agree on the scrambled keys: every matching
/// event still resumes its run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scattered_keys_match_their_waiting_runs_on_both_stores() {
    run(&["--scattered-keys"], "scattered").await;
}
