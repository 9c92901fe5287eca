//! Runs in the store: claiming ([`ClaimParams`] → [`ClaimedRun`]), leases ([`Lease`]), the end
//! of an attempt ([`Completion`], [`Finish`]), bulk actions, a run with its log, attempts and steps
//! ([`RunDetail`]), the list query ([`RunQuery`], [`RunSummary`]) and counts by state
//! ([`RunCounts`]).

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use super::page::{Cursor, DEFAULT_LIMIT};
use crate::model::{Attempt, LogLine, Run, RunStatus, Step};

/// Claim up to `limit` runnable runs of the listed jobs.
#[derive(Debug, Clone)]
pub struct ClaimGroup {
    /// Job ids.
    pub jobs: Vec<String>,
    /// At most this many.
    pub limit: usize,
    /// For a job with concurrency limits (then `jobs` holds that job alone): its runs are
    /// claimed through their slots, only from slots with room. `None`: runs without slots.
    pub flow: Option<FlowGroup>,
}

/// The claim of a limited job's runs (see `model::flow`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowGroup {
    /// The job's second slot (`job:<job>` or `group:<name>`), checked for room first.
    pub second_slot: Option<String>,
}

/// Parameters of a claim.
#[derive(Debug, Clone)]
pub struct ClaimParams {
    /// Now, ms.
    pub now: i64,
    /// Lease expiry for the claimed runs, ms.
    pub lease_until: i64,
    /// The claiming process (engine node id), recorded on each run so operators see which node
    /// ran it.
    pub node: Option<String>,
    /// What to claim: the groups in order, each at most its own limit, and all of them together
    /// at most the largest limit (the claiming process's free room; the worker gives every group
    /// that same limit and rotates their order between claims).
    pub groups: Vec<ClaimGroup>,
}

/// A claimed run, ready to execute.
#[derive(Debug, Clone)]
pub struct ClaimedRun {
    /// Run id.
    pub id: String,
    /// Its event.
    pub event_id: String,
    /// The event's name.
    pub event_name: String,
    /// Job id.
    pub job_id: String,
    /// This attempt's number (from 1).
    pub attempt: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// The fencing token: completions must present it.
    pub token: i64,
    /// The event payload.
    pub payload: Value,
    /// When this attempt started, ms.
    pub started_at: i64,
}

/// How an attempt ended.
#[derive(Debug, Clone)]
pub enum Finish {
    /// Succeeded with an output.
    Succeeded(Value),
    /// Failed; try again at `at` (ms).
    Retry {
        /// Error message.
        error: String,
        /// Next attempt time, ms.
        at: i64,
    },
    /// Failed for good.
    Failed(String),
    /// Suspended by `io.wait`: the wait step `key` is recorded (due at `until`, called at
    /// `since`) and the run goes back to the queue due at `until`, the attempt not counted.
    Wait {
        /// The wait step's key.
        key: String,
        /// Due time, ms: the run's next `run_at`.
        until: i64,
        /// When the job called `wait`, ms.
        since: i64,
        /// `io.wait_for_event`: the event waited for (stored with the run, looked up by each
        /// insert of an event of that name); `until` is then the timeout.
        event: Option<crate::model::EventWait>,
    },
}

/// The end of one attempt, fenced by its lease token.
#[derive(Debug, Clone)]
pub struct Completion {
    /// Run id.
    pub run_id: String,
    /// The run's job (as claimed): the per-minute outcome counts are kept by job.
    pub job_id: String,
    /// The lease token the attempt was claimed with.
    pub token: i64,
    /// Attempt number.
    pub attempt: u32,
    /// When the attempt started, ms.
    pub started_at: i64,
    /// When it ended, ms.
    pub finished_at: i64,
    /// Outcome.
    pub finish: Finish,
    /// Log lines it wrote.
    pub logs: Vec<LogLine>,
}

/// A run holding a lease: id and fencing token.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Lease {
    /// Run id.
    pub run_id: String,
    /// Token.
    pub token: i64,
}

/// A run with its log and attempts.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunDetail {
    /// The run.
    #[serde(flatten)]
    pub run: Run,
    /// Its log lines, oldest first.
    pub logs: Vec<LogLine>,
    /// Finished attempts, oldest first.
    pub attempts: Vec<Attempt>,
    /// Its durable steps (`io.run_task`, `io.wait`, chained `io.send_event`), in the order they
    /// first started.
    pub steps: Vec<Step>,
    /// The durable wait the run is in (`io.wait_for_event`, `io.invoke`, `io.callback`): what
    /// it waits for, until when; `null` else.
    pub wait: Option<PendingWait>,
    /// What holds a queued run back, if a limit does: `concurrency: 2 of 2 running for key
    /// cus_1`, `throttled until 2024-05-01T12:00:01Z`, `debounced: starts at 12:00:05 unless
    /// another event comes`.
    pub waiting_for: Option<String>,
    /// The event that cancelled it (its job's `cancel_on`), while it is cancelled so.
    pub cancelled_by: Option<super::links::CancelledBy>,
    /// The run that invoked it (`io.invoke`), if one did.
    pub parent_run_id: Option<String>,
    /// The runs it invoked, with their states, in the order they were invoked.
    pub children: Vec<super::links::LinkedRun>,
}

impl RunDetail {
    /// Shows `wait` as what the run waits for, while the run is queued or running (a finished
    /// run's wait is not shown: a cancel drops its wait rows, and an ended wait has none).
    pub(crate) fn with_wait(mut self, wait: Option<PendingWait>) -> Self {
        if matches!(self.run.status, RunStatus::Queued | RunStatus::Running) {
            self.wait = wait;
        }
        self
    }
}

/// A wait for an event still pending, as shown with its run.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingWait {
    /// The wait step's key.
    pub step_key: String,
    /// The event name waited for.
    pub event: String,
    /// The match path (`payload.invoiceId`), if any.
    #[serde(rename = "match")]
    pub match_path: Option<String>,
    /// The run's own value there, which the incoming event must equal.
    pub match_value: Option<String>,
    /// The CEL condition, if any.
    pub condition: Option<String>,
    /// When the run reached the wait.
    pub since: DateTime<Utc>,
    /// The deadline: the wait ends with nothing then.
    pub until: DateTime<Utc>,
    /// For a callback (`io.callback`): the path a `POST` of JSON resumes the run at, after the
    /// server's address (`/callbacks/<token>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callback_url: Option<String>,
}

impl PendingWait {
    /// From the stored columns (an empty path is no match).
    pub(crate) fn from_row(
        step_key: String,
        event: String,
        match_path: String,
        match_value: String,
        condition: Option<String>,
        since: i64,
        until: i64,
    ) -> Self {
        let matched = !match_path.is_empty();
        let callback_url = (event == crate::model::wait::CALLBACK_EVENT && matched)
            .then(|| format!("/callbacks/{match_value}"));
        Self {
            step_key,
            event,
            match_path: matched.then_some(match_path),
            match_value: matched.then_some(match_value),
            condition,
            since: crate::model::ms_to_time(since),
            until: crate::model::ms_to_time(until),
            callback_url,
        }
    }
}

/// A slot of a queued run as stored (`model::flow`): name, capacity, runs executing, and for a
/// throttled one when its next start is allowed (ms).
#[derive(Debug, Clone)]
pub(crate) struct SlotState {
    pub(crate) slot: String,
    pub(crate) cap: i64,
    pub(crate) running: i64,
    pub(crate) next_start: Option<i64>,
}

/// What holds back queued run `run` whose slots are `a` and `b`: a full slot (the first, then
/// the second), or a throttle whose next start is after the run became due. Both backends.
pub(crate) fn waiting_for(
    run: &Run,
    a: Option<&SlotState>,
    b: Option<&SlotState>,
) -> Option<String> {
    if run.status != RunStatus::Queued {
        return None;
    }
    let whose = |slot: &str| -> String {
        if let Some(rest) = slot.strip_prefix("key:") {
            let value = rest.split_once(':').map_or(rest, |(_, v)| v);
            format!("for key {value}")
        } else if let Some(g) = slot.strip_prefix("group:") {
            format!("in group {g}")
        } else {
            format!("for job {}", slot.trim_start_matches("job:"))
        }
    };
    for s in [a, b].into_iter().flatten() {
        if s.running >= s.cap {
            return Some(format!(
                "concurrency: {} of {} running {}",
                s.running,
                s.cap,
                whose(&s.slot)
            ));
        }
    }
    let at = a?.next_start?;
    (at > run.run_at.timestamp_millis()).then(|| {
        format!(
            "throttled until {}",
            crate::model::ms_to_time(at).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        )
    })
}

/// What holds back queued run `run`, the run of an open debounce window: its start (UTC, the
/// time of day, with the date when it is not the day the run was created).
pub(crate) fn debounced(run: &Run) -> Option<String> {
    if run.status != RunStatus::Queued {
        return None;
    }
    let format = if run.run_at.date_naive() == run.created_at.date_naive() {
        "%H:%M:%S"
    } else {
        "%Y-%m-%d %H:%M:%S"
    };
    Some(format!(
        "debounced: starts at {} unless another event comes",
        run.run_at.format(format)
    ))
}

/// The reason a queued run shows, of those its slots (`flow`, see [`waiting_for`]) and its
/// debounce window ([`debounced`]) give: a full slot, then the window, then a throttle.
pub(crate) fn held_by(flow: Option<String>, debounce: Option<String>) -> Option<String> {
    match flow {
        Some(full) if full.starts_with("concurrency:") => Some(full),
        flow => debounce.or(flow),
    }
}

impl RunDetail {
    /// The run's detail from its stored attempts. A succeeded run's last attempt is not stored
    /// as a row of its own: the run row already holds all of it (number, start, end, no error),
    /// and leaving it out spares the hot path one insert per run. It is added back here, unless
    /// an older version of Flare stored it.
    pub(crate) fn new(
        run: Run,
        logs: Vec<LogLine>,
        mut attempts: Vec<Attempt>,
        steps: Vec<Step>,
    ) -> Self {
        let succeeded = RunStatus::Succeeded.as_str();
        if let (RunStatus::Succeeded, Some(finished_at)) = (run.status, run.finished_at) {
            // Matched on the outcome too: an attempt released at shutdown keeps its number, and
            // the attempt that ran again after it has the same one.
            if !attempts
                .iter()
                .any(|a| a.attempt == run.attempt && a.outcome == succeeded)
            {
                attempts.push(Attempt {
                    attempt: run.attempt,
                    outcome: succeeded.to_string(),
                    started_at: run.started_at,
                    finished_at,
                    error: None,
                });
            }
        }
        RunDetail {
            run,
            logs,
            attempts,
            steps,
            wait: None,
            waiting_for: None,
            cancelled_by: None,
            parent_run_id: None,
            children: Vec::new(),
        }
    }
}

/// What a bulk action does to each run it selects (see [`crate::store::Store::runs_bulk`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkRunAction {
    /// Cancel queued or running runs.
    Cancel,
    /// Queue failed or cancelled runs again.
    Retry,
}

/// Runs changed in one transaction of a bulk action.
pub const BULK_CHUNK: usize = 500;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ms_to_time;

    fn run(status: RunStatus, attempt: u32) -> Run {
        Run {
            id: "run_1".into(),
            event_id: "evt_1".into(),
            job_id: "job".into(),
            job_version: "1".into(),
            status,
            attempt,
            max_attempts: 3,
            run_at: ms_to_time(1_000),
            started_at: Some(ms_to_time(2_000)),
            finished_at: (status != RunStatus::Queued).then(|| ms_to_time(3_000)),
            output: None,
            error: None,
            created_at: ms_to_time(1_000),
            node: None,
        }
    }

    fn attempt(n: u32, outcome: &str) -> Attempt {
        Attempt {
            attempt: n,
            outcome: outcome.into(),
            started_at: Some(ms_to_time(500)),
            finished_at: ms_to_time(900),
            error: Some("boom".into()),
        }
    }

    #[test]
    fn a_succeeded_run_gets_its_last_attempt_from_the_run_row() {
        let d = RunDetail::new(
            run(RunStatus::Succeeded, 2),
            vec![],
            vec![attempt(1, "retrying")],
            vec![],
        );
        let outcomes: Vec<_> = d.attempts.iter().map(|a| a.outcome.as_str()).collect();
        assert_eq!(outcomes, ["retrying", "succeeded"]);
        let last = &d.attempts[1];
        assert_eq!(last.attempt, 2);
        assert_eq!(last.started_at, Some(ms_to_time(2_000)));
        assert_eq!(last.finished_at, ms_to_time(3_000));
        assert_eq!(last.error, None);
    }

    #[test]
    fn a_stored_success_row_is_not_doubled_and_other_states_add_nothing() {
        let old = RunDetail::new(
            run(RunStatus::Succeeded, 1),
            vec![],
            vec![attempt(1, "succeeded")],
            vec![],
        );
        assert_eq!(old.attempts.len(), 1);
        let after_release = RunDetail::new(
            run(RunStatus::Succeeded, 1),
            vec![],
            vec![attempt(1, "released")],
            vec![],
        );
        let outcomes: Vec<_> = after_release
            .attempts
            .iter()
            .map(|a| a.outcome.as_str())
            .collect();
        assert_eq!(outcomes, ["released", "succeeded"]);
        let failed = RunDetail::new(
            run(RunStatus::Failed, 1),
            vec![],
            vec![attempt(1, "failed")],
            vec![],
        );
        assert_eq!(failed.attempts.len(), 1);
        let queued = RunDetail::new(
            run(RunStatus::Queued, 1),
            vec![],
            vec![attempt(1, "retrying")],
            vec![],
        );
        assert_eq!(queued.attempts.len(), 1);
    }
}
