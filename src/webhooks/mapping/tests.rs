//! Tests for [`super`]: every fixture body under `fixtures/stripe` and `fixtures/clerk`, the
//! shapes of newer API versions, name sanitizing and malformed bodies.
//!
//! Kept beside `mapping.rs` rather than inside it so that file stays under ~500 lines.

use super::super::read_fixture;
use super::*;
use serde_json::json;

const EVT: &str = "evt_000000000000000000000000";

fn stripe_fixture(name: &str) -> StripeDelivery {
    let body = read_fixture(&format!("stripe/{name}.json"));
    stripe_events(&body).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

fn clerk_fixture(name: &str) -> ClerkDelivery {
    let body = read_fixture(&format!("clerk/{name}.json"));
    clerk_events(&body).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

fn names(events: &[MappedEvent]) -> Vec<&str> {
    events.iter().map(|e| e.name.as_str()).collect()
}

/// Flare's event-name rule, written independently of `sanitize_name`.
fn is_valid_name(name: &str) -> bool {
    (1..=200).contains(&name.len())
        && name.split('.').all(|seg| {
            !seg.is_empty()
                && seg
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
        })
}

/// Checks the raw `stripe.<type>` event against the fixture's envelope.
fn assert_raw_stripe_event(fixture: &str, delivery: &StripeDelivery) {
    let envelope: Value =
        serde_json::from_slice(&read_fixture(&format!("stripe/{fixture}.json"))).expect("json");
    let raw = delivery.events.last().expect("raw event");
    assert_eq!(raw.name, format!("stripe.{fixture}"), "{fixture}");
    assert_eq!(raw.payload["stripeEventId"], json!(EVT), "{fixture}");
    assert_eq!(raw.payload["type"], json!(fixture), "{fixture}");
    assert_eq!(raw.payload["created"], envelope["created"], "{fixture}");
    assert_eq!(raw.payload["livemode"], json!(false), "{fixture}");
    assert_eq!(
        raw.payload["object"], envelope["data"]["object"],
        "{fixture}"
    );
    assert_eq!(delivery.id, EVT);
    assert_eq!(delivery.event_type, fixture);
}

#[test]
fn stripe_payment_intent_succeeded() {
    let d = stripe_fixture("payment_intent.succeeded");
    assert_eq!(
        names(&d.events),
        ["payment.succeeded", "stripe.payment_intent.succeeded"]
    );
    assert_eq!(
        d.events[0].payload,
        json!({
            "paymentIntentId": "pi_000000000000000000000000",
            "stripeEventId": EVT,
            "amount": 2000,
            "currency": "usd",
            "customerId": null,
            "status": "succeeded",
        })
    );
    assert_raw_stripe_event("payment_intent.succeeded", &d);
    assert!(d.events[1].payload.get("previousAttributes").is_none());
}

#[test]
fn stripe_payment_intent_payment_failed() {
    let d = stripe_fixture("payment_intent.payment_failed");
    assert_eq!(
        names(&d.events),
        ["payment.failed", "stripe.payment_intent.payment_failed"]
    );
    assert_eq!(
        d.events[0].payload,
        json!({
            "paymentIntentId": "pi_000000000000000000000000",
            "stripeEventId": EVT,
            "amount": 2000,
            "currency": "usd",
            "customerId": null,
            "status": "requires_payment_method",
            "failureCode": "card_declined",
            "failureMessage": "Your card was declined.",
        })
    );
    assert_raw_stripe_event("payment_intent.payment_failed", &d);
}

#[test]
fn stripe_checkout_session_completed() {
    let d = stripe_fixture("checkout.session.completed");
    assert_eq!(
        names(&d.events),
        ["checkout.completed", "stripe.checkout.session.completed"]
    );
    assert_eq!(
        d.events[0].payload,
        json!({
            "checkoutSessionId": "cs_test_0000000000000000000000000000000000000000000000000000000000",
            "stripeEventId": EVT,
            "amount": 3000,
            "currency": "usd",
            "customerId": "cus_00000000000000",
            "customerEmail": "stripe@example.com",
            "mode": "payment",
            "paymentStatus": "paid",
            "status": "complete",
            "paymentIntentId": "pi_000000000000000000000000",
            "subscriptionId": null,
        })
    );
    assert_raw_stripe_event("checkout.session.completed", &d);
}

#[test]
fn stripe_invoice_paid() {
    let d = stripe_fixture("invoice.paid");
    assert_eq!(names(&d.events), ["invoice.paid", "stripe.invoice.paid"]);
    assert_eq!(
        d.events[0].payload,
        json!({
            "invoiceId": "in_000000000000000000000000",
            "stripeEventId": EVT,
            "amountDue": 2000,
            "amountPaid": 2000,
            "currency": "usd",
            "customerId": "cus_00000000000000",
            "subscriptionId": null,
            "status": "paid",
        })
    );
    assert_raw_stripe_event("invoice.paid", &d);
}

#[test]
fn stripe_customer_subscription_updated() {
    let d = stripe_fixture("customer.subscription.updated");
    assert_eq!(
        names(&d.events),
        [
            "subscription.updated",
            "stripe.customer.subscription.updated"
        ]
    );
    assert_eq!(
        d.events[0].payload,
        json!({
            "subscriptionId": "sub_000000000000000000000000",
            "stripeEventId": EVT,
            "customerId": "cus_00000000000000",
            "status": "active",
            "currentPeriodEnd": 1650998505,
            "cancelAtPeriodEnd": false,
        })
    );
    assert_raw_stripe_event("customer.subscription.updated", &d);
    assert_eq!(
        d.events[1].payload["previousAttributes"],
        json!({"schedule": "sub_sched_000000000000000000000000"})
    );
}

fn stripe_body(event_type: &str, object: Value) -> Vec<u8> {
    json!({"id": "evt_1", "type": event_type, "data": {"object": object}})
        .to_string()
        .into_bytes()
}

#[test]
fn stripe_other_well_known_types() {
    let refund = stripe_events(&stripe_body(
        "charge.refunded",
        json!({"id": "ch_1", "amount": 500, "amount_refunded": 200, "currency": "eur",
               "customer": {"id": "cus_9", "object": "customer"}, "payment_intent": "pi_1"}),
    ))
    .expect("charge.refunded");
    assert_eq!(
        names(&refund.events),
        ["payment.refunded", "stripe.charge.refunded"]
    );
    assert_eq!(
        refund.events[0].payload,
        json!({"chargeId": "ch_1", "paymentIntentId": "pi_1", "stripeEventId": "evt_1",
               "amount": 500, "amountRefunded": 200, "currency": "eur", "customerId": "cus_9"})
    );

    // Basil (2025-03-31) shapes: subscription under `parent`, period end on the items.
    let invoice = stripe_events(&stripe_body(
        "invoice.payment_failed",
        json!({"id": "in_1", "amount_due": 900, "amount_paid": 0, "status": "open",
               "parent": {"subscription_details": {"subscription": "sub_7"}}}),
    ))
    .expect("invoice.payment_failed");
    assert_eq!(invoice.events[0].name, "invoice.payment_failed");
    assert_eq!(invoice.events[0].payload["amountDue"], json!(900));
    assert_eq!(invoice.events[0].payload["subscriptionId"], json!("sub_7"));

    for (kind, status) in [("created", "incomplete"), ("deleted", "canceled")] {
        let sub = stripe_events(&stripe_body(
            &format!("customer.subscription.{kind}"),
            json!({"id": "sub_7", "status": status, "customer": "cus_1",
                   "items": {"data": [{"current_period_end": 1_800_000_000}]}}),
        ))
        .expect("subscription");
        assert_eq!(sub.events[0].name, format!("subscription.{kind}"));
        assert_eq!(sub.events[0].payload["status"], json!(status));
        assert_eq!(
            sub.events[0].payload["currentPeriodEnd"],
            json!(1_800_000_000)
        );
    }
}

#[test]
fn stripe_unknown_type_yields_only_raw_event() {
    let d = stripe_events(&stripe_body("customer.updated", json!({"id": "cus_1"})))
        .expect("customer.updated");
    assert_eq!(names(&d.events), ["stripe.customer.updated"]);
    assert_eq!(d.events[0].payload["object"], json!({"id": "cus_1"}));
    assert_eq!(d.events[0].payload["created"], Value::Null);
}

#[test]
fn stripe_types_are_sanitized_into_valid_names() {
    let cases = [
        (
            "v1.billing.meter.error_report_triggered",
            "stripe.v1.billing.meter.error_report_triggered",
        ),
        (
            "Payment Intent.Succeeded!",
            "stripe.payment_intent.succeeded_",
        ),
        ("a..b.", "stripe.a._.b._"),
        ("日本.x", "stripe.__.x"),
    ];
    for (raw, want) in cases {
        let d = stripe_events(&stripe_body(raw, json!({}))).expect(raw);
        assert_eq!(d.events[0].name, want, "type {raw:?}");
        assert_eq!(d.event_type, raw, "event_type keeps the original");
    }
    let long = format!("x.{}", "a".repeat(300));
    let name = &stripe_events(&stripe_body(&long, json!({})))
        .expect("long")
        .events[0]
        .name;
    assert_eq!(name.len(), 200);
    let dotted = format!("{}.b", "a".repeat(192));
    let name = &stripe_events(&stripe_body(&dotted, json!({})))
        .expect("dot")
        .events[0]
        .name;
    assert_eq!(
        name,
        &format!("stripe.{}", "a".repeat(192)),
        "trailing dot dropped"
    );
    for (raw, _) in cases {
        assert!(is_valid_name(&sanitize_name(raw)), "{raw:?}");
    }
}

#[test]
fn stripe_malformed_bodies_are_rejected() {
    let cases: [(&[u8], &str); 9] = [
        (b"{not json", "not valid JSON"),
        (b"", "not valid JSON"),
        (b"[1,2]", "`(body)` must be a JSON object"),
        (
            br#"{"type":"x","data":{"object":{}}}"#,
            "missing the required field `id`",
        ),
        (
            br#"{"id":"evt","data":{"object":{}}}"#,
            "missing the required field `type`",
        ),
        (
            br#"{"id":"evt","type":"","data":{"object":{}}}"#,
            "required field `type`",
        ),
        (
            br#"{"id":"evt","type":7,"data":{"object":{}}}"#,
            "`type` must be a string",
        ),
        (
            br#"{"id":"evt","type":"x","data":{}}"#,
            "missing the required field `data.object`",
        ),
        (
            br#"{"id":"evt","type":"x","data":{"object":"pi_1"}}"#,
            "`data.object` must be an object",
        ),
    ];
    for (body, want) in cases {
        let err = stripe_events(body).expect_err(want);
        assert!(err.to_string().contains(want), "{want}: got {err}");
    }
}

#[test]
fn clerk_user_created_fixture() {
    let d = clerk_fixture("user.created.docs");
    assert_eq!(d.event_type, "user.created");
    assert_eq!(names(&d.events), ["user.created", "clerk.user.created"]);
    assert_eq!(
        d.events[0].payload,
        json!({
            "userId": "user_29w83sxmDNGwOuEthce5gg56FcC",
            "email": "example@example.org",
            "name": "Example Example",
        })
    );
    let envelope: Value =
        serde_json::from_slice(&read_fixture("clerk/user.created.docs.json")).expect("json");
    assert_eq!(d.events[1].payload, envelope["data"]);
}

#[test]
fn clerk_session_created_fixture() {
    let d = clerk_fixture("session.created.catalog");
    assert_eq!(
        names(&d.events),
        ["session.created", "clerk.session.created"]
    );
    assert_eq!(
        d.events[0].payload,
        json!({
            "sessionId": "sess_29wBYxnMCQU2KIs6V3ZPOJCPUXx",
            "userId": "user_29wBMCtzATuFJut8jO2VNTVekS4",
            "status": "active",
        })
    );
    let envelope: Value =
        serde_json::from_slice(&read_fixture("clerk/session.created.catalog.json")).expect("json");
    assert_eq!(d.events[1].payload, envelope["data"]);
}

fn clerk(event_type: &str, data: Value) -> ClerkDelivery {
    let body = json!({"type": event_type, "object": "event", "data": data}).to_string();
    clerk_events(body.as_bytes()).unwrap_or_else(|e| panic!("{event_type}: {e}"))
}

#[test]
fn clerk_user_email_and_name_rules() {
    let emails = json!([
        {"id": "idn_a", "email_address": "first@example.org"},
        {"id": "idn_b", "email_address": "primary@example.org"},
    ]);
    let cases = [
        // (data, expected email, expected name)
        (
            json!({"id": "u", "email_addresses": emails, "primary_email_address_id": "idn_b",
                "first_name": " Ada ", "last_name": null, "username": "ada"}),
            json!("primary@example.org"),
            json!("Ada"),
        ),
        (
            json!({"id": "u", "email_addresses": emails, "primary_email_address_id": "idn_zz",
                "first_name": null, "last_name": "Lovelace"}),
            json!("first@example.org"),
            json!("Lovelace"),
        ),
        (
            json!({"id": "u", "email_addresses": emails, "primary_email_address_id": null,
                "first_name": "", "last_name": "", "username": "ada"}),
            json!("first@example.org"),
            json!("ada"),
        ),
        (
            json!({"id": "u", "email_addresses": [], "first_name": null, "username": null}),
            Value::Null,
            Value::Null,
        ),
    ];
    for (i, (data, email, name)) in cases.into_iter().enumerate() {
        for kind in ["user.created", "user.updated"] {
            let d = clerk(kind, data.clone());
            assert_eq!(d.events[0].name, kind, "case {i}");
            assert_eq!(
                d.events[0].payload,
                json!({"userId": "u", "email": email, "name": name}),
                "case {i} {kind}"
            );
        }
    }
}

#[test]
fn clerk_other_domain_events() {
    let deleted = clerk(
        "user.deleted",
        json!({"id": "user_1", "object": "user", "deleted": true}),
    );
    assert_eq!(
        names(&deleted.events),
        ["user.deleted", "clerk.user.deleted"]
    );
    assert_eq!(
        deleted.events[0].payload,
        json!({"userId": "user_1", "deleted": true})
    );

    let ended = clerk(
        "session.ended",
        json!({"id": "sess_1", "user_id": "user_1", "status": "ended"}),
    );
    assert_eq!(
        names(&ended.events),
        ["session.ended", "clerk.session.ended"]
    );
    assert_eq!(
        ended.events[0].payload,
        json!({"sessionId": "sess_1", "userId": "user_1", "status": "ended"})
    );
    let revoked = clerk("session.revoked", json!({"id": "sess_2"}));
    assert_eq!(revoked.events[0].name, "session.revoked");

    let org = clerk(
        "organization.created",
        json!({"id": "org_1", "name": "Acme", "slug": "acme", "members_count": 3}),
    );
    assert_eq!(
        names(&org.events),
        ["organization.created", "clerk.organization.created"]
    );
    assert_eq!(
        org.events[0].payload,
        json!({"organizationId": "org_1", "name": "Acme", "slug": "acme"})
    );
}

#[test]
fn clerk_unknown_types_yield_only_raw_event() {
    let m = clerk("organizationMembership.created", json!({"id": "orgmem_1"}));
    assert_eq!(names(&m.events), ["clerk.organization_membership.created"]);
    assert_eq!(m.events[0].payload, json!({"id": "orgmem_1"}));
    assert_eq!(m.event_type, "organizationMembership.created");
    let e = clerk("email.created", json!({"id": "ema_1"}));
    assert_eq!(names(&e.events), ["clerk.email.created"]);
}

#[test]
fn clerk_malformed_bodies_are_rejected() {
    let cases: [(&[u8], &str); 5] = [
        (b"nope", "not valid JSON"),
        (b"\"user.created\"", "must be a JSON object"),
        (br#"{"data":{}}"#, "missing the required field `type`"),
        (
            br#"{"type":"user.created"}"#,
            "missing the required field `data`",
        ),
        (
            br#"{"type":"user.created","data":[]}"#,
            "`data` must be an object",
        ),
    ];
    for (body, want) in cases {
        let err = clerk_events(body).expect_err(want);
        assert!(err.to_string().contains(want), "{want}: got {err}");
    }
}

/// PostgreSQL cannot store a NUL in text: the fields stored as text refuse one on every store.
#[test]
fn a_nul_in_stored_text_is_refused_and_one_in_the_payload_kept() {
    let stripe: [(&[u8], &str); 2] = [
        (
            br#"{"id":"evt_1","type":"invoice.paid\u0000","data":{"object":{}}}"#,
            "`type` contains a NUL",
        ),
        (
            br#"{"id":"evt\u0000","type":"invoice.paid","data":{"object":{}}}"#,
            "`id` contains a NUL",
        ),
    ];
    for (body, want) in stripe {
        let err = stripe_events(body).expect_err(want);
        assert!(err.to_string().contains(want), "{want}: got {err}");
    }
    let err = clerk_events(br#"{"type":"user.created\u0000x","data":{}}"#).expect_err("clerk");
    assert!(err.to_string().contains("`type` contains a NUL"), "{err}");
    let kept = stripe_events(
        br#"{"id":"evt_1","type":"invoice.paid","data":{"object":{"description":"a\u0000b"}}}"#,
    )
    .expect("a NUL in the payload is fine");
    assert_eq!(kept.events[1].payload["object"]["description"], "a\0b");
}

#[test]
fn every_mapped_name_is_valid() {
    let mut all = Vec::new();
    for f in [
        "payment_intent.succeeded",
        "payment_intent.payment_failed",
        "checkout.session.completed",
        "invoice.paid",
        "customer.subscription.updated",
    ] {
        all.extend(stripe_fixture(f).events);
    }
    all.extend(clerk_fixture("user.created.docs").events);
    all.extend(clerk_fixture("session.created.catalog").events);
    all.extend(clerk("organizationInvitation.accepted", json!({})).events);
    for e in &all {
        assert!(is_valid_name(&e.name), "{}", e.name);
    }
}
