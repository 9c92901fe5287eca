//! The read side: parameter and result types of the list and statistics queries behind the JSON
//! API and the dashboard. Backend-neutral; each backend implements them (see `sqlite/query.rs`).
//!
//! Lists are newest first and keyset-paginated: a page ends with a [`Cursor`] naming the last row
//! shown, and the next page starts strictly after it, so concurrent inserts never shift pages and
//! a walk over every page sees each row once. Every list query uses an index.

use std::fmt;
use std::str::FromStr;

use base64::Engine as _;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use crate::model::{Run, RunStatus, StoredEvent};

/// Rows per page when the caller does not say.
pub const DEFAULT_LIMIT: usize = 50;
/// Most rows per page.
pub const MAX_LIMIT: usize = 500;

/// Longest payload search (`q`), in characters.
///
/// Longer than any text worth looking for (an email address has at most 254 characters, a UUID
/// 36), and short enough that checking a payload stays cheap whatever is stored: the `LIKE`
/// that decides costs up to the payload's length times the term's (both stores compare the term
/// at each position), for 256 characters over a 1 MiB payload built for it about 0.2 s on
/// SQLite and 0.6 s on PostgreSQL. Unbounded, one request with a 10,000-character term ran a
/// server out of memory (issue 23).
pub const MAX_SEARCH_CHARS: usize = 256;

/// Why a payload search is refused, if it is: longer than [`MAX_SEARCH_CHARS`].
pub fn search_refusal(text: &str) -> Option<String> {
    let n = text.chars().count();
    (n > MAX_SEARCH_CHARS).then(|| {
        format!("the payload search q has {n} characters; it may have at most {MAX_SEARCH_CHARS}")
    })
}

/// Clamps a requested page size to `1..=MAX_LIMIT`.
pub fn clamp_limit(limit: usize) -> usize {
    limit.clamp(1, MAX_LIMIT)
}

/// An opaque position in a newest-first list: the next page starts after it.
///
/// It prints as a short URL-safe string; [`Cursor::from_str`] reads it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cursor(i64);

/// A cursor string that was not produced by Flare.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid cursor: pass the nextCursor value of the previous page unchanged")]
pub struct InvalidCursor;

impl Cursor {
    /// The cursor after the row with storage sequence number `seq`.
    pub(crate) fn after(seq: i64) -> Self {
        Self(seq)
    }

    /// The storage sequence number: rows with a smaller one come next.
    pub(crate) fn seq(self) -> i64 {
        self.0
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = format!("v1:{}", self.0);
        f.write_str(&base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text))
    }
}

impl FromStr for Cursor {
    type Err = InvalidCursor;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(s)
            .map_err(|_| InvalidCursor)?;
        let text = String::from_utf8(bytes).map_err(|_| InvalidCursor)?;
        let seq: i64 = text
            .strip_prefix("v1:")
            .and_then(|n| n.parse().ok())
            .ok_or(InvalidCursor)?;
        if seq < 1 {
            return Err(InvalidCursor);
        }
        Ok(Self(seq))
    }
}

impl Serialize for Cursor {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// One page of a list.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Page<T> {
    /// The rows, newest first.
    pub items: Vec<T>,
    /// Where the next page starts; `None` on the last page.
    pub next_cursor: Option<Cursor>,
}

impl<T> Page<T> {
    /// No rows, and no next page.
    pub fn empty() -> Self {
        Self {
            items: Vec::new(),
            next_cursor: None,
        }
    }
}

/// The outcome of an event as a whole, derived from its own state and its runs' states.
///
/// The states partition events; they are decided in this order:
/// 1. `cancelled` — the event was cancelled before delivery, or every run it started was
///    cancelled (nothing ran);
/// 2. `scheduled` — delayed and not delivered yet;
/// 3. `no_runs` — delivered, but no job matched it;
/// 4. `running` — some run is queued (including waiting for a retry) or running;
/// 5. `failed` — every run finished and at least one failed;
/// 6. `succeeded` — every run finished, none failed, and at least one succeeded (runs cancelled
///    beside succeeded ones do not change that).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventStatus {
    /// Delayed, not delivered yet.
    Scheduled,
    /// Cancelled before delivery, or all of its runs were cancelled.
    Cancelled,
    /// Delivered; no job matched.
    NoRuns,
    /// Some run is queued or running.
    Running,
    /// All runs finished; at least one failed.
    Failed,
    /// All runs finished; none failed; at least one succeeded.
    Succeeded,
}

impl EventStatus {
    /// Every state.
    pub const ALL: [EventStatus; 6] = [
        EventStatus::Scheduled,
        EventStatus::Cancelled,
        EventStatus::NoRuns,
        EventStatus::Running,
        EventStatus::Failed,
        EventStatus::Succeeded,
    ];

    /// The spelling used in the API and in query parameters.
    pub fn as_str(self) -> &'static str {
        match self {
            EventStatus::Scheduled => "scheduled",
            EventStatus::Cancelled => "cancelled",
            EventStatus::NoRuns => "no_runs",
            EventStatus::Running => "running",
            EventStatus::Failed => "failed",
            EventStatus::Succeeded => "succeeded",
        }
    }

    /// Parses [`EventStatus::as_str`]'s spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// The state of `event` whose runs are counted in `runs` (the rules above).
    pub fn of(event: &StoredEvent, runs: &RunCounts) -> Self {
        if event.cancelled_at.is_some() {
            EventStatus::Cancelled
        } else if event.delivered_at.is_none() {
            EventStatus::Scheduled
        } else if runs.total() == 0 {
            EventStatus::NoRuns
        } else if runs.queued + runs.running > 0 {
            EventStatus::Running
        } else if runs.failed > 0 {
            EventStatus::Failed
        } else if runs.succeeded > 0 {
            EventStatus::Succeeded
        } else {
            EventStatus::Cancelled
        }
    }
}

impl fmt::Display for EventStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How many runs are in each state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunCounts {
    /// Queued (including waiting for a retry).
    pub queued: u64,
    /// Running.
    pub running: u64,
    /// Succeeded.
    pub succeeded: u64,
    /// Failed.
    pub failed: u64,
    /// Cancelled.
    pub cancelled: u64,
}

impl RunCounts {
    /// Adds `n` runs in `status`.
    pub fn add(&mut self, status: RunStatus, n: u64) {
        match status {
            RunStatus::Queued => self.queued += n,
            RunStatus::Running => self.running += n,
            RunStatus::Succeeded => self.succeeded += n,
            RunStatus::Failed => self.failed += n,
            RunStatus::Cancelled => self.cancelled += n,
        }
    }

    /// All runs counted.
    pub fn total(&self) -> u64 {
        self.queued + self.running + self.succeeded + self.failed + self.cancelled
    }

    /// Counts the statuses of `runs`.
    pub fn of_runs<'a>(runs: impl IntoIterator<Item = &'a Run>) -> Self {
        let mut counts = Self::default();
        for r in runs {
            counts.add(r.status, 1);
        }
        counts
    }
}

/// Filters of the event list. All given filters must hold.
#[derive(Debug, Clone)]
pub struct EventQuery {
    /// Exact event name.
    pub name: Option<String>,
    /// Source: matches exactly, or as the kind before a colon (`job` matches `job:run_…`,
    /// `webhook` matches `webhook:payments` and `webhook:auth`).
    pub source: Option<String>,
    /// Outcome, see [`EventStatus`].
    pub status: Option<EventStatus>,
    /// Received at or after this time.
    pub from: Option<DateTime<Utc>>,
    /// Received strictly before this time.
    pub to: Option<DateTime<Utc>>,
    /// Text the payload's JSON must contain (case-insensitive for ASCII), at most
    /// [`MAX_SEARCH_CHARS`] characters.
    pub q: Option<String>,
    /// Page size (clamped to `1..=MAX_LIMIT`).
    pub limit: usize,
    /// Start after this position (from the previous page).
    pub cursor: Option<Cursor>,
}

impl Default for EventQuery {
    fn default() -> Self {
        Self {
            name: None,
            source: None,
            status: None,
            from: None,
            to: None,
            q: None,
            limit: DEFAULT_LIMIT,
            cursor: None,
        }
    }
}

/// An event in a list: its stored fields, its outcome and its runs counted by state.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventSummary {
    /// The event.
    #[serde(flatten)]
    pub event: StoredEvent,
    /// Its outcome.
    pub status: EventStatus,
    /// Its runs by state.
    pub run_counts: RunCounts,
}

/// Filters of the run list. All given filters must hold.
#[derive(Debug, Clone)]
pub struct RunQuery {
    /// Job id.
    pub job_id: Option<String>,
    /// Run state.
    pub status: Option<RunStatus>,
    /// The event that started the run.
    pub event_id: Option<String>,
    /// Page size (clamped to `1..=MAX_LIMIT`).
    pub limit: usize,
    /// Start after this position (from the previous page).
    pub cursor: Option<Cursor>,
}

impl Default for RunQuery {
    fn default() -> Self {
        Self {
            job_id: None,
            status: None,
            event_id: None,
            limit: DEFAULT_LIMIT,
            cursor: None,
        }
    }
}

/// A run in a list, with the name of its event.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunSummary {
    /// The run.
    #[serde(flatten)]
    pub run: Run,
    /// Its event's name (empty if the event is gone).
    pub event_name: String,
}

/// A stored job definition.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobDefinition {
    /// Job id (slug).
    pub id: String,
    /// Display name.
    pub name: String,
    /// Semver version of the latest definition.
    pub version: String,
    /// The event name it listens for.
    pub event: String,
    /// Its payload filter, as written.
    pub filter: Option<Value>,
    /// Attempts allowed per run.
    pub max_attempts: u32,
    /// Per-attempt timeout, ms.
    pub timeout_ms: u64,
    /// Concurrency limit per process.
    pub concurrency: Option<u32>,
    /// When the definition was last stored.
    pub updated_at: DateTime<Utc>,
    /// Paused: its runs are created but not claimed until it is resumed.
    pub paused: bool,
}

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

/// A job with its current load and recent outcomes.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSummary {
    /// The definition.
    #[serde(flatten)]
    pub job: JobDefinition,
    /// Its runs now queued (including waiting for a retry).
    pub queued: u64,
    /// Its runs now running.
    pub running: u64,
    /// Runs that finished in the last hour: [`StatsWindow::Hour`]'s span (60 whole minutes, the
    /// current one included), as on the statistics page.
    pub last_hour: Outcomes,
    /// Runs that finished in the last 24 hours: [`StatsWindow::Day`]'s span (24 whole hours).
    pub last_day: Outcomes,
    /// Where it runs: its endpoint, the live nodes defining it, and whether anything serves it.
    pub placement: super::endpoints::JobPlacement,
    /// A scheduled job's schedule and next run times; `null` for a job on an event.
    pub schedule: Option<JobSchedule>,
}

/// How many upcoming run times [`JobSchedule::next_runs`] lists.
pub const NEXT_RUNS: usize = 3;

/// A scheduled job's schedule as the jobs list shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSchedule {
    /// The cron expression (cron schedules).
    pub cron: Option<String>,
    /// The cron expression's IANA time zone (cron schedules).
    pub timezone: Option<String>,
    /// The interval in seconds (interval schedules).
    pub interval_seconds: Option<f64>,
    /// A short description: `cron 0 9 * * 1-5 (Europe/Paris)`, `every 5 min`.
    pub description: String,
    /// The next run times, the first being the tick the scheduler fires next.
    pub next_runs: Vec<DateTime<Utc>>,
    /// The last tick fired.
    pub last_run: Option<DateTime<Utc>>,
}

impl JobSchedule {
    /// What the jobs list shows of a stored schedule.
    pub fn new(state: &super::ScheduleState) -> Self {
        use crate::schedule::Schedule;
        let t = crate::model::ms_to_time;
        let mut next_runs = vec![t(state.next_tick)];
        let mut tick = state.next_tick;
        while next_runs.len() < NEXT_RUNS {
            match state.schedule.next_after(tick) {
                Some(next) => {
                    next_runs.push(t(next));
                    tick = next;
                }
                None => break,
            }
        }
        let (cron, timezone, interval_seconds) = match &state.schedule {
            Schedule::Cron { expr, tz } => (Some(expr.clone()), Some(tz.clone()), None),
            Schedule::Interval(every) => (None, None, Some(every.as_secs_f64())),
        };
        JobSchedule {
            cron,
            timezone,
            interval_seconds,
            description: state.schedule.describe(),
            next_runs,
            last_run: state.last_tick.map(t),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ms_to_time;

    #[test]
    fn cursors_round_trip_and_reject_garbage() {
        let c = Cursor::after(12345);
        let text = c.to_string();
        assert!(!text.contains("12345"), "{text} should be opaque");
        assert_eq!(text.parse::<Cursor>(), Ok(c));
        for bad in ["", "12345", "!!", "djE6", "djE6LTE", "eDox"] {
            assert_eq!(bad.parse::<Cursor>(), Err(InvalidCursor), "{bad:?}");
        }
    }

    fn event(delivered: bool, cancelled: bool) -> StoredEvent {
        StoredEvent {
            id: "e".into(),
            name: "a.b".into(),
            payload: Value::Null,
            context: None,
            source: "api".into(),
            timestamp: ms_to_time(0),
            deliver_at: None,
            delivered_at: delivered.then(|| ms_to_time(0)),
            cancelled_at: cancelled.then(|| ms_to_time(0)),
            parent_run_id: None,
            run_ids: Vec::new(),
        }
    }

    fn counts(pairs: &[(RunStatus, u64)]) -> RunCounts {
        let mut c = RunCounts::default();
        for (s, n) in pairs {
            c.add(*s, *n);
        }
        c
    }

    #[test]
    fn event_status_follows_the_documented_order() {
        use RunStatus::*;
        let none = RunCounts::default();
        assert_eq!(
            EventStatus::of(&event(false, true), &none),
            EventStatus::Cancelled
        );
        assert_eq!(
            EventStatus::of(&event(false, false), &none),
            EventStatus::Scheduled
        );
        assert_eq!(
            EventStatus::of(&event(true, false), &none),
            EventStatus::NoRuns
        );
        let delivered = event(true, false);
        let cases = [
            (vec![(Queued, 1), (Failed, 1)], EventStatus::Running),
            (vec![(Running, 1), (Succeeded, 1)], EventStatus::Running),
            (vec![(Failed, 1), (Succeeded, 3)], EventStatus::Failed),
            (vec![(Succeeded, 2), (Cancelled, 1)], EventStatus::Succeeded),
            (vec![(Cancelled, 2)], EventStatus::Cancelled),
        ];
        for (pairs, want) in cases {
            assert_eq!(
                EventStatus::of(&delivered, &counts(&pairs)),
                want,
                "{pairs:?}"
            );
        }
        for s in EventStatus::ALL {
            assert_eq!(EventStatus::parse(s.as_str()), Some(s));
        }
    }

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
