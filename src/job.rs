//! Job definitions: what runs when an event arrives. The builder checks a definition into the
//! stored `JobSpec` (a noun, `crate::model`) and the engine's `Handler`; it knows no HTTP.
//!
//! ```no_run
//! use flare::{event_trigger, Io, Job};
//! #[derive(serde::Deserialize)]
//! struct UserCreated { email: String }
//!
//! let job = Job::new("send-welcome-email", "Send welcome email", "1.0.0")
//!     .trigger(event_trigger("user.created"))
//!     .run(|payload: UserCreated, io: Io| async move {
//!         io.logger.info(format!("welcome {}", payload.email));
//!         Ok(serde_json::json!({ "sent": true }))
//!     });
//! ```

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::engine::execution::{BoxFuture, Execution, Handler};
use crate::filter::Filter;
use crate::io::Io;
use crate::model::validate_event_name;
use crate::model::Debounce;
use crate::model::Priority;
use crate::model::{CancelOn, Concurrency, ConcurrencyLimit, RateLimitSpec, ThrottleSpec};
pub use crate::model::{Event, InvalidJob, JobError, JobSpec, RetryPolicy};
pub use crate::schedule::{InvalidSchedule, Schedule};
use crate::store::ended::RunFailure;

/// What starts a job: an event (optionally narrowed by a payload filter), or a schedule (a cron
/// expression in a time zone, or an interval).
#[derive(Debug, Clone)]
pub struct Trigger {
    pub(crate) event: String,
    pub(crate) filter: Option<Value>,
    pub(crate) schedule: Option<ScheduleDraft>,
}

/// A schedule as written, checked when the job is defined.
#[derive(Debug, Clone)]
pub(crate) enum ScheduleDraft {
    Cron { expr: String, tz: Option<String> },
    Interval(Duration),
    Checked(Schedule),
}

/// A trigger on the event `name`.
pub fn event_trigger(name: impl Into<String>) -> Trigger {
    Trigger {
        event: name.into(),
        filter: None,
        schedule: None,
    }
}

/// A trigger on a cron expression (5 fields, `minute hour day-of-month month day-of-week`, or 6
/// with seconds first), in UTC unless [`Trigger::tz`] names a zone. `cron_trigger("0 9 * * 1-5")`
/// runs the job at 09:00 on weekdays. The expression is checked when the job is defined.
///
/// Each tick inserts one event named `schedule.<job id>` (source `schedule`, payload
/// `{"ts": <tick>, "lastTimestamp": <previous tick or null>}`), so its runs retry and show like
/// any other. See [`Schedule`] for what happens after downtime.
pub fn cron_trigger(expr: impl Into<String>) -> Trigger {
    Trigger {
        event: String::new(),
        filter: None,
        schedule: Some(ScheduleDraft::Cron {
            expr: expr.into(),
            tz: None,
        }),
    }
}

/// A trigger every `every` (at least one second), counted from when the job is first defined.
pub fn interval_trigger(every: Duration) -> Trigger {
    Trigger {
        event: String::new(),
        filter: None,
        schedule: Some(ScheduleDraft::Interval(every)),
    }
}

/// A trigger on a schedule already checked ([`Schedule::cron`], [`Schedule::interval`]), e.g.
/// read from another SDK's job definition.
pub fn schedule_trigger(schedule: Schedule) -> Trigger {
    Trigger {
        event: String::new(),
        filter: None,
        schedule: Some(ScheduleDraft::Checked(schedule)),
    }
}

impl Trigger {
    /// Only start the job for payloads that match `filter` (see [`crate::Filter`]). Event
    /// triggers only: a scheduled job with a filter is refused.
    pub fn filter(mut self, filter: Value) -> Self {
        self.filter = Some(filter);
        self
    }
    /// The IANA time zone a cron trigger's expression is read in (`Europe/Paris`); UTC by
    /// default. Daylight saving is followed: `0 9 * * *` in `Europe/Paris` is 08:00 UTC in
    /// winter and 07:00 UTC in summer.
    pub fn tz(mut self, zone: impl Into<String>) -> Self {
        if let Some(ScheduleDraft::Cron { tz, .. }) = &mut self.schedule {
            *tz = Some(zone.into());
        }
        self
    }
    /// The event name.
    pub fn event(&self) -> &str {
        &self.event
    }
}

/// A job definition. Build it with [`Job::new`], then [`Job::trigger`] and [`Job::run`].
#[derive(Clone)]
pub struct Job {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) trigger: Option<Trigger>,
    pub(crate) handler: Option<Handler>,
    pub(crate) retry: RetryPolicy,
    pub(crate) timeout: Duration,
    pub(crate) concurrency: Vec<ConcurrencyLimit>,
    pub(crate) rate_limit: Option<RateLimitSpec>,
    pub(crate) throttle: Option<ThrottleSpec>,
    pub(crate) start_timeout: Option<Duration>,
    pub(crate) debounce: Option<Debounce>,
    pub(crate) priority: Option<String>,
    pub(crate) cancel_on: Vec<CancelOn>,
    /// The failure handler's job ([`Job::on_failure`]), defined with this one.
    pub(crate) on_failure: Option<Box<Job>>,
}

impl fmt::Debug for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Job")
            .field("id", &self.id)
            .field("version", &self.version)
            .field("trigger", &self.trigger)
            .finish_non_exhaustive()
    }
}

impl Job {
    /// A job with an id (a slug), a display name and a semver version.
    pub fn new(id: impl Into<String>, name: impl Into<String>, version: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            version: version.into(),
            trigger: None,
            handler: None,
            retry: RetryPolicy::default(),
            timeout: Duration::from_secs(300),
            concurrency: Vec::new(),
            rate_limit: None,
            throttle: None,
            start_timeout: None,
            debounce: None,
            priority: None,
            cancel_on: Vec::new(),
            on_failure: None,
        }
    }

    /// Starts the job when `trigger`'s event arrives.
    pub fn trigger(mut self, trigger: Trigger) -> Self {
        self.trigger = Some(trigger);
        self
    }

    /// The job's body. The payload is deserialized into `T`; a payload that does not fit fails
    /// the run at once, without retries.
    pub fn run<T, O, F, Fut>(mut self, f: F) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
        F: Fn(T, Io) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, JobError>> + Send + 'static,
    {
        let f = Arc::new(f);
        let job_id = self.id.clone();
        self.handler = Some(Arc::new(
            move |payload: Value, exec: Execution| -> BoxFuture {
                let f = Arc::clone(&f);
                let io = Io::new(exec);
                let job_id = job_id.clone();
                Box::pin(async move {
                    let payload: T = serde_json::from_value(payload).map_err(|e| {
                        JobError::fatal(format!("invalid payload for job '{job_id}': {e}"))
                    })?;
                    let out = f(payload, io).await?;
                    serde_json::to_value(out)
                        .map_err(|e| JobError::fatal(format!("job output is not JSON: {e}")))
                })
            },
        ));
        self
    }

    /// Triggers on `E::NAME` and runs `f` with a typed payload: the typed form of
    /// `.trigger(event_trigger(E::NAME)).run(f)`.
    pub fn on<E, O, F, Fut>(self, f: F) -> Self
    where
        E: Event,
        O: Serialize + Send + 'static,
        F: Fn(E, Io) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, JobError>> + Send + 'static,
    {
        self.trigger(event_trigger(E::NAME)).run(f)
    }

    /// The retry policy (default: 3 attempts, exponential backoff from 1 s with jitter).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// How long one attempt may take before it counts as failed (default 5 minutes).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// At most `n` runs of this job executing at once, across every process sharing the
    /// database (a run suspended in `io.wait` holds no slot). The same as
    /// `.concurrency_limit(ConcurrencyLimit::job(n))`.
    pub fn concurrency(self, n: u32) -> Self {
        self.concurrency_limit(ConcurrencyLimit::job(n))
    }

    /// Adds a concurrency limit: over the whole job ([`ConcurrencyLimit::job`]), per value of a
    /// CEL key over the event ([`ConcurrencyLimit::key`]) or shared by every job naming a group
    /// ([`ConcurrencyLimit::group`]). At most two, of different shapes; checked when the job is
    /// defined.
    pub fn concurrency_limit(mut self, limit: ConcurrencyLimit) -> Self {
        self.concurrency.push(limit);
        self
    }

    /// At most `limit` runs created per `period` (1 s to 7 days) per value of `key` (a CEL
    /// expression over `event`; `None`: the whole job). An event beyond it starts no run of
    /// this job and lists the job under its `skipped`. Checked when the job is defined.
    pub fn rate_limit(mut self, limit: u32, period: Duration, key: Option<&str>) -> Self {
        self.rate_limit = Some(RateLimitSpec {
            limit,
            period_ms: u64::try_from(period.as_millis()).unwrap_or(u64::MAX),
            key: key.map(str::to_string),
        });
        self
    }

    /// At most `limit` run starts per `period` (1 s to 7 days) per value of `key` (a CEL
    /// expression over `event`; `None`: the whole job), `burst` (from 1 to `limit`) at once after
    /// a quiet spell; the other runs wait queued, in order. Checked when the job is defined.
    pub fn throttle(mut self, limit: u32, period: Duration, key: Option<&str>, burst: u32) -> Self {
        self.throttle = Some(ThrottleSpec {
            limit,
            period_ms: u64::try_from(period.as_millis()).unwrap_or(u64::MAX),
            key: key.map(str::to_string),
            burst,
        });
        self
    }

    /// A run not started `timeout` after it became due (1 s to 7 days) is cancelled with the
    /// reason "expired before it started" (no attempt made; it can be retried).
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = Some(timeout);
        self
    }

    /// One run per burst of events: `Debounce::new(period).key("event.payload.id")
    /// .timeout(max)` starts the run `period` (1 s to 7 days) after the last event of a burst
    /// per value of the key, with that event's payload, never later than `max` after the first;
    /// the earlier events link to it. Checked when the job is defined.
    pub fn debounce(mut self, debounce: Debounce) -> Self {
        self.debounce = Some(debounce);
        self
    }

    /// The priority of its runs: a CEL expression over `event` giving seconds (−600 to 600,
    /// clamped; not a whole number: 0), evaluated when a run is created. Among due runs, one with
    /// priority `p` is taken as if it had become due `p` seconds earlier, never before it is due:
    /// `.priority("event.payload.plan == 'enterprise' ? 120 : 0")`. Checked when the job is
    /// defined.
    pub fn priority(mut self, run: &str) -> Self {
        self.priority = Some(run.to_string());
        self
    }

    /// Cancels the job's queued, running and waiting runs that `on`'s event matches (see
    /// [`CancelOn`]), recorded with a link to that event; cancelling a run cancels the runs it
    /// invoked. At most 10; checked when the job is defined (a malformed match or condition is
    /// refused, naming the field).
    ///
    /// ```no_run
    /// # use flare::{event_trigger, CancelOn, Io, Job};
    /// let job = Job::new("fulfil", "Fulfil", "1.0.0")
    ///     .trigger(event_trigger("order.placed"))
    ///     .cancel_on(CancelOn::event("order.cancelled").matching("payload.orderId"))
    ///     .run(|_p: serde_json::Value, _io: Io| async move { Ok(()) });
    /// ```
    pub fn cancel_on(mut self, on: CancelOn) -> Self {
        self.cancel_on.push(on);
        self
    }

    /// Runs `f` when a run of this job fails for good (its last attempt failed) — shorthand for
    /// a job `<id>-on-failure` triggered by `flare/run.failed` filtered on this job's id,
    /// defined together with this one. Call it after [`Job::new`]'s id and version are final.
    ///
    /// ```no_run
    /// # use flare::{event_trigger, Io, Job, RunFailure};
    /// let job = Job::new("charge", "Charge", "1.0.0")
    ///     .trigger(event_trigger("order.placed"))
    ///     .run(|_p: serde_json::Value, _io: Io| async move { Ok(()) })
    ///     .on_failure(|failed: RunFailure, io: Io| async move {
    ///         io.logger.error(format!("run {} failed: {:?}", failed.run_id, failed.error));
    ///         Ok(())
    ///     });
    /// ```
    pub fn on_failure<O, F, Fut>(mut self, f: F) -> Self
    where
        O: Serialize + Send + 'static,
        F: Fn(RunFailure, Io) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, JobError>> + Send + 'static,
    {
        let handler = Job::new(
            format!("{}-on-failure", self.id),
            format!("{} (on failure)", self.name),
            self.version.clone(),
        )
        .trigger(
            event_trigger(crate::store::ended::RUN_FAILED)
                .filter(serde_json::json!({ "jobId": [self.id] })),
        )
        .run(f);
        self.on_failure = Some(Box::new(handler));
        self
    }

    /// This job and its failure handler's job, if any, each to define.
    pub(crate) fn with_companions(mut self) -> Vec<Job> {
        let handler = self.on_failure.take();
        let mut jobs = vec![self];
        jobs.extend(handler.map(|h| *h));
        jobs
    }

    /// The job id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Checks the definition and turns it into what the engine registers.
    pub(crate) fn validate(self) -> Result<(JobSpec, Handler), InvalidJob> {
        let id = self.id.clone();
        let slug_ok = !id.is_empty()
            && id.len() <= 100
            && id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if !slug_ok {
            return Err(InvalidJob::Id(id));
        }
        let version = semver::Version::parse(&self.version).map_err(|e| InvalidJob::Version {
            job: id.clone(),
            version: self.version.clone(),
            reason: e.to_string(),
        })?;
        let trigger = self
            .trigger
            .ok_or_else(|| InvalidJob::NoTrigger(id.clone()))?;
        let handler = self.handler.ok_or_else(|| InvalidJob::NoRun(id.clone()))?;
        let schedule = match trigger.schedule {
            None => None,
            Some(draft) => {
                let bad = |source| InvalidJob::Schedule {
                    job: id.clone(),
                    source,
                };
                if trigger.filter.is_some() {
                    return Err(bad(InvalidSchedule::Filter));
                }
                Some(
                    match draft {
                        ScheduleDraft::Cron { expr, tz } => Schedule::cron(&expr, tz.as_deref()),
                        ScheduleDraft::Interval(every) => Schedule::interval(every),
                        ScheduleDraft::Checked(s) => Ok(s),
                    }
                    .map_err(bad)?,
                )
            }
        };
        let event = match schedule {
            Some(_) => Schedule::event_name(&id),
            None => trigger.event,
        };
        validate_event_name(&event).map_err(|source| InvalidJob::EventName {
            job: id.clone(),
            source,
        })?;
        let filter = trigger
            .filter
            .as_ref()
            .map(Filter::parse)
            .transpose()
            .map_err(|source| InvalidJob::Filter {
                job: id.clone(),
                source,
            })?;
        self.retry
            .validate()
            .map_err(|reason| InvalidJob::Options {
                job: id.clone(),
                reason,
            })?;
        if self.timeout.is_zero() {
            return Err(InvalidJob::Options {
                job: id,
                reason: "timeout must be greater than zero".into(),
            });
        }
        let concurrency =
            Concurrency::new(&self.concurrency).map_err(|reason| InvalidJob::Options {
                job: id.clone(),
                reason,
            })?;
        let throttle = self
            .throttle
            .as_ref()
            .map(ThrottleSpec::check)
            .transpose()
            .and_then(|t| concurrency.check_with(t.as_ref()).map(|()| t))
            .map_err(|reason| InvalidJob::Options {
                job: id.clone(),
                reason,
            })?;
        if let Some(t) = self.start_timeout {
            if t < Duration::from_secs(1) || t > Duration::from_secs(7 * 86_400) {
                return Err(InvalidJob::Options {
                    job: id,
                    reason: format!(
                        "startTimeoutMs: must be from 1000 (1 s) to 604800000 (7 days), got {}",
                        t.as_millis()
                    ),
                });
            }
        }
        let priority = self
            .priority
            .as_deref()
            .map(Priority::parse)
            .transpose()
            .map_err(|reason| InvalidJob::Options {
                job: id.clone(),
                reason,
            })?;
        CancelOn::check_list(&self.cancel_on).map_err(|reason| InvalidJob::Options {
            job: id.clone(),
            reason,
        })?;
        let rate_limit = self
            .rate_limit
            .as_ref()
            .map(RateLimitSpec::check)
            .transpose()
            .map_err(|reason| InvalidJob::Options {
                job: id.clone(),
                reason,
            })?;
        let debounce = self
            .debounce
            .as_ref()
            .map(Debounce::check)
            .transpose()
            .map_err(|reason| InvalidJob::Options {
                job: id.clone(),
                reason,
            })?;
        Ok((
            JobSpec {
                id,
                name: self.name,
                version: version.to_string(),
                event,
                filter,
                schedule,
                retry: self.retry,
                timeout: self.timeout,
                concurrency,
                rate_limit,
                throttle,
                start_timeout: self.start_timeout,
                debounce,
                priority,
                cancel_on: self.cancel_on,
            },
            handler,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(id: &str, version: &str) -> Job {
        Job::new(id, "A job", version)
            .trigger(event_trigger("user.created"))
            .run(|_p: Value, _io: Io| async move { Ok(json!(null)) })
    }

    /// An invoked child's payload is parsed only for a job that reads it to queue a run: each
    /// option that does says so, and a job with none does not.
    #[test]
    fn jobs_that_queue_runs_by_their_payload_say_so() {
        let reads = |j: Job| {
            j.validate()
                .map(|(spec, _)| spec.queues_by_payload())
                .unwrap()
        };
        assert!(!reads(job("plain", "1.0.0")));
        let day = std::time::Duration::from_secs(86_400);
        let keyed = [
            job("a", "1.0.0").concurrency_limit(crate::model::flow::ConcurrencyLimit::key(
                1,
                "event.payload.team",
            )),
            job("b", "1.0.0").rate_limit(1, day, Some("event.payload.team")),
            job("c", "1.0.0").throttle(1, day, Some("event.payload.team"), 1),
            job("d", "1.0.0").debounce(Debounce::new(day).key("event.payload.team")),
            job("e", "1.0.0").priority("event.payload.urgency"),
            job("f", "1.0.0").cancel_on(
                crate::model::cancel::CancelOn::event("x.cancelled").matching("payload.id"),
            ),
        ];
        for j in keyed {
            let id = j.id().to_string();
            assert!(reads(j), "{id}");
        }
    }

    #[test]
    fn versions_must_be_semver() {
        assert!(job("a", "1.0.0").validate().is_ok());
        assert!(job("a", "1.2.3-beta.1").validate().is_ok());
        for bad in ["1", "1.0", "v1.0.0", "latest", ""] {
            let Err(err) = job("a", bad).validate() else {
                panic!("{bad} accepted")
            };
            assert!(matches!(err, InvalidJob::Version { .. }), "{bad}: {err}");
        }
    }

    #[test]
    fn ids_triggers_and_bodies_are_checked() {
        assert!(matches!(
            job("Bad Id", "1.0.0").validate(),
            Err(InvalidJob::Id(_))
        ));
        let no_trigger =
            Job::new("a", "A", "1.0.0").run(|_p: Value, _io: Io| async { Ok(json!(1)) });
        assert!(matches!(
            no_trigger.validate(),
            Err(InvalidJob::NoTrigger(_))
        ));
        let no_run = Job::new("a", "A", "1.0.0").trigger(event_trigger("x.y"));
        assert!(matches!(no_run.validate(), Err(InvalidJob::NoRun(_))));
        let bad_name = Job::new("a", "A", "1.0.0")
            .trigger(event_trigger("X"))
            .run(|_p: Value, _io: Io| async { Ok(json!(1)) });
        assert!(matches!(
            bad_name.validate(),
            Err(InvalidJob::EventName { .. })
        ));
        let bad_filter =
            job("a", "1.0.0").trigger(event_trigger("x.y").filter(json!({"a": [{"$nope": 1}]})));
        assert!(matches!(
            bad_filter.validate(),
            Err(InvalidJob::Filter { .. })
        ));
        assert!(matches!(
            job("a", "1.0.0").concurrency(0).validate(),
            Err(InvalidJob::Options { .. })
        ));
        assert!(matches!(
            job("a", "1.0.0")
                .retry(RetryPolicy::default().max_attempts(0))
                .validate(),
            Err(InvalidJob::Options { .. })
        ));
    }

    #[test]
    fn cancel_on_is_checked_at_definition_naming_the_field() {
        let bad = job("a", "1.0.0")
            .cancel_on(CancelOn::event("order.cancelled").matching("payload.orderId"))
            .cancel_on(CancelOn::event("order.cancelled").condition("async.payload.n >"));
        let Err(InvalidJob::Options { reason, .. }) = bad.validate() else {
            panic!("accepted")
        };
        assert!(reason.starts_with("cancelOn[1].if:"), "{reason}");
        let (spec, _) = job("a", "1.0.0")
            .cancel_on(CancelOn::event("order.cancelled").matching("payload.orderId"))
            .validate()
            .expect("valid");
        assert_eq!(spec.cancel_on.len(), 1);
    }

    #[test]
    fn spec_matches_name_and_filter() {
        let (spec, _) = job("a", "1.0.0")
            .trigger(event_trigger("payment.succeeded").filter(json!({"currency": ["usd"]})))
            .validate()
            .expect("valid");
        assert!(spec.matches("payment.succeeded", &json!({"currency": "usd"})));
        assert!(!spec.matches("payment.succeeded", &json!({"currency": "eur"})));
        assert!(!spec.matches("payment.failed", &json!({"currency": "usd"})));
    }

    #[test]
    fn errors_convert_and_keep_their_cause() {
        let e: JobError = "boom".into();
        assert!(e.is_retryable());
        assert_eq!(e.message(), "boom");
        assert!(!JobError::fatal("no").is_retryable());
        let io = std::io::Error::other("disk");
        let e: JobError = io.into();
        assert_eq!(e.to_string(), "disk");
    }
}
