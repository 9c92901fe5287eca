//! The onboarding workflow (issue 27's "done means"): create the account, wait up to three days
//! for `user.verified` of this user, else send a reminder; then invoke `send-tips` for each of the
//! user's teams and report when all are done; alert on failure. Every wait holds no worker and
//! is in the database: a restart in the middle of either loses nothing
//! (`tests/engine/onboarding.rs` restarts in each).

use std::time::Duration;

use flare::{event_trigger, Io, Job, JobError, RunFailure, WaitFor};
use serde::Deserialize;
use serde_json::{json, Value};

/// `user.created`'s payload.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewUser {
    pub user_id: String,
    pub teams: Vec<Value>,
}

pub fn onboarding() -> Job {
    Job::new("onboarding", "Onboarding", "1.0.0")
        .trigger(event_trigger("user.created"))
        .run(|user: NewUser, io: Io| async move {
            let account: String = io
                .run_task("account", || create_account(&user.user_id))
                .await?;
            let three_days = WaitFor::timeout(Duration::from_secs(3 * 86_400));
            let verified = io
                .wait_for_event(
                    "verified",
                    "user.verified",
                    three_days.matching("payload.userId"),
                )
                .await?;
            if verified.is_none() {
                io.run_task("remind", || remind(&user.user_id)).await?;
            }
            let tips: Vec<Value> = io
                .invoke_all("tips", "send-tips", &user.teams, Duration::from_secs(3600))
                .await?;
            io.logger.info(format!("tips sent to {} teams", tips.len()));
            Ok(json!({ "account": account, "verified": verified.is_some(), "teams": tips.len() }))
        })
        .on_failure(|failed: RunFailure, io: Io| async move {
            io.logger.error(format!(
                "onboarding run {} failed: {:?}",
                failed.run_id, failed.error
            ));
            Ok(())
        })
}

/// One team's tips; a team `{"fail": true}` cannot be reached.
pub fn send_tips() -> Job {
    Job::new("send-tips", "Send tips", "1.0.0")
        .trigger(event_trigger("tips.requested"))
        .run(|team: Value, _io: Io| async move {
            if team["fail"] == json!(true) {
                return Err(JobError::fatal(format!(
                    "team {} cannot be reached",
                    team["name"]
                )));
            }
            Ok(json!({ "team": team["name"] }))
        })
}

async fn create_account(user_id: &str) -> Result<String, JobError> {
    Ok(format!("acct-{user_id}"))
}

async fn remind(user_id: &str) -> Result<String, JobError> {
    Ok(format!("reminded {user_id}"))
}
