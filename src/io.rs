//! What a running job gets besides its payload: `io.logger`, durable steps (`io.run_task`,
//! `io.wait`, `io.wait_until`, `io.wait_for_event`, `io.invoke`, `io.invoke_all`,
//! `io.callback`) and `io.send_event`.
//!
//! Log lines are kept with the attempt and stored when it finishes, in the same transaction as its
//! outcome. A step's result is stored as soon as it succeeds, so when the run executes again (a
//! retry, an expired lease, a resumed wait) the stored result is returned and the step is not run
//! again (see [`crate::engine::steps`]). Events sent with `io.send_event` carry the run as their
//! parent; their ids are derived from the run id and the call order (or an explicit key), so a
//! retried run that sends again returns the event it sent the first time instead of sending a
//! second one; each is recorded as an `event` step (`event:<n>` or `event:<key>`).
//!
//! `Io` is built from the engine's `Execution` (the engine never sees `Io`) and sends through
//! `crate::send`; no HTTP.

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::engine::execution::Execution;
pub use crate::engine::execution::Logger;
use crate::engine::steps::{Steps, EVENT_KEY_PREFIX};
use crate::model::{Event, JobError, Source, StoredEvent, WaitedEvent};
use crate::send::{prepare, send_with, Error, SendEvent};

/// What [`Io::wait_for_event`] waits for besides the event's name: a timeout, and a match
/// and/or a condition.
#[derive(Debug, Clone, Default)]
pub struct WaitFor {
    timeout: Duration,
    match_path: Option<String>,
    condition: Option<String>,
}

impl WaitFor {
    /// Waits at most `timeout` (then the wait returns `None`).
    pub fn timeout(timeout: Duration) -> Self {
        Self {
            timeout,
            ..Self::default()
        }
    }

    /// Only an event whose payload field `path` (`"payload.invoiceId"`) equals this run's
    /// event's (a string, number or boolean). Looked up by value: any number of runs may wait.
    pub fn matching(mut self, path: &str) -> Self {
        self.match_path = Some(path.to_string());
        self
    }

    /// Only an event for which the CEL expression `cel` is true, with `event` this run's event
    /// and `async` the incoming one, each `{id, name, payload}`:
    /// `"async.payload.amount >= event.payload.amount"`.
    pub fn condition(mut self, cel: &str) -> Self {
        self.condition = Some(cel.to_string());
        self
    }
}

/// A callback URL made by [`Io::callback`]: give [`Callback::url_path`] (after your Flare
/// server's address) to a person or another system, then [`Io::wait_for_callback`].
#[derive(Debug, Clone)]
pub struct Callback {
    key: String,
    token: String,
    since: i64,
    until: i64,
}

impl Callback {
    /// The unguessable token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// `/callbacks/<token>`: a `POST` of JSON there (no API key) resumes the run, once.
    pub fn url_path(&self) -> String {
        format!("/callbacks/{}", self.token)
    }

    /// When the callback stops being accepted.
    pub fn deadline(&self) -> chrono::DateTime<chrono::Utc> {
        crate::clock::ms_to_time(self.until)
    }
}

/// Handed to a job's `run` with the payload.
#[derive(Clone, Debug)]
pub struct Io {
    /// The run's logger.
    pub logger: Logger,
    exec: Execution,
    /// Chained sends so far in this execution (the key of one sent without an explicit id).
    calls: Arc<AtomicU32>,
}

impl Io {
    /// The `io` of an execution.
    pub(crate) fn new(exec: Execution) -> Self {
        Self {
            logger: exec.logger.clone(),
            exec,
            calls: Arc::default(),
        }
    }

    /// Whether this run was cancelled (or its lease lost) while it executes. Its outcome will not
    /// be recorded: the run stays cancelled whatever the job returns, and the engine stops the
    /// execution (drops its future) at its next await. Check it between units of work to stop
    /// cleanly.
    pub fn is_cancelled(&self) -> bool {
        self.exec.cancel.is_cancelled()
    }

    /// Completes when this run is cancelled (see [`Io::is_cancelled`]), for a `select!` around
    /// long work:
    ///
    /// ```no_run
    /// # async fn demo(io: flare::Io) -> Result<(), flare::JobError> {
    /// tokio::select! {
    ///     () = io.cancelled() => return Err(flare::JobError::fatal("cancelled")),
    ///     () = tokio::time::sleep(std::time::Duration::from_secs(60)) => {}
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn cancelled(&self) {
        self.exec.cancel.cancelled().await;
    }

    /// This execution's steps (the executor watches them for a suspension).
    pub(crate) fn steps(&self) -> Arc<Steps> {
        Arc::clone(&self.exec.steps)
    }

    /// Runs `f` as the durable step `key` and returns its value. The value is stored as soon as
    /// `f` succeeds; when the run executes again (a retry, an expired lease, a resumed wait) the
    /// stored value is returned and `f` is not called, so a completed side effect happens once.
    ///
    /// An `Err` from `f` is recorded as the step's error and returned: propagate it with `?` and
    /// the attempt fails, following the job's retry policy (the step runs again in the next
    /// attempt). Keys are unique within a run: using one twice is a fatal error. Between `f`
    /// succeeding and its value being stored a crash can still lose it (at least once); a worker
    /// that lost the run's lease cannot store it (an error).
    ///
    /// ```no_run
    /// # async fn demo(io: flare::Io) -> Result<(), flare::JobError> {
    /// let charge: String = io.run_task("charge", || async { Ok("ch_123".to_string()) }).await?;
    /// # Ok(()) }
    /// ```
    pub async fn run_task<T, F, Fut>(&self, key: &str, f: F) -> Result<T, JobError>
    where
        T: Serialize + DeserializeOwned + Send,
        F: FnOnce() -> Fut + Send,
        Fut: Future<Output = Result<T, JobError>> + Send,
    {
        self.exec.steps.task(key, f).await
    }

    /// Waits `duration` as the durable step `key`: see [`Io::wait_until`]. The due time is fixed
    /// when the wait is first reached (now + `duration`), not at each execution.
    pub async fn wait(&self, key: &str, duration: Duration) {
        let ms = i64::try_from(duration.as_millis()).unwrap_or(i64::MAX / 2);
        let until = self.exec.clock.now_ms().saturating_add(ms);
        self.exec.steps.wait_until(key, until).await;
    }

    /// Waits until `at` as the durable step `key`. When `at` has passed (or the step already
    /// waited) it returns at once. Otherwise it never returns: the execution ends there, the run
    /// goes back to the queue due at `at` holding no worker slot (the attempt is not counted),
    /// and at that time it executes again from the start, its completed steps returning their
    /// stored results, and continues past this wait. The wait is stored, so it survives restarts.
    ///
    /// Just `.await` it; nothing needs handling. A key used twice, or a wait that cannot be
    /// stored, fails the attempt.
    ///
    /// ```no_run
    /// # async fn demo(io: flare::Io) -> Result<(), flare::JobError> {
    /// io.run_task("send-welcome", || async { Ok(()) }).await?;
    /// io.wait("a-day-later", std::time::Duration::from_secs(86_400)).await;
    /// io.run_task("send-tips", || async { Ok(()) }).await?;
    /// # Ok(()) }
    /// ```
    pub async fn wait_until(&self, key: &str, at: chrono::DateTime<chrono::Utc>) {
        self.exec.steps.wait_until(key, at.timestamp_millis()).await;
    }

    /// Waits as the durable step `key` for the first event named `event` sent after this call
    /// that matches `options` (a payload field equal in this run's event and the incoming one,
    /// and/or a CEL condition over `event` and `async`), for at most the options' timeout.
    /// Returns the event, or `None` when the timeout passed. Every waiting run the event matches
    /// gets it.
    ///
    /// While waiting the run holds no worker slot: the execution ends here and the run executes
    /// again from the start when the event arrives (or the timeout passes), its completed steps
    /// returning their stored results. The wait is stored, so it survives restarts. A malformed
    /// match or condition, or a match field this run's event lacks, is a fatal error.
    ///
    /// ```no_run
    /// # async fn demo(io: flare::Io) -> Result<(), flare::JobError> {
    /// use flare::WaitFor;
    /// use std::time::Duration;
    /// let paid = io
    ///     .wait_for_event(
    ///         "paid",
    ///         "invoice.paid",
    ///         WaitFor::timeout(Duration::from_secs(3 * 86_400)).matching("payload.invoiceId"),
    ///     )
    ///     .await?;
    /// if paid.is_none() {
    ///     io.run_task("remind", || async { Ok(()) }).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn wait_for_event(
        &self,
        key: &str,
        event: &str,
        options: WaitFor,
    ) -> Result<Option<WaitedEvent>, JobError> {
        let ms = i64::try_from(options.timeout.as_millis()).unwrap_or(i64::MAX / 2);
        self.exec
            .steps
            .wait_for_event(
                key,
                event,
                options.match_path.as_deref(),
                options.condition.as_deref(),
                ms,
            )
            .await
    }

    /// Runs job `job_id` with `payload` as the durable step `key` (a run of that job alone, whose
    /// event's parent is this run) and returns its output once it succeeded. Its failure or
    /// cancellation, or its not ending within `timeout`, is returned as a step error (the job's
    /// retry policy applies, and this run's retry invokes the job again: a new child; an output
    /// once returned is kept). Meanwhile this run holds no worker slot, as in
    /// [`Io::wait_for_event`]; cancelling it cancels the child. An unknown job id is a fatal
    /// error, and no child is started.
    ///
    /// ```no_run
    /// # async fn demo(io: flare::Io) -> Result<(), flare::JobError> {
    /// let tips: serde_json::Value = io
    ///     .invoke("tips", "send-tips", &serde_json::json!({ "team": 1 }), std::time::Duration::from_secs(3600))
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn invoke<T: DeserializeOwned, P: Serialize + ?Sized>(
        &self,
        key: &str,
        job_id: &str,
        payload: &P,
        timeout: Duration,
    ) -> Result<T, JobError> {
        let payload = serde_json::value::to_raw_value(payload).map_err(|e| {
            JobError::fatal(format!("invoke {key:?}: the payload is not JSON: {e}"))
        })?;
        let ms = i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX / 2);
        let mut outputs = self
            .exec
            .steps
            .invoke(&[key.to_string()], job_id, |_| Ok(payload.clone()), ms)
            .await?;
        serde_json::from_value(outputs.pop().unwrap_or_default()).map_err(|e| {
            JobError::fatal(format!(
                "invoke {key:?}: the output does not fit the type asked for: {e}"
            ))
        })
    }

    /// Runs job `job_id` once per payload (fan-out), all at once (started in one transaction),
    /// as the steps `<key>:0`, `<key>:1`, …, and returns their outputs in order when every one
    /// succeeded (fan-in): this run resumes once, when the last child ended, not once per
    /// child. The first failure in key order is returned as a step error (a retry invokes the
    /// failed ones again, and keeps the outputs of those that succeeded). Each child's
    /// `timeout` counts from when it was started. See [`Io::invoke`].
    pub async fn invoke_all<T: DeserializeOwned, P: Serialize>(
        &self,
        key: &str,
        job_id: &str,
        payloads: &[P],
        timeout: Duration,
    ) -> Result<Vec<T>, JobError> {
        let keys: Vec<String> = (0..payloads.len()).map(|i| format!("{key}:{i}")).collect();
        let ms = i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX / 2);
        // Serialized only for the children started now (once resumed, none is), straight to the
        // text their events store.
        let payload = |i: usize| {
            serde_json::value::to_raw_value(&payloads[i])
                .map_err(|e| JobError::fatal(format!("invoke {key:?}: a payload is not JSON: {e}")))
        };
        let outputs = self.exec.steps.invoke(&keys, job_id, payload, ms).await?;
        outputs
            .into_iter()
            .map(serde_json::from_value)
            .collect::<Result<Vec<T>, _>>()
            .map_err(|e| {
                JobError::fatal(format!(
                    "invoke {key:?}: an output does not fit the type asked for: {e}"
                ))
            })
    }

    /// Makes the callback step `key`: an unguessable URL path ([`Callback::url_path`]) that a
    /// `POST` of JSON resumes this run with, once, until `timeout` from now (fixed at the first
    /// call). Stored at once, so a post that arrives before the run waits is kept. Then
    /// [`Io::wait_for_callback`].
    ///
    /// ```no_run
    /// # async fn demo(io: flare::Io) -> Result<(), flare::JobError> {
    /// let approval = io.callback("approve", std::time::Duration::from_secs(86_400)).await?;
    /// io.run_task("ask", || async { /* send approval.url_path() to a person */ Ok(()) }).await?;
    /// let answer = io.wait_for_callback(&approval).await?; // Some(body) or None after a day
    /// # Ok(()) }
    /// ```
    pub async fn callback(&self, key: &str, timeout: Duration) -> Result<Callback, JobError> {
        let ms = i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX / 2);
        let (token, since, until) = self.exec.steps.callback(key, ms).await?;
        Ok(Callback {
            key: key.to_string(),
            token,
            since,
            until,
        })
    }

    /// Waits for `callback`'s post, holding no worker slot: the JSON body posted, or `None` when
    /// its deadline passed.
    pub async fn wait_for_callback(
        &self,
        callback: &Callback,
    ) -> Result<Option<serde_json::Value>, JobError> {
        self.exec
            .steps
            .callback_wait(
                &callback.key,
                &callback.token,
                callback.since,
                callback.until,
            )
            .await
    }

    /// This run's id.
    pub fn run_id(&self) -> &str {
        &self.exec.run_id
    }

    /// The id of the event that started this run.
    pub fn event_id(&self) -> &str {
        &self.exec.event_id
    }

    /// The name of the event that started this run.
    pub fn event_name(&self) -> &str {
        &self.exec.event_name
    }

    /// This attempt's number, from 1.
    pub fn attempt(&self) -> u32 {
        self.exec.attempt
    }

    /// Sends a chained event whose parent is this run. Sent at most once per call position, even
    /// when the run is retried.
    pub async fn send_event<T: Serialize + ?Sized>(
        &self,
        name: &str,
        payload: &T,
    ) -> Result<StoredEvent, Error> {
        self.send_event_with(SendEvent::new(name, payload)).await
    }

    /// Sends a typed chained event.
    pub async fn send<E: Event>(&self, event: &E) -> Result<StoredEvent, Error> {
        self.send_event(E::NAME, event).await
    }

    /// Sends several chained events in one transaction, all or none; each `(key, event)` gets the
    /// id `<run id>-<key>`, so answering the same keys again (a retried run) sends nothing twice.
    pub(crate) async fn send_keyed(
        &self,
        events: Vec<(String, SendEvent)>,
    ) -> Result<Vec<StoredEvent>, Error> {
        let now = self.exec.clock.now_ms();
        let source = Source::Job(self.exec.run_id.to_string());
        let rows = events
            .into_iter()
            .map(|(key, event)| {
                let event = event.id(format!("{}-{key}", self.exec.run_id));
                prepare(event, &source, Some(self.exec.run_id.to_string()), now)
            })
            .collect::<Result<Vec<_>, _>>()?;
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let inserted = self.exec.store.event_insert_many(rows).await?;
        inserted.iter().for_each(crate::send::counted);
        Ok(inserted.into_iter().map(|i| i.event).collect())
    }

    /// Sends a chained event with options. An explicit `.id(key)` is used as the idempotency key
    /// within this run instead of the call order.
    pub async fn send_event_with(&self, event: SendEvent) -> Result<StoredEvent, Error> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        let (key, step) = match &event.id {
            Some(key) => (
                format!("{}-{key}", self.exec.run_id),
                format!("{EVENT_KEY_PREFIX}{key}"),
            ),
            None => (
                format!("{}-{n}", self.exec.run_id),
                format!("{EVENT_KEY_PREFIX}{n}"),
            ),
        };
        let started_at = self.exec.clock.now_ms();
        let event = event.id(key);
        let sent = send_with(
            &self.exec.store,
            &self.exec.clock,
            event,
            Source::Job(self.exec.run_id.to_string()),
            Some(self.exec.run_id.to_string()),
        )
        .await
        .map(|inserted| inserted.event)?;
        self.exec
            .steps
            .event_sent(&step, &sent.id, started_at)
            .await;
        Ok(sent)
    }
}
