//! Schedules of scheduled jobs: a cron expression in a time zone, or a fixed interval, and the
//! tick arithmetic the scheduler needs (next tick, most recent tick).
//!
//! Cron expressions are parsed by `croner` (5 fields, or 6 with seconds first; `L`, `#`, `W`,
//! names such as `MON` and `JAN`), time zones by `chrono-tz` (IANA names). A tick is a time in
//! ms since the epoch; ticks are computed in the zone, so daylight saving is followed: a wall
//! clock time skipped by the change does not fire that day, one repeated fires once.
//!
//! **Catch-up.** The scheduler stores each schedule's next tick. When it finds that tick past
//! (Flare was down, or no node led), it fires once, for the most recent tick that passed, not
//! once per missed tick, and continues with the first tick after now. An interval keeps its
//! phase: ticks stay `first + k × interval`.

use std::str::FromStr;
use std::time::Duration;

use chrono::{TimeZone, Utc};

/// The most cron ticks skipped one by one when looking for the latest past tick; beyond, the
/// search jumps (see [`Schedule::latest_at`]).
const MAX_STEPS: usize = 10_000;

/// Why a schedule was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InvalidSchedule {
    /// The cron expression does not parse.
    #[error("invalid cron expression {expr:?}: {reason} (expected 5 fields: minute hour day-of-month month day-of-week, e.g. \"0 9 * * 1-5\")")]
    Cron {
        /// The expression.
        expr: String,
        /// The parser's reason.
        reason: String,
    },
    /// The cron expression never matches a time (e.g. February 30th).
    #[error("cron expression {0:?} never fires")]
    Never(String),
    /// The time zone is not an IANA name.
    #[error("unknown time zone {0:?}: use an IANA name such as \"Europe/Paris\" or \"UTC\"")]
    Zone(String),
    /// The interval is under one second.
    #[error("interval {0:?} is too short: at least one second")]
    Interval(Duration),
    /// A payload filter on a schedule.
    #[error("a scheduled trigger takes no payload filter")]
    Filter,
}

/// When a scheduled job runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Schedule {
    /// A cron expression read in an IANA time zone.
    Cron {
        /// The expression as written.
        expr: String,
        /// The time zone's name (`UTC` by default).
        tz: String,
    },
    /// Every this long, from when the job is first defined.
    Interval(Duration),
}

impl Schedule {
    /// A cron schedule: `expr` read in `tz` (an IANA name; `None` is UTC). What a Trigger.dev
    /// `cronTrigger({ cron })` becomes.
    pub fn cron(expr: &str, tz: Option<&str>) -> Result<Self, InvalidSchedule> {
        let tz = tz.unwrap_or("UTC").to_string();
        let schedule = Schedule::Cron {
            expr: expr.trim().to_string(),
            tz,
        };
        let (cron, zone) = schedule.parsed_cron()?;
        // A pattern that never matches (30 February) is refused now rather than never firing.
        let now = zone.from_utc_datetime(&Utc::now().naive_utc());
        if cron.find_next_occurrence(&now, false).is_err() {
            return Err(InvalidSchedule::Never(expr.to_string()));
        }
        Ok(schedule)
    }

    /// An interval schedule, at least one second. What a Trigger.dev `intervalTrigger({ seconds })`
    /// becomes (`Schedule::interval(Duration::from_secs(seconds))`).
    pub fn interval(every: Duration) -> Result<Self, InvalidSchedule> {
        if every < Duration::from_secs(1) {
            return Err(InvalidSchedule::Interval(every));
        }
        Ok(Schedule::Interval(every))
    }

    /// The event name a scheduled job listens for, which the scheduler sends at each tick.
    pub fn event_name(job_id: &str) -> String {
        format!("schedule.{job_id}")
    }

    /// The event id of `job_id`'s tick at `tick` (ms): the same tick is the same event, however
    /// many times a scheduler inserts it.
    pub fn event_id(job_id: &str, tick: i64) -> String {
        format!("schedule:{job_id}:{tick}")
    }

    /// How it is stored: `cron:<expr>` or `interval:<ms>`, and the time zone of a cron schedule.
    pub fn to_stored(&self) -> (String, Option<String>) {
        match self {
            Schedule::Cron { expr, tz } => (format!("cron:{expr}"), Some(tz.clone())),
            Schedule::Interval(every) => (format!("interval:{}", every.as_millis()), None),
        }
    }

    /// Reads what [`Schedule::to_stored`] wrote.
    pub fn from_stored(spec: &str, tz: Option<&str>) -> Result<Self, InvalidSchedule> {
        if let Some(ms) = spec.strip_prefix("interval:") {
            let ms: u64 = ms.parse().map_err(|_| InvalidSchedule::Cron {
                expr: spec.to_string(),
                reason: "not a stored schedule".into(),
            })?;
            return Schedule::interval(Duration::from_millis(ms));
        }
        let expr = spec.strip_prefix("cron:").unwrap_or(spec);
        let schedule = Schedule::Cron {
            expr: expr.to_string(),
            tz: tz.unwrap_or("UTC").to_string(),
        };
        schedule.parsed_cron()?;
        Ok(schedule)
    }

    /// A short description: `cron 0 9 * * 1-5 (Europe/Paris)` or `every 90 s`.
    pub fn describe(&self) -> String {
        match self {
            Schedule::Cron { expr, tz } => format!("cron {expr} ({tz})"),
            Schedule::Interval(every) => format!("every {}", describe_interval(*every)),
        }
    }

    fn parsed_cron(&self) -> Result<(croner::Cron, chrono_tz::Tz), InvalidSchedule> {
        let Schedule::Cron { expr, tz } = self else {
            return Err(InvalidSchedule::Cron {
                expr: String::new(),
                reason: "not a cron schedule".into(),
            });
        };
        let zone = chrono_tz::Tz::from_str(tz).map_err(|_| InvalidSchedule::Zone(tz.clone()))?;
        let cron = croner::Cron::from_str(expr).map_err(|e| InvalidSchedule::Cron {
            expr: expr.clone(),
            reason: e.to_string(),
        })?;
        Ok((cron, zone))
    }

    /// The first tick strictly after `after` (ms). An interval's first tick is one interval after
    /// `after`; `None` when a cron expression has no later match.
    pub fn next_after(&self, after: i64) -> Option<i64> {
        match self {
            Schedule::Interval(every) => Some(after.saturating_add(ms(*every))),
            Schedule::Cron { .. } => {
                let (cron, zone) = self.parsed_cron().ok()?;
                let from = zone.timestamp_millis_opt(after).single()?;
                cron.find_next_occurrence(&from, false)
                    .ok()
                    .map(|t| t.timestamp_millis())
            }
        }
    }

    /// The most recent tick at or before `now`, given the stored next tick `due` (at or before
    /// `now`): what one firing after downtime stands for (see the module's catch-up rule).
    pub fn latest_at(&self, due: i64, now: i64) -> i64 {
        if now <= due {
            return due;
        }
        match self {
            Schedule::Interval(every) => {
                let every = ms(*every).max(1);
                due + (now - due) / every * every
            }
            Schedule::Cron { .. } => {
                let Ok((cron, zone)) = self.parsed_cron() else {
                    return due;
                };
                match zone.timestamp_millis_opt(now).single() {
                    Some(at) => cron
                        .find_previous_occurrence(&at, true)
                        .map(|t| t.timestamp_millis())
                        .ok()
                        .filter(|t| *t >= due)
                        .unwrap_or(due),
                    None => {
                        let mut tick = due;
                        for _ in 0..MAX_STEPS {
                            match self.next_after(tick) {
                                Some(next) if next <= now => tick = next,
                                _ => break,
                            }
                        }
                        tick
                    }
                }
            }
        }
    }
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn describe_interval(every: Duration) -> String {
    let s = every.as_secs();
    if every.subsec_millis() != 0 {
        format!("{} ms", every.as_millis())
    } else if s % 86_400 == 0 {
        format!("{} d", s / 86_400)
    } else if s % 3_600 == 0 {
        format!("{} h", s / 3_600)
    } else if s % 60 == 0 {
        format!("{} min", s / 60)
    } else {
        format!("{s} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> i64 {
        chrono::DateTime::parse_from_rfc3339(s)
            .expect("time")
            .timestamp_millis()
    }

    #[test]
    fn cron_ticks_follow_the_time_zone_and_daylight_saving() {
        let paris = Schedule::cron("0 9 * * 1-5", Some("Europe/Paris")).expect("valid");
        // Monday 2026-01-05, winter: 09:00 Paris is 08:00 UTC.
        assert_eq!(
            paris.next_after(at("2026-01-05T00:00:00Z")),
            Some(at("2026-01-05T08:00:00Z"))
        );
        // Monday 2026-07-06, summer: 07:00 UTC.
        assert_eq!(
            paris.next_after(at("2026-07-06T00:00:00Z")),
            Some(at("2026-07-06T07:00:00Z"))
        );
        // Friday after the tick: next is Monday.
        assert_eq!(
            paris.next_after(at("2026-01-09T08:00:00Z")),
            Some(at("2026-01-12T08:00:00Z"))
        );
        let utc = Schedule::cron("*/5 * * * *", None).expect("valid");
        assert_eq!(
            utc.next_after(at("2026-01-05T00:00:00Z")),
            Some(at("2026-01-05T00:05:00Z"))
        );
    }

    #[test]
    fn the_latest_tick_is_the_most_recent_one_passed() {
        let hourly = Schedule::cron("0 * * * *", None).expect("valid");
        let due = at("2026-01-05T01:00:00Z");
        assert_eq!(
            hourly.latest_at(due, at("2026-01-07T05:30:00Z")),
            at("2026-01-07T05:00:00Z")
        );
        assert_eq!(hourly.latest_at(due, due), due);
        let every = Schedule::interval(Duration::from_secs(60)).expect("valid");
        assert_eq!(
            every.latest_at(1_000, 1_000 + 60_000 * 10 + 5),
            1_000 + 60_000 * 10
        );
        assert_eq!(every.next_after(1_000), Some(61_000));
    }

    #[test]
    fn bad_schedules_say_what_is_wrong() {
        assert!(matches!(
            Schedule::cron("not a cron", None),
            Err(InvalidSchedule::Cron { .. })
        ));
        assert!(matches!(
            Schedule::cron("0 9 * * *", Some("Mars/Olympus")),
            Err(InvalidSchedule::Zone(_))
        ));
        assert!(matches!(
            Schedule::interval(Duration::from_millis(10)),
            Err(InvalidSchedule::Interval(_))
        ));
    }

    #[test]
    fn stored_schedules_read_back() {
        for s in [
            Schedule::cron("0 9 * * 1-5", Some("Europe/Paris")).expect("valid"),
            Schedule::interval(Duration::from_secs(90)).expect("valid"),
        ] {
            let (spec, tz) = s.to_stored();
            assert_eq!(Schedule::from_stored(&spec, tz.as_deref()), Ok(s));
        }
        assert_eq!(
            Schedule::interval(Duration::from_secs(90))
                .expect("valid")
                .describe(),
            "every 90 s"
        );
    }
}
