//! Durable steps in the store: a step to record under a run's lease ([`NewStep`]), a run to
//! start for an invoke step ([`NewChild`]).

use serde_json::Value;

use super::runs::Lease;
use crate::model::{StepKind, StepStatus};

/// A step to record for a run that holds a lease (see [`crate::store::Store::step_record`]).
#[derive(Debug, Clone)]
pub struct NewStep {
    /// The run and the lease token of the attempt recording it (fencing).
    pub lease: Lease,
    /// Unique within the run.
    pub key: String,
    /// Task, wait or event.
    pub kind: StepKind,
    /// Succeeded, failed or waiting.
    pub status: StepStatus,
    /// The run's attempt.
    pub attempt: u32,
    /// When the step started, ms.
    pub started_at: i64,
    /// When it ended, ms.
    pub finished_at: Option<i64>,
    /// A wait's due time, ms.
    pub wait_until: Option<i64>,
    /// A succeeded task's result.
    pub output: Option<Value>,
    /// A failed task's error.
    pub error: Option<String>,
    /// What the run page shows for it when its key says little (a Trigger.dev v2 task's name
    /// and key, whose step key is a hash); kept when `None`.
    pub label: Option<String>,
}

/// A run to start for an invoke step of the run holding a lease (see
/// [`crate::store::Store::runs_invoke`]): a run of the invoked job alone, whose parent waits for
/// it under the step `key` until `until`.
#[derive(Debug, Clone)]
pub struct NewChild {
    /// The caller's step key.
    pub key: String,
    /// The id of the child's event, its idempotency key
    /// ([`crate::model::wait::invoke_event_id`]).
    pub event_id: String,
    /// The child's payload, as JSON text (valid by its type: made by
    /// `serde_json::value::to_raw_value`): the event stores it as is, and it is parsed only for a
    /// job whose runs are queued by what it holds ([`NewChild::payload_for`]).
    pub payload: Box<serde_json::value::RawValue>,
    /// When the caller stops waiting for it (the step's timeout), ms.
    pub until: i64,
}

impl NewChild {
    /// The payload as a run of `job` is queued with it: parsed when `job` reads it to queue a
    /// run (its flow-control keys, priority, cancel-on matches), else `null`, never read (a
    /// fan-out of thousands parses none).
    pub fn payload_for(&self, job: &crate::model::JobSpec) -> Result<Value, super::Error> {
        if !job.queues_by_payload() {
            return Ok(Value::Null);
        }
        serde_json::from_str(self.payload.get()).map_err(|e| {
            super::Error::Invalid(format!(
                "the payload of invoke step {:?} is not JSON: {e}",
                self.key
            ))
        })
    }
}
