//! An online shop's background jobs on Flare, in the shop's own binary.
//!
//! `order.placed` → `charge-order` charges the card and sends `order.charged` →
//! `email-receipt` sends the receipt; `order.charged` also starts `update-stats` (broadcast).
//!
//! ```sh
//! cargo run -p rust-app -- serve          # the API and dashboard on http://127.0.0.1:3000
//! curl -s -X POST http://127.0.0.1:3000/trigger -H 'Content-Type: application/json' \
//!   -d '{"event": "order.placed", "payload": {"orderId": "o_1", "email": "ada@example.com", "amountCents": 4200, "currency": "eur"}}'
//! ```
//!
//! `rust-app --help` lists everything else: `worker` (jobs only, next to one `serve`), `send`,
//! the same flags and variables as `flare`. The seed's demo jobs do not run here.

use std::process::ExitCode;
use std::time::Duration;

use flare::{Event, Io, Job, JobError, RetryPolicy};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// A customer placed an order.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct OrderPlaced {
    order_id: String,
    email: String,
    amount_cents: u64,
    currency: String,
}
impl Event for OrderPlaced {
    const NAME: &'static str = "order.placed";
}

/// The order's card was charged.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct OrderCharged {
    order_id: String,
    email: String,
    amount_cents: u64,
    currency: String,
    charge_id: String,
}
impl Event for OrderCharged {
    const NAME: &'static str = "order.charged";
}

fn main() -> ExitCode {
    flare::App::new("rust-app")
        .job(charge_order())
        .jobs([email_receipt(), update_stats()])
        .run()
}

/// Charges the order, then announces it. A payment provider that is down fails the attempt and
/// Flare retries it; an order of nothing fails at once.
fn charge_order() -> Job {
    Job::new("charge-order", "Charge the order", "1.0.0")
        .retry(RetryPolicy::default().delays(Duration::from_secs(1), Duration::from_secs(60)))
        .timeout(Duration::from_secs(30))
        .on(|order: OrderPlaced, io: Io| async move {
            if order.amount_cents == 0 {
                return Err(JobError::fatal("nothing to charge"));
            }
            // A real shop calls its payment provider here, with the run id as idempotency key.
            let charge_id = format!("ch_{}", io.run_id());
            io.logger.info(format!(
                "charged {} {} for order {}",
                order.amount_cents, order.currency, order.order_id
            ));
            // Chaining: the next jobs start from this event. A retried run does not send it twice.
            io.send(&OrderCharged {
                order_id: order.order_id,
                email: order.email,
                amount_cents: order.amount_cents,
                currency: order.currency,
                charge_id: charge_id.clone(),
            })
            .await?;
            Ok(json!({ "chargeId": charge_id }))
        })
}

/// Emails the receipt of a charged order.
fn email_receipt() -> Job {
    Job::new("email-receipt", "Email the receipt", "1.0.0").on(
        |charged: OrderCharged, io: Io| async move {
            io.logger.info(format!(
                "receipt for order {} ({}) sent to {}",
                charged.order_id, charged.charge_id, charged.email
            ));
            Ok(json!({ "sentTo": charged.email }))
        },
    )
}

/// Counts revenue per currency (a second job on `order.charged`: broadcast).
fn update_stats() -> Job {
    Job::new("update-stats", "Update revenue statistics", "1.0.0")
        .concurrency(1)
        .on(|charged: OrderCharged, io: Io| async move {
            io.logger.debug(format!(
                "{} {} more revenue",
                charged.amount_cents, charged.currency
            ));
            Ok(json!({ "currency": charged.currency, "amountCents": charged.amount_cents }))
        })
}
