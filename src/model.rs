//! The nouns Flare stores: events, runs and their log lines, with the rules on event names and
//! delays. Field names serialize in camelCase, as in the seed.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Longest delay an event may be scheduled with.
pub const MAX_DELAY: Duration = Duration::from_secs(365 * 24 * 3600);

/// Longest event name, in bytes.
pub const MAX_EVENT_NAME_LEN: usize = 200;

/// Why an event name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid event name {name:?}: {reason}")]
pub struct InvalidEventName {
    /// The refused name (truncated to 64 bytes).
    pub name: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Checks an event name: 1–200 bytes of lowercase ASCII letters, digits, `_` and `-`, in
/// dot-separated, non-empty segments (`user.created`, `stripe.invoice.payment_failed`).
pub fn validate_event_name(name: &str) -> Result<(), InvalidEventName> {
    let fail = |reason| {
        let mut shown: String = name.chars().take(64).collect();
        if shown.len() < name.len() {
            shown.push('…');
        }
        Err(InvalidEventName {
            name: shown,
            reason,
        })
    };
    if name.is_empty() {
        return fail("it is empty");
    }
    if name.len() > MAX_EVENT_NAME_LEN {
        return fail("it is longer than 200 bytes");
    }
    for segment in name.split('.') {
        if segment.is_empty() {
            return fail("it has an empty segment (names look like `entity.action`)");
        }
        if !segment
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
        {
            return fail("only lowercase ASCII letters, digits, `_`, `-` and `.` are allowed");
        }
    }
    Ok(())
}

/// How long to wait before delivering an event. Units combine: `Delay::hours(1) + Delay::minutes(30)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Delay(Duration);

impl Delay {
    /// A delay of `n` seconds.
    pub fn seconds(n: u64) -> Self {
        Self(Duration::from_secs(n))
    }
    /// A delay of `n` minutes.
    pub fn minutes(n: u64) -> Self {
        Self(Duration::from_secs(n.saturating_mul(60)))
    }
    /// A delay of `n` hours.
    pub fn hours(n: u64) -> Self {
        Self(Duration::from_secs(n.saturating_mul(3600)))
    }
    /// A delay of `n` days.
    pub fn days(n: u64) -> Self {
        Self(Duration::from_secs(n.saturating_mul(86_400)))
    }
    /// The delay as a [`Duration`].
    pub fn as_duration(self) -> Duration {
        self.0
    }

    /// Parses a human delay such as `90s`, `15m`, `2h`, `1d` or `1h30m`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("empty delay".into());
        }
        let mut total = Duration::ZERO;
        let mut digits = String::new();
        for c in text.chars() {
            if c.is_ascii_digit() {
                digits.push(c);
                continue;
            }
            let n: u64 = digits
                .parse()
                .map_err(|_| format!("invalid delay {text:?}: expected a number before '{c}'"))?;
            digits.clear();
            // Saturating: a huge delay is refused by the 365-day limit instead of overflowing.
            total = total.saturating_add(match c {
                's' => Duration::from_secs(n),
                'm' => Duration::from_secs(n.saturating_mul(60)),
                'h' => Duration::from_secs(n.saturating_mul(3600)),
                'd' => Duration::from_secs(n.saturating_mul(86_400)),
                _ => {
                    return Err(format!(
                        "invalid delay {text:?}: unknown unit '{c}' (use s, m, h or d)"
                    ))
                }
            });
        }
        if !digits.is_empty() {
            return Err(format!(
                "invalid delay {text:?}: missing unit after {digits} (use s, m, h or d)"
            ));
        }
        Ok(Self(total))
    }
}

impl std::ops::Add for Delay {
    type Output = Delay;
    fn add(self, rhs: Delay) -> Delay {
        Delay(self.0.saturating_add(rhs.0))
    }
}

impl From<Duration> for Delay {
    fn from(d: Duration) -> Self {
        Self(d)
    }
}

/// Where an event came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Sent from Rust with [`crate::Client::send_event`].
    Api,
    /// Sent over HTTP (`POST /trigger` and the compatible ingest routes).
    Http,
    /// A verified webhook from the named provider (`payments`, `auth`).
    Webhook(String),
    /// Sent by a job run with `io.send_event`.
    Job(String),
    /// A replay of another event.
    Replay(String),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Api => f.write_str("api"),
            Source::Http => f.write_str("http"),
            Source::Webhook(p) => write!(f, "webhook:{p}"),
            Source::Job(run) => write!(f, "job:{run}"),
            Source::Replay(ev) => write!(f, "replay:{ev}"),
        }
    }
}

/// An event as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredEvent {
    /// Unique id (caller-supplied or generated).
    pub id: String,
    /// Event name, `entity.action`.
    pub name: String,
    /// The payload; `null` when absent.
    pub payload: Value,
    /// Optional caller context.
    pub context: Option<Value>,
    /// `api`, `http`, `webhook:payments`, `webhook:auth`, `job:<run id>`, `replay:<event id>`.
    pub source: String,
    /// When Flare received it.
    pub timestamp: DateTime<Utc>,
    /// When it is due, for a delayed event.
    pub deliver_at: Option<DateTime<Utc>>,
    /// When its runs were created.
    pub delivered_at: Option<DateTime<Utc>>,
    /// When it was cancelled, if it was.
    pub cancelled_at: Option<DateTime<Utc>>,
    /// The run that sent it, for chained events.
    pub parent_run_id: Option<String>,
    /// The runs it started (one per matching job).
    pub run_ids: Vec<String>,
}

/// The state of a run. See `ARCHITECTURE.md` for the diagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Waiting to be claimed (at or after `runAt`).
    Queued,
    /// Claimed by a worker holding a lease.
    Running,
    /// Finished with an output.
    Succeeded,
    /// Finished with an error and no attempts left, or an invalid payload.
    Failed,
    /// Cancelled before it ran.
    Cancelled,
}

impl RunStatus {
    /// All states, in lifecycle order.
    pub const ALL: [RunStatus; 5] = [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Succeeded,
        RunStatus::Failed,
        RunStatus::Cancelled,
    ];

    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// True for succeeded, failed and cancelled.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Succeeded | RunStatus::Failed | RunStatus::Cancelled
        )
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One execution of one job for one event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Run {
    /// Run id.
    pub id: String,
    /// The event that started it.
    pub event_id: String,
    /// The job it runs.
    pub job_id: String,
    /// The job version it was created for.
    pub job_version: String,
    /// Current state.
    pub status: RunStatus,
    /// Attempts started so far.
    pub attempt: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// When it may next be claimed.
    pub run_at: DateTime<Utc>,
    /// When the latest attempt started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it reached a final state.
    pub finished_at: Option<DateTime<Utc>>,
    /// The job's result, on success.
    pub output: Option<Value>,
    /// The latest error.
    pub error: Option<String>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// The node (process) that claimed its latest attempt; `None` until claimed.
    pub node: Option<String>,
}

/// The severity of a log line written by a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Detail.
    Debug,
    /// Normal progress.
    Info,
    /// Something odd.
    Warn,
    /// Something failed.
    Error,
}

impl Level {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        }
    }
    /// Parses the stored spelling.
    pub fn parse(s: &str) -> Option<Self> {
        [Level::Debug, Level::Info, Level::Warn, Level::Error]
            .into_iter()
            .find(|l| l.as_str() == s)
    }
}

/// A log line written by a run through `io.logger`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogLine {
    /// Which attempt wrote it.
    pub attempt: u32,
    /// Severity.
    pub level: Level,
    /// The message.
    pub message: String,
    /// Optional structured fields.
    pub fields: Option<Value>,
    /// When it was written.
    pub at: DateTime<Utc>,
}

/// One attempt of a run, for the timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Attempt {
    /// Attempt number, from 1.
    pub attempt: u32,
    /// How it ended: `succeeded`, `failed`, `retrying`, `lost`, `released` or `waiting` (it reached
    /// an `io.wait` not yet due; not counted as an attempt).
    pub outcome: String,
    /// When it started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it ended.
    pub finished_at: DateTime<Utc>,
    /// Its error, if any.
    pub error: Option<String>,
}

/// What a durable step of a run is (see [`crate::Io::run_task`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepKind {
    /// `io.run_task`: a closure whose result is stored.
    Task,
    /// `io.wait` / `io.wait_until`: the run sleeps until a due time, holding no worker.
    Wait,
    /// `io.send_event`: a chained event.
    Event,
}

impl StepKind {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            StepKind::Task => "task",
            StepKind::Wait => "wait",
            StepKind::Event => "event",
        }
    }
    /// Parses the stored spelling.
    pub fn parse(s: &str) -> Option<Self> {
        [StepKind::Task, StepKind::Wait, StepKind::Event]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

/// Where a step stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepStatus {
    /// Done: its output is stored and is returned instead of running it again.
    Succeeded,
    /// Its last try failed (it runs again in the run's next attempt).
    Failed,
    /// A wait whose due time has not been passed yet.
    Waiting,
}

impl StepStatus {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Succeeded => "succeeded",
            StepStatus::Failed => "failed",
            StepStatus::Waiting => "waiting",
        }
    }
    /// Parses the stored spelling.
    pub fn parse(s: &str) -> Option<Self> {
        [
            StepStatus::Succeeded,
            StepStatus::Failed,
            StepStatus::Waiting,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

/// One durable step of a run, as stored: unique by key within the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    /// The key the job gave it, unique within the run (`event:<n>` or `event:<id>` for a chained
    /// event).
    pub key: String,
    /// Task, wait or event.
    pub kind: StepKind,
    /// Succeeded, failed or waiting.
    pub status: StepStatus,
    /// The attempt of the run that last ran it.
    pub attempt: u32,
    /// When it last started.
    pub started_at: DateTime<Utc>,
    /// When it ended (succeeded or failed); `None` while a wait is pending.
    pub finished_at: Option<DateTime<Utc>>,
    /// `finished_at - started_at`, ms.
    pub duration_ms: Option<i64>,
    /// A wait's due time.
    pub wait_until: Option<DateTime<Utc>>,
    /// A task's stored result (a chained event's `{"eventId": …}`).
    pub output: Option<Value>,
    /// The error of a failed task.
    pub error: Option<String>,
}

/// Converts stored milliseconds to a UTC time.
pub fn ms_to_time(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names_follow_the_dot_rule() {
        for ok in [
            "user.created",
            "stripe.invoice.payment_failed",
            "a",
            "x-1.y_2",
            "reminder.send",
        ] {
            assert!(validate_event_name(ok).is_ok(), "{ok} should be valid");
        }
        for bad in [
            "",
            "User.created",
            "user..created",
            ".user",
            "user.",
            "user created",
            "usér.x",
            "a/b",
        ] {
            assert!(
                validate_event_name(bad).is_err(),
                "{bad:?} should be invalid"
            );
        }
        assert!(validate_event_name(&"a".repeat(200)).is_ok());
        let long = validate_event_name(&"a".repeat(201)).unwrap_err();
        assert!(long.to_string().contains("200 bytes"), "{long}");
    }

    #[test]
    fn delays_combine_and_parse() {
        assert_eq!(Delay::hours(1) + Delay::minutes(30), Delay::minutes(90));
        assert_eq!(Delay::days(1), Delay::hours(24));
        assert_eq!(Delay::parse("1h30m"), Ok(Delay::minutes(90)));
        assert_eq!(Delay::parse("45s"), Ok(Delay::seconds(45)));
        assert_eq!(Delay::parse("2d"), Ok(Delay::days(2)));
        assert!(Delay::parse("2").unwrap_err().contains("missing unit"));
        assert!(Delay::parse("2w").unwrap_err().contains("unknown unit"));
        assert!(Delay::parse("h").is_err());
    }

    /// Found by `tests/ingest/trigger_fuzz.rs`: units that add up past `Duration::MAX` panicked
    /// ("overflow when adding durations") instead of being refused by the 365-day limit.
    #[test]
    fn huge_delays_saturate_instead_of_overflowing() {
        let max = Delay::from(Duration::MAX);
        assert_eq!(Delay::parse("18446744073709551615s1s"), Ok(max));
        assert_eq!(
            Delay::parse("99999999999999999d99999999999999999d"),
            Ok(max)
        );
    }

    #[test]
    fn sources_spell_as_the_spec_says() {
        assert_eq!(
            Source::Webhook("payments".into()).to_string(),
            "webhook:payments"
        );
        assert_eq!(Source::Job("r1".into()).to_string(), "job:r1");
        assert_eq!(Source::Replay("e1".into()).to_string(), "replay:e1");
        assert_eq!(RunStatus::parse("queued"), Some(RunStatus::Queued));
        assert_eq!(RunStatus::parse("nope"), None);
    }
}
