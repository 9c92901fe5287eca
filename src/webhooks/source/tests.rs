use serde_json::json;

use super::*;

fn parse(v: Value) -> Result<SourceSpec, String> {
    SourceSpec::parse(&v)
}

#[test]
fn the_short_form_takes_a_secret_or_a_list() {
    let one = parse(json!({"id": "github", "preset": "github", "secret": "s"})).expect("one");
    assert_eq!(one.secrets.as_deref(), Some(&["s".to_string()][..]));
    let two =
        parse(json!({"id": "github", "preset": "github", "secret": ["a", "b"]})).expect("two");
    assert_eq!(two.secrets.map(|s| s.len()), Some(2));
    assert_eq!(
        one.settings.verification,
        Verification::Hmac(HmacScheme::github())
    );
}

#[test]
fn what_is_wrong_is_named() {
    for (body, needle) in [
        (json!({"id": "x", "secret": "s"}), "needs a preset"),
        (
            json!({"id": "x", "preset": "gitlab", "secret": "s"}),
            "unknown preset",
        ),
        (
            json!({"id": "x", "preset": "github", "scheme": "hmac"}),
            "not both",
        ),
        (json!({"id": "X Y", "preset": "github"}), "id must be"),
        (
            json!({"id": "x", "scheme": "hmac", "eventName": "a.{payload.type}"}),
            "header",
        ),
        (
            json!({"id": "x", "scheme": "bearer"}),
            "eventName is required",
        ),
        (
            json!({"id": "x", "scheme": "bearer", "eventName": "A B {payload.x"}),
            "eventName",
        ),
        (
            json!({"id": "x", "scheme": "bearer", "eventName": "e", "toleranceSecs": 5}),
            "toleranceSecs",
        ),
        (
            json!({"id": "x", "preset": "github", "algorithm": "sha1"}),
            "algorithm is for",
        ),
        (
            json!({"id": "x", "scheme": "hmac", "header": "x-sig", "eventName": "e", "signedContent": "{timestamp}.{body}"}),
            "timestampHeader",
        ),
        (
            json!({"id": "x", "scheme": "none", "eventName": "e", "secret": "s"}),
            "takes no secret",
        ),
        (
            json!({"id": "x", "scheme": "basic", "eventName": "e", "secret": "nocolon"}),
            "user:password",
        ),
        (
            json!({"id": "x", "preset": "clerk", "secret": "not-whsec"}),
            "secret",
        ),
        (json!({"id": "x", "preset": "github", "secret": ""}), "1 to"),
        (
            json!({"id": "x", "preset": "github", "secret": 5}),
            "string",
        ),
        (
            json!({"id": "x", "preset": "github", "nope": 1}),
            "unknown field",
        ),
        (
            json!({"id": "x", "scheme": "bearer", "eventName": "e", "deliveryId": "fixed"}),
            "deliveryId",
        ),
    ] {
        let e = parse(body.clone()).expect_err(&body.to_string());
        assert!(e.contains(needle), "{body}: {e}");
        assert!(!e.contains("not-whsec"), "{e}");
    }
}

#[test]
fn the_stored_definition_reads_back_the_same_and_holds_no_secret() {
    for body in [
        json!({"id": "a", "preset": "paddle", "secret": "pdl", "toleranceSecs": 30}),
        json!({"id": "b", "scheme": "hmac", "header": "X-Sig", "algorithm": "sha512", "encoding": "base64", "prefix": "v1=", "signedContent": "{timestamp}:{body}", "timestampHeader": "X-Ts", "toleranceSecs": 60, "eventName": "acme.{payload.type}", "deliveryId": "{header.x-id}", "secret": "topsecret"}),
        json!({"id": "c", "scheme": "none", "eventName": "open.{payload.kind}"}),
    ] {
        let spec = parse(body).expect("parse");
        let definition = spec.settings.definition();
        assert!(!definition.to_string().contains("topsecret"));
        let again = SourceSpec::parse(&definition).expect("again");
        assert_eq!(again.settings, spec.settings);
    }
}

#[test]
fn the_view_never_shows_a_secret_and_reads_back() {
    let spec =
        parse(json!({"id": "gh", "preset": "github", "secret": "topsecret"})).expect("parse");
    let source = Source {
        id: "gh".into(),
        settings: spec.settings.clone(),
        secrets: spec.secrets.unwrap_or_default(),
        origin: Origin::Api,
        times: Some((1, 2)),
    };
    let view = source.view();
    assert!(!view.to_string().contains("topsecret"), "{view}");
    assert!(!format!("{source:?}").contains("topsecret"));
    assert_eq!(view["secrets"], json!(1));
    assert_eq!(view["url"], json!("/webhooks/gh"));
    assert_eq!(view["verified"], json!(true));
    assert_eq!(
        SourceSpec::from_view(&view).expect("view").settings,
        spec.settings
    );
}
