//! The event writers' set of the values waited for, per (event name, match path) pair of
//! `wait_paths`, so that an event no run waits for is told apart without a lookup of
//! `run_waits_match`: with keys spread over the index, that lookup cost an eighth of the rate
//! beside 100,000 waits (BENCHMARKS.md, issue 27's eighteenth sitting).
//!
//! **It never misses a value waited for; it may hold values no longer waited for** (then the
//! lookup runs and finds nothing, as it always did). The order comes from the per-name locks of
//! `waits.rs`: a registration holds its name's lock exclusively until it commits, and bumps its
//! pair's `wait_paths.seq` and appends `(pair, seq, value)` to `wait_log` (`0054_wait_log.sql`),
//! so each pair's `seq` are contiguous and committed in their order. A batch holds the shared
//! lock of its names from before it reads the pairs' `seq` until it commits: no registration of
//! them commits in between, so the `seq` it reads are the last, and every wait up to them is
//! committed. So, for each pair of its events' names:
//! - it reads the log past the `seq` its set holds, in the same pipeline as its insert; with
//!   every entry up to the pair's `seq`, the set holds every value waited for;
//! - with entries missing (the log's front was trimmed: registrations keep the last
//!   [`LOG_KEEP`] of each pair), or no set yet, it builds the pair's set from `run_waits` in its
//!   transaction (one round trip, at the pair's read `seq`);
//! - it builds it again when the values no longer waited for cost too much: once it has doubled
//!   since it was built (memory), or once the lookups it let through that found nothing reach
//!   half its size (time);
//! - past [`MAX_VALUES`] rows of a pair, no set is kept: every event looks up, as before, until
//!   as many more were registered or looked up in vain.
//!
//! A node's event writers share the sets; a set only grows between builds, and a build replaces
//! it only with one at a `seq` as recent, so whichever writer merges first, what a set holds
//! covers every wait up to its `seq`.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::{Mutex, MutexGuard};

use deadpool_postgres::GenericClient;

use super::rows::{exec, rows};
use crate::store::Result;

/// Most rows of one pair a set is kept for (some 20 bytes each).
pub(super) const MAX_VALUES: usize = 1 << 21;

/// Entries of `wait_log` each pair keeps: a registration whose `seq` is a multiple of this
/// deletes the pair's entries this many before it.
pub(super) const LOG_KEEP: i64 = 1 << 16;

/// A set smaller than this is not built again for its growth or its lookups in vain.
const MIN_BUILT: usize = 4096;

/// The entries of `wait_log` past the `seq` `$3` of the pairs `$1`, `$2`: one range of the
/// primary key per pair (`LATERAL`; joined, the planner scanned the whole log).
pub(super) const LOG_SQL: &str = "SELECT k.n, k.p, l.seq, l.match_value \
     FROM unnest($1::text[], $2::text[], $3::int8[]) AS k(n, p, s) \
     CROSS JOIN LATERAL (SELECT seq, match_value FROM wait_log \
       WHERE event_name = k.n AND match_path = k.p AND seq > k.s ORDER BY seq) l";

/// Bumps the pair's `seq` (`$1`, `$2`), appends the wait's value `$3` to the log under it, and
/// returns it.
const REGISTERED_SQL: &str = "WITH p AS ( \
       INSERT INTO wait_paths (event_name, match_path, seq) VALUES ($1, $2, 1) \
       ON CONFLICT (event_name, match_path) DO UPDATE SET seq = wait_paths.seq + 1 \
       RETURNING seq) \
     INSERT INTO wait_log (event_name, match_path, seq, match_value) SELECT $1, $2, seq, $3 FROM p \
     RETURNING seq";

/// Deletes the pair's (`$1`, `$2`) entries up to `seq` `$3`.
const TRIM_SQL: &str =
    "DELETE FROM wait_log WHERE event_name = $1 AND match_path = $2 AND seq <= $3";

/// Logs a wait for events `name` whose value at `path` is `value`, in the transaction that
/// registers it, which holds the name's lock exclusively; every [`LOG_KEEP`] entries of the
/// pair, trims the log's front.
pub(super) async fn registered<C: GenericClient>(
    c: &C,
    name: &str,
    path: &str,
    value: &str,
) -> Result<()> {
    let logged = rows(c, REGISTERED_SQL, &[&name, &path, &value]).await?;
    let seq: i64 = logged
        .first()
        .map(|r| r.try_get(0))
        .transpose()?
        .unwrap_or(0);
    if seq > LOG_KEEP && seq % LOG_KEEP == 0 {
        exec(c, TRIM_SQL, &[&name, &path, &(seq - LOG_KEEP)]).await?;
    }
    Ok(())
}

/// The `seq` of each (name, path) pair of `wait_paths`, per name and path.
pub(super) type Seqs = HashMap<String, HashMap<String, i64>>;

/// A (name, path) pair of `wait_paths`.
pub(super) type Pair = (String, String);

/// The sets per event name and path.
type Sets = HashMap<String, HashMap<String, PairValues>>;

/// One pair's set.
struct PairValues {
    /// Every wait registered up to this `seq` has its value in `set` (unless `too_many`).
    seq: i64,
    set: HashSet<u64>,
    /// The set's size when it was last built.
    built_len: usize,
    /// Lookups the set let through that found no wait, since it was built.
    in_vain: u64,
    /// Past the limit: no set; built again once `seq` + `in_vain` reach this.
    too_many: Option<i64>,
}

/// See the module.
#[derive(Default)]
pub(super) struct WaitedValues {
    /// The hash of the values; its keys are random per process.
    state: RandomState,
    pairs: Mutex<Sets>,
    /// [`MAX_VALUES`], or a test's.
    limit: Option<usize>,
}

/// What a batch knew of its pairs when it sent its insert: the `seq` of each set it holds (the
/// log is read past them), and which of its keys it looked up in the same pipeline.
#[derive(Default)]
pub(super) struct Known {
    pub(super) names: Vec<String>,
    pub(super) paths: Vec<String>,
    pub(super) seqs: Vec<i64>,
}

impl Known {
    /// The one pair and its `seq`, if there is exactly one.
    pub(super) fn one(&self) -> Option<(&str, &str, i64)> {
        match (&self.names[..], &self.paths[..], &self.seqs[..]) {
            ([name], [path], [seq]) => Some((name.as_str(), path.as_str(), *seq)),
            _ => None,
        }
    }
}

/// A pair's log entries a batch read.
#[derive(Default)]
pub(super) struct Entries(HashMap<Pair, Vec<(i64, String)>>);

impl Entries {
    /// Adds the rows of [`LOG_SQL`].
    pub(super) fn add_rows(&mut self, found: &[tokio_postgres::Row]) -> Result<()> {
        for r in found {
            self.push(r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?);
        }
        Ok(())
    }

    /// Adds the entry `seq` of the pair (`name`, `path`), `value` (in `seq` order).
    pub(super) fn push(&mut self, name: String, path: String, seq: i64, value: String) {
        self.0.entry((name, path)).or_default().push((seq, value));
    }
}

impl WaitedValues {
    /// Sets that keep at most `limit` values per pair (tests).
    #[cfg(test)]
    fn with_limit(limit: usize) -> Self {
        Self {
            limit: Some(limit),
            ..Self::default()
        }
    }

    fn key(&self, value: &str) -> u64 {
        self.state.hash_one(value)
    }

    fn lock(&self) -> MutexGuard<'_, Sets> {
        // A panic while it was held (none can: no code there panics) leaves a set that still
        // covers its `seq`.
        self.pairs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The `seq` of the sets this process holds of the match `paths` per name, for [`LOG_SQL`].
    pub(super) fn known(&self, paths: &HashMap<String, Vec<String>>) -> Known {
        let sets = self.lock();
        let mut known = Known::default();
        for (name, paths) in paths {
            for path in paths {
                if let Some(p) = set_of(&sets, name, path).filter(|p| p.too_many.is_none()) {
                    known.names.push(name.clone());
                    known.paths.push(path.clone());
                    known.seqs.push(p.seq);
                }
            }
        }
        known
    }

    /// The sets as they are now, to tell the keys they may hold: the others are not looked up
    /// in the batch's pipeline (it checks them again once it read the log).
    pub(super) fn holding(&self) -> Holding<'_> {
        Holding {
            values: self,
            sets: self.lock(),
        }
    }

    /// Adds what a batch read of the log, which it asked for past `known` (the pairs' `seq` it
    /// read are `read`), and answers which pairs it must build: those whose set would not hold
    /// every wait up to their `seq` (none yet, entries trimmed), or that should be built again.
    pub(super) fn merge(&self, known: &Known, read: &Seqs, entries: &Entries) -> Vec<(Pair, i64)> {
        let mut sets = self.lock();
        let from: HashMap<(&str, &str), i64> = known
            .names
            .iter()
            .zip(&known.paths)
            .zip(&known.seqs)
            .map(|((n, p), s)| ((n.as_str(), p.as_str()), *s))
            .collect();
        let mut build = Vec::new();
        let read = read
            .iter()
            .flat_map(|(n, ps)| ps.iter().map(move |(p, s)| ((n.clone(), p.clone()), *s)));
        for (pair, seq) in read {
            let Some(set) = sets.get_mut(&pair.0).and_then(|ps| ps.get_mut(&pair.1)) else {
                build.push((pair.clone(), seq));
                continue;
            };
            if let Some(at) = set.too_many {
                if seq + set.in_vain as i64 >= at {
                    build.push((pair, seq));
                }
                continue;
            }
            let mine = entries.0.get(&pair).map(Vec::as_slice).unwrap_or_default();
            set.set
                .extend(mine.iter().map(|(_, v)| self.state.hash_one(v.as_str())));
            // Read past `start`: the set covers `seq` if no entry in between is missing (the
            // set covered `start` then, and only grew since).
            let complete = from
                .get(&(pair.0.as_str(), pair.1.as_str()))
                .is_some_and(|&start| {
                    start <= set.seq
                        && (seq - start) as usize == mine.len()
                        && mine.first().is_none_or(|(s, _)| *s == start + 1)
                });
            if complete {
                set.seq = set.seq.max(seq);
            }
            let len = set.set.len();
            if set.seq < seq
                || len >= 2 * set.built_len.max(MIN_BUILT)
                || set.in_vain >= (len.max(MIN_BUILT) / 2) as u64
            {
                build.push((pair, seq));
            }
        }
        build
    }

    /// Builds the set of `pair` from `run_waits` at its `seq` (the caller holds the shared lock
    /// of its name, so no wait of it commits meanwhile); none past the limit.
    pub(super) async fn build<C: GenericClient>(&self, c: &C, pair: &Pair, seq: i64) -> Result<()> {
        let limit = self.limit.unwrap_or(MAX_VALUES);
        let found = rows(
            c,
            "SELECT match_value FROM run_waits WHERE event_name = $1 AND match_path = $2 LIMIT $3",
            &[&pair.0, &pair.1, &(limit as i64 + 1)],
        )
        .await?;
        let values: Vec<String> = found
            .iter()
            .map(|r| r.try_get(0))
            .collect::<std::result::Result<_, _>>()?;
        self.built(pair, seq, values, limit);
        Ok(())
    }

    /// Keeps the set built of `values` at `seq`, unless one as recent is kept already.
    fn built(&self, pair: &Pair, seq: i64, values: Vec<String>, limit: usize) {
        let complete = values.len() <= limit;
        tracing::debug!(
            event = %pair.0,
            path = %pair.1,
            rows = values.len(),
            complete,
            "built the event writer's set of the values waited for"
        );
        let set: HashSet<u64> = if complete {
            values.iter().map(|v| self.key(v)).collect()
        } else {
            HashSet::new()
        };
        let mut sets = self.lock();
        if set_of(&sets, &pair.0, &pair.1).is_some_and(|p| p.too_many.is_none() && p.seq > seq) {
            return;
        }
        sets.entry(pair.0.clone()).or_default().insert(
            pair.1.clone(),
            PairValues {
                seq,
                built_len: set.len(),
                set,
                in_vain: 0,
                too_many: (!complete).then_some(seq + 2 * limit as i64),
            },
        );
    }

    /// Of the `keys` of a batch's delivered events, those not `probed` in its pipeline that a
    /// wait may have, by the sets once [`Self::merge`]d and built as the pairs' `seqs` ask: a
    /// pair's key is left out only if its set covers the pair's `seq` and lacks the value.
    pub(super) fn to_look_up<'k>(
        &self,
        keys: impl Iterator<Item = (&'k str, &'k str, &'k str)>,
        seqs: &Seqs,
        probed: &HashSet<(&str, &str, &str)>,
    ) -> Vec<(&'k str, &'k str, &'k str)> {
        let sets = self.lock();
        keys.filter(|&(name, path, value)| {
            if probed.contains(&(name, path, value)) {
                return false;
            }
            let seq = seqs.get(name).and_then(|ps| ps.get(path));
            match set_of(&sets, name, path) {
                Some(p) if p.too_many.is_none() && Some(&p.seq) == seq => {
                    p.set.contains(&self.key(value))
                }
                _ => true,
            }
        })
        .collect()
    }

    /// Counts the lookups of the pairs `looked` that found no wait: values no longer waited for
    /// (or others' with the same hash), or any lookup while no set is kept.
    pub(super) fn found_none<'a>(&self, looked: impl Iterator<Item = (&'a str, &'a str)>) {
        let mut sets = self.lock();
        for (name, path) in looked {
            if let Some(p) = sets.get_mut(name).and_then(|ps| ps.get_mut(path)) {
                p.in_vain += 1;
            }
        }
    }
}

/// The sets, locked: see [`WaitedValues::holding`].
pub(super) struct Holding<'a> {
    values: &'a WaitedValues,
    sets: MutexGuard<'a, Sets>,
}

impl Holding<'_> {
    /// False only if the pair has a set and `value` is not in it.
    pub(super) fn may_hold(&self, name: &str, path: &str, value: &str) -> bool {
        match set_of(&self.sets, name, path) {
            Some(p) if p.too_many.is_none() => p.set.contains(&self.values.key(value)),
            _ => true,
        }
    }
}

fn set_of<'s>(sets: &'s Sets, name: &str, path: &str) -> Option<&'s PairValues> {
    sets.get(name)?.get(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> Pair {
        ("invoice.paid".to_string(), "payload.id".to_string())
    }

    fn read(seq: i64) -> Seqs {
        let (name, path) = pair();
        HashMap::from([(name, HashMap::from([(path, seq)]))])
    }

    fn entries(from: i64, values: &[&str]) -> Entries {
        let list = values
            .iter()
            .enumerate()
            .map(|(i, v)| (from + i as i64, v.to_string()))
            .collect();
        Entries(HashMap::from([(pair(), list)]))
    }

    fn known(values: &WaitedValues) -> Known {
        let (name, path) = pair();
        values.known(&HashMap::from([(name, vec![path])]))
    }

    /// Whether a batch that read the pair's `seq` looks `value` up.
    fn looks_up(values: &WaitedValues, value: &str, seq: i64) -> bool {
        let key = std::iter::once(("invoice.paid", "payload.id", value));
        !values
            .to_look_up(key, &read(seq), &HashSet::new())
            .is_empty()
    }

    /// Whether a batch probes `value` in its pipeline (by the sets before it read the log).
    fn may_hold(values: &WaitedValues, value: &str) -> bool {
        values
            .holding()
            .may_hold("invoice.paid", "payload.id", value)
    }

    fn found_none(values: &WaitedValues) {
        values.found_none(std::iter::once(("invoice.paid", "payload.id")));
    }

    fn built(values: &WaitedValues, seq: i64, list: &[&str]) {
        let list = list.iter().map(|v| v.to_string()).collect();
        values.built(&pair(), seq, list, values.limit.unwrap_or(MAX_VALUES));
    }

    #[test]
    fn a_pair_without_a_set_is_built_and_then_tells_values_apart() {
        let values = WaitedValues::default();
        let k = known(&values);
        assert!(k.names.is_empty(), "no set yet: no log to read");
        assert_eq!(
            values.merge(&k, &read(3), &Entries::default()),
            vec![(pair(), 3)]
        );
        assert!(looks_up(&values, "in_1", 3), "not built yet");
        built(&values, 3, &["in_1", "in_2"]);
        assert!(looks_up(&values, "in_1", 3));
        assert!(!looks_up(&values, "in_9", 3));
        assert!(!may_hold(&values, "in_9"));
        assert!(may_hold(&values, "in_2"));
        // A `seq` it does not cover (read by a batch that did not merge it) looks up.
        assert!(looks_up(&values, "in_9", 4));
        // Another pair has no set: it looks up.
        assert!(values
            .holding()
            .may_hold("invoice.paid", "payload.other", "in_9"));
    }

    #[test]
    fn entries_read_past_the_set_are_added_and_a_missing_one_means_a_build() {
        let values = WaitedValues::default();
        built(&values, 3, &["in_1"]);
        let k = known(&values);
        assert_eq!(k.seqs, vec![3]);
        // Entries 4 and 5: the set covers 5.
        assert!(values
            .merge(&k, &read(5), &entries(4, &["in_4", "in_5"]))
            .is_empty());
        assert!(looks_up(&values, "in_5", 5));
        assert!(!looks_up(&values, "in_6", 5));
        // Entry 6 trimmed, 7 read: the values read are kept, but 7 is not covered.
        let k = known(&values);
        assert_eq!(
            values.merge(&k, &read(7), &entries(7, &["in_7"])),
            vec![(pair(), 7)]
        );
        assert!(looks_up(&values, "in_8", 7));
        built(&values, 7, &["in_6", "in_7"]);
        assert!(!looks_up(&values, "in_8", 7));
        assert!(!looks_up(&values, "in_1", 7), "the build dropped it");
        // Fewer entries than `seq` moved (one in the middle missing): a build.
        let k = known(&values);
        let mut gap = entries(8, &["in_8"]);
        gap.0.get_mut(&pair()).unwrap().push((10, "in_10".into()));
        assert_eq!(values.merge(&k, &read(10), &gap), vec![(pair(), 10)]);
    }

    #[test]
    fn writers_merging_out_of_order_keep_what_covers_the_seq() {
        let values = WaitedValues::default();
        built(&values, 3, &["in_1"]);
        // Two batches read past 3; the later one (up to 5) merges first.
        let (first, second) = (known(&values), known(&values));
        assert!(values
            .merge(&second, &read(5), &entries(4, &["in_4", "in_5"]))
            .is_empty());
        assert!(values
            .merge(&first, &read(4), &entries(4, &["in_4"]))
            .is_empty());
        assert!(looks_up(&values, "in_5", 5));
        assert!(!looks_up(&values, "in_6", 5), "still covers 5");
        // A build at an older `seq` does not replace a newer set.
        built(&values, 4, &["in_4"]);
        assert!(looks_up(&values, "in_5", 5));
    }

    #[test]
    fn lookups_in_vain_and_growth_ask_for_a_build() {
        let values = WaitedValues::default();
        built(&values, 1, &["in_1"]);
        for _ in 0..MIN_BUILT / 2 - 1 {
            found_none(&values);
        }
        assert!(values
            .merge(&known(&values), &read(1), &Entries::default())
            .is_empty());
        found_none(&values);
        assert_eq!(
            values.merge(&known(&values), &read(1), &Entries::default()),
            vec![(pair(), 1)]
        );
        built(&values, 1, &["in_1"]);
        let many: Vec<String> = (0..2 * MIN_BUILT).map(|i| format!("v{i}")).collect();
        let list: Vec<&str> = many.iter().map(String::as_str).collect();
        let grown = entries(2, &list);
        assert_eq!(
            values.merge(&known(&values), &read(1 + list.len() as i64), &grown),
            vec![(pair(), 1 + list.len() as i64)]
        );
    }

    #[test]
    fn past_the_limit_no_set_is_kept_until_as_many_more_came() {
        let values = WaitedValues::with_limit(2);
        built(&values, 3, &["in_1", "in_2", "in_3"]);
        assert!(looks_up(&values, "in_9", 3));
        assert!(may_hold(&values, "in_9"));
        assert!(known(&values).names.is_empty(), "no log to read");
        assert!(values
            .merge(&known(&values), &read(6), &Entries::default())
            .is_empty());
        found_none(&values);
        assert_eq!(
            values.merge(&known(&values), &read(6), &Entries::default()),
            vec![(pair(), 6)],
            "3 + 2 × 2 reached by registrations and a lookup in vain"
        );
        built(&values, 6, &["in_1"]);
        assert!(!looks_up(&values, "in_9", 6));
    }
}
