//! Scheduled jobs in the store: a schedule as stored with its next and last tick
//! ([`ScheduleState`]), the event a tick inserts (`tick_event`) and which tick a due schedule
//! fires (`tick_due`).

use super::events::NewEvent;
use crate::schedule::Schedule;

/// A scheduled job's schedule as stored, with its next and last tick (ms).
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleState {
    /// The job.
    pub job_id: String,
    /// Its schedule.
    pub schedule: Schedule,
    /// The next tick the scheduler fires.
    pub next_tick: i64,
    /// The last tick it fired, if any.
    pub last_tick: Option<i64>,
}

/// A row of `schedules` as read: job id, stored spec, time zone, next tick, last tick.
pub(crate) type ScheduleRow = (String, String, Option<String>, i64, Option<i64>);

/// The event that fires `job_id`'s `tick` (ms), inserted at `now`: id `schedule:<job>:<tick>` (so
/// a tick inserted twice is one event), name `schedule.<job>`, source `schedule`, payload
/// `{"ts": <tick>, "lastTimestamp": <previous tick or null>}` as RFC 3339 times (Trigger.dev's
/// scheduled payload).
pub(crate) fn tick_event(job_id: &str, tick: i64, last: Option<i64>, now: i64) -> NewEvent {
    let iso =
        |ms: i64| crate::model::ms_to_time(ms).to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    NewEvent {
        id: Schedule::event_id(job_id, tick),
        name: Schedule::event_name(job_id),
        payload: serde_json::json!({ "ts": iso(tick), "lastTimestamp": last.map(iso) }),
        context: None,
        source: "schedule".into(),
        parent_run_id: None,
        deliver_at: None,
        now,
    }
}

/// What firing a due schedule does: the tick it fires (the most recent one at or before `now`,
/// see [`crate::schedule`]'s catch-up rule) and the next tick after `now`, or `None` when the
/// schedule never fires again.
pub(crate) fn tick_due(schedule: &Schedule, due: i64, now: i64) -> (i64, Option<i64>) {
    let tick = schedule.latest_at(due, now);
    let next = match schedule.next_after(tick) {
        Some(n) if n > now => Some(n),
        _ => schedule.next_after(now),
    };
    (tick, next)
}
