//! The workers page (issue 25): each live process with its name, version, runs executing
//! against its concurrency, jobs and last beat.

use crate::fixture::{fixture, row};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workers_page_lists_the_live_nodes_with_what_they_run() {
    let f = fixture().await;
    f.client.engine().beat().await.expect("beat");
    let page = f.page("/workers").await;
    assert!(page.contains("href=\"/workers\""), "in the navigation");
    let node = f.client.engine().node_id();
    let me = row(&page, "data-node", node);
    assert!(me.contains("(this process)"), "{me}");
    assert!(me.contains(env!("CARGO_PKG_VERSION")), "its version: {me}");
    assert!(me.contains("0 / 100"), "runs executing / concurrency: {me}");
    assert!(me.contains("/jobs#job-greet"), "its jobs: {me}");
    assert!(!page.contains("Gone (no beat"), "{page}");
}
