//! Workers (`/workers`): the processes (nodes) running on this database, from their beats: each
//! one's name (`--node-name`), the Flare version it runs, the runs it executes now against its
//! concurrency, the jobs it runs, when it started and its last beat. Nodes not heard from for
//! 20 s are listed apart, as gone; a node that shut down cleanly removes itself.

use axum::extract::State;
use maud::{html, Markup};

use super::page::{self, layout, PageResult};
use crate::http::AppState;
use crate::model::ms_to_time;
use crate::store::NodeSummary;

/// Job ids listed on a node's row; more are counted (all of them on hover).
const JOBS_SHOWN: usize = 6;

/// `GET /workers`.
pub async fn page(State(state): State<AppState>) -> PageResult {
    let now = state.client.clock().now_ms();
    let nodes = state.client.store().nodes_list(now).await?;
    let (live, gone): (Vec<&NodeSummary>, Vec<&NodeSummary>) = nodes.iter().partition(|n| n.live);
    let this = state.client.engine().node_id().to_string();
    let body = html! {
        div.title-row {
            h1 { "Workers" }
            span.muted.as-of { "as of " (ms_to_time(now).format("%H:%M:%S")) " UTC" }
        }
        (page::live("workers-live", html! {
            @if live.is_empty() {
                p.muted.empty { "No live process: nothing runs jobs on this database now." }
            } @else {
                (table(&live, &this))
            }
            @if !gone.is_empty() {
                h2 { "Gone (no beat for 20 s)" }
                (table(&gone, &this))
            }
        }))
    };
    Ok(layout(&state, "Workers", "/workers", body))
}

fn table(nodes: &[&NodeSummary], this: &str) -> Markup {
    html! {
        table.workers {
            thead { tr {
                th { "Node" } th { "Version" } th { "Running" } th { "Jobs" } th { "Started (UTC)" } th { "Last beat (UTC)" }
            } }
            tbody {
                @for n in nodes {
                    tr data-node=(n.id) {
                        td {
                            span.mono.node { (n.id) }
                            @if n.id == this { " " span.muted { "(this process)" } }
                        }
                        td { @if n.version.is_empty() { span.muted { "—" } } @else { (n.version) } }
                        td.num.running { (n.running) " / " (n.concurrency) }
                        td.jobs {
                            @if n.jobs.is_empty() { span.muted { "none" } }
                            @for (i, j) in n.jobs.iter().take(JOBS_SHOWN).enumerate() {
                                @if i > 0 { ", " }
                                a href={ "/jobs#job-" (page::url_encode(j)) } { code { (j) } }
                            }
                            @if n.jobs.len() > JOBS_SHOWN {
                                " " span.muted title=(n.jobs.join(", ")) { "+" (n.jobs.len() - JOBS_SHOWN) " more" }
                            }
                        }
                        td { (page::time(n.started_at)) }
                        td { (page::time(n.seen_at)) }
                    }
                }
            }
        }
    }
}
