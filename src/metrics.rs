//! Prometheus metrics: what the process counts and how `GET /metrics` renders it.
//!
//! - `flare_events_received_total{source}` — events stored (new ids only), by source kind
//!   (`api`, `http`, `webhook:payments`, `webhook:auth`, `job`, `replay`: the run or event id
//!   after `job:`/`replay:` is dropped so the label stays bounded);
//! - `flare_runs_finished_total{job, outcome}` — runs that reached a final outcome by job
//!   (`succeeded`, `failed`);
//! - `flare_run_retries_total{job}` — attempts that failed and were queued again;
//! - `flare_run_duration_seconds{job}` — attempt durations, histogram;
//! - `flare_webhook_deliveries_total{source, outcome, status}` — webhook deliveries by source,
//!   outcome (`accepted`, `duplicate`, `answered` for a handshake, `rejected`) and the status
//!   answered (recorded once, by `webhooks::inbound::record_outcome`);
//! - `flare_http_requests_total{route, method, status}` — HTTP requests answered, by matched
//!   route pattern (`/api/runs/{id}`; `unmatched` for none), method and status (recorded by
//!   `http::observe`);
//! - `flare_endpoint_calls_total{endpoint, outcome}` — calls to HTTP job endpoints (index and
//!   run), by endpoint id and outcome (`ok`, `error`);
//! - `flare_queue_depth{state}` — read from the store at scrape time (`ready`, `delayed`,
//!   `running`, `scheduled_events`);
//! - `flare_runs_waiting{reason}` — queued runs at scrape time by what they wait for: `worker`
//!   (due, waiting to be claimed), `wait` (an `io.wait` not yet due), `retry` (a backoff),
//!   `paused` (their job is paused);
//! - `flare_runs_held{reason}` — due queued runs at scrape time held back by flow control:
//!   `concurrency` (a key, job or group at its limit), `throttle` (their key's next start is
//!   later), `start_timeout` (past their start timeout: never started, cancelled by the rescuer's
//!   next pass), and `debounce` (not due yet: the run of an open debounce window); read from the
//!   slots' counters, the queues' indexes and the open windows.
//!
//! The counters are process-wide (one registry per process), recorded with one call from the
//! code that knows: [`event_received`] after a committed insert, [`attempt_finished`] when the
//! executor has an attempt's outcome.

use std::sync::LazyLock;

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry,
};

/// Histogram buckets for attempt durations, seconds: jobs range from milliseconds to minutes.
const DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

struct Metrics {
    registry: Registry,
    events: IntCounterVec,
    finished: IntCounterVec,
    retries: IntCounterVec,
    duration: HistogramVec,
    webhooks: IntCounterVec,
    http: IntCounterVec,
    endpoints: IntCounterVec,
}

impl Metrics {
    fn new() -> prometheus::Result<Self> {
        let registry = Registry::new();
        let events = IntCounterVec::new(
            Opts::new(
                "flare_events_received_total",
                "Events stored, by source kind.",
            ),
            &["source"],
        )?;
        let finished = IntCounterVec::new(
            Opts::new(
                "flare_runs_finished_total",
                "Runs that reached a final outcome (succeeded, failed), by job.",
            ),
            &["job", "outcome"],
        )?;
        let retries = IntCounterVec::new(
            Opts::new(
                "flare_run_retries_total",
                "Run attempts that failed and were queued again, by job.",
            ),
            &["job"],
        )?;
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "flare_run_duration_seconds",
                "Duration of run attempts, by job.",
            )
            .buckets(DURATION_BUCKETS.to_vec()),
            &["job"],
        )?;
        let webhooks = IntCounterVec::new(
            Opts::new(
                "flare_webhook_deliveries_total",
                "Webhook deliveries, by source, outcome and the status answered.",
            ),
            &["source", "outcome", "status"],
        )?;
        let http = IntCounterVec::new(
            Opts::new(
                "flare_http_requests_total",
                "HTTP requests answered, by route pattern, method and status.",
            ),
            &["route", "method", "status"],
        )?;
        let endpoints = IntCounterVec::new(
            Opts::new(
                "flare_endpoint_calls_total",
                "Calls to HTTP job endpoints (index and run), by endpoint id and outcome (ok, error).",
            ),
            &["endpoint", "outcome"],
        )?;
        registry.register(Box::new(http.clone()))?;
        registry.register(Box::new(endpoints.clone()))?;
        registry.register(Box::new(webhooks.clone()))?;
        registry.register(Box::new(events.clone()))?;
        registry.register(Box::new(finished.clone()))?;
        registry.register(Box::new(retries.clone()))?;
        registry.register(Box::new(duration.clone()))?;
        Ok(Self {
            registry,
            events,
            finished,
            retries,
            duration,
            webhooks,
            http,
            endpoints,
        })
    }
}

static METRICS: LazyLock<Option<Metrics>> = LazyLock::new(|| match Metrics::new() {
    Ok(m) => Some(m),
    Err(e) => {
        tracing::error!(error = %e, "metrics are disabled: cannot create them");
        None
    }
});

/// The bounded label of a source: `job:<run>` and `replay:<event>` lose their id.
pub fn source_kind(source: &str) -> &str {
    match source.split_once(':') {
        Some((kind @ ("job" | "replay"), _)) => kind,
        _ => source,
    }
}

/// Counts an event stored (a new id; call it after the commit) from `source`.
pub fn event_received(source: &str) {
    if let Some(m) = METRICS.as_ref() {
        m.events.with_label_values(&[source_kind(source)]).inc();
    }
}

/// Counts a webhook delivery to `source` that ended with `outcome`, answered `status`.
pub fn webhook_delivery(source: &str, outcome: &str, status: u16) {
    if let Some(m) = METRICS.as_ref() {
        m.webhooks
            .with_label_values(&[source, outcome, &status.to_string()])
            .inc();
    }
}

/// Counts an HTTP request answered `status` on `route` (the matched pattern, `unmatched` for
/// none) with `method` (one of the standard methods, else `other`, so the label stays bounded).
pub fn http_request(route: &str, method: &str, status: u16) {
    const METHODS: &[&str] = &[
        "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE",
    ];
    let method = if METHODS.contains(&method) {
        method
    } else {
        "other"
    };
    if let Some(m) = METRICS.as_ref() {
        m.http
            .with_label_values(&[route, method, &status.to_string()])
            .inc();
    }
}

/// Counts a call to the HTTP job endpoint `endpoint` (its id) that succeeded (`ok`) or not.
pub fn endpoint_call(endpoint: &str, ok: bool) {
    if let Some(m) = METRICS.as_ref() {
        m.endpoints
            .with_label_values(&[endpoint, if ok { "ok" } else { "error" }])
            .inc();
    }
}

/// How an attempt ended, for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptEnd {
    /// The run succeeded.
    Succeeded,
    /// The run failed for good.
    Failed,
    /// The attempt failed and the run was queued again.
    Retried,
    /// The run waits (an `io.wait` not yet due); not an outcome.
    Waiting,
}

/// Counts a finished attempt of `job` (a final outcome, or a retry) and records how long it took
/// (`millis`).
pub fn attempt_finished(job: &str, end: AttemptEnd, millis: i64) {
    let Some(m) = METRICS.as_ref() else { return };
    match end {
        AttemptEnd::Succeeded => m.finished.with_label_values(&[job, "succeeded"]).inc(),
        AttemptEnd::Failed => m.finished.with_label_values(&[job, "failed"]).inc(),
        AttemptEnd::Retried => m.retries.with_label_values(&[job]).inc(),
        AttemptEnd::Waiting => {}
    }
    m.duration
        .with_label_values(&[job])
        .observe(millis.max(0) as f64 / 1000.0);
}

/// Renders every metric in the Prometheus text format, with the gauges read from the store at
/// scrape time: `flare_queue_depth` set to `queue` (state → count), `flare_runs_waiting` to
/// `waiting` and `flare_runs_held` to `held` (reason → count).
///
/// The gauges live in a registry of this scrape only, so two stores in one process (tests, or
/// two servers) never see each other's queue.
pub fn render(queue: &[(&str, u64)], waiting: &[(&str, u64)], held: &[(&str, u64)]) -> String {
    let mut families = METRICS
        .as_ref()
        .map(|m| m.registry.gather())
        .unwrap_or_default();
    let gauges = [
        (
            "flare_queue_depth",
            "Runs waiting or running and events scheduled, at scrape time.",
            "state",
            queue,
        ),
        (
            "flare_runs_waiting",
            "Queued runs at scrape time by what they wait for: worker (due), wait (an io.wait), retry (a backoff), paused (their job).",
            "reason",
            waiting,
        ),
        (
            "flare_runs_held",
            "Queued runs at scrape time held back by flow control: due in a key, job or group at its limit (concurrency), due with their key's next start later (throttle), past their start timeout (start_timeout, to be cancelled), an open debounce window's run (debounce).",
            "reason",
            held,
        ),
    ];
    for (name, help, label, values) in gauges {
        match gauge_family(name, help, label, values) {
            Ok(mut gauge) => families.append(&mut gauge),
            Err(e) => tracing::error!(error = %e, "cannot build the gauges {name}"),
        }
    }
    let mut out = Vec::new();
    if let Err(e) = prometheus::TextEncoder::new().encode(&families, &mut out) {
        tracing::error!(error = %e, "cannot encode metrics");
    }
    String::from_utf8(out).unwrap_or_default()
}

fn gauge_family(
    name: &str,
    help: &str,
    label: &str,
    values: &[(&str, u64)],
) -> prometheus::Result<Vec<prometheus::proto::MetricFamily>> {
    let registry = Registry::new();
    let gauge = IntGaugeVec::new(Opts::new(name, help), &[label])?;
    registry.register(Box::new(gauge.clone()))?;
    for &(state, n) in values {
        gauge
            .with_label_values(&[state])
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
    Ok(registry.gather())
}

/// The content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_keep_a_bounded_kind() {
        assert_eq!(source_kind("job:run_123"), "job");
        assert_eq!(source_kind("replay:evt_1"), "replay");
        assert_eq!(source_kind("webhook:payments"), "webhook:payments");
        assert_eq!(source_kind("api"), "api");
    }

    #[test]
    fn attempts_and_the_queue_render_as_text() {
        attempt_finished("metrics-unit-job", AttemptEnd::Failed, 1500);
        let text = render(
            &[("ready", 3), ("running", 0)],
            &[("wait", 2)],
            &[("concurrency", 4)],
        );
        assert!(
            text.contains(
                r#"flare_runs_finished_total{job="metrics-unit-job",outcome="failed"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"flare_run_duration_seconds_bucket{job="metrics-unit-job",le="2.5"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"flare_queue_depth{state="ready"} 3"#),
            "{text}"
        );
        assert!(
            text.contains(r#"flare_runs_waiting{reason="wait"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"flare_runs_held{reason="concurrency"} 4"#),
            "{text}"
        );
    }

    #[test]
    fn http_requests_and_endpoint_calls_are_counted_with_bounded_labels() {
        http_request("/metrics-unit/{id}", "GET", 200);
        http_request("/metrics-unit/{id}", "BREW", 418);
        endpoint_call("ep_metricsunit", true);
        endpoint_call("ep_metricsunit", false);
        let text = render(&[], &[], &[]);
        for line in [
            r#"flare_http_requests_total{method="GET",route="/metrics-unit/{id}",status="200"} 1"#,
            r#"flare_http_requests_total{method="other",route="/metrics-unit/{id}",status="418"} 1"#,
            r#"flare_endpoint_calls_total{endpoint="ep_metricsunit",outcome="ok"} 1"#,
            r#"flare_endpoint_calls_total{endpoint="ep_metricsunit",outcome="error"} 1"#,
        ] {
            assert!(text.contains(line), "{line} in:\n{text}");
        }
    }
}
