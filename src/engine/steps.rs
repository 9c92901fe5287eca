//! Durable steps of one execution of a run: what `io.run_task`, `io.wait` / `io.wait_until` and
//! chained `io.send_event` do underneath.
//!
//! - **Stored results.** A step that succeeds is written at once, in a write of its own
//!   ([`Store::step_record`]), fenced by the lease token the execution was claimed with: a worker
//!   that lost its lease records nothing. The run's steps are read once per execution, at its
//!   first step (a job without steps reads nothing), by key ([`Store::run_steps_by_key`]), and
//!   served from memory: a step stored as succeeded returns its stored output and its closure
//!   is not called.
//! - **Keys** are unique within a run. Using one twice in an execution, or with another kind
//!   than it was stored with, is a fatal error (a bug in the job, which no retry fixes).
//! - **Waits** suspend the execution: the wait records why (`Suspension`) and never resolves;
//!   the executor, which selects on `Steps::suspended` next to the job's future, drops the
//!   job's future and hands the completer [`crate::store::Finish::Wait`]: the wait step and the
//!   run's return to the queue (due at the wait's time, the attempt not counted) are one
//!   transaction. A user cannot swallow the suspension as they could an error.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Mutex;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use crate::clock::SharedClock;
use crate::log_throttle::storage_failure;
use crate::model::JobError;
use crate::model::{EventWait, Invoked, RunStatus, StepKind, StepStatus, StepsByKey, WaitedEvent};
use crate::store::{Lease, NewChild, NewStep, Store};

/// Longest step key, in bytes.
pub const MAX_STEP_KEY_LEN: usize = 200;

/// The prefix of chained events' step keys (`event:<n>`, `event:<id>`), not allowed in the keys
/// of tasks and waits.
pub const EVENT_KEY_PREFIX: &str = "event:";

/// Why an execution ended before its job returned.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Suspension {
    /// `io.wait`: resume at `until` (ms); the job called it at `since`. `io.wait_for_event`
    /// (`event`): or earlier, when a matching event arrives.
    Wait {
        key: String,
        until: i64,
        since: i64,
        event: Option<EventWait>,
    },
    /// A wait that could not be honoured (a key used twice, storage failing, the lease lost).
    Fail { message: String, retryable: bool },
}

/// The event that started a run, as an execution holds it.
#[derive(Debug, Clone)]
pub(crate) struct RunEvent {
    pub(crate) id: std::sync::Arc<str>,
    pub(crate) name: std::sync::Arc<str>,
    pub(crate) payload: std::sync::Arc<Value>,
}

impl RunEvent {
    /// `{id, name, payload}`, the run's event in a wait's CEL condition.
    fn value(&self) -> Value {
        crate::model::wait::event_value(&self.id, &self.name, &self.payload)
    }
}

/// The steps of one execution (shared by the clones of its `Io`).
#[derive(Debug)]
pub(crate) struct Steps {
    store: Store,
    clock: SharedClock,
    lease: Lease,
    attempt: u32,
    /// The run's event, what waits for events match against (as `{id, name, payload}`, built
    /// only by a wait: the payload is shared with the handler's, not copied per execution).
    run_event: RunEvent,
    /// The run's steps as stored when this execution first needed them.
    stored: OnceCell<StepsByKey>,
    /// Keys of tasks and waits used in this execution.
    used: Mutex<HashSet<String, foldhash::fast::RandomState>>,
    suspend: CancellationToken,
    suspension: Mutex<Option<Suspension>>,
}

impl Steps {
    pub(crate) fn new(
        store: Store,
        clock: SharedClock,
        lease: Lease,
        attempt: u32,
        run_event: RunEvent,
    ) -> Self {
        Self {
            store,
            clock,
            lease,
            attempt,
            run_event,
            stored: OnceCell::new(),
            used: Mutex::default(),
            suspend: CancellationToken::new(),
            suspension: Mutex::default(),
        }
    }

    /// Resolves when the execution suspended itself (see [`Self::suspension`]).
    pub(crate) async fn suspended(&self) {
        self.suspend.cancelled().await;
    }

    /// Why the execution suspended itself, once it did.
    pub(crate) fn suspension(&self) -> Option<Suspension> {
        self.suspension.lock().ok().and_then(|s| s.clone())
    }

    /// Records `why` and never resolves: the executor drops the job's future.
    async fn suspend(&self, why: Suspension) {
        if let Ok(mut s) = self.suspension.lock() {
            s.get_or_insert(why);
        }
        self.suspend.cancel();
        std::future::pending::<()>().await;
    }

    /// Whether this execution resumes its attempt after a wait: the steps it read include a wait
    /// that this attempt reached in an earlier execution. Its body ran again from the start, so
    /// the log lines before the wait were written again ([`crate::engine::executor`] records
    /// them once).
    pub(crate) fn resumed_after_wait(&self) -> bool {
        self.stored.get().is_some_and(|steps| {
            steps
                .values()
                .any(|s| s.kind == StepKind::Wait && s.attempt == self.attempt)
        })
    }

    /// How many stored steps this execution read (none before its first step).
    pub(crate) fn held(&self) -> usize {
        self.stored.get().map_or(0, StepsByKey::len)
    }

    /// The run's stored steps, read at the first call of this execution.
    pub(crate) async fn stored(&self) -> Result<&StepsByKey, JobError> {
        self.stored
            .get_or_try_init(|| self.store.run_steps_by_key(&self.lease.run_id))
            .await
            .map_err(|e| JobError::from(format!("could not read the run's steps: {e}")))
    }

    /// Takes `key` for a task or wait of this execution: refused (fatal) when it is empty, too
    /// long, reserved or already used.
    fn take_key(&self, key: &str) -> Result<(), JobError> {
        self.take_keys(std::slice::from_ref(&key))
    }

    /// [`Self::take_key`] for each of `keys` (a fan-out's thousands, under one lock).
    fn take_keys(&self, keys: &[impl AsRef<str>]) -> Result<(), JobError> {
        let mut used = self.used.lock().map_err(|_| {
            JobError::fatal("this execution's step keys could not be read (a step panicked)")
        })?;
        used.reserve(keys.len());
        for key in keys {
            let key = key.as_ref();
            if key.is_empty() || key.len() > MAX_STEP_KEY_LEN || !crate::store::storable(key) {
                return Err(JobError::fatal(format!(
                    "invalid step key {key:?}: use 1-{MAX_STEP_KEY_LEN} bytes without NUL"
                )));
            }
            if key.starts_with(EVENT_KEY_PREFIX) {
                return Err(JobError::fatal(format!(
                    "invalid step key {key:?}: keys starting with {EVENT_KEY_PREFIX:?} are the chained events'"
                )));
            }
            if !used.insert(key.to_string()) {
                return Err(JobError::fatal(format!(
                    "step key {key:?} is used twice in this run: step keys must be unique within a run"
                )));
            }
        }
        Ok(())
    }

    /// Records `step` under this execution's lease. `Err` when it could not be written or the
    /// lease is lost (this execution's outcome will be discarded anyway).
    pub(crate) async fn record(&self, step: NewStep) -> Result<(), JobError> {
        let key = step.key.clone();
        match self.store.step_record(step).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(JobError::from(format!(
                "step {key:?} was not recorded: this worker lost the run's lease"
            ))),
            Err(e) => Err(JobError::from(format!(
                "step {key:?} could not be recorded: {e}"
            ))),
        }
    }

    pub(crate) fn new_step(
        &self,
        key: &str,
        kind: StepKind,
        status: StepStatus,
        started_at: i64,
    ) -> NewStep {
        NewStep {
            lease: self.lease.clone(),
            key: key.to_string(),
            kind,
            status,
            attempt: self.attempt,
            started_at,
            finished_at: None,
            wait_until: None,
            output: None,
            error: None,
            label: None,
        }
    }

    /// See [`crate::Io::run_task`].
    pub(crate) async fn task<T, F, Fut>(&self, key: &str, f: F) -> Result<T, JobError>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, JobError>>,
    {
        self.take_key(key)?;
        if let Some(step) = self.stored().await?.get(key) {
            if step.kind != StepKind::Task {
                return Err(kind_clash(key, step.kind, StepKind::Task));
            }
            if step.status == StepStatus::Succeeded {
                let output = step.output.clone().unwrap_or(Value::Null);
                return serde_json::from_value(output).map_err(|e| {
                    JobError::fatal(format!(
                        "the stored result of step {key:?} does not fit the type asked for: {e}"
                    ))
                });
            }
        }
        let started_at = self.clock.now_ms();
        match f().await {
            Ok(value) => {
                let output = serde_json::to_value(&value).map_err(|e| {
                    JobError::fatal(format!("the result of step {key:?} is not JSON: {e}"))
                })?;
                let mut step =
                    self.new_step(key, StepKind::Task, StepStatus::Succeeded, started_at);
                step.finished_at = Some(self.clock.now_ms());
                step.output = Some(output);
                self.record(step).await?;
                Ok(value)
            }
            Err(e) => {
                let mut step = self.new_step(key, StepKind::Task, StepStatus::Failed, started_at);
                step.finished_at = Some(self.clock.now_ms());
                step.error = Some(e.message().to_string());
                if let Err(not_recorded) = self.record(step).await {
                    if let Some(suppressed) = storage_failure("steps:failed-step") {
                        tracing::warn!(run = %self.lease.run_id, error = %not_recorded, suppressed, "a failed step's error was not recorded");
                    }
                }
                Err(e)
            }
        }
    }

    /// See [`crate::Io::wait_until`]: returns once the wait is over; otherwise suspends the
    /// execution (never returns).
    pub(crate) async fn wait_until(&self, key: &str, until: i64) {
        if let Err(e) = self.take_key(key) {
            return self.fail(e).await;
        }
        let stored = match self.stored().await {
            Ok(s) => s.get(key).cloned(),
            Err(e) => return self.fail(e).await,
        };
        let now = self.clock.now_ms();
        let (since, until) = match stored {
            Some(step) if step.kind != StepKind::Wait => {
                return self.fail(kind_clash(key, step.kind, StepKind::Wait)).await;
            }
            Some(step) if step.status == StepStatus::Succeeded => return,
            Some(step) => (
                step.started_at.timestamp_millis(),
                step.wait_until.map_or(now, |t| t.timestamp_millis()),
            ),
            None => (now, until),
        };
        if until > now {
            return self
                .suspend(Suspension::Wait {
                    key: key.to_string(),
                    until,
                    since,
                    event: None,
                })
                .await;
        }
        let mut step = self.new_step(key, StepKind::Wait, StepStatus::Succeeded, since);
        step.finished_at = Some(now);
        step.wait_until = Some(until);
        if let Err(e) = self.record(step).await {
            self.fail(e).await;
        }
    }

    /// See [`crate::Io::wait_for_event`]: the event the wait resumed with (`None` on timeout),
    /// once it is over; otherwise suspends the execution (never returns).
    pub(crate) async fn wait_for_event(
        &self,
        key: &str,
        event: &str,
        match_path: Option<&str>,
        condition: Option<&str>,
        timeout_ms: i64,
    ) -> Result<Option<WaitedEvent>, JobError> {
        self.take_key(key)?;
        let wait = EventWait::new(event, match_path, condition, self.run_event.value())
            .map_err(|e| JobError::fatal(format!("wait_for_event {key:?}: {e}")))?;
        let stored = self.stored().await?.get(key).cloned();
        let first = stored.is_none();
        let now = self.clock.now_ms();
        let (since, until) = match stored {
            Some(step) if step.kind != StepKind::EventWait => {
                return Err(kind_clash(key, step.kind, StepKind::EventWait));
            }
            Some(step) if step.status == StepStatus::Succeeded => {
                return waited(key, step.output.unwrap_or(Value::Null));
            }
            Some(step) => (
                step.started_at.timestamp_millis(),
                step.wait_until.map_or(now, |t| t.timestamp_millis()),
            ),
            None => (now, now.saturating_add(timeout_ms.max(0))),
        };
        if until > now || first {
            self.suspend(Suspension::Wait {
                key: key.to_string(),
                until,
                since,
                event: Some(wait),
            })
            .await;
        }
        // Timed out: unless an event resumed it meanwhile, it ends with nothing.
        match self.store.wait_expire(self.lease.clone(), key, now).await {
            Ok(Some(output)) => waited(key, output),
            Ok(None) => Err(JobError::from(format!(
                "wait {key:?} could not end: this worker lost the run's lease"
            ))),
            Err(e) => Err(JobError::from(format!("wait {key:?} could not end: {e}"))),
        }
    }

    /// See [`crate::Io::invoke_all`]: runs of `job_id`, one per payload, as the steps `keys`;
    /// their outputs once every one has ended, or the first child error in key order (a step
    /// error); otherwise suspends the execution until the last child ends (never returns).
    ///
    /// A step whose child failed (or timed out) in an earlier attempt is invoked again in this
    /// one, a new child (`model::wait::invoke_event_id`); one that failed in this attempt is its
    /// error. Children not ended yet are started once per key, whoever asks again, all in one
    /// write with their steps and this run's waits for them; the run resumes once, when none is
    /// left (fan-in).
    pub(crate) async fn invoke(
        &self,
        keys: &[String],
        job_id: &str,
        payload: impl Fn(usize) -> Result<Box<serde_json::value::RawValue>, JobError>,
        timeout_ms: i64,
    ) -> Result<Vec<Value>, JobError> {
        self.invoke_with(keys, job_id, payload, timeout_ms, |key, ended| {
            invoked(key, job_id, ended)
        })
        .await
    }

    /// [`Self::invoke`], each ended child's outcome (`None`: timed out) read by `outcome` (an
    /// endpoint's steps tell it to the endpoint). The payload of the child of `keys[i]` is
    /// `payload(i)` (JSON text), asked only for the children started now.
    pub(crate) async fn invoke_with(
        &self,
        keys: &[String],
        job_id: &str,
        payload: impl Fn(usize) -> Result<Box<serde_json::value::RawValue>, JobError>,
        timeout_ms: i64,
        outcome: impl Fn(&str, Option<&Invoked>) -> Result<Value, JobError>,
    ) -> Result<Vec<Value>, JobError> {
        self.take_keys(keys)?;
        let stored = self.stored().await?;
        let now = self.clock.now_ms();
        let until = now.saturating_add(timeout_ms.max(0));
        let mut ended: Vec<Option<Result<Value, JobError>>> = Vec::with_capacity(keys.len());
        // Waiting children: (index, child run id, since, until).
        let mut pending: Vec<(usize, String, i64, i64)> = Vec::new();
        let mut start: Vec<NewChild> = Vec::new();
        let mut started: Vec<usize> = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            let again_in = match stored.get(key) {
                Some(step) if step.kind != StepKind::Invoke => {
                    return Err(kind_clash(key, step.kind, StepKind::Invoke));
                }
                Some(step) if step.status == StepStatus::Succeeded => {
                    ended.push(Some(outcome(key, step.invoked().as_deref())));
                    continue;
                }
                Some(step) if step.status == StepStatus::Failed && step.attempt == self.attempt => {
                    ended.push(Some(outcome(key, step.invoked().as_deref())));
                    continue;
                }
                // Failed in an earlier attempt: invoked again, a new child.
                Some(step) if step.status == StepStatus::Failed => Some(self.attempt),
                Some(step) => {
                    let child = step.output.as_ref().and_then(|o| o["runId"].as_str());
                    if let Some(child) = child {
                        ended.push(None);
                        pending.push((
                            i,
                            child.to_string(),
                            step.started_at.timestamp_millis(),
                            step.wait_until.map_or(now, |t| t.timestamp_millis()),
                        ));
                        continue;
                    }
                    // Stored before children kept their id: found by its event.
                    None
                }
                None => None,
            };
            ended.push(None);
            started.push(i);
            start.push(NewChild {
                key: key.clone(),
                event_id: crate::model::wait::invoke_event_id(&self.lease.run_id, key, again_in),
                payload: payload(i)?,
                until,
            });
        }
        if !start.is_empty() {
            let ids = self.spawn_children(job_id, start).await?;
            for (i, child) in started.into_iter().zip(ids) {
                pending.push((i, child, now, until));
            }
        }
        // Timed out: unless the child ended meanwhile, the step fails.
        for (i, _, _, until) in &pending {
            if *until > now {
                continue;
            }
            let key = &keys[*i];
            let output = match self.store.wait_expire(self.lease.clone(), key, now).await {
                Ok(Some(output)) => output,
                Ok(None) => {
                    return Err(JobError::from(format!(
                        "invoke {key:?} could not end: this worker lost the run's lease"
                    )))
                }
                Err(e) => return Err(JobError::from(format!("invoke {key:?} could not end: {e}"))),
            };
            ended[*i] = Some(outcome(key, Invoked::from_json(&output).as_ref()));
        }
        // The first error in key order (a child failed, or timed out); else, while children
        // run, wait for them: the run resumes when the last one ends, or at the first timeout.
        if let Some(i) = ended.iter().position(|e| matches!(e, Some(Err(_)))) {
            if let Some(Err(e)) = ended.swap_remove(i) {
                return Err(e);
            }
        }
        let next = pending
            .iter()
            .filter(|(i, ..)| ended[*i].is_none())
            .min_by_key(|(.., until)| *until)
            .cloned();
        if let Some((i, child, since, until)) = next {
            self.suspend(Suspension::Wait {
                key: keys[i].clone(),
                until,
                since,
                event: Some(EventWait::invoke(&child)),
            })
            .await;
        }
        Ok(ended
            .into_iter()
            .map(|e| e.and_then(Result::ok).unwrap_or(Value::Null))
            .collect())
    }

    /// See [`crate::Io::callback`]: the callback step `key` (its token, when the run reached it,
    /// its deadline), created and stored with its wait at the first call.
    pub(crate) async fn callback(
        &self,
        key: &str,
        timeout_ms: i64,
    ) -> Result<(String, i64, i64), JobError> {
        self.take_key(key)?;
        if let Some(step) = self.stored().await?.get(key) {
            if step.kind != StepKind::Callback {
                return Err(kind_clash(key, step.kind, StepKind::Callback));
            }
            let token = step.output.as_ref().and_then(|o| o["token"].as_str());
            let since = step.started_at.timestamp_millis();
            let until = step.wait_until.map_or(since, |t| t.timestamp_millis());
            // A callback answered (or timed out) holds its body instead of its token.
            return Ok((token.unwrap_or_default().to_string(), since, until));
        }
        // 256 bits from the thread's cryptographically secure generator.
        let token = format!("cb_{}", hex::encode(rand::random::<[u8; 32]>()));
        let since = self.clock.now_ms();
        let until = since.saturating_add(timeout_ms.max(0));
        match self
            .store
            .callback_create(self.lease.clone(), key, &token, since, until)
            .await
        {
            Ok(true) => Ok((token, since, until)),
            Ok(false) => Err(JobError::from(format!(
                "callback {key:?} was not stored: this worker lost the run's lease"
            ))),
            Err(e) => Err(JobError::from(format!(
                "callback {key:?} could not be stored: {e}"
            ))),
        }
    }

    /// See [`crate::Io::wait_for_callback`]: the body posted, `None` after the deadline;
    /// otherwise suspends the execution (never returns).
    pub(crate) async fn callback_wait(
        &self,
        key: &str,
        token: &str,
        since: i64,
        until: i64,
    ) -> Result<Option<Value>, JobError> {
        let stored = self.stored().await?.get(key).cloned();
        let now = self.clock.now_ms();
        if let Some(step) = &stored {
            if step.status == StepStatus::Succeeded {
                return Ok(body_of(step.output.clone()));
            }
            if until <= now {
                return match self.store.wait_expire(self.lease.clone(), key, now).await {
                    Ok(Some(output)) => Ok(body_of(Some(output))),
                    Ok(None) => Err(JobError::from(format!(
                        "callback {key:?} could not end: this worker lost the run's lease"
                    ))),
                    Err(e) => Err(JobError::from(format!(
                        "callback {key:?} could not end: {e}"
                    ))),
                };
            }
        }
        self.suspend(Suspension::Wait {
            key: key.to_string(),
            until,
            since,
            event: Some(EventWait::callback(token)),
        })
        .await;
        Ok(None)
    }

    /// Suspends the execution on `wait` as the step `key` (reached at `since`, over at `until`)
    /// and never returns: the wait is stored with the run's return to the queue, as every wait's
    /// (Trigger.dev v2's callback tasks, whose wait the SDK names only after the task exists).
    pub(crate) async fn suspend_on(&self, key: &str, since: i64, until: i64, wait: EventWait) {
        self.suspend(Suspension::Wait {
            key: key.to_string(),
            until,
            since,
            event: Some(wait),
        })
        .await;
    }

    /// Ends the wait `key` at its timeout unless something resumed it first; its stored output
    /// (null: timed out).
    pub(crate) async fn expire(&self, key: &str) -> Result<Value, JobError> {
        let now = self.clock.now_ms();
        match self.store.wait_expire(self.lease.clone(), key, now).await {
            Ok(Some(output)) => Ok(output),
            Ok(None) => Err(JobError::from(format!(
                "wait {key:?} could not end: this worker lost the run's lease"
            ))),
            Err(e) => Err(JobError::from(format!("wait {key:?} could not end: {e}"))),
        }
    }

    /// Starts (or finds) the child run of step `key`, alone: no step or wait is written (a
    /// Trigger.dev v2 invoke task, which waits with [`Self::suspend_on`]).
    pub(crate) async fn spawn(
        &self,
        key: &str,
        job_id: &str,
        payload: Value,
        now: i64,
    ) -> Result<String, JobError> {
        match self
            .store
            .run_invoke(self.lease.clone(), key, job_id, payload, now)
            .await
        {
            Ok(Some(child)) => Ok(child),
            Ok(None) => Err(JobError::from(format!(
                "invoke {key:?} could not start its run: this worker lost the run's lease"
            ))),
            Err(crate::store::Error::NotFound { .. }) => Err(JobError::fatal(format!(
                "invoke {key:?}: no job {job_id:?} is defined"
            ))),
            Err(e) => Err(JobError::from(format!(
                "invoke {key:?} could not start its run: {e}"
            ))),
        }
    }

    /// Starts (or finds) the children of invoke steps, with their steps and this run's waits,
    /// in one write; their run ids in order.
    async fn spawn_children(
        &self,
        job_id: &str,
        children: Vec<NewChild>,
    ) -> Result<Vec<String>, JobError> {
        // Named in an error only (a fan-out's keys are thousands).
        let keys: Vec<String> = match children.as_slice() {
            [one] => vec![one.key.clone()],
            many => many.iter().take(3).map(|c| c.key.clone()).collect(),
        };
        let n = children.len();
        let what = move || match keys.as_slice() {
            [one] if n == 1 => format!("invoke {one:?}"),
            some if n > some.len() => format!("invoke [{}, … {n} in all]", some.join(", ")),
            all => format!("invoke [{}]", all.join(", ")),
        };
        let now = self.clock.now_ms();
        match self
            .store
            .runs_invoke(self.lease.clone(), job_id, self.attempt, children, now)
            .await
        {
            Ok(Some(ids)) => Ok(ids),
            Ok(None) => Err(JobError::from(format!(
                "{} could not start its run: this worker lost the run's lease",
                what()
            ))),
            Err(crate::store::Error::NotFound { .. }) => Err(JobError::fatal(format!(
                "{}: no job {job_id:?} is defined",
                what()
            ))),
            Err(e) => Err(JobError::from(format!(
                "{} could not start its run: {e}",
                what()
            ))),
        }
    }

    async fn fail(&self, e: JobError) {
        self.suspend(Suspension::Fail {
            message: e.message().to_string(),
            retryable: e.is_retryable(),
        })
        .await;
    }

    /// Records the chained event `event_id` as the step `key` (`event:…`). Its id already makes
    /// the send idempotent, so a failure to record is only logged.
    pub(crate) async fn event_sent(&self, key: &str, event_id: &str, started_at: i64) {
        let mut step = self.new_step(key, StepKind::Event, StepStatus::Succeeded, started_at);
        step.finished_at = Some(self.clock.now_ms());
        step.output = Some(serde_json::json!({ "eventId": event_id }));
        if let Err(e) = self.record(step).await {
            if let Some(suppressed) = storage_failure("steps:event-step") {
                tracing::warn!(run = %self.lease.run_id, error = %e, suppressed, "a chained event's step was not recorded");
            }
        }
    }
}

/// The body of an answered callback step (`{"body": …}`; `null`: timed out).
fn body_of(output: Option<Value>) -> Option<Value> {
    output.and_then(|o| o.get("body").cloned())
}

/// The result of an invoked run (`None`: it did not end before the timeout).
fn invoked(key: &str, job_id: &str, ended: Option<&Invoked>) -> Result<Value, JobError> {
    let Some(ended) = ended else {
        return Err(JobError::from(format!(
            "invoke {key:?}: the run of {job_id:?} did not end before the timeout"
        )));
    };
    if ended.status == RunStatus::Succeeded {
        return Ok(ended.output.clone());
    }
    Err(JobError::from(format!(
        "invoke {key:?}: run {} of {job_id:?} {}: {}",
        ended.run_id,
        ended.status.as_str(),
        ended.error.as_deref().unwrap_or("no error given")
    )))
}

/// The stored result of a wait for an event.
fn waited(key: &str, output: Value) -> Result<Option<WaitedEvent>, JobError> {
    serde_json::from_value(output).map_err(|e| {
        JobError::fatal(format!(
            "the stored event of wait {key:?} could not be read: {e}"
        ))
    })
}

fn kind_clash(key: &str, stored: StepKind, asked: StepKind) -> JobError {
    JobError::fatal(format!(
        "step key {key:?} is stored as a {} step and used now as a {} step: step keys must be unique within a run",
        stored.as_str(),
        asked.as_str()
    ))
}
