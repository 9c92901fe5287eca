//! The onboarding workflow of `jobs.rs`, two ways:
//!
//! - `cargo run --example onboarding` runs it once and prints the outcome: a user signs up with
//!   five teams and verifies their address; the run resumes from its wait, fans out to
//!   `send-tips` for each team and ends when all five are done (a fresh SQLite file in a temp
//!   directory, removed after).
//! - `cargo run --example onboarding -- serve` runs its jobs in Flare's service, as an
//!   application built on `flare::App` does (data in `./flare.db`, API and dashboard on
//!   http://127.0.0.1:3000; `-- --help` lists the rest): send `user.created` and `user.verified`
//!   with `POST /trigger` and the run page shows the wait, its deadline and the children (the
//!   README's "Calling other jobs" has the commands). Stop and start it in the middle of the wait
//!   and the run still waits.

mod jobs;

use std::process::ExitCode;
use std::time::Duration;

use flare::{Client, RunStatus};
use serde_json::json;

fn main() -> ExitCode {
    if std::env::args_os().len() > 1 {
        return flare::App::new("onboarding")
            .jobs([jobs::onboarding(), jobs::send_tips()])
            .run();
    }
    let once = tokio::runtime::Runtime::new()
        .map_err(Into::into)
        .and_then(|runtime| runtime.block_on(once()));
    match once {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("onboarding: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One user through the workflow, on a SQLite file of its own.
async fn once() -> Result<(), Box<dyn std::error::Error>> {
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
