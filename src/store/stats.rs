//! Statistics in the store: outcome counts and rates ([`Outcomes`]), the windows of the charts
//! ([`StatsWindow`]), their query and result ([`StatsQuery`], [`Stats`]), and the queue now
//! ([`QueueDepth`]).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::model::{ms_to_time, RunStatus};

/// Runs that finished in a time window, with rates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcomes {
    /// Runs that succeeded.
    pub succeeded: u64,
    /// Runs that failed for good.
    pub failed: u64,
    /// Runs cancelled (not counted in the rates).
    pub cancelled: u64,
    /// `succeeded / (succeeded + failed)`; `None` when nothing finished.
    pub success_rate: Option<f64>,
    /// `failed / (succeeded + failed)`; `None` when nothing finished.
    pub failure_rate: Option<f64>,
}

impl Outcomes {
    /// Adds `n` runs that finished in `status` (queued and running are ignored).
    pub fn add(&mut self, status: RunStatus, n: u64) {
        match status {
            RunStatus::Succeeded => self.succeeded += n,
            RunStatus::Failed => self.failed += n,
            RunStatus::Cancelled => self.cancelled += n,
            RunStatus::Queued | RunStatus::Running => {}
        }
        self.rate();
    }

    fn rate(&mut self) {
        let done = self.succeeded + self.failed;
        if done == 0 {
            self.success_rate = None;
            self.failure_rate = None;
        } else {
            self.success_rate = Some(self.succeeded as f64 / done as f64);
            self.failure_rate = Some(self.failed as f64 / done as f64);
        }
    }
}

/// The time span of [`Stats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum StatsWindow {
    /// The last hour, in minute buckets.
    #[serde(rename = "1h")]
    Hour,
    /// The last 24 hours, in hour buckets.
    #[serde(rename = "24h")]
    Day,
}

impl StatsWindow {
    /// Parses `1h` or `24h`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "1h" => Some(StatsWindow::Hour),
            "24h" => Some(StatsWindow::Day),
            _ => None,
        }
    }

    /// Bucket width, ms.
    pub fn bucket_ms(self) -> i64 {
        match self {
            StatsWindow::Hour => 60_000,
            StatsWindow::Day => 3_600_000,
        }
    }

    /// Number of buckets.
    pub fn buckets(self) -> i64 {
        match self {
            StatsWindow::Hour => 60,
            StatsWindow::Day => 24,
        }
    }

    /// The window `[from, to)` in ms ending with the bucket that contains `now`.
    pub fn bounds(self, now_ms: i64) -> (i64, i64) {
        let b = self.bucket_ms();
        let to = now_ms.div_euclid(b) * b + b;
        (to - b * self.buckets(), to)
    }
}

/// What [`Stats`] covers.
#[derive(Debug, Clone, Copy)]
pub struct StatsQuery {
    /// Span and bucket width.
    pub window: StatsWindow,
    /// The current time (the last bucket contains it).
    pub now: DateTime<Utc>,
}

/// Events received and runs finished in one time bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatsBucket {
    /// Bucket start.
    pub start: DateTime<Utc>,
    /// Events received.
    pub events: u64,
    /// Runs that finished in the bucket.
    #[serde(flatten)]
    pub runs: Outcomes,
}

/// Outcomes of one job over the window.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobOutcomes {
    /// Job id.
    pub job_id: String,
    /// Its runs that finished in the window.
    #[serde(flatten)]
    pub runs: Outcomes,
}

/// What is waiting to run, now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueDepth {
    /// Queued runs that are due (could start now).
    pub ready: u64,
    /// Queued runs due later (waiting for a retry backoff).
    pub delayed: u64,
    /// Runs executing.
    pub running: u64,
    /// Delayed events not delivered yet.
    pub scheduled_events: u64,
}

impl QueueDepth {
    /// The gauges of `GET /metrics` (`flare_queue_depth{state}`).
    pub fn gauges(&self) -> [(&'static str, u64); 4] {
        [
            ("ready", self.ready),
            ("delayed", self.delayed),
            ("running", self.running),
            ("scheduled_events", self.scheduled_events),
        ]
    }
}

/// Queued runs by what they wait for, at one moment (`flare_runs_waiting{reason}`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunsWaiting {
    /// Due, waiting to be claimed by a worker (their job not paused).
    pub worker: u64,
    /// Waiting for an `io.wait` to come due.
    pub wait: u64,
    /// Waiting for a retry's backoff.
    pub retry: u64,
    /// Their job is paused.
    pub paused: u64,
}

impl RunsWaiting {
    /// From the queue's depth and what a backend counted: queued runs of paused jobs due now
    /// (`paused_due`) and later (`paused_later`), and runs of jobs not paused waiting on a wait
    /// step (`waits`). Written once for both backends.
    pub(crate) fn assemble(
        depth: &QueueDepth,
        paused_due: u64,
        paused_later: u64,
        waits: u64,
    ) -> Self {
        Self {
            worker: depth.ready.saturating_sub(paused_due),
            wait: waits,
            retry: depth
                .delayed
                .saturating_sub(paused_later)
                .saturating_sub(waits),
            paused: paused_due + paused_later,
        }
    }

    /// The gauges of `GET /metrics`.
    pub fn gauges(&self) -> [(&'static str, u64); 4] {
        [
            ("worker", self.worker),
            ("wait", self.wait),
            ("retry", self.retry),
            ("paused", self.paused),
        ]
    }
}

/// Counts and rates over time, for charts.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    /// The span.
    pub window: StatsWindow,
    /// Bucket width, seconds.
    pub bucket_seconds: i64,
    /// Window start (first bucket's start).
    pub from: DateTime<Utc>,
    /// Window end (exclusive).
    pub to: DateTime<Utc>,
    /// Events received in the window.
    pub events: u64,
    /// Runs that finished in the window.
    pub runs: Outcomes,
    /// Every bucket, oldest first, including empty ones.
    pub buckets: Vec<StatsBucket>,
    /// Per job, ordered by job id; only jobs with runs finished in the window.
    pub jobs: Vec<JobOutcomes>,
    /// The queue now.
    pub queue: QueueDepth,
}

/// What a backend read for [`Stats`]: per-minute counts already grouped into the window's
/// buckets (bucket index, count; runs also by stored status), outcomes per job, and the queue.
pub(crate) struct StatsRows {
    /// Events received per bucket.
    pub(crate) events: Vec<(i64, u64)>,
    /// Runs finished per bucket and status.
    pub(crate) runs: Vec<(i64, String, u64)>,
    /// Outcomes per job over the window.
    pub(crate) jobs: HashMap<String, Outcomes>,
    /// The queue now.
    pub(crate) queue: QueueDepth,
}

impl Stats {
    /// Assembles the statistics of `q` from what a backend read: every bucket of the window (the
    /// empty ones too), totals, jobs ordered by id. Written once for both backends.
    pub(crate) fn assemble(q: &StatsQuery, read: StatsRows) -> Stats {
        let now = q.now.timestamp_millis();
        let (from, to) = q.window.bounds(now);
        let width = q.window.bucket_ms();
        let mut buckets: Vec<StatsBucket> = (0..q.window.buckets())
            .map(|i| StatsBucket {
                start: ms_to_time(from + i * width),
                ..StatsBucket::default()
            })
            .collect();
        let n = buckets.len();
        let slot = move |b: i64| usize::try_from(b).ok().filter(|&i| i < n);
        let mut events = 0;
        for (b, k) in read.events {
            events += k;
            if let Some(i) = slot(b) {
                buckets[i].events += k;
            }
        }
        let mut runs = Outcomes::default();
        for (b, status, k) in read.runs {
            let Some(s) = RunStatus::parse(&status) else {
                continue;
            };
            runs.add(s, k);
            if let Some(i) = slot(b) {
                buckets[i].runs.add(s, k);
            }
        }
        let mut jobs: Vec<JobOutcomes> = read
            .jobs
            .into_iter()
            .map(|(job_id, runs)| JobOutcomes { job_id, runs })
            .collect();
        jobs.sort_by(|a, b| a.job_id.cmp(&b.job_id));
        Stats {
            window: q.window,
            bucket_seconds: width / 1000,
            from: ms_to_time(from),
            to: ms_to_time(to),
            events,
            runs,
            buckets,
            jobs,
            queue: read.queue,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_ignore_cancelled_runs_and_are_none_without_outcomes() {
        let mut o = Outcomes::default();
        o.add(RunStatus::Cancelled, 4);
        assert_eq!(o.success_rate, None);
        o.add(RunStatus::Succeeded, 3);
        o.add(RunStatus::Failed, 1);
        assert_eq!(o.success_rate, Some(0.75));
        assert_eq!(o.failure_rate, Some(0.25));
    }

    #[test]
    fn windows_end_with_the_bucket_holding_now() {
        let (from, to) = StatsWindow::Hour.bounds(90_000);
        assert_eq!((from, to), (120_000 - 3_600_000, 120_000));
        let (from, to) = StatsWindow::Day.bounds(3_600_000);
        assert_eq!(to, 7_200_000);
        assert_eq!(to - from, 24 * 3_600_000);
        assert_eq!(StatsWindow::parse("24h"), Some(StatsWindow::Day));
        assert_eq!(StatsWindow::parse("7d"), None);
    }
}
