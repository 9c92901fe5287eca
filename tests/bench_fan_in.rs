//! Smoke test of `flare bench fan-in` at a tiny N: a parent invokes its children with
//! `io.invoke_all`, runs twice (before its wait and after the last child), and the plain drain of
//! as many runs is measured beside it, on SQLite and on a fresh PostgreSQL database of the local
//! server (skipped without one, except under `CI`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use clap::Parser;
use flare::bench::{Args, Figure};
use support::{Backend, TestDb};

const CHILDREN: usize = 200;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: Args,
}

fn check(figures: &[Figure], stores: &[&str]) {
    assert_eq!(figures.len(), 2 * stores.len(), "{figures:?}");
    for (pair, store) in figures.chunks(2).zip(stores) {
        let (fan, drain) = (&pair[0], &pair[1]);
        assert_eq!(fan.scenario, "fan-in");
        assert_eq!(drain.scenario, "fan-in drain");
        assert_eq!(fan.settings["store"], *store);
        assert_eq!(fan.median["children"], CHILDREN as f64);
        assert!(fan.median["children_per_s"] > 0.0, "{fan:?}");
        assert_eq!(fan.median["parent_executions"], 2.0, "{fan:?}");
        // The first child started, then the last ran, then the parent got every output, all
        // before the clock stopped.
        let (first, last, fan_in) = (
            fan.median["first_child_secs"],
            fan.median["last_child_secs"],
            fan.median["fan_in_secs"],
        );
        assert!(0.0 < first && first <= last, "{fan:?}");
        assert!(
            fan_in > 0.0 && last + fan_in <= fan.median["secs"],
            "{fan:?}"
        );
        assert_eq!(drain.median["events"], CHILDREN as f64);
        assert!(drain.median["runs_per_s"] > 0.0, "{drain:?}");
        // The drain counting its events' writing is slower than the drain alone, and the
        // fan-in's ratios are those of its rate to theirs (each repetition's; one here).
        let seeded = drain.median["seeded_drain_per_s"];
        assert!(
            seeded > 0.0 && seeded < drain.median["runs_per_s"],
            "{drain:?}"
        );
        let rate = fan.median["children_per_s"];
        assert!((fan.median["vs_drain"] - rate / drain.median["runs_per_s"]).abs() < 1e-9);
        assert!((fan.median["vs_seeded_drain"] - rate / seeded).abs() < 1e-9);
        // Each left its runs stored: a child's run and event carry its caller, its step and its
        // source, so the fan-in stored more than the drain of as many runs.
        let (fan_mb, drain_mb) = (fan.median["stored_mb"], drain.median["stored_mb"]);
        assert!(drain_mb > 0.0 && fan_mb > drain_mb, "{fan:?} {drain:?}");
        assert!((fan.median["vs_drain_stored"] - fan_mb / drain_mb).abs() < 1e-9);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fan_in_and_its_plain_drain_on_both_stores() {
    let children = CHILDREN.to_string();
    let mut args = Cli::parse_from([
        "bench",
        "fan-in",
        "--reps",
        "1",
        "--children",
        &children,
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
