//! One job id, one owner: who may store a job definition over the one stored under its id, and
//! the note a change of owner leaves on the job (shown on the jobs page). Both backends apply it
//! the same way, inside the transaction that stores the definition.
//!
//! The rule: a job defined in code (by a process starting now) displaces a stored endpoint job
//! with the same id, with a warning and a note; the endpoint's index of that id is then refused
//! (409) while a live node defines it in code ([`super::endpoints`]'s `check_owners`), and the
//! registry runs an endpoint's job only while the endpoint owns it. An endpoint may take over a
//! job defined in code that no live node defines, also with a note. An endpoint never takes
//! another endpoint's job.

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::model::ms_to_time;

/// What storing a definition does to the job's owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OwnerChange {
    /// A new job, or the same owner again: stored, its note kept.
    Keep,
    /// Another endpoint's job: refused, nothing written.
    Refuse,
    /// A definition from code over endpoint `0`'s job: stored, owned by code, noted.
    Displace(String),
    /// An endpoint's definition over a job defined in code (that no live node defines; the
    /// caller checked): stored, owned by the endpoint, noted.
    TakeOver,
}

/// What happens when `incoming` (an endpoint id, or `None` for code) stores a job whose stored
/// owner is `stored` (`None`: no such job; `Some(None)`: defined in code).
pub(crate) fn owner_change(stored: Option<Option<&str>>, incoming: Option<&str>) -> OwnerChange {
    match (stored, incoming) {
        (None, _) => OwnerChange::Keep,
        (Some(None), None) => OwnerChange::Keep,
        (Some(Some(old)), Some(new)) if old == new => OwnerChange::Keep,
        (Some(Some(_)), Some(_)) => OwnerChange::Refuse,
        (Some(Some(old)), None) => OwnerChange::Displace(old.to_string()),
        (Some(None), Some(_)) => OwnerChange::TakeOver,
    }
}

/// What storing a job definition did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Put {
    /// Stored (new, or the same owner again).
    Stored,
    /// Refused: another endpoint serves the job.
    Refused,
    /// Stored from code over the job of the endpoint at this URL.
    Displaced(String),
}

/// The note a displaced endpoint job leaves on the job.
pub(crate) fn displaced_note(url: &str) -> String {
    format!(
        "defined in code; it displaced the job with this id that the endpoint {url} served \
         (one job id, one owner)"
    )
}

/// The note an endpoint's take-over of a job defined in code leaves on the job.
pub(crate) const TAKE_OVER_NOTE: &str = "served by its endpoint; it took over a job with this id \
     defined in code, which no running process defined (one job id, one owner)";

/// A stored job's owner as the placement reads it: its endpoint (`None`: defined in code) and
/// the note of its last change of owner.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JobOwner {
    /// The job id.
    pub(crate) job: String,
    /// The endpoint serving it.
    pub(crate) endpoint: Option<String>,
    /// The note and when it was written, ms.
    pub(crate) note: Option<(String, i64)>,
}

/// The last change of a job's owner, as the jobs list shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerNote {
    /// What happened.
    pub message: String,
    /// When.
    pub at: DateTime<Utc>,
}

impl OwnerNote {
    /// The note of a stored (`message`, ms) pair.
    pub(crate) fn new((message, at): (String, i64)) -> Self {
        Self {
            message,
            at: ms_to_time(at),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_displaces_an_endpoint_and_endpoints_never_take_each_others_jobs() {
        assert_eq!(owner_change(None, None), OwnerChange::Keep);
        assert_eq!(owner_change(None, Some("ep_a")), OwnerChange::Keep);
        assert_eq!(owner_change(Some(None), None), OwnerChange::Keep);
        assert_eq!(
            owner_change(Some(Some("ep_a")), Some("ep_a")),
            OwnerChange::Keep
        );
        assert_eq!(
            owner_change(Some(Some("ep_a")), Some("ep_b")),
            OwnerChange::Refuse
        );
        assert_eq!(
            owner_change(Some(Some("ep_a")), None),
            OwnerChange::Displace("ep_a".into())
        );
        assert_eq!(
            owner_change(Some(None), Some("ep_a")),
            OwnerChange::TakeOver
        );
    }
}
