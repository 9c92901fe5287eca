//! A small application with its own jobs: typed events, broadcast, chaining, a delayed reminder and
//! a flaky step that is retried. Run it with `cargo run --example signup`; it uses a fresh SQLite
//! file in a temp directory and exits when every run has finished.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use flare::{
    Client, Delay, EngineConfig, Event, Io, Job, JobError, RetryPolicy, RunStatus, SendEvent,
};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct UserCreated {
    user_id: String,
    email: String,
    name: Option<String>,
}
impl Event for UserCreated {
    const NAME: &'static str = "user.created";
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WelcomeSent {
    user_id: String,
}
impl Event for WelcomeSent {
    const NAME: &'static str = "email.sent";
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("flare-example-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let url = format!("sqlite://{}", dir.join("app.db").display());
    let config = EngineConfig {
        poll_interval: Duration::from_millis(50),
        ..EngineConfig::default()
    };
    let client = Client::builder(&url).config(config).connect().await?;

    // Broadcast: two jobs listen for user.created.
    client.define_job(
        Job::new("send-welcome-email", "Send welcome email", "1.0.0").on(
            |user: UserCreated, io: Io| async move {
                io.logger.info(format!("welcome {}", user.email));
                // Chaining: the next step starts from an event this run sends.
                io.send(&WelcomeSent {
                    user_id: user.user_id,
                })
                .await?;
                Ok(json!({ "sent": true }))
            },
        ),
    )?;
    let flaky_calls = Arc::new(AtomicU32::new(0));
    let calls = Arc::clone(&flaky_calls);
    client.define_job(
        Job::new("sync-crm", "Sync to CRM", "1.2.0")
            .retry(
                RetryPolicy::default().delays(Duration::from_millis(100), Duration::from_secs(1)),
            )
            .on(move |user: UserCreated, io: Io| {
                let calls = Arc::clone(&calls);
                async move {
                    if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                        io.logger.warn("CRM timed out; Flare will retry");
                        return Err(JobError::from("CRM unavailable"));
                    }
                    Ok(json!({ "crmId": format!("crm-{}", user.user_id) }))
                }
            }),
    )?;
    client.define_job(Job::new("log-email", "Log sent email", "1.0.0").on(
        |e: WelcomeSent, io: Io| async move {
            io.logger.info(format!("email to {} recorded", e.user_id));
            Ok(json!(null))
        },
    ))?;

    // The seed's helper: the first client is the process-wide default.
    let user = UserCreated {
        user_id: "u_1".into(),
        email: "ada@example.com".into(),
        name: Some("Ada".into()),
    };
    let event = flare::send_event(UserCreated::NAME, &user).await?;
    println!(
        "sent {} ({}), started {} runs",
        event.name,
        event.id,
        event.run_ids.len()
    );

    // A delayed event, cancelled before it is due.
    let reminder = client
        .send_event_with(
            SendEvent::new(
                "reminder.send",
                &json!({"userId": "u_1", "message": "finish your profile"}),
            )
            .delay(Delay::hours(24)),
        )
        .await?;
    client.cancel_event(&reminder.id).await?;
    println!("scheduled and cancelled reminder {}", reminder.id);

    // Wait for the whole chain to finish, then show what happened.
    let detail = loop {
        let d = client
            .store()
            .event_detail(&event.id)
            .await?
            .ok_or("event vanished")?;
        let chain_done = d.children.len() == 1;
        if chain_done && d.runs.iter().all(|r| r.status.is_terminal()) {
            break d;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for run in &detail.runs {
        println!(
            "  {} v{}: {} after {} attempt(s), output {}",
            run.job_id,
            run.job_version,
            run.status,
            run.attempt,
            run.output.clone().unwrap_or_default()
        );
        assert_eq!(run.status, RunStatus::Succeeded);
    }
    println!(
        "  chained: {} ({})",
        detail.children[0].name, detail.children[0].id
    );
    client.shutdown().await;
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
