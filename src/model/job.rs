//! A job as every layer sees it: its stored definition ([`JobSpec`]), why a definition is
//! refused ([`InvalidJob`]), and the error a job's body returns ([`JobError`]). The builder that
//! makes a `JobSpec` from Rust code is `crate::job::Job`.

use std::fmt;
use std::time::Duration;

use serde_json::Value;

use super::cel::EventFields;
use super::debounce::DebounceWindow;
use super::event::InvalidEventName;
use super::flow::{Concurrency, RunSlots};
use super::priority::Priority;
use super::rate::RateLimit;
use super::retry::RetryPolicy;
use super::throttle::Throttle;
use crate::filter::{Filter, InvalidFilter};
use crate::schedule::{InvalidSchedule, Schedule};

/// A validated job definition without its body: what is stored and what fan-out matches against.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    /// Job id.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Semver version.
    pub version: String,
    /// The event name it listens for.
    pub event: String,
    /// Its payload filter.
    pub filter: Option<Filter>,
    /// Its schedule: the job then listens for `schedule.<id>`, which the scheduler sends at each
    /// tick. `None` for an event trigger (and in definitions read back from the job table: the
    /// schedule itself is kept in the `schedules` table).
    pub schedule: Option<Schedule>,
    /// Its retry policy.
    pub retry: RetryPolicy,
    /// Per-attempt timeout.
    pub timeout: Duration,
    /// Its concurrency limits, across every process sharing the store (see
    /// [`super::flow`]).
    pub concurrency: Concurrency,
    /// Its rate limit: runs created per period per key (see [`super::rate`]).
    pub rate_limit: Option<RateLimit>,
    /// Its throttle: run starts per period per key (see [`super::throttle`]).
    pub throttle: Option<Throttle>,
    /// How long a run may wait to start after it became due; then it is cancelled ("expired
    /// before it started").
    pub start_timeout: Option<Duration>,
    /// Its debounce: one run per burst of events per key (see [`super::debounce`]).
    pub debounce: Option<DebounceWindow>,
    /// Its priority: seconds earlier than due its runs are taken (see [`super::priority`]).
    pub priority: Option<Priority>,
    /// The events that cancel its queued, running and waiting runs (see [`super::cancel`]).
    pub cancel_on: Vec<super::cancel::CancelOn>,
}

impl JobSpec {
    /// Whether its runs take slots (concurrency limits or a throttle): claimed through them.
    pub fn has_flow(&self) -> bool {
        !self.concurrency.is_empty() || self.throttle.is_some()
    }

    /// Whether queueing a run of this job reads its event's payload: the keys of its slots,
    /// rate limit or debounce, its priority, or its cancel-on matches.
    pub fn queues_by_payload(&self) -> bool {
        self.has_flow()
            || self.rate_limit.is_some()
            || self.debounce.is_some()
            || self.priority.is_some()
            || !self.cancel_on.is_empty()
    }

    /// The slots a run of this job takes for `event` (see `model::flow`).
    pub fn run_slots(&self, event: &EventFields<'_>) -> Option<RunSlots> {
        self.concurrency
            .slots_with(&self.id, self.throttle.as_ref(), event)
    }

    /// The second slot of its runs, checked for room before the first.
    pub fn second_slot(&self) -> Option<String> {
        self.concurrency
            .second_slot_with(&self.id, self.throttle.as_ref())
            .map(|(s, _)| s)
    }

    /// True when an event with this name and payload should start this job.
    pub fn matches(&self, name: &str, payload: &Value) -> bool {
        self.event == name && self.filter.as_ref().is_none_or(|f| f.matches(payload))
    }
}

/// Why a job definition was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InvalidJob {
    /// The id is not a slug.
    #[error("invalid job id {0:?}: use 1-100 lowercase letters, digits and '-'")]
    Id(String),
    /// The version is not `MAJOR.MINOR.PATCH`.
    #[error(
        "job {job}: invalid version {version:?}: expected semver MAJOR.MINOR.PATCH ({reason})"
    )]
    Version {
        /// The job.
        job: String,
        /// The refused version.
        version: String,
        /// The parser's reason.
        reason: String,
    },
    /// No `.trigger(..)`.
    #[error("job {0}: no trigger; add .trigger(event_trigger(\"entity.action\"))")]
    NoTrigger(String),
    /// No `.run(..)`.
    #[error("job {0}: no run function; add .run(|payload, io| async move {{ .. }})")]
    NoRun(String),
    /// The trigger's schedule (cron expression, time zone, interval) is invalid.
    #[error("job {job}: {source}")]
    Schedule {
        /// The job.
        job: String,
        /// The schedule problem.
        source: InvalidSchedule,
    },
    /// The trigger's event name is invalid.
    #[error("job {job}: {source}")]
    EventName {
        /// The job.
        job: String,
        /// The name problem.
        source: InvalidEventName,
    },
    /// The trigger's filter is invalid.
    #[error("job {job}: {source}")]
    Filter {
        /// The job.
        job: String,
        /// The filter problem.
        source: InvalidFilter,
    },
    /// The retry policy, timeout or concurrency is out of bounds.
    #[error("job {job}: {reason}")]
    Options {
        /// The job.
        job: String,
        /// What is wrong.
        reason: String,
    },
}

/// The error a job's `run` returns. Any error converts into it with `?`; [`JobError::fatal`] marks
/// one that must not be retried.
pub struct JobError {
    message: String,
    retryable: bool,
}

impl JobError {
    /// An error that skips the remaining attempts.
    pub fn fatal(message: impl fmt::Display) -> Self {
        Self {
            message: message.to_string(),
            retryable: false,
        }
    }
    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
    /// Whether another attempt may be made.
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }
}

impl<E: Into<Box<dyn std::error::Error + Send + Sync>>> From<E> for JobError {
    fn from(err: E) -> Self {
        let err = err.into();
        let mut message = err.to_string();
        let mut source = err.source();
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        Self {
            message,
            retryable: true,
        }
    }
}

impl fmt::Debug for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobError")
            .field("message", &self.message)
            .field("retryable", &self.retryable)
            .finish()
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}
