//! The onboarding workflow of `jobs.rs`, run once: a user signs up with five teams and verifies
//! their address; the run resumes from its wait, fans out to `send-tips` for each team and ends
//! when all five are done. `cargo run --example onboarding` (a fresh SQLite file in a temp
//! directory); the dashboard of `flare serve` on that file shows the run, its wait and children.

mod jobs;

use std::time::Duration;

use flare::{Client, RunStatus};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("flare-onboarding-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let url = format!("sqlite://{}", dir.join("app.db").display());
    let client = Client::builder(&url).connect().await?;
    client.register_job(jobs::onboarding()).await?;
    client.register_job(jobs::send_tips()).await?;

    let teams: Vec<_> = (1..=5)
        .map(|n| json!({ "name": format!("team-{n}") }))
        .collect();
    let created = client
        .send_event("user.created", &json!({ "userId": "u_1", "teams": teams }))
        .await?;
    let run_id = created.run_ids[0].clone();
    // The run waits for the verification, holding no worker.
    while client
        .store()
        .run_detail(&run_id)
        .await?
        .and_then(|d| d.wait)
        .is_none()
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    client
        .send_event("user.verified", &json!({ "userId": "u_1" }))
        .await?;
    let run = loop {
        let d = client
            .store()
            .run_detail(&run_id)
            .await?
            .ok_or("the run is gone")?;
        if d.run.status.is_terminal() {
            break d.run;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    println!(
        "onboarding {}: {:?} {}",
        run.id,
        run.status,
        run.output.unwrap_or_default()
    );
    client.shutdown().await;
    std::fs::remove_dir_all(&dir)?;
    if run.status == RunStatus::Succeeded {
        Ok(())
    } else {
        Err("the onboarding run did not succeed".into())
    }
}
