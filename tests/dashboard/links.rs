//! What the run and event pages link to (issue 27): a run cancelled by an event names and links
//! it, a run shows the runs it invoked with their states and an invoked run its caller, and an
//! event page lists the runs it resumed and those it cancelled.

use std::time::Duration;

use flare::{event_trigger, CancelOn, Io, Job, RunStatus, WaitFor};
use serde_json::{json, Value};

use crate::fixture::fixture;
use crate::support::wait_for;

const DAY: Duration = Duration::from_secs(86_400);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_and_event_pages_show_what_cancelled_resumed_and_invoked_runs() {
    let f = fixture().await;
    f.client
        .define_job(
            Job::new("pack", "Pack", "1.0.0")
                .trigger(event_trigger("never.sent"))
                .run(|_p: Value, io: Io| async move {
                    io.wait("slowly", DAY).await;
                    Ok(json!("packed"))
                }),
        )
        .expect("define pack");
    f.client
        .define_job(
            Job::new("fulfil", "Fulfil", "1.0.0")
                .trigger(event_trigger("order.made"))
                .cancel_on(CancelOn::event("order.cancelled").matching("payload.orderId"))
                .run(|_p: Value, io: Io| async move {
                    io.wait_for_event(
                        "paid",
                        "invoice.paid",
                        WaitFor::timeout(DAY).matching("payload.orderId"),
                    )
                    .await?;
                    let packed: Value = io.invoke("pack", "pack", &json!({}), DAY).await?;
                    Ok(packed)
                }),
        )
        .expect("define fulfil");
    let made = f
        .client
        .send_event("order.made", &json!({ "orderId": "o1" }))
        .await
        .expect("send");
    let parent = made.run_ids[0].clone();
    let waits = |n: usize| {
        let f = &f;
        let parent = parent.clone();
        async move {
            let d = f
                .client
                .store()
                .run_detail(&parent)
                .await
                .expect("detail")?;
            (d.run.status == RunStatus::Queued && d.wait.is_some() && d.children.len() == n)
                .then_some(d)
        }
    };
    wait_for("the order to wait for its invoice", || waits(0)).await;
    let paid = f
        .client
        .send_event("invoice.paid", &json!({ "orderId": "o1" }))
        .await
        .expect("send");
    let page = f.page(&format!("/events/{}", paid.id)).await;
    assert!(page.contains("Waiting runs it resumed (1)"), "{page}");
    assert!(page.contains(&format!("/runs/{parent}")));
    let d = wait_for("the order to wait for its pack", || waits(1)).await;
    let child = d.children[0].run_id.clone();

    let page = f.page(&format!("/runs/{parent}")).await;
    assert!(page.contains("Runs it invoked (1)"), "{page}");
    assert!(page.contains(&format!("data-run-id=\"{child}\"")));
    assert!(page.contains("<code>pack</code>"), "the invoking step");
    let page = f.page(&format!("/runs/{child}")).await;
    assert!(page.contains("id=\"invoked-by\""), "{page}");
    assert!(page.contains(&format!("/runs/{parent}")));

    let cancelled = f
        .client
        .send_event("order.cancelled", &json!({ "orderId": "o1" }))
        .await
        .expect("send");
    let page = f.page(&format!("/runs/{parent}")).await;
    assert!(page.contains("id=\"cancelled-by\""), "{page}");
    assert!(page.contains(&format!("/events/{}", cancelled.id)));
    assert!(page.contains("st-cancelled"), "the child's state");
    let page = f.page(&format!("/events/{}", cancelled.id)).await;
    assert!(page.contains("Runs it cancelled (2)"), "{page}");
    assert!(page.contains(&format!("data-run-id=\"{parent}\"")));
    assert!(page.contains(&format!("data-run-id=\"{child}\"")));
}
