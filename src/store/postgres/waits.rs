//! Waits for an event on PostgreSQL (`0030_event_waits.sql`): registering a wait with the run's
//! suspension, resuming waiters in the transaction that inserts (or delivers) an event, and
//! ending a wait at its timeout.
//!
//! **The race.** A run reaches `wait_for_event` at `since`; its wait is registered later, when the
//! completion is written. An event committed in between must not be missed, and under `READ
//! COMMITTED` a registration and an insert running at once would each miss the other's
//! uncommitted row. So they are ordered by an advisory lock per event name (`hashtext(name)`
//! under the key class [`LOCK_CLASS`]): every transaction inserting events takes it *shared*, in
//! a statement before its insert, for each name it inserts (inserts never wait for each other);
//! a registration takes it *exclusive* before writing the wait. The registration therefore
//! starts after every insert of that name in flight has committed, and then looks for a matching
//! event sent since `since` (its statements see those commits); an insert that starts after the
//! registration waits for its commit, and its waiter lookup (a later statement, so a later
//! snapshot) sees the wait. Either way one of them sees the other.

use std::collections::{HashMap, HashSet};

use deadpool_postgres::GenericClient;
use serde_json::Value;

use super::rows::{exec, json_text, opt_json, rows};
use crate::model::wait::{
    event_value, payload_key, CALLBACK_EVENT, CALLBACK_PATH, INVOKE_EVENT, INVOKE_PATH,
};
use crate::model::{ms_to_time, EventWait, WaitedEvent};
use crate::store::{Lease, PendingWait, Result};

/// The advisory lock class (first key) of the per-name locks; the issue that brought them.
pub(super) const LOCK_CLASS: i32 = 27;

/// Takes the shared per-name lock for each name of `$1` (text[]), in name order.
pub(super) const LOCK_SHARED_SQL: &str =
    "SELECT count(pg_advisory_xact_lock_shared(27, hashtext(n))) \
     FROM (SELECT DISTINCT unnest($1::text[]) AS n ORDER BY 1) s";

/// Waits found by their (name, path, value) key: each with its run id and step key.
type Waiters = HashMap<(String, String, String), Vec<(String, String, EventWait)>>;

/// Takes the shared lock of the name [`INVOKE_EVENT`], for a transaction that ends runs (a
/// parent may be registering its wait for one of them).
pub(super) const LOCK_INVOKE_SHARED_SQL: &str =
    "SELECT pg_advisory_xact_lock_shared(27, hashtext('flare/job.invoked'))";

/// Takes the per-parent lock (advisory, class 28, `hashtext` of the run id) of the
/// runs waiting for any of the runs `$1` (their parents: the fan-in of `children.rs`), in lock
/// order so that two transactions take them in one order. An advisory lock, not the parent's
/// queue row: a parent still writing its fan-out holds that row shared, and its first
/// children's completions would wait for each part of it (and it for them). Each run's wait is
/// looked up by its id (an index probe whatever the statistics say), and not at all while no run
/// waits for a child.
pub(super) const LOCK_PARENTS_SQL: &str = "WITH x AS MATERIALIZED (SELECT (SELECT w.run_id FROM run_waits w \
         WHERE w.event_name = 'flare/job.invoked' AND w.match_path = 'run' AND w.match_value = c.id LIMIT 1) AS p \
       FROM unnest($1::text[]) AS c(id) \
       WHERE EXISTS (SELECT 1 FROM run_waits WHERE event_name = 'flare/job.invoked' AND match_path = 'run')) \
     SELECT count(pg_advisory_xact_lock(28, h)) \
     FROM (SELECT DISTINCT hashtext(p) AS h FROM x WHERE p IS NOT NULL ORDER BY 1) s";

/// [`LOCK_PARENTS_SQL`] for the runs `ids`, in the caller's transaction.
pub(super) async fn lock_parents<C: GenericClient>(c: &C, ids: &[&str]) -> Result<()> {
    exec(c, LOCK_PARENTS_SQL, &[&ids]).await.map(|_| ())
}

/// An event just delivered, for [`on_events`].
pub(super) struct Delivered<'a> {
    pub(super) id: &'a str,
    pub(super) name: &'a str,
    pub(super) payload: &'a Value,
    /// When it was sent, ms.
    pub(super) at: i64,
    /// When it was delivered, ms: a resumed run is due then.
    pub(super) now: i64,
}

/// The (name, path, value) keys `events` look up by the match `paths` of their names: per
/// event its (path, value) pairs, and all of them as the columns `$1`–`$3` of a lookup. Event
/// waits and cancel-on keys share this rule (an empty path matches every event of the name; an
/// event without the path's field looks nothing up).
pub(super) struct LookupKeys {
    pub(super) per_event: Vec<Vec<(String, String)>>,
    pub(super) names: Vec<String>,
    pub(super) paths: Vec<String>,
    pub(super) values: Vec<String>,
}

impl LookupKeys {
    /// The keys as `joined_key!` joins a row's columns, for a lookup by `run_waits_key` or
    /// `run_cancel_keys_key`.
    pub(super) fn joined(&self) -> Vec<String> {
        (self.names.iter().zip(&self.paths).zip(&self.values))
            .map(|((name, path), value)| format!("{name} {path} {value}"))
            .collect()
    }
}

/// How many keys PostgreSQL's generic plan of `= ANY($n)` assumes an array holds.
const PLANNED_KEYS: usize = 10;

/// Joined `keys` padded to [`PLANNED_KEYS`] with empty ones, which no wait has (a joined key
/// holds two spaces). A custom plan for fewer keys is estimated cheaper than the generic plan,
/// so a connection looking up one key at a time (a quiet sender's batches) had PostgreSQL plan
/// the lookup again every time, ~80 µs, far more than the lookup; padded, PostgreSQL keeps the
/// generic plan after its first five, and each padding key costs one probe of one bucket.
pub(super) fn padded(mut keys: Vec<String>) -> Vec<String> {
    if keys.len() < PLANNED_KEYS {
        keys.resize(PLANNED_KEYS, String::new());
    }
    keys
}

pub(super) fn lookup_keys(
    events: &[Delivered<'_>],
    paths: &HashMap<String, Vec<String>>,
) -> LookupKeys {
    let mut keys = LookupKeys {
        per_event: Vec::with_capacity(events.len()),
        names: Vec::new(),
        paths: Vec::new(),
        values: Vec::new(),
    };
    for e in events {
        let mut mine = Vec::new();
        for path in paths.get(e.name).map(Vec::as_slice).unwrap_or_default() {
            let value = if path.is_empty() {
                String::new()
            } else {
                match payload_key(e.payload, path) {
                    Some(v) => v,
                    None => continue,
                }
            };
            keys.names.push(e.name.to_string());
            keys.paths.push(path.clone());
            keys.values.push(value.clone());
            mine.push((path.clone(), value));
        }
        keys.per_event.push(mine);
    }
    keys
}

/// The match paths that waiting runs use for the event names `$1` (name, path): an event whose
/// name has none resumes nothing, and costs nothing more.
pub(super) const WAIT_PATHS_SQL: &str =
    "SELECT event_name, match_path FROM wait_paths WHERE event_name = ANY($1)";

/// Resumes every wait the delivered `events` match (broadcast; a waiter matched by several takes
/// the first), in the caller's transaction, which holds the shared locks of their names.
/// Returns how many were resumed.
pub(super) async fn on_events<C: GenericClient>(c: &C, events: &[Delivered<'_>]) -> Result<usize> {
    if events.is_empty() {
        return Ok(0);
    }
    let names: Vec<&str> = events
        .iter()
        .map(|e| e.name)
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    let paths = match_paths(&rows(c, WAIT_PATHS_SQL, &[&names]).await?)?;
    on_events_with(c, events, &paths, None).await
}

/// The rows of [`WAIT_PATHS_SQL`] as the match paths of each event name.
pub(super) fn match_paths(
    path_rows: &[tokio_postgres::Row],
) -> Result<HashMap<String, Vec<String>>> {
    let mut paths: HashMap<String, Vec<String>> = HashMap::new();
    for r in path_rows {
        paths.entry(r.try_get(0)?).or_default().push(r.try_get(1)?);
    }
    Ok(paths)
}

/// The match paths of waits (`wait_paths`) per event name, as the last batch of that name read
/// them (names without any are left out), shared by a node's event writers: a batch looks the
/// waits of its events up by these in its insert's pipeline ([`Self::guess`]), and again only if
/// a path it reads there was not among them ([`Self::read`]: a wait registered since, by any
/// process).
#[derive(Default)]
pub(super) struct KnownPaths(std::sync::Mutex<HashMap<String, Vec<String>>>);

impl KnownPaths {
    /// The match paths of waits for the event `names` as last read.
    pub(super) fn guess(&self, names: &[&str]) -> HashMap<String, Vec<String>> {
        let known = self.0.lock().unwrap_or_else(|e| e.into_inner());
        names
            .iter()
            .filter_map(|n| known.get(*n).map(|p| (n.to_string(), p.clone())))
            .collect()
    }

    /// Keeps the match paths `read` for the event `names` and answers whether each was among
    /// those `guessed`.
    pub(super) fn read(
        &self,
        names: &[&str],
        guessed: &HashMap<String, Vec<String>>,
        read: &HashMap<String, Vec<String>>,
    ) -> bool {
        let covered = read.iter().all(|(name, paths)| {
            let had = guessed.get(name).map(Vec::as_slice).unwrap_or_default();
            paths.iter().all(|p| had.contains(p))
        });
        let mut known = self.0.lock().unwrap_or_else(|e| e.into_inner());
        for name in names {
            match read.get(*name) {
                Some(paths) => known.insert(name.to_string(), paths.clone()),
                None => known.remove(*name),
            };
        }
        covered
    }
}

/// The (name, path, value) of the row aliased `$t` joined by spaces: the expression of the hash
/// indexes `run_waits_key` (`0055_wait_key.sql`) and `run_cancel_keys_key` (`0056`), written as
/// the indexes have it so that the planner uses them. A path may hold spaces, so different keys
/// can join alike: a lookup by it finds a superset, and the caller keeps the rows whose own
/// columns are the event's key ([`on_events_with`], `cancel_on::matched`).
macro_rules! joined_key {
    ($t:literal) => {
        concat!(
            "(",
            $t,
            ".event_name || ' ' || ",
            $t,
            ".match_path || ' ' || ",
            $t,
            ".match_value)"
        )
    };
}
pub(super) use joined_key;

/// The columns of a wait that [`on_events_with`] reads.
macro_rules! wait_columns {
    () => {
        "w.run_id, w.step_key, w.event_name, w.match_path, w.match_value, w.condition, w.run_event"
    };
}

/// The waits of the joined keys `$1` ([`LookupKeys::joined`]), as [`on_events_with`] reads them.
pub(super) const LOOKUP_SQL: &str = concat!(
    "SELECT ",
    wait_columns!(),
    " FROM run_waits w WHERE ",
    joined_key!("w"),
    " = ANY($1::text[])"
);

/// The match paths of the names `$1` in the columns of [`LOOKUP_SQL`] (no run id; the name and
/// path where a wait's are): what the event writer reads when it guessed no wait.
macro_rules! paths_as_waits_sql {
    () => {
        "SELECT NULL::text, NULL::text, event_name, match_path, NULL::text, NULL::text, NULL::text \
         FROM wait_paths WHERE event_name = ANY($1)"
    };
}
pub(super) const PATHS_AS_WAITS_SQL: &str = paths_as_waits_sql!();

/// [`PATHS_AS_WAITS_SQL`] and, in the same statement, the waits of the joined keys `$2` (one
/// bucket of `run_waits_key` each): the event writer's batch with waits to look up costs no
/// statement more than a batch of names without waits.
pub(super) const PATHS_AND_WAITS_SQL: &str = concat!(
    paths_as_waits_sql!(),
    " UNION ALL SELECT ",
    wait_columns!(),
    " FROM run_waits w WHERE ",
    joined_key!("w"),
    " = ANY($2::text[])"
);

/// The match paths of waits per event name.
pub(super) type Paths = HashMap<String, Vec<String>>;

/// The rows of [`PATHS_AND_WAITS_SQL`] (or [`PATHS_AS_WAITS_SQL`]) as the match paths of each
/// name and the waits found.
pub(super) fn paths_and_waits(
    found: Vec<tokio_postgres::Row>,
) -> Result<(Paths, Vec<tokio_postgres::Row>)> {
    let mut paths = Paths::new();
    let mut waits = Vec::new();
    for r in found {
        if r.try_get::<_, Option<String>>(0)?.is_some() {
            waits.push(r);
        } else {
            paths.entry(r.try_get(2)?).or_default().push(r.try_get(3)?);
        }
    }
    Ok((paths, waits))
}

/// [`on_events`] with the match `paths` of the events' names read already (the event writer
/// reads them in its pipeline with the insert, after the names' locks, so that events no wait
/// can match cost no round trip), and, when `found` is given, the rows of [`LOOKUP_SQL`] for a
/// superset of the keys these paths give (the writer looks them up in the same pipeline, by the
/// paths it read last time).
pub(super) async fn on_events_with<C: GenericClient>(
    c: &C,
    events: &[Delivered<'_>],
    paths: &HashMap<String, Vec<String>>,
    found: Option<Vec<tokio_postgres::Row>>,
) -> Result<usize> {
    // Nothing found for a superset of the keys: no event of these resumes a wait.
    if events.is_empty() || paths.is_empty() || found.as_ref().is_some_and(Vec::is_empty) {
        return Ok(0);
    }
    let lookup = lookup_keys(events, paths);
    if lookup.names.is_empty() {
        return Ok(0);
    }
    let found = match found {
        Some(found) => found,
        None => rows(c, LOOKUP_SQL, &[&padded(lookup.joined())]).await?,
    };
    let keys = lookup.per_event;
    let mut waits: Waiters = HashMap::new();
    let mut seen = HashSet::new();
    for r in found {
        let (run_id, key): (String, String) = (r.try_get(0)?, r.try_get(1)?);
        if !seen.insert((run_id.clone(), key.clone())) {
            continue;
        }
        let wait = EventWait {
            event: r.try_get(2)?,
            match_path: r.try_get(3)?,
            match_value: r.try_get(4)?,
            condition: r.try_get(5)?,
            run_event: opt_json(r.try_get(6)?)?,
        };
        waits
            .entry((
                wait.event.clone(),
                wait.match_path.clone(),
                wait.match_value.clone(),
            ))
            .or_default()
            .push((run_id, key, wait));
    }
    let mut resolved = Resolutions::default();
    let mut taken = HashSet::new();
    for (e, mine) in events.iter().zip(&keys) {
        // Built for a condition's check only, once a wait is found.
        let mut incoming: Option<Value> = None;
        for (path, value) in mine {
            let Some(found) = waits.get(&(e.name.to_string(), path.clone(), value.clone())) else {
                continue;
            };
            let incoming = incoming.get_or_insert_with(|| event_value(e.id, e.name, e.payload));
            for (run_id, key, wait) in found {
                if taken.contains(&(run_id, key)) || !wait.accepts(incoming) {
                    continue;
                }
                taken.insert((run_id, key));
                resolved.add(run_id, key, e, e.now);
            }
        }
    }
    resolved.apply(c).await
}

/// Waits to resume, as the columns of [`RESOLVE_SQL`].
#[derive(Default)]
struct Resolutions {
    /// The events that resume them (by `add`: recorded as their effect once applied).
    events: Vec<String>,
    run_ids: Vec<String>,
    keys: Vec<String>,
    outputs: Vec<String>,
    at: Vec<i64>,
}

/// Resumes one wait with `output` (JSON text).
async fn resolve_one<C: GenericClient>(
    c: &C,
    run_id: &str,
    key: &str,
    output: String,
    now: i64,
) -> Result<usize> {
    let r = Resolutions {
        events: Vec::new(),
        run_ids: vec![run_id.to_string()],
        keys: vec![key.to_string()],
        outputs: vec![output],
        at: vec![now],
    };
    r.apply(c).await
}

/// Resumes the run waiting on callback `token` with `output` (JSON), unless the token is
/// unknown, used or past its deadline at `now`; the shared lock of the callbacks' name first.
pub(super) async fn callback_resolve<C: GenericClient>(
    c: &C,
    token: &str,
    output: String,
    now: i64,
) -> Result<bool> {
    exec(
        c,
        "SELECT pg_advisory_xact_lock_shared(27, hashtext($1))",
        &[&CALLBACK_EVENT],
    )
    .await?;
    let found = rows(
        c,
        "SELECT run_id, step_key FROM run_waits \
         WHERE event_name = $1 AND match_path = $2 AND match_value = $3 AND until > $4",
        &[&CALLBACK_EVENT, &CALLBACK_PATH, &token, &now],
    )
    .await?;
    let Some(r) = found.first() else {
        return Ok(false);
    };
    let (run_id, key): (String, String) = (r.try_get(0)?, r.try_get(1)?);
    Ok(resolve_one(c, &run_id, &key, output, now).await? > 0)
}

/// How run `id` ended (`{runId, status, output, error}`, JSON), or `None` while it has not.
async fn child_outcome<C: GenericClient>(c: &C, id: &str) -> Result<Option<String>> {
    let found = rows(
        c,
        "SELECT json_build_object('runId', id, 'status', status, 'output', output::json, 'error', error)::text \
         FROM runs WHERE id = $1 AND status IN ('succeeded', 'failed', 'cancelled')",
        &[&id],
    )
    .await?;
    Ok(found.first().map(|r| r.try_get(0)).transpose()?)
}

/// Resumes the parents waiting for run `id` (`io.invoke`), which just ended in the caller's
/// transaction; the shared lock of [`INVOKE_EVENT`] first (see the module doc). Returns how many.
pub(super) async fn on_run_end<C: GenericClient>(c: &C, id: &str, now: i64) -> Result<usize> {
    exec(c, LOCK_INVOKE_SHARED_SQL, &[]).await?;
    // The parents' locks first, then their waits read again (see `children.rs`).
    lock_parents(c, &[id]).await?;
    let parents = rows(
        c,
        "SELECT run_id, step_key FROM run_waits WHERE event_name = $1 AND match_path = $2 AND match_value = $3",
        &[&INVOKE_EVENT, &INVOKE_PATH, &id],
    )
    .await?;
    if parents.is_empty() {
        return Ok(0);
    }
    let Some(outcome) = child_outcome(c, id).await? else {
        return Ok(0);
    };
    let mut n = 0;
    for p in parents {
        let (run_id, key): (String, String) = (p.try_get(0)?, p.try_get(1)?);
        n += resolve_one(c, &run_id, &key, outcome.clone(), now).await?;
    }
    Ok(n)
}

/// The queued or running runs that run `id` invoked.
pub(super) async fn children_unfinished<C: GenericClient>(c: &C, id: &str) -> Result<Vec<String>> {
    rows(
        c,
        "SELECT r.id FROM events e JOIN runs r ON r.event_id = e.id \
         LEFT JOIN run_queue q ON q.seq = r.seq \
         WHERE e.parent_run_id = $1 AND e.name = $2 AND q.seq IS NOT NULL",
        &[&id, &INVOKE_EVENT],
    )
    .await?
    .iter()
    .map(|r| r.try_get(0).map_err(Into::into))
    .collect()
}

impl Resolutions {
    fn add(&mut self, run_id: &str, key: &str, e: &Delivered<'_>, now: i64) {
        let event = WaitedEvent {
            id: e.id.to_string(),
            name: e.name.to_string(),
            payload: e.payload.clone(),
            timestamp: ms_to_time(e.at),
        };
        self.events.push(e.id.to_string());
        self.run_ids.push(run_id.to_string());
        self.keys.push(key.to_string());
        self.outputs
            .push(serde_json::to_string(&event).unwrap_or_else(|_| "null".into()));
        self.at.push(now);
    }

    async fn apply<C: GenericClient>(&self, c: &C) -> Result<usize> {
        if self.run_ids.is_empty() {
            return Ok(0);
        }
        let resumed = rows(
            c,
            RESOLVE_SQL,
            &[
                &self.run_ids,
                &self.keys,
                &self.outputs,
                &self.at,
                &self.events,
            ],
        )
        .await?;
        Ok(resumed.len())
    }
}

/// Resumes waits (`$1` run ids, `$2` step keys, `$3` the events as JSON, `$4` due times, `$5`
/// the ids of the events resuming them, shorter or empty where none does): each
/// wait row still there is deleted (a wait resumed or timed out already is gone: nothing else
/// changes), its step succeeds with the event (an invoke step whose child did not succeed
/// fails with its outcome), and a queued run becomes due (queue row, then run row); a parent
/// waiting for several children only once none is left (`children.rs`; its waits counted up to
/// one more than this statement deletes, as in `runs::COMPLETE_SQL`); the event page's link from
/// each resuming event to its run (`event_effects`) is written by the same statement.
const RESOLVE_SQL: &str = "WITH u AS ( \
       SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[], $5::text[]) \
         AS u(run_id, key, output, at, ev) WHERE run_id IS NOT NULL), \
     d AS (DELETE FROM run_waits w USING u WHERE w.run_id = u.run_id AND w.step_key = u.key \
       RETURNING u.run_id, u.key, u.output, u.at, u.ev, w.event_name = 'flare/job.invoked' AS invoke, \
         w.event_name = 'flare/job.invoked' AND u.output::json->>'status' IS DISTINCT FROM 'succeeded' AS failed), \
     s AS (UPDATE run_steps s SET status = CASE WHEN d.failed THEN 'failed' ELSE 'succeeded' END, \
         finished_at = d.at, output = d.output, error = CASE WHEN d.failed THEN 'run ' || (d.output::json->>'runId') \
           || ' ' || (d.output::json->>'status') || ': ' || coalesce(d.output::json->>'error', 'no error given') END \
       FROM d WHERE s.run_id = d.run_id AND s.key = d.key AND s.status <> 'succeeded'), \
     q AS (UPDATE run_queue q SET run_at = d.at FROM runs r, d \
       WHERE r.id = d.run_id AND q.seq = r.seq AND q.lease_until IS NULL AND (NOT d.invoke \
         OR (SELECT count(*) FROM (SELECT FROM run_waits w WHERE w.run_id = d.run_id \
             AND w.event_name = 'flare/job.invoked' \
             LIMIT (SELECT count(*) FROM d x WHERE x.run_id = d.run_id AND x.invoke) + 1) left_) \
          = (SELECT count(*) FROM d x WHERE x.run_id = d.run_id AND x.invoke)) \
       RETURNING q.seq, q.run_at), \
     hist AS (UPDATE runs x SET run_at = q.run_at FROM q WHERE x.seq = q.seq), \
     eff AS (INSERT INTO event_effects (event_id, run_id, effect, at) \
       SELECT DISTINCT ON (d.ev, d.run_id) d.ev, d.run_id, 'resumed', d.at FROM d WHERE d.ev IS NOT NULL \
       ORDER BY d.ev, d.run_id \
       ON CONFLICT (event_id, effect, run_id) DO UPDATE SET at = excluded.at) \
     SELECT run_id FROM d";

/// Stores the wait of run `run_id`'s step `key` (suspended at `since`, timing out at `until`) in
/// the caller's transaction, which holds the exclusive lock of the event name, and resumes it
/// at once with the first matching event delivered since `since`. Returns whether it was.
pub(super) async fn register<C: GenericClient>(
    c: &C,
    run_id: &str,
    key: &str,
    wait: &EventWait,
    since: i64,
    until: i64,
    now: i64,
) -> Result<bool> {
    if wait.is_callback() {
        let answered = rows(
            c,
            "SELECT 1 FROM run_steps WHERE run_id = $1 AND key = $2 AND status = 'succeeded'",
            &[&run_id, &key],
        )
        .await?;
        if !answered.is_empty() {
            // Posted to before the run got here: due now.
            exec(
                c,
                "WITH q AS (UPDATE run_queue q SET run_at = $2 FROM runs r \
                   WHERE r.id = $1 AND q.seq = r.seq AND q.lease_until IS NULL RETURNING q.seq) \
                 UPDATE runs x SET run_at = $2 FROM q WHERE x.seq = q.seq",
                &[&run_id, &now],
            )
            .await?;
            return Ok(true);
        }
    }
    let run_event = wait.run_event.as_ref().map(Value::to_string);
    exec(
        c,
        "INSERT INTO run_waits (run_id, step_key, event_name, match_path, match_value, condition, run_event, since, until) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
         ON CONFLICT (run_id, step_key) DO UPDATE SET event_name = excluded.event_name, \
           match_path = excluded.match_path, match_value = excluded.match_value, \
           condition = excluded.condition, run_event = excluded.run_event, since = excluded.since, until = excluded.until",
        &[&run_id, &key, &wait.event, &wait.match_path, &wait.match_value, &wait.condition, &run_event, &since, &until],
    )
    .await?;
    if wait.is_callback() {
        return Ok(false);
    }
    if wait.is_invoke() {
        // A child that ended already resumes its parent now.
        return match child_outcome(c, &wait.match_value).await? {
            Some(outcome) => Ok(resolve_one(c, run_id, key, outcome, now).await? > 0),
            None => Ok(false),
        };
    }
    exec(
        c,
        "INSERT INTO wait_paths (event_name, match_path) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        &[&wait.event, &wait.match_path],
    )
    .await?;
    for r in rows(
        c,
        "SELECT id, payload, timestamp FROM events \
         WHERE timestamp >= $1 AND name = $2 AND delivered_at IS NOT NULL ORDER BY timestamp, seq",
        &[&since, &wait.event],
    )
    .await?
    {
        let id: String = r.try_get(0)?;
        let payload = json_text(&r.try_get::<_, String>(1)?)?;
        if wait.accepts(&event_value(&id, &wait.event, &payload)) {
            let e = Delivered {
                id: &id,
                name: &wait.event,
                payload: &payload,
                at: r.try_get(2)?,
                now,
            };
            let mut one = Resolutions::default();
            one.add(run_id, key, &e, now);
            return Ok(one.apply(c).await? > 0);
        }
    }
    Ok(false)
}

/// Ends the wait `key` of the run holding `lease` at its timeout, in the caller's transaction
/// (see [`crate::store::Store::wait_expire`]): the wait row is deleted first, so an insert
/// resuming it at the same time either committed before (its event is read back) or finds it
/// gone. `None` when the lease is lost.
pub(super) async fn expire<C: GenericClient>(
    tx: &C,
    lease: &Lease,
    key: &str,
    now: i64,
) -> Result<Option<Value>> {
    let held = rows(
        tx,
        "WITH held AS (SELECT r.id FROM run_queue q JOIN runs r ON r.seq = q.seq \
           WHERE r.id = $1 AND q.lease_token = $3 AND q.lease_until IS NOT NULL FOR SHARE OF q), \
         d AS (DELETE FROM run_waits w USING held WHERE w.run_id = held.id AND w.step_key = $2) \
         SELECT count(*) FROM held",
        &[&lease.run_id, &key, &lease.token],
    )
    .await?
    .first()
    .map(|r| r.try_get::<_, i64>(0))
    .transpose()?
    .unwrap_or(0);
    if held == 0 {
        return Ok(None);
    }
    // Still waiting (else it ended meanwhile: its outcome stays). An invoke step fails.
    exec(
        tx,
        "UPDATE run_steps SET status = CASE WHEN kind = 'invoke' THEN 'failed' ELSE 'succeeded' END, \
           finished_at = $3, output = 'null', \
           error = CASE WHEN kind = 'invoke' THEN 'the invoked run did not end before the timeout' END \
         WHERE run_id = $1 AND key = $2 AND status = 'waiting'",
        &[&lease.run_id, &key, &now],
    )
    .await?;
    let output: Option<String> = rows(
        tx,
        "SELECT output FROM run_steps WHERE run_id = $1 AND key = $2",
        &[&lease.run_id, &key],
    )
    .await?
    .first()
    .map(|r| r.try_get::<_, Option<String>>(0))
    .transpose()?
    .flatten();
    Ok(Some(opt_json(output)?.unwrap_or(Value::Null)))
}

/// The pending wait for an event of run `run_id`, if any.
pub(super) async fn pending<C: GenericClient>(c: &C, run_id: &str) -> Result<Option<PendingWait>> {
    let found = rows(
        c,
        "SELECT step_key, event_name, match_path, match_value, condition, since, until \
         FROM run_waits WHERE run_id = $1 ORDER BY since LIMIT 1",
        &[&run_id],
    )
    .await?;
    let Some(r) = found.first() else {
        return Ok(None);
    };
    Ok(Some(PendingWait::from_row(
        r.try_get(0)?,
        r.try_get(1)?,
        r.try_get(2)?,
        r.try_get(3)?,
        r.try_get(4)?,
        r.try_get(5)?,
        r.try_get(6)?,
    )))
}
