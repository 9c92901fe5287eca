//! The nouns every layer shares: events, runs, steps, log lines, the stored job definition, its
//! retry policy and the error a job returns, delays. Plain data and the rules on it (event names,
//! delays, backoff); nothing here does I/O or knows the store, the engine or HTTP.
//!
//! Field names serialize in camelCase, as in the seed.

pub mod cancel;
pub mod cel;
pub mod debounce;
pub mod delay;
pub mod event;
pub mod flow;
pub mod job;
mod period;
pub mod priority;
pub mod rate;
pub mod retry;
pub mod run;
pub mod step;
pub mod throttle;
pub mod wait;

pub use crate::clock::ms_to_time;
pub use cancel::CancelOn;
pub use cel::{CelKey, EventFields};
pub use debounce::{Debounce, DebounceWindow};
pub use delay::{Delay, DelaySpec, DelayUnits, MAX_DELAY};
pub use event::{
    validate_event_name, Event, InvalidEventName, Source, StoredEvent, MAX_EVENT_NAME_LEN,
};
pub use flow::{Concurrency, ConcurrencyLimit, LimitScope, RunSlots};
pub use job::{InvalidJob, JobError, JobSpec};
pub use priority::Priority;
pub use rate::{RateLimit, RateLimitSpec};
pub use retry::RetryPolicy;
pub use run::{Attempt, Level, LogLine, Run, RunStatus};
pub use step::{Invoked, Step, StepKind, StepStatus, StepsByKey};
pub use throttle::{Throttle, ThrottleSpec};
pub use wait::{EventWait, WaitedEvent};
