//! `flare webhook send <source> <file>` and `flare webhook fixtures`: test a source without its
//! provider. `send` reads the source's settings from the server (`GET /api/webhook-sources/{id}`,
//! with `FLARE_API_KEY`), signs the file's bytes exactly as the provider would
//! ([`crate::webhooks::sign`]) with the secret given by `--secret` or the environment, posts them
//! to `/webhooks/{id}`, and prints the answer and the events it created.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::Value;

use crate::webhooks::fixtures;
use crate::webhooks::sign::{self, SignParams};
use crate::webhooks::source::SourceSpec;

/// `flare webhook …`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Sign a JSON body as the source's provider would and deliver it to a running server.
    Send(SendArgs),
    /// Write the bundled delivery bodies (one or more per preset) to a directory.
    Fixtures(FixturesArgs),
}

#[derive(clap::Args)]
struct SendArgs {
    /// The source's id (the last segment of /webhooks/{id}).
    source: String,
    /// The body to send, byte for byte (e.g. one written by `flare webhook fixtures`).
    file: PathBuf,
    /// The signing secret (default: FLARE_WEBHOOK_SECRET, or STRIPE_WEBHOOK_SECRET /
    /// CLERK_WEBHOOK_SECRET for the payments and auth sources).
    #[arg(long, env = "FLARE_WEBHOOK_SECRET", hide_env_values = true)]
    secret: Option<String>,
    /// The provider's event type where it travels in a header (GitHub's X-GitHub-Event,
    /// Shopify's X-Shopify-Topic); by default from the file name (issues.opened.json → issues).
    #[arg(long)]
    event: Option<String>,
    /// The delivery id to send where the provider sends one in a header (default: a new one).
    #[arg(long)]
    delivery_id: Option<String>,
    /// The server.
    #[arg(long, env = "FLARE_URL", default_value = "http://127.0.0.1:3000")]
    url: String,
}

#[derive(clap::Args)]
struct FixturesArgs {
    /// Where to write them (`<dir>/<preset>/<file>`).
    #[arg(long, default_value = "webhook-fixtures")]
    dir: PathBuf,
}

/// Runs `flare webhook …`.
pub async fn run(args: Args) -> anyhow::Result<std::process::ExitCode> {
    match args.command {
        Command::Send(a) => send(a).await,
        Command::Fixtures(a) => write_fixtures(&a.dir),
    }
}

fn write_fixtures(dir: &std::path::Path) -> anyhow::Result<std::process::ExitCode> {
    for f in fixtures::ALL {
        let folder = dir.join(f.preset.as_str());
        std::fs::create_dir_all(&folder)
            .with_context(|| format!("cannot create {}", folder.display()))?;
        let path = folder.join(f.file);
        std::fs::write(&path, f.body)
            .with_context(|| format!("cannot write {}", path.display()))?;
        println!("{}", path.display());
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// The first of a comma-separated list of secrets.
fn first_secret(value: &str) -> Option<String> {
    value
        .split(',')
        .map(str::trim)
        .find(|s| !s.is_empty())
        .map(str::to_string)
}

async fn send(a: SendArgs) -> anyhow::Result<std::process::ExitCode> {
    let base = a.url.trim_end_matches('/').to_string();
    if !(base.starts_with("http://") || base.starts_with("https://")) {
        bail!(
            "invalid --url {:?}: expected something like http://127.0.0.1:3000",
            a.url
        );
    }
    let body =
        std::fs::read(&a.file).with_context(|| format!("cannot read {}", a.file.display()))?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .context("cannot build the HTTP client")?;
    let key = std::env::var("FLARE_API_KEY")
        .ok()
        .filter(|k| !k.trim().is_empty());
    let get = |path: String| {
        let mut req = client.get(format!("{base}{path}"));
        if let Some(k) = &key {
            req = req.bearer_auth(k.trim());
        }
        req
    };
    let res = get(format!("/api/webhook-sources/{}", a.source))
        .send()
        .await
        .with_context(|| format!("cannot reach the Flare server at {base}"))?;
    let status = res.status();
    let view: Value = res
        .json()
        .await
        .context("the server's answer is not JSON")?;
    if !status.is_success() {
        bail!(
            "cannot read the source {:?} ({status}): {}",
            a.source,
            view.get("error").and_then(Value::as_str).unwrap_or("")
        );
    }
    let spec =
        SourceSpec::from_view(&view).map_err(|e| anyhow::anyhow!("the server's source: {e}"))?;
    let variable = view.get("variable").and_then(Value::as_str);
    let secret = match (&a.secret, variable) {
        (Some(s), _) => first_secret(s),
        (None, Some(variable)) => std::env::var(variable).ok().and_then(|s| first_secret(&s)),
        (None, None) => None,
    };
    let secret = match (secret, spec.settings.verified()) {
        (Some(s), _) => s,
        (None, false) => String::new(),
        (None, true) => bail!(
            "no secret: pass --secret or set {}",
            variable.unwrap_or("FLARE_WEBHOOK_SECRET")
        ),
    };
    let event = a.event.or_else(|| {
        spec.settings
            .preset
            .and_then(|p| fixtures::event_from_file_name(p, &a.file.to_string_lossy()))
    });
    let params = SignParams {
        now_s: chrono::Utc::now().timestamp(),
        delivery_id: a
            .delivery_id
            .unwrap_or_else(|| format!("flare-test-{}", uuid::Uuid::now_v7())),
        event,
    };
    let headers = sign::headers(&spec.settings, &secret, &body, &params)
        .map_err(|e| anyhow::anyhow!("cannot sign: {e}"))?;
    let mut req = client
        .post(format!("{base}/webhooks/{}", a.source))
        .header("content-type", "application/json")
        .body(body);
    for (name, value) in &headers {
        req = req.header(name.as_str(), value.as_str());
    }
    let res = req
        .send()
        .await
        .with_context(|| format!("cannot reach the Flare server at {base}"))?;
    let status = res.status();
    let text = res.text().await.unwrap_or_default();
    println!("{} {}", status.as_u16(), text.trim());
    let answer: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    for id in answer
        .get("eventIds")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        let name = match get(format!("/api/events/{id}")).send().await {
            Ok(r) if r.status().is_success() => r
                .json::<Value>()
                .await
                .ok()
                .and_then(|v| {
                    v.pointer("/event/name")
                        .or_else(|| v.get("name"))
                        .and_then(Value::as_str)
                        .map(str::to_string)
                })
                .unwrap_or_default(),
            _ => String::new(),
        };
        println!("event {id} {name}");
    }
    Ok(if status.is_success() {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    })
}
