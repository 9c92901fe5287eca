//! HTTP job endpoints through the dashboard's forms: added (with a signing secret), listed with
//! their health and errors, re-indexed and removed, against a small in-test application.

use axum::http::StatusCode;
use flare::RunStatus;
use serde_json::json;

use crate::fixture::{fixture, form, row, rows, APP_SECRET, ORIGIN};
use crate::support::endpoint_app::{job, EndpointApp};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_are_added_listed_reindexed_and_removed_through_the_forms() {
    let f = fixture().await;
    let cookie = f.login().await;
    let app = EndpointApp::start(
        vec![
            job("ep-mail", "mail.requested"),
            job("ep-report", "report.requested"),
        ],
        None,
    )
    .await;
    let page = f.page("/endpoints").await;
    assert!(page.contains("No endpoint is registered yet."));
    assert!(
        page.contains("class=\"active\" href=\"/endpoints\""),
        "in the nav"
    );

    // The form suggests a fresh secret for an application that has none yet.
    let suggested = page
        .split("id=\"endpoint-secret\"")
        .nth(1)
        .and_then(|rest| rest.split("value=\"").nth(1))
        .and_then(|rest| rest.split('"').next())
        .expect("a suggested secret");
    assert!(
        flare::endpoints::validate_secret(suggested).is_ok(),
        "{suggested}"
    );
    assert_ne!(suggested, flare::endpoints::generate_secret());

    // Refused and failed adds store nothing and never echo a secret.
    let add = form(&[("url", &app.url), ("secret", APP_SECRET)]);
    let a = f
        .post("/endpoints", &cookie, "http://evil.example", &add)
        .await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    assert!(
        app.received().is_empty(),
        "a cross-origin post calls nothing"
    );
    for (url, secret, status, says) in [
        (
            "ftp://example.com/flare",
            "",
            StatusCode::BAD_REQUEST,
            "invalid endpoint URL",
        ),
        (
            &app.url,
            "not-a-whsec-secret",
            StatusCode::BAD_REQUEST,
            "invalid endpoint secret",
        ),
        (
            &app.url,
            "",
            StatusCode::BAD_REQUEST,
            "give the secret your application checks",
        ),
        (
            "http://169.254.169.254/latest/meta-data/",
            APP_SECRET,
            StatusCode::BAD_REQUEST,
            "169.254.169.254 is a cloud metadata service",
        ),
        (
            "http://metadata.google.internal/computeMetadata/v1/",
            APP_SECRET,
            StatusCode::BAD_REQUEST,
            "metadata.google.internal is a cloud metadata service",
        ),
        (
            &format!("{}/missing", app.url),
            APP_SECRET,
            StatusCode::UNPROCESSABLE_ENTITY,
            "answered HTTP 404",
        ),
    ] {
        let a = f
            .post(
                "/endpoints",
                &cookie,
                ORIGIN,
                &form(&[("url", url), ("secret", secret)]),
            )
            .await;
        assert_eq!(a.status, status, "{url}: {}", a.body);
        let error = a
            .body
            .split("id=\"add-error\"")
            .nth(1)
            .expect("the error is shown");
        assert!(error.contains(says), "{url}: {error}");
        assert!(
            a.body.contains(&format!("value=\"{url}\"")),
            "the typed URL is kept"
        );
        assert!(
            secret.is_empty() || !a.body.contains(&format!("value=\"{secret}\"")),
            "the secret is not shown back"
        );
        assert!(f.endpoints().await.is_empty(), "nothing stored for {url}");
    }

    // Added: the outcome says what it serves, the secret is stored and never shown.
    let a = f.post("/endpoints", &cookie, ORIGIN, &add).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    let stored = f.endpoints().await;
    assert_eq!(stored.len(), 1);
    let (id, secret) = (stored[0].summary.id.clone(), stored[0].secret.clone());
    assert_eq!(secret, APP_SECRET);
    let added = a
        .body
        .split("id=\"added\"")
        .nth(1)
        .expect("the outcome is shown");
    assert!(added.contains("Flare runs them from now on"), "{added}");
    assert!(!a.body.contains(&secret));
    assert_eq!(rows(&a.body, "data-endpoint"), vec![id.clone()]);
    let page = f.page("/endpoints").await;
    assert!(!page.contains(&secret), "never shown again");
    let listed = row(&page, "data-endpoint", &id);
    assert!(listed.contains(&app.url));
    for job in ["ep-mail", "ep-report"] {
        assert!(
            listed.contains(&format!("href=\"/runs?jobId={job}\"")),
            "{job}"
        );
    }
    assert!(listed.contains("badge health st-ok"), "{listed}");
    assert!(listed.contains("<time"), "indexed and last ok times");
    assert!(page.contains("id=\"endpoints-live\" data-live"));
    let again = f.post("/endpoints", &cookie, ORIGIN, &add).await;
    assert_eq!(again.status, StatusCode::CONFLICT);
    assert!(again.body.contains("registered already"));

    // A secret typed in is the one Flare signs with (this application checks it).
    let key = flare::endpoints::generate_secret();
    let signed = EndpointApp::start(vec![job("ep-signed", "signed.requested")], Some(&key)).await;
    let wrong = flare::endpoints::generate_secret();
    let a = f
        .post(
            "/endpoints",
            &cookie,
            ORIGIN,
            &form(&[("url", &signed.url), ("secret", &wrong)]),
        )
        .await;
    assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", a.body);
    assert!(a.body.contains("answered HTTP 401") && !a.body.contains(&wrong));
    let a = f
        .post(
            "/endpoints",
            &cookie,
            ORIGIN,
            &form(&[("url", &signed.url), ("secret", &key)]),
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert!(!a.body.contains(&key), "the secret is not shown back");

    // A failed call to the endpoint shows among its recent errors, with its JSON error's
    // message (the only part of an answer quoted), escaped.
    app.set_run_failure(
        "ep-report",
        StatusCode::SERVICE_UNAVAILABLE,
        &json!({"error": "report service <b>down</b>"}).to_string(),
    );
    let stuck = f.failed_once("report.requested").await;
    let page = f.page("/endpoints").await;
    let errors = row(&page, "data-endpoint-errors", &id);
    assert!(
        errors.contains("report service &lt;b&gt;down&lt;/b&gt;"),
        "{errors}"
    );
    assert!(!page.contains("<b>down</b>"));
    assert!(row(&page, "data-endpoint", &id).contains("badge health st-failing"));

    // Re-index: the job that left the index goes, with its queued run.
    let reindex = format!("/endpoints/{id}/index");
    app.set_jobs(vec![job("ep-mail", "mail.requested")]);
    let a = f.post(&reindex, &cookie, "http://evil.example", "").await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    assert_eq!(f.endpoint_jobs(&id).await.len(), 2, "not re-indexed");
    let a = f.post(&reindex, &cookie, ORIGIN, "").await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    let outcome = a
        .body
        .split("id=\"reindexed\"")
        .nth(1)
        .expect("the outcome");
    assert!(
        outcome.contains("href=\"/runs?jobId=ep-report\""),
        "{outcome}"
    );
    assert!(outcome.contains("1 queued run cancelled"), "{outcome}");
    assert_eq!(f.run_status(&stuck.id).await, RunStatus::Cancelled);
    assert_eq!(f.endpoint_jobs(&id).await, vec!["ep-mail".to_string()]);

    // A failed re-index says why and keeps the previous index.
    app.set_index_answer(
        StatusCode::INTERNAL_SERVER_ERROR,
        json!({"error": "index broken"}),
    );
    let a = f.post(&reindex, &cookie, ORIGIN, "").await;
    assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", a.body);
    let error = a
        .body
        .split("id=\"reindex-error\"")
        .nth(1)
        .expect("the error");
    assert!(
        error.contains("answered HTTP 500") && error.contains("previous index"),
        "{error}"
    );
    assert_eq!(f.endpoint_jobs(&id).await, vec!["ep-mail".to_string()]);
    let unknown = f
        .post("/endpoints/ep_nope/index", &cookie, ORIGIN, "")
        .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);

    // Remove: a confirmation page that counts the queued runs, then the removal.
    app.set_run_answer("ep-mail", json!({"error": "mailer down"}));
    let queued = f.failed_once("mail.requested").await;
    let remove = format!("/endpoints/{id}/remove");
    let confirm = f.page(&remove).await;
    let warning = confirm
        .split("id=\"remove-warning\"")
        .nth(1)
        .expect("a warning");
    assert!(warning.contains("queued runs are cancelled"), "{warning}");
    assert!(
        warning.contains("1 queued run</b> will be cancelled"),
        "{warning}"
    );
    assert!(confirm.contains(&format!("action=\"{remove}\"")));
    assert_eq!(f.endpoints().await.len(), 2, "asking removes nothing");
    let a = f.post(&remove, &cookie, "http://evil.example", "").await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    assert_eq!(f.endpoints().await.len(), 2);
    let a = f.post(&remove, &cookie, ORIGIN, "").await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    let removed = a.body.split("id=\"removed\"").nth(1).expect("the outcome");
    assert!(
        removed.contains(&app.url) && removed.contains("1 queued run cancelled"),
        "{removed}"
    );
    assert_eq!(f.run_status(&queued.id).await, RunStatus::Cancelled);
    let left: Vec<String> = f
        .endpoints()
        .await
        .into_iter()
        .map(|e| e.summary.id)
        .collect();
    assert!(!left.contains(&id));
    assert!(!rows(&f.page("/endpoints").await, "data-endpoint").contains(&id));
    let a = f.post(&remove, &cookie, ORIGIN, "").await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "removed already");
}
