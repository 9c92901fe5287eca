//! `flare bench waiters`: what runs waiting for events cost the senders of events (issue 27: the
//! match is an index lookup, so the send rate with 100,000 runs waiting stays within 10% of the
//! rate without them). On a temporary SQLite file and (with `--database-url postgres://…`) on
//! fresh PostgreSQL databases, per repetition:
//!
//! 1. **Without waiters**: `--waiters` events start a job that ends at once (so the tables hold
//!    as many events and runs as below), then a send-only client sends `--events` events named
//!    `bench.signal` from `--e2e-senders` tasks: the baseline rate. Then as many events of a
//!    name a job triggers on (its runs wait for a worker): each starts one run, the work a
//!    matching event's resumption makes (one run made due), for a like-for-like baseline.
//!    Before the clock starts, the seed settles (`scenarios::settle`: SQLite's search index
//!    caught up and its WAL reset, PostgreSQL's `VACUUM ANALYZE`), in both databases alike.
//! 2. **With waiters**, on another database: the same `--waiters` events start a job that waits
//!    in `io.wait_for_event("bench.signal", matching "payload.k")` on a key of its own (the
//!    number of its event, or with `--scattered-keys` a string scrambled from it); once every
//!    run waits, the workers stop and the send-only client sends `--events` events whose keys no
//!    run waits for (non-matching), then `--events` events each matching one waiting run (each
//!    resumes it, in the send's transaction). Between the two, on the same database, ten
//!    alternated rounds of events of a name no run waits for and of non-matching ones
//!    ([`interleaved`]): the two databases' rates drift by more than the 10% at stake from one
//!    phase to the next on a small machine (the baseline alone ranged 45k–56k events/s over
//!    six sittings), and alternating puts that drift on both sides alike. The first tenth of
//!    the matching events is timed apart too: each resumes a run beside all the others waiting.
//!    Before the matching events it settles again, as step 3's database does. On SQLite the
//!    waits resumed are deleted later, many at a time (`0055_wait_resumed.sql`): after each
//!    timed part, what is left of that is done and timed with it, on both databases.
//! 3. **Few waiters**, on a third database seeded beside the second: the same `--waiters`
//!    events, but only the runs of the first tenth of the keys wait (the others end). It takes
//!    the same sends as step 2's before its matching events (so the events' tables are the same
//!    size), then a tenth of `--events` matching events ([`few`]), sent in rounds alternated
//!    with step 2's first tenth (the same keys). Beside that first tenth, it is the same work on
//!    tables of the same size, with a tenth of the runs waiting: what the waiting runs
//!    themselves cost a matching event (a resumption does more work than an event that starts
//!    nothing, so the rates of step 1 do not answer that).
//!
//! Reported: the four send rates, each rate with waiters over the baseline (and the matching
//! one over the rate of events starting a run), the interleaved rates and their ratio, the
//! matching rate beside all waiters over the rate beside a tenth of them
//! (`matching_waiters_cost_ratio`), and how many runs the matching sends resumed and the
//! starting sends started: one per event, or the repetition fails.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use serde_json::{json, Value};
use tokio::task::JoinSet;

use super::args::{Args, Error, Sample};
use super::backend::{Backend, Place};
use super::drain::seed_events_keyed;
use super::scenarios::{count, engine_config, settle};
use crate::store::query::StatsWindow;
use crate::store::StatsQuery;
use crate::{event_trigger, Client, Io, Job, JobError, RunStatus, WaitFor};

const JOB: &str = "bench-waiter";
const START: &str = "bench.wait";
const SIGNAL: &str = "bench.signal";
/// An event no run waits for and no job triggers on: the interleaved baseline.
const UNWAITED: &str = "bench.unwaited";
/// Rounds of the interleaved comparison ([`interleaved`]).
const ROUNDS: usize = 10;
/// The event of the like-for-like baseline, and its job's id.
const KICK: &str = "bench.kick";
const KICKED: &str = "bench-kicked";

/// One repetition on `backend`: the baseline and the rates with waiters, on two databases.
pub(super) async fn run(args: &Args, backend: Backend, pb: &ProgressBar) -> Result<Sample, Error> {
    let place = Place::new(args, backend, "flare_bench_nowait").await?;
    let baseline = without_waiters(args, place.url(), pb).await;
    place.remove().await;
    let (baseline, starting, started) = baseline?;
    let place = Place::new(args, backend, "flare_bench_waiters").await?;
    let few_place = match Place::new(args, backend, "flare_bench_fewwaiters").await {
        Ok(p) => p,
        Err(e) => {
            place.remove().await;
            return Err(e);
        }
    };
    let waiting = with_waiters(args, place.url(), few_place.url(), pb).await;
    place.remove().await;
    few_place.remove().await;
    let w = waiting?;
    let (few_rate, few_resumed, few_stored) = (w.few_rate, w.few_resumed, w.few_stored);
    // Beside the same tables, or the waiters' cost is not what the ratio measures.
    if few_stored != w.stored {
        return Err(Error::Stalled(format!(
            "the database with few waiters held {few_stored} events before its matching ones, \
             the one with all {} waiters {}: their rates would not be comparable",
            args.waiters, w.stored
        )));
    }
    // A rate of sends that did not all do their work measures something else: refused.
    for (what, did, expected) in [
        ("matching events resumed", w.resumed, args.events),
        (
            "matching events beside few waiters resumed",
            few_resumed,
            few(args),
        ),
        (
            "events of the like-for-like baseline started",
            started,
            args.events,
        ),
    ] {
        if did != expected as u64 {
            return Err(Error::Stalled(format!(
                "{what} {did} runs, not {expected}: the rates would not be of that work"
            )));
        }
    }
    Ok(Sample::from([
        ("waiters", args.waiters as f64),
        ("events", args.events as f64),
        ("no_waiters_per_s", baseline),
        ("starting_one_run_per_s", starting),
        ("non_matching_per_s", w.non_matching),
        ("matching_per_s", w.matching),
        ("non_matching_ratio", w.non_matching / baseline),
        ("matching_ratio", w.matching / baseline),
        ("matching_vs_starting_ratio", w.matching / starting),
        ("interleaved_unwaited_per_s", w.unwaited),
        ("interleaved_non_matching_per_s", w.interleaved),
        ("interleaved_non_matching_ratio", w.interleaved / w.unwaited),
        ("resumed", w.resumed as f64),
        ("few_waiters", few(args) as f64),
        ("matching_first_per_s", w.matching_first),
        ("matching_few_waiters_per_s", few_rate),
        ("matching_waiters_cost_ratio", w.matching_first / few_rate),
        ("few_resumed", few_resumed as f64),
        ("events_before_matching", w.stored as f64),
        ("started", started as f64),
    ]))
}

/// The job of the waiters: the runs of the events `i` below `waiting` wait, the others (all of
/// them in the baseline) end at once.
fn job(waiting: usize, ran: Arc<AtomicUsize>) -> Job {
    Job::new(JOB, "Benchmark waiter", "1.0.0")
        .trigger(event_trigger(START))
        .run(move |p: Value, io: Io| {
            let ran = Arc::clone(&ran);
            async move {
                ran.fetch_add(1, Ordering::Relaxed);
                let i = p["i"].as_u64().map_or(usize::MAX, |i| i as usize);
                if i >= waiting {
                    return Ok::<_, JobError>(Value::Null);
                }
                let got = io
                    .wait_for_event(
                        "signal",
                        SIGNAL,
                        WaitFor::timeout(Duration::from_secs(3600)).matching("payload.k"),
                    )
                    .await?;
                Ok(json!(got.is_some()))
            }
        })
}

/// Stores `--waiters` events of the job with a worker running it until the runs of the first
/// `waiting` keys wait and the others ended; then the worker stops. Returns the send-only client.
async fn seed(args: &Args, url: &str, waiting: usize, pb: &ProgressBar) -> Result<Client, Error> {
    let n = args.waiters;
    let waiting = waiting.min(n);
    let sender = Client::builder(url).workers(false).connect().await?;
    let ran = Arc::new(AtomicUsize::new(0));
    sender.register_job(job(waiting, Arc::clone(&ran))).await?;
    let worker = Client::builder(url)
        .config(engine_config(args))
        .connect()
        .await?;
    worker.define_job(job(waiting, Arc::clone(&ran)))?;
    // Event `i` with the key of `i`.
    seed_events_keyed(&sender, START, n, |i| key(args.scattered_keys, i)).await?;
    let limit = Duration::from_secs(300).max(Duration::from_millis(5 * n as u64));
    let start = Instant::now();
    let settled = loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        pb.set_position(ran.load(Ordering::Relaxed) as u64);
        if ran.load(Ordering::Relaxed) >= n {
            let counts = worker.store().run_counts().await?;
            let settled = count(&counts, RunStatus::Queued) == waiting as u64
                && count(&counts, RunStatus::Running) == 0
                && count(&counts, RunStatus::Succeeded) == (n - waiting) as u64;
            if settled {
                break Ok(());
            }
        }
        if start.elapsed() > limit {
            let counts = worker.store().run_counts().await?;
            break Err(Error::Stalled(format!(
                "{n} waiters did not settle in {limit:?}: counts {counts:?}"
            )));
        }
    };
    worker.shutdown().await;
    // The seed's aftermath (search indexing, WAL checkpoints, autovacuum) done before the clock
    // starts: otherwise it lands in whichever phase runs next, a different share in each.
    let settled = match settled {
        Ok(()) => settle(&sender).await.map(|_| ()),
        Err(e) => Err(e),
    };
    if let Err(e) = settled {
        sender.shutdown().await;
        return Err(e);
    }
    Ok(sender)
}

/// Sends `--events` `name` events from `--e2e-senders` tasks, event `i` with the key of
/// `from + i` (the waiting runs have the keys of 0 to `--waiters` − 1); returns events per second.
async fn send(
    args: &Args,
    client: &Client,
    name: &'static str,
    from: usize,
    pb: &ProgressBar,
) -> Result<f64, Error> {
    let secs = send_timed(args, client, name, from, args.events, pb).await?;
    Ok(args.events as f64 / secs)
}

/// [`send`] of `n` events; returns the seconds they took.
async fn send_timed(
    args: &Args,
    client: &Client,
    name: &'static str,
    from: usize,
    n: usize,
    pb: &ProgressBar,
) -> Result<f64, Error> {
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    let scattered = args.scattered_keys;
    for _ in 0..args.e2e_senders.max(1) {
        let (client, next) = (client.clone(), Arc::clone(&next));
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return Ok::<_, Error>(());
                }
                client
                    .send_event(name, &json!({ "k": key(scattered, from + i) }))
                    .await?;
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.map_err(|e| Error::Stalled(format!("a sender panicked: {e}")))??;
        pb.set_position(next.load(Ordering::Relaxed).min(n) as u64);
    }
    Ok(start.elapsed().as_secs_f64())
}

/// On the database holding the waiters, [`ROUNDS`] rounds of `--events` / [`ROUNDS`] events of
/// a name no run waits for (no lookup at all) and as many non-matching ones, alternated so that
/// the machine's drift during the sitting falls on both alike; returns both rates.
async fn interleaved(args: &Args, client: &Client, pb: &ProgressBar) -> Result<(f64, f64), Error> {
    let per = (args.events / ROUNDS).max(1);
    let (mut plain, mut looked_up) = (0.0, 0.0);
    for round in 0..ROUNDS {
        plain += send_timed(args, client, UNWAITED, 0, per, pb).await?;
        let from = 2 * args.waiters + round * per;
        looked_up += send_timed(args, client, SIGNAL, from, per, pb).await?;
    }
    let total = (per * ROUNDS) as f64;
    Ok((total / plain, total / looked_up))
}

/// The baseline send rates (events starting nothing, events each starting one run) and how
/// many runs the second started.
async fn without_waiters(
    args: &Args,
    url: &str,
    pb: &ProgressBar,
) -> Result<(f64, f64, u64), Error> {
    let sender = seed(args, url, 0, pb).await?;
    let measured = async {
        let rate = send(args, &sender, SIGNAL, args.waiters, pb).await?;
        sender
            .register_job(
                Job::new(KICKED, "Benchmark kicked", "1.0.0")
                    .trigger(event_trigger(KICK))
                    .run(|_p: Value, _io: Io| async { Ok::<_, JobError>(Value::Null) }),
            )
            .await?;
        let starting = send(args, &sender, KICK, args.waiters, pb).await?;
        // No worker runs them: each is queued and due.
        let counts = sender.store().run_counts().await?;
        let started = count(&counts, RunStatus::Queued);
        Ok::<_, Error>((rate, starting, started))
    }
    .await;
    sender.shutdown().await;
    measured
}

/// The non-matching and matching send rates with `--waiters` runs waiting, and how many runs
/// the matching sends resumed; and, on the database at `few_url`, the rate of matching events
/// beside a tenth of the runs waiting ([`few`]).
///
/// Both databases are seeded first and take the same sends before their matching events. The
/// first [`few`] matching events of each are then sent in [`ROUNDS`] alternated rounds (which
/// database goes first alternates too), so that the machine's drift over the sitting falls on
/// both alike: one after the other, the ratio of the two ranged 0.62–1.15 from one run to the
/// next on one machine (BENCHMARKS.md, issue 27's twenty-first and twenty-second sittings).
async fn with_waiters(
    args: &Args,
    url: &str,
    few_url: &str,
    pb: &ProgressBar,
) -> Result<Waiting, Error> {
    if args.events > args.waiters {
        return Err(Error::Stalled(format!(
            "--events {} is more than --waiters {}: every matching event needs a run waiting",
            args.events, args.waiters
        )));
    }
    let few = few(args);
    let sender = seed(args, url, args.waiters, pb).await?;
    let few_sender = match seed(args, few_url, few, pb).await {
        Ok(c) => c,
        Err(e) => {
            sender.shutdown().await;
            return Err(e);
        }
    };
    let measured = async {
        let non_matching = send(args, &sender, SIGNAL, args.waiters, pb).await?;
        let (unwaited, looked_up) = interleaved(args, &sender, pb).await?;
        // The same sends on the other database, rates unused: both tables of events the same
        // size when the matching ones are timed.
        send(args, &few_sender, SIGNAL, args.waiters, pb).await?;
        interleaved(args, &few_sender, pb).await?;
        // Both databases settle (WAL reset, search index caught up): the 200,000 events sent
        // before would otherwise put a WAL reset in one database's phase and not the other's.
        settle(&sender).await?;
        settle(&few_sender).await?;
        let stored = events_stored(&sender).await?;
        let few_stored = events_stored(&few_sender).await?;
        let (mut first, mut beside_few) = (0.0, 0.0);
        let rounds = ROUNDS.min(few);
        for round in 0..rounds {
            let from = round * few / rounds;
            let n = (round + 1) * few / rounds - from;
            let (a, b) = if round % 2 == 0 {
                let a = send_timed(args, &sender, SIGNAL, from, n, pb).await?;
                (a, send_timed(args, &few_sender, SIGNAL, from, n, pb).await?)
            } else {
                let b = send_timed(args, &few_sender, SIGNAL, from, n, pb).await?;
                (send_timed(args, &sender, SIGNAL, from, n, pb).await?, b)
            };
            first += a;
            beside_few += b;
        }
        // On SQLite the resumed waits are deleted later, many at a time (each database's
        // writer swept some already): what is left of that work is done now and charged.
        first += swept(&sender).await?;
        beside_few += swept(&few_sender).await?;
        let rest = send_timed(args, &sender, SIGNAL, few, args.events - few, pb).await?
            + swept(&sender).await?;
        let matching = args.events as f64 / (first + rest);
        // A resumed run is due at once; the workers are off, so it waits for a worker (the
        // others wait for their timeout, an hour away).
        let now = chrono::Utc::now();
        let resumed = sender.store().runs_waiting(now).await?.worker;
        let few_resumed = few_sender.store().runs_waiting(now).await?.worker;
        Ok::<_, Error>(Waiting {
            non_matching,
            unwaited,
            interleaved: looked_up,
            matching,
            matching_first: few as f64 / first,
            resumed,
            stored,
            few_rate: few as f64 / beside_few,
            few_resumed,
            few_stored,
        })
    }
    .await;
    sender.shutdown().await;
    few_sender.shutdown().await;
    measured
}

/// Seconds taken to delete the waits resumed that `client`'s store has not deleted yet.
async fn swept(client: &Client) -> Result<f64, Error> {
    let start = Instant::now();
    client.store().waits_swept().await?;
    Ok(start.elapsed().as_secs_f64())
}

/// The rates [`with_waiters`] measured.
struct Waiting {
    non_matching: f64,
    /// Of the interleaved rounds: events of a name no run waits for, and non-matching ones.
    unwaited: f64,
    interleaved: f64,
    matching: f64,
    /// Of the first [`few`] matching events, sent beside all `--waiters` waiting runs.
    matching_first: f64,
    resumed: u64,
    /// Events stored before the matching ones.
    stored: u64,
    /// The same of the database where only [`few`] runs wait: the rate of its [`few`] matching
    /// events, the runs they resumed, the events it held before them.
    few_rate: f64,
    few_resumed: u64,
    few_stored: u64,
}

/// How many events the comparison beside few waiters sends: a tenth of the matching ones, each
/// matching one of the runs of the first tenth of the keys, which alone wait there (the others
/// ended). Beside the first tenth of the matching events of the database where every run waits,
/// the same work on tables of the same size: only the number of waiting runs differs.
fn few(args: &Args) -> usize {
    (args.events.min(args.waiters) / 10).max(1)
}

/// The events `client`'s database holds: those of the last 24 hours (the whole repetition).
async fn events_stored(client: &Client) -> Result<u64, Error> {
    let q = StatsQuery {
        window: StatsWindow::Day,
        now: chrono::Utc::now(),
    };
    Ok(client.store().stats(q).await?.events)
}

/// The key of run and event `i`: the number `i`, or with `--scattered-keys` a 16-hex-digit
/// string scrambled from it (splitmix64's finalizer, a bijection: distinct `i`, distinct keys).
fn key(scattered: bool, i: usize) -> Value {
    if !scattered {
        return json!(i);
    }
    let mut z = (i as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    json!(format!("{:016x}", z ^ (z >> 31)))
}
