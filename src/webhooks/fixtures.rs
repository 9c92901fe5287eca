//! The bundled delivery bodies, one or more per preset (`fixtures/` in the repository, embedded
//! in the binary): what `flare webhook fixtures` writes out and the dashboard's **Send a test
//! delivery** signs. Bodies are byte-exact as the providers send (or document) them.

use super::source::Preset;

/// One bundled body.
#[derive(Debug, Clone, Copy)]
pub struct Fixture {
    /// The preset it is for.
    pub preset: Preset,
    /// File name under `fixtures/<preset>/` (and what `flare webhook fixtures` writes).
    pub file: &'static str,
    /// The event type sent in a header (GitHub's `X-GitHub-Event`, Shopify's topic), if any.
    pub event: Option<&'static str>,
    /// The body.
    pub body: &'static [u8],
}

macro_rules! fixture {
    ($preset:expr, $dir:literal, $file:literal, $event:expr) => {
        Fixture {
            preset: $preset,
            file: $file,
            event: $event,
            body: include_bytes!(concat!("../../fixtures/", $dir, "/", $file)),
        }
    };
}

/// Every bundled body; the first of each preset is its test delivery.
pub const ALL: &[Fixture] = &[
    fixture!(
        Preset::Stripe,
        "stripe",
        "payment_intent.succeeded.json",
        None
    ),
    fixture!(
        Preset::Stripe,
        "stripe",
        "checkout.session.completed.json",
        None
    ),
    fixture!(
        Preset::StandardWebhooks,
        "standard-webhooks",
        "email.sent.json",
        None
    ),
    fixture!(Preset::Clerk, "clerk", "user.created.docs.json", None),
    fixture!(
        Preset::Github,
        "github",
        "issues.opened.json",
        Some("issues")
    ),
    fixture!(Preset::Github, "github", "push.json", Some("push")),
    fixture!(Preset::Github, "github", "ping.json", Some("ping")),
    fixture!(
        Preset::Shopify,
        "shopify",
        "orders.create.json",
        Some("orders/create")
    ),
    fixture!(Preset::Paddle, "paddle", "transaction.completed.json", None),
    fixture!(Preset::Slack, "slack", "app_mention.json", None),
    fixture!(Preset::Slack, "slack", "url_verification.json", None),
    fixture!(Preset::Database, "database", "orders.insert.json", None),
];

/// The test delivery of a source without a preset.
pub const GENERIC: &[u8] =
    br#"{"type":"test.delivery","id":"test","data":{"message":"A test delivery from Flare"}}"#;

/// The first bundled body of `preset`.
pub fn first(preset: Preset) -> Option<&'static Fixture> {
    ALL.iter().find(|f| f.preset == preset)
}

/// The event type a fixture file name implies for `preset` (`issues.opened.json` → `issues`,
/// `orders.create.json` → `orders/create`), for bodies that are not bundled.
pub fn event_from_file_name(preset: Preset, file: &str) -> Option<String> {
    let stem = file
        .rsplit('/')
        .next()?
        .strip_suffix(".json")
        .unwrap_or(file);
    match preset {
        Preset::Github => stem.split('.').next().map(str::to_string),
        Preset::Shopify => Some(stem.replace('.', "/")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_has_a_json_fixture() {
        for preset in Preset::ALL {
            assert!(first(preset).is_some(), "{preset:?}");
        }
        for f in ALL {
            serde_json::from_slice::<serde_json::Value>(f.body)
                .unwrap_or_else(|e| panic!("{}: {e}", f.file));
        }
        assert_eq!(
            event_from_file_name(Preset::Github, "x/issues.opened.json").as_deref(),
            Some("issues")
        );
        assert_eq!(
            event_from_file_name(Preset::Shopify, "orders.create.json").as_deref(),
            Some("orders/create")
        );
    }
}
