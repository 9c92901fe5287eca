//! Durable steps in the store: a step to record under a run's lease ([`NewStep`]).

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
