//! What a run's and an event's pages link to beyond their own rows (issue 27): on a run, the
//! event that cancelled it, the run that invoked it and the runs it invoked with their states;
//! on an event, the runs it resumed (a wait for it) and those it cancelled (their job's
//! `cancel_on`). Shared by the `runs` and `events` screens.

use maud::{html, Markup};

use super::page;
use crate::store::{EventDetail, LinkedRun, RunDetail};

/// The run's links: cancelled by, invoked by, runs it invoked. Empty when it has none.
pub fn of_run(detail: &RunDetail) -> Markup {
    html! {
        @if detail.cancelled_by.is_some() || detail.parent_run_id.is_some() {
            dl.facts #run-links {
                @if let Some(by) = &detail.cancelled_by {
                    dt { "Cancelled by" }
                    dd #cancelled-by {
                        "event " a href=(page::event_href(&by.event_id)) { (by.event_name) } " "
                        span.mono.muted { (by.event_id) } " at " (page::time(by.at))
                    }
                }
                @if let Some(parent) = &detail.parent_run_id {
                    dt { "Invoked by" } dd #invoked-by { "run " (page::run_link(parent)) }
                }
            }
        }
        @if !detail.children.is_empty() {
            section #run-children {
                h2 { "Runs it invoked (" (detail.children.len()) ")" }
                (table(&detail.children, "Step"))
            }
        }
    }
}

/// The event's effects on runs it did not start. Empty when it had none.
pub fn of_event(detail: &EventDetail) -> Markup {
    html! {
        @if !detail.resumed_runs.is_empty() {
            section #event-resumed {
                h2 { "Waiting runs it resumed (" (detail.resumed_runs.len()) ")" }
                (table(&detail.resumed_runs, "Resumed"))
            }
        }
        @if !detail.cancelled_runs.is_empty() {
            section #event-cancelled {
                h2 { "Runs it cancelled (" (detail.cancelled_runs.len()) ")" }
                (table(&detail.cancelled_runs, "Cancelled"))
            }
        }
    }
}

/// Linked runs: job, state, the step or time that goes with each, and the run.
fn table(runs: &[LinkedRun], what: &str) -> Markup {
    html! {
        table.runs {
            thead { tr { th { "Job" } th { "State" } th { (what) } th { "Run" } } }
            tbody {
                @for r in runs {
                    tr data-run-id=(r.run_id) {
                        td { b { (r.job_id) } }
                        td { (page::badge(r.status.as_str())) }
                        td {
                            @if let Some(key) = &r.step_key { code { (key) } }
                            @else { (page::time_opt(r.at)) }
                        }
                        td { (page::run_link(&r.run_id)) }
                    }
                }
            }
        }
    }
}
