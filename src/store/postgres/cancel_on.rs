//! Cancelling runs on an event on PostgreSQL (`0031_cancel_on.sql`): a run of a job with
//! `cancel_on` is armed in the transaction that creates it (one key per entry), the transaction
//! inserting (or delivering) events looks up the runs they cancel by those keys, and a run's
//! keys are dropped when it ends.
//!
//! **Concurrency.** Unlike a wait, a key needs no lock: it is written in the very transaction
//! that creates its run, so no event can have been meant for the run before that transaction
//! commits. An event whose insert overlaps the run's creation and does not see the key is
//! ordered before the run, which it then does not cancel; an event inserted after the run's
//! creation committed sees the key. Within one batch, an event cancels the runs started by
//! events before it in the batch, as on SQLite, where inserts are applied one by one.

use std::collections::{HashMap, HashSet};

use deadpool_postgres::GenericClient;
use serde_json::Value;
use tokio_postgres::Row;

use super::rows::{exec, opt_json, rows};
use super::waits::{joined_key, lookup_keys, padded, Delivered};
use crate::model::wait::event_value;
use crate::model::{EventFields, EventWait, JobSpec};
use crate::store::Result;

/// The keys of new runs, as columns (`run_cancel_keys`).
#[derive(Default)]
pub(super) struct CancelKeys {
    run_ids: Vec<String>,
    n: Vec<i32>,
    events: Vec<String>,
    paths: Vec<String>,
    values: Vec<String>,
    conditions: Vec<Option<String>>,
    run_events: Vec<Option<String>>,
    until: Vec<Option<i64>>,
}

impl CancelKeys {
    /// Adds the keys of run `run_id` of `job`, created at `now` for `event`: one per
    /// `cancel_on` entry whose match field the event has.
    pub(super) fn add(&mut self, job: &JobSpec, run_id: &str, event: &EventFields<'_>, now: i64) {
        if job.cancel_on.is_empty() {
            return;
        }
        let run_event = event_value(event.id, event.name, event.payload);
        for (n, on) in job.cancel_on.iter().enumerate() {
            let Some((key, until)) = on.key(&run_event, now) else {
                continue;
            };
            self.run_ids.push(run_id.to_string());
            self.n.push(i32::try_from(n).unwrap_or(i32::MAX));
            self.events.push(key.event);
            self.paths.push(key.match_path);
            self.values.push(key.match_value);
            self.conditions.push(key.condition);
            self.run_events
                .push(key.run_event.as_ref().map(Value::to_string));
            self.until.push(until);
        }
    }

    /// The runs armed.
    pub(super) fn runs(&self) -> HashSet<&str> {
        self.run_ids.iter().map(String::as_str).collect()
    }
}

/// The armed runs among `started` (an event's id and the runs it started, for each event of a
/// batch), each with the index in `delivered` of the event that started it (see [`matched`]).
pub(super) fn positions<'a>(
    armed: &CancelKeys,
    delivered: &[Delivered<'_>],
    started: impl Iterator<Item = (&'a str, &'a [String])>,
) -> HashMap<String, usize> {
    let armed = armed.runs();
    if armed.is_empty() {
        return HashMap::new();
    }
    let at: HashMap<&str, usize> = delivered
        .iter()
        .enumerate()
        .map(|(i, d)| (d.id, i))
        .collect();
    let mut found = HashMap::new();
    for (event, runs) in started {
        let Some(p) = at.get(event) else { continue };
        for run in runs.iter().filter(|r| armed.contains(r.as_str())) {
            found.insert(run.clone(), *p);
        }
    }
    found
}

/// The match paths in use per event name (`$1`: the names), for [`matched`].
pub(super) const PATHS_SQL: &str =
    "SELECT event_name, match_path FROM cancel_paths WHERE event_name = ANY($1)";

/// Match paths by event name.
pub(super) type Paths = HashMap<String, Vec<String>>;

/// The paths [`PATHS_SQL`] read (before this transaction's keys were written), with those of
/// `armed`, the keys this transaction writes.
pub(super) fn paths_with(rows: &[Row], armed: &CancelKeys) -> Result<Paths> {
    let mut paths: Paths = HashMap::new();
    let read = rows
        .iter()
        .map(|r| Ok((r.try_get::<_, String>(0)?, r.try_get::<_, String>(1)?)))
        .collect::<Result<Vec<_>>>()?;
    let own = armed
        .events
        .iter()
        .cloned()
        .zip(armed.paths.iter().cloned());
    for (name, path) in read.into_iter().chain(own) {
        let known = paths.entry(name).or_default();
        if !known.contains(&path) {
            known.push(path);
        }
    }
    Ok(paths)
}

/// Writes `keys` for the runs that were created (a run over its job's rate limit was not) and
/// the match paths they use, in the caller's transaction, after the runs' insert.
pub(super) async fn arm<C: GenericClient>(c: &C, keys: &CancelKeys) -> Result<()> {
    if keys.run_ids.is_empty() {
        return Ok(());
    }
    exec(
        c,
        "WITH k AS (INSERT INTO run_cancel_keys \
             (run_id, n, event_name, match_path, match_value, condition, run_event, until) \
           SELECT u.* FROM unnest($1::text[], $2::int4[], $3::text[], $4::text[], $5::text[], $6::text[], \
                                  $7::text[], $8::int8[]) AS u(run_id, n, e, p, v, c, re, until) \
           WHERE EXISTS (SELECT 1 FROM runs r WHERE r.id = u.run_id) \
           ON CONFLICT (run_id, n) DO NOTHING RETURNING event_name, match_path) \
         INSERT INTO cancel_paths (event_name, match_path) \
         SELECT DISTINCT event_name, match_path FROM k ORDER BY 1, 2 ON CONFLICT DO NOTHING",
        &[
            &keys.run_ids,
            &keys.n,
            &keys.events,
            &keys.paths,
            &keys.values,
            &keys.conditions,
            &keys.run_events,
            &keys.until,
        ],
    )
    .await?;
    Ok(())
}

/// The cancel keys of queued or running runs whose joined key is one of `$1`
/// (`LookupKeys::joined`, [`padded`]), found through `run_cancel_keys_key`: a superset of the
/// exact keys (see `joined_key!`), which [`matched`] narrows by each row's own columns.
const MATCHED_SQL: &str = concat!(
    "SELECT k.run_id, k.event_name, k.match_path, k.match_value, k.condition, k.run_event, k.until, r.event_id \
     FROM run_cancel_keys k JOIN runs r ON r.id = k.run_id \
     WHERE ",
    joined_key!("k"),
    " = ANY($1::text[]) AND EXISTS (SELECT 1 FROM run_queue rq WHERE rq.seq = r.seq)"
);

/// An armed run found by a key: its id, the key as a wait, when it is disarmed, its own event.
type Armed = (String, EventWait, Option<i64>, String);

/// The queued or running runs (a waiting run is queued) that the delivered `events` cancel,
/// each with the index of the first event (in `events`' order) that cancels it: a key the event
/// matches, still armed at the event's time, on a run the event did not start. `created` gives
/// the runs started in this same batch the index of the event that started them: an event
/// cancels only those started before it.
/// The match paths are `paths` when the caller read them already (see [`paths_with`]).
pub(super) async fn matched<C: GenericClient>(
    c: &C,
    paths: Option<Paths>,
    events: &[Delivered<'_>],
    created: &HashMap<String, usize>,
) -> Result<Vec<(usize, String)>> {
    if events.is_empty() {
        return Ok(Vec::new());
    }
    let paths = match paths {
        Some(p) => p,
        None => {
            let names: Vec<&str> = events
                .iter()
                .map(|e| e.name)
                .collect::<HashSet<_>>()
                .into_iter()
                .collect();
            paths_with(
                &rows(c, PATHS_SQL, &[&names]).await?,
                &CancelKeys::default(),
            )?
        }
    };
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    let lookup = lookup_keys(events, &paths);
    if lookup.names.is_empty() {
        return Ok(Vec::new());
    }
    let joined = padded(lookup.joined());
    let keys = lookup.per_event;
    let mut armed: HashMap<(String, String, String), Vec<Armed>> = HashMap::new();
    for r in rows(c, MATCHED_SQL, &[&joined]).await? {
        let key = EventWait {
            event: r.try_get(1)?,
            match_path: r.try_get(2)?,
            match_value: r.try_get(3)?,
            condition: r.try_get(4)?,
            run_event: opt_json(r.try_get(5)?)?,
        };
        armed
            .entry((
                key.event.clone(),
                key.match_path.clone(),
                key.match_value.clone(),
            ))
            .or_default()
            .push((r.try_get(0)?, key, r.try_get(6)?, r.try_get(7)?));
    }
    let mut taken: HashSet<&str> = HashSet::new();
    let mut found = Vec::new();
    for (i, (e, mine)) in events.iter().zip(&keys).enumerate() {
        let incoming = event_value(e.id, e.name, e.payload);
        for (path, value) in mine {
            let Some(runs) = armed.get(&(e.name.to_string(), path.clone(), value.clone())) else {
                continue;
            };
            for (run, key, until, own) in runs {
                let later = created.get(run).is_some_and(|at| *at >= i);
                if taken.contains(run.as_str())
                    || until.is_some_and(|u| u <= e.now)
                    || own == e.id
                    || later
                    || !key.accepts(&incoming)
                {
                    continue;
                }
                taken.insert(run);
                found.push((i, run.clone()));
            }
        }
    }
    Ok(found)
}
