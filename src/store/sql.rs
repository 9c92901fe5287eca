//! SQL text both backends share: the event-status conditions of [`EventStatus`], `LIKE`
//! escaping for the payload search, and cutting a fetched page. Both backends name their tables
//! and columns alike, so these fragments are written once.

use super::query::{clamp_limit, Cursor, EventStatus, Page};

/// Runs of this event in any of these states exist.
fn runs_exist(states: &str) -> String {
    format!("EXISTS (SELECT 1 FROM runs r WHERE r.event_id = events.id AND r.status IN ({states}))")
}

/// The SQL condition selecting events in `status` (the rules of [`EventStatus`]).
pub(crate) fn status_condition(status: EventStatus) -> String {
    let active = runs_exist("'queued', 'running'");
    let failed = runs_exist("'failed'");
    let any = "EXISTS (SELECT 1 FROM runs r WHERE r.event_id = events.id)";
    match status {
        EventStatus::Scheduled => "delivered_at IS NULL AND cancelled_at IS NULL".into(),
        EventStatus::Cancelled => format!(
            "(cancelled_at IS NOT NULL OR (delivered_at IS NOT NULL AND {} AND NOT {}))",
            runs_exist("'cancelled'"),
            runs_exist("'queued', 'running', 'succeeded', 'failed'")
        ),
        EventStatus::NoRuns => {
            format!("delivered_at IS NOT NULL AND cancelled_at IS NULL AND NOT {any}")
        }
        EventStatus::Running => format!("cancelled_at IS NULL AND {active}"),
        EventStatus::Failed => format!("cancelled_at IS NULL AND NOT {active} AND {failed}"),
        EventStatus::Succeeded => format!(
            "cancelled_at IS NULL AND NOT {active} AND NOT {failed} AND {}",
            runs_exist("'succeeded'")
        ),
    }
}

/// Escapes `%`, `_` and `\` for a `LIKE` pattern whose escape character is `\` (SQLite's
/// `ESCAPE '\'`, PostgreSQL's default).
pub(crate) fn like_pattern(text: &str) -> String {
    let mut p = String::with_capacity(text.len() + 2);
    p.push('%');
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            p.push('\\');
        }
        p.push(c);
    }
    p.push('%');
    p
}

/// Cuts the extra row off and names the cursor of the next page.
pub(crate) fn page<T>(mut rows: Vec<(T, i64)>, limit: usize) -> Page<T> {
    let limit = clamp_limit(limit);
    let more = rows.len() > limit;
    rows.truncate(limit);
    let next_cursor = if more {
        rows.last().map(|(_, seq)| Cursor::after(*seq))
    } else {
        None
    };
    Page {
        items: rows.into_iter().map(|(item, _)| item).collect(),
        next_cursor,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_patterns_escape_wildcards() {
        assert_eq!(like_pattern("a%b_c\\"), "%a\\%b\\_c\\\\%");
    }
}
