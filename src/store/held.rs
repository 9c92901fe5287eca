//! What flow control holds back now (issue 26), read from the slots' counters (`flow_slots`) and
//! the queues' indexes: per job, its keys at their limit and the queued runs of its busiest keys
//! ([`JobKeys`], the jobs page and `GET /api/jobs`); in all, the due runs held by each kind of
//! limit ([`RunsHeld`], `flare_runs_held`). The backends read rows; what they mean is decided
//! here, once for both.

use std::collections::HashMap;

use serde::Serialize;

use crate::model::flow::UNLIMITED;

/// How many of a job's keys [`JobKeys::top`] lists.
pub const TOP_KEYS: usize = 5;

/// One of a job's slots (a key's, or the whole job's) as the jobs page shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyLoad {
    /// The key's value; `None` for the slot of the whole job.
    pub key: Option<String>,
    /// Its runs executing now.
    pub running: u64,
    /// Runs it allows at once; `None` when no concurrency limit counts on it (a throttle's key).
    pub limit: Option<u64>,
    /// Its runs queued now (due or not).
    pub queued: u64,
}

impl KeyLoad {
    /// At its concurrency limit: its queued runs wait for one of its running ones to end.
    pub fn at_limit(&self) -> bool {
        self.limit.is_some_and(|l| self.running >= l)
    }
}

/// A job's keys now: how many are at their limit, and the ones with the most queued runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobKeys {
    /// Its slots (keys, or the whole job) at their concurrency limit.
    pub at_limit: u64,
    /// Up to [`TOP_KEYS`] slots with queued runs or at their limit, most queued first.
    pub top: Vec<KeyLoad>,
}

/// A row a backend read for [`job_keys`]: one of the `top` busiest slots of a job, with the
/// count of the job's slots at their limit.
pub(crate) struct KeyRow {
    pub(crate) job: String,
    pub(crate) slot: String,
    pub(crate) cap: i64,
    pub(crate) running: i64,
    pub(crate) queued: i64,
    pub(crate) at_limit: i64,
}

/// The SQL both backends run for [`KeyRow`]s, over `$queued` (rows `slot, n`: queued runs per
/// slot) and `$top` (the bound parameter of [`TOP_KEYS`]): every job's own slots that hold queued
/// runs or are at their limit, ranked by queued runs.
macro_rules! key_rows_sql {
    ($queued:expr, $top:literal) => {
        concat!(
            "WITH q AS (SELECT slot, CAST(sum(n) AS BIGINT) AS n FROM (",
            $queued,
            ") x GROUP BY slot), \
             s AS (SELECT f.job_id, f.slot, f.cap, f.running, coalesce(q.n, 0) AS queued \
               FROM flow_slots f LEFT JOIN q ON q.slot = f.slot \
               WHERE f.job_id IS NOT NULL AND (q.n IS NOT NULL OR f.running >= f.cap)), \
             r AS (SELECT s.*, row_number() OVER (PARTITION BY job_id ORDER BY queued DESC, running DESC, slot) AS rk, \
               sum(CASE WHEN running >= cap THEN 1 ELSE 0 END) OVER (PARTITION BY job_id) AS at_limit FROM s) \
             SELECT job_id, slot, cap, running, queued, at_limit FROM r WHERE rk <= ",
            $top,
            " ORDER BY job_id, rk"
        )
    };
}
pub(crate) use key_rows_sql;

/// Each job's keys from the rows a backend read, in the rows' order.
pub(crate) fn job_keys(rows: Vec<KeyRow>) -> HashMap<String, JobKeys> {
    let n = |v: i64| u64::try_from(v).unwrap_or(0);
    let mut out: HashMap<String, JobKeys> = HashMap::new();
    for r in rows {
        let key = r
            .slot
            .strip_prefix("key:")
            .and_then(|rest| rest.strip_prefix(r.job.as_str()))
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::to_string);
        let keys = out.entry(r.job).or_default();
        keys.at_limit = n(r.at_limit);
        keys.top.push(KeyLoad {
            key,
            running: n(r.running),
            limit: (r.cap < i64::from(UNLIMITED)).then(|| n(r.cap)),
            queued: n(r.queued),
        });
    }
    out
}

/// Queued runs held back by flow control now, by kind (`flare_runs_held`): due runs a limit
/// holds, and the runs of open debounce windows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunsHeld {
    /// In a key, a job or a group at its concurrency limit.
    pub concurrency: u64,
    /// In a key whose throttle allows its next start later (and not at a concurrency limit).
    pub throttle: u64,
    /// Not due yet: the run of an open debounce window, which another event may push back.
    pub debounce: u64,
    /// Past their start timeout: no claim starts them; the rescuer's next pass cancels them.
    pub start_timeout: u64,
}

impl RunsHeld {
    /// The gauges of `GET /metrics`.
    pub fn gauges(&self) -> [(&'static str, u64); 4] {
        [
            ("concurrency", self.concurrency),
            ("throttle", self.throttle),
            ("debounce", self.debounce),
            ("start_timeout", self.start_timeout),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_read_as_keys_with_their_limit() {
        let row = |slot: &str, cap: i64, running, queued| KeyRow {
            job: "sync".into(),
            slot: slot.into(),
            cap,
            running,
            queued,
            at_limit: 1,
        };
        let keys = job_keys(vec![
            row("key:sync:cus:1", 1, 1, 7),
            row("job:sync", 4, 2, 0),
            row("key:sync:null", i64::from(UNLIMITED), 0, 3),
        ]);
        let sync = &keys["sync"];
        assert_eq!(sync.at_limit, 1);
        let shown: Vec<(Option<&str>, Option<u64>, bool)> = sync
            .top
            .iter()
            .map(|k| (k.key.as_deref(), k.limit, k.at_limit()))
            .collect();
        assert_eq!(
            shown,
            [
                (Some("cus:1"), Some(1), true),
                (None, Some(4), false),
                (Some("null"), None, false)
            ]
        );
    }
}
