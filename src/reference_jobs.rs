//! The seed's reference jobs, run by `flare serve`, with the seed's typed payloads:
//!
//! | job | trigger | does |
//! |---|---|---|
//! | `send-welcome-email` | `user.created` | logs the welcome email it would send |
//! | `track-signup` | `user.created` | logs the signup for analytics |
//! | `process-upload` | `file.uploaded` | "processes" the file and sends `file.processed` |
//! | `notify-file-processed` | `file.processed` | logs the result |
//! | `record-payment` | `payment.processed` | books the payment |
//! | `record-payment-succeeded` | `payment.succeeded` | books a provider-confirmed payment |
//! | `send-reminder` | `reminder.send` | logs the reminder it would send |
//! | `sync-customer` | `customer.synced` | one at a time per customer, four at once in all (the group `crm-api`): records when it started and ended |

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::client::{Client, Error};
use crate::io::Io;
use crate::job::{event_trigger, Event, Job};
use crate::model::ConcurrencyLimit;

/// `user.created`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct UserCreated {
    /// Email address.
    pub email: String,
    /// Display name.
    #[serde(default)]
    pub name: Option<String>,
    /// The user's id.
    pub user_id: String,
}
impl Event for UserCreated {
    const NAME: &'static str = "user.created";
}

/// `payment.processed`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PaymentProcessed {
    /// Amount in the currency's minor unit.
    pub amount: f64,
    /// ISO currency code.
    pub currency: String,
    /// The paying customer.
    pub customer_id: String,
}
impl Event for PaymentProcessed {
    const NAME: &'static str = "payment.processed";
}

/// `payment.succeeded`, as the payments webhook sends it (fields may be absent).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PaymentSucceeded {
    /// Amount in minor units.
    #[serde(default)]
    pub amount: Option<f64>,
    /// Currency.
    #[serde(default)]
    pub currency: Option<String>,
    /// Customer.
    #[serde(default)]
    pub customer_id: Option<String>,
}

/// `file.uploaded`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FileUploaded {
    /// The file's id.
    pub file_id: String,
    /// Its name.
    pub filename: String,
}
impl Event for FileUploaded {
    const NAME: &'static str = "file.uploaded";
}

/// `file.processed`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FileProcessed {
    /// The file's id.
    pub file_id: String,
    /// What processing found.
    pub processing_result: String,
}
impl Event for FileProcessed {
    const NAME: &'static str = "file.processed";
}

/// `reminder.send`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReminderSend {
    /// Who to remind.
    pub user_id: String,
    /// What to say.
    pub message: String,
}
impl Event for ReminderSend {
    const NAME: &'static str = "reminder.send";
}

/// `customer.synced`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CustomerSynced {
    /// The customer.
    pub customer_id: String,
    /// How long the sync takes, ms (at most 1,000).
    #[serde(default)]
    pub sleep_ms: u64,
}
impl Event for CustomerSynced {
    const NAME: &'static str = "customer.synced";
}

/// Wall-clock time in microseconds, comparable across processes on one machine.
fn wall_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The reference jobs.
pub fn all() -> Vec<Job> {
    vec![
        Job::new("send-welcome-email", "Send welcome email", "1.0.0").on(
            |p: UserCreated, io: Io| async move {
                let who = p.name.as_deref().unwrap_or("there");
                io.logger.info(format!(
                    "sending welcome email to {} (hello {who})",
                    p.email
                ));
                Ok(json!({ "sent": true, "to": p.email }))
            },
        ),
        Job::new("track-signup", "Track signup", "1.0.0").on(|p: UserCreated, io: Io| async move {
            io.logger
                .info(format!("tracked signup of user {}", p.user_id));
            Ok(json!({ "tracked": true, "userId": p.user_id }))
        }),
        Job::new("process-upload", "Process upload", "1.0.0").on(
            |p: FileUploaded, io: Io| async move {
                io.logger
                    .info(format!("processing {} ({})", p.filename, p.file_id));
                let processed = FileProcessed {
                    file_id: p.file_id.clone(),
                    processing_result: format!("processed {}", p.filename),
                };
                let sent = io.send(&processed).await?;
                Ok(json!({ "fileId": p.file_id, "sentEventId": sent.id }))
            },
        ),
        Job::new("notify-file-processed", "Notify file processed", "1.0.0").on(
            |p: FileProcessed, io: Io| async move {
                io.logger.info(format!(
                    "file {} processed: {}",
                    p.file_id, p.processing_result
                ));
                Ok(json!({ "notified": true }))
            },
        ),
        Job::new("record-payment", "Record payment", "1.0.0").on(
            |p: PaymentProcessed, io: Io| async move {
                io.logger.info(format!(
                    "recorded {} {} from {}",
                    p.amount, p.currency, p.customer_id
                ));
                Ok(json!({ "recorded": true }))
            },
        ),
        Job::new(
            "record-payment-succeeded",
            "Record succeeded payment",
            "1.0.0",
        )
        .trigger(event_trigger("payment.succeeded"))
        .run(|p: PaymentSucceeded, io: Io| async move {
            io.logger.info(format!(
                "recorded succeeded payment of {:?} {:?} from {:?}",
                p.amount, p.currency, p.customer_id
            ));
            Ok(json!({ "recorded": true }))
        }),
        Job::new("send-reminder", "Send reminder", "1.0.0").on(
            |p: ReminderSend, io: Io| async move {
                io.logger
                    .info(format!("reminding {}: {}", p.user_id, p.message));
                Ok(json!({ "reminded": p.user_id }))
            },
        ),
        Job::new("sync-customer", "Sync customer to the CRM", "1.0.0")
            .concurrency_limit(ConcurrencyLimit::key(1, "event.payload.customerId"))
            .concurrency_limit(ConcurrencyLimit::group(4, "crm-api"))
            .on(|p: CustomerSynced, _io: Io| async move {
                let start_us = wall_us();
                tokio::time::sleep(std::time::Duration::from_millis(p.sleep_ms.min(1_000))).await;
                let end_us = wall_us();
                Ok(json!({
                    "customerId": p.customer_id,
                    "startUs": start_us,
                    "endUs": end_us,
                    "pid": std::process::id(),
                }))
            }),
    ]
}

/// Defines every reference job on `client` and waits until the definitions are stored.
pub async fn define_all(client: &Client) -> Result<(), Error> {
    for job in all() {
        client.register_job(job).await?;
    }
    Ok(())
}
