//! The benchmark's figures: medians and ranges over repetitions, the table, the JSON lines, and
//! the `/proc` readings (load average, resident memory) recorded with them.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use serde_json::Value;

use super::args::Sample;

/// One scenario variant measured over several repetitions.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    /// `send`, `e2e`, `latency`, `memory`, `steps`, ….
    pub scenario: &'static str,
    /// Which variant (`64 senders`, `1000/s`, …).
    pub variant: String,
    /// The settings it ran with.
    pub settings: Value,
    /// Number of repetitions.
    pub reps: usize,
    /// Median of each metric over the repetitions.
    pub median: BTreeMap<&'static str, f64>,
    /// Smallest value of each metric.
    pub min: BTreeMap<&'static str, f64>,
    /// Largest value of each metric.
    pub max: BTreeMap<&'static str, f64>,
    /// Every repetition's figures, in order.
    pub samples: Vec<Sample>,
}

impl Figure {
    /// Summarizes `samples` (median, min, max per metric).
    pub fn new(
        scenario: &'static str,
        variant: String,
        settings: Value,
        samples: Vec<Sample>,
    ) -> Self {
        let mut median = BTreeMap::new();
        let mut min = BTreeMap::new();
        let mut max = BTreeMap::new();
        let keys: Vec<&'static str> = samples
            .iter()
            .flat_map(|s| s.keys().copied())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        for key in keys {
            let mut values: Vec<f64> = samples.iter().filter_map(|s| s.get(key).copied()).collect();
            values.sort_by(f64::total_cmp);
            if let (Some(lo), Some(hi)) = (values.first(), values.last()) {
                min.insert(key, *lo);
                max.insert(key, *hi);
                median.insert(key, median_of_sorted(&values));
            }
        }
        Self {
            scenario,
            variant,
            settings,
            reps: samples.len(),
            median,
            min,
            max,
            samples,
        }
    }

    /// The figure as one JSON line.
    pub fn json_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

fn median_of_sorted(values: &[f64]) -> f64 {
    let n = values.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// The `q` quantile (0..=1) of sorted values, nearest rank.
pub(crate) fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The metrics shown in the table, per scenario, with their units. The JSON has all of them.
fn headline(scenario: &str) -> &'static [(&'static str, &'static str)] {
    match scenario {
        "send" => &[("events_per_s", "events/s"), ("send_p99_ms", "ms/send p99")],
        "e2e" => &[
            ("runs_per_s", "runs/s"),
            ("send_phase_events_per_s", "events/s while sending"),
            ("bench_peak_rss_mb", "MB peak RSS (bench process)"),
        ],
        "latency" => &[
            ("p50_ms", "ms p50"),
            ("p95_ms", "ms p95"),
            ("p99_ms", "ms p99"),
            ("max_ms", "ms max"),
        ],
        "memory" => &[("idle_rss_mb", "MB RSS"), ("idle_hwm_mb", "MB peak RSS")],
        "pg-scale drain" | "drain" => &[
            ("runs_per_s", "runs/s"),
            ("seed_events_per_s", "events/s seeding"),
        ],
        "pg-scale latency" => &[
            ("p50_ms", "ms p50"),
            ("p99_ms", "ms p99"),
            ("max_ms", "ms max"),
        ],
        "endpoint" => &[
            ("runs_per_s", "runs/s"),
            ("flare_cpu_ms_per_run", "ms Flare CPU per run"),
            ("endpoint_cpu_ms_per_run", "ms endpoint CPU per run"),
        ],
        "endpoint latency" => &[
            ("p50_ms", "ms p50"),
            ("p95_ms", "ms p95"),
            ("p99_ms", "ms p99"),
            ("max_ms", "ms max"),
        ],
        "fan-in" => &[
            ("children_per_s", "children/s"),
            ("secs", "s to the parent's end"),
            ("first_child_secs", "s to 1st child start"),
            ("parent_executions", "parent executions"),
            ("vs_drain", "× fan-in / drain"),
            ("vs_seeded_drain", "× fan-in / (seeding + drain)"),
            ("stored_mb", "MB stored"),
            ("vs_drain_stored", "× MB stored / drain's"),
        ],
        "fan-in drain" => &[
            ("runs_per_s", "runs/s"),
            (
                "seeded_drain_per_s",
                "runs/s counting their events' writing",
            ),
            ("stored_mb", "MB stored"),
        ],
        "waiters" => &[
            ("no_waiters_per_s", "events/s, no run waiting"),
            ("starting_one_run_per_s", "events/s each starting a run"),
            ("non_matching_per_s", "events/s matching none"),
            ("matching_per_s", "events/s each resuming one"),
            ("non_matching_ratio", "× non-matching / none"),
            ("matching_ratio", "× matching / none"),
            ("matching_vs_starting_ratio", "× matching / starting"),
            (
                "interleaved_unwaited_per_s",
                "events/s, alternated: a name none waits for",
            ),
            (
                "interleaved_non_matching_per_s",
                "events/s, alternated: matching none",
            ),
            (
                "interleaved_non_matching_ratio",
                "× alternated non-matching / unwaited",
            ),
            ("resumed", "runs resumed"),
        ],
        "steps" => &[
            ("runs_per_s", "runs/s"),
            ("steps_per_s", "steps/s"),
            ("first_step_p50_ms", "ms p50 1st step (read+write)"),
            ("first_step_p99_ms", "ms p99 1st step"),
            ("next_step_p50_ms", "ms p50 later step (write)"),
            ("next_step_p99_ms", "ms p99 later step"),
        ],
        _ => &[],
    }
}

/// The human table: one row per headline metric, median and min–max, load averages.
pub fn table(figures: &[Figure]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<9} {:<18} {:>14} {:>23}  {:<28} load1",
        "scenario", "variant", "median", "min–max", "unit"
    );
    for f in figures {
        let loads: Vec<String> = f
            .samples
            .iter()
            .filter_map(|s| s.get("load1"))
            .map(|l| format!("{l:.2}"))
            .collect();
        for (key, unit) in headline(f.scenario) {
            let (Some(med), Some(lo), Some(hi)) =
                (f.median.get(key), f.min.get(key), f.max.get(key))
            else {
                continue;
            };
            let _ = writeln!(
                out,
                "{:<9} {:<18} {:>14} {:>23}  {:<28} {}",
                f.scenario,
                f.variant,
                num(*med),
                format!("{}–{}", num(*lo), num(*hi)),
                unit,
                loads.join(" ")
            );
        }
    }
    out
}

fn num(v: f64) -> String {
    if v.abs() >= 100.0 {
        let n = v.round() as i64;
        let s = n.abs().to_string();
        let mut grouped = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 {
                grouped.push(',');
            }
            grouped.push(c);
        }
        if n < 0 {
            format!("-{grouped}")
        } else {
            grouped
        }
    } else {
        format!("{v:.2}")
    }
}

/// The 1-minute load average, or NaN where `/proc/loadavg` is missing.
pub(crate) fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|l| l.parse().ok()))
        .unwrap_or(f64::NAN)
}

/// Resets this process's peak resident memory (`VmHWM`), so the next reading covers only what
/// follows. Linux only; elsewhere a no-op.
pub(crate) fn reset_peak_memory() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// A `kB` field (`VmRSS`, `VmHWM`) of `/proc/<pid>/status`.
pub(crate) fn proc_status_kb(pid: &str, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_range_per_metric() {
        let samples: Vec<Sample> = [3.0, 1.0, 2.0]
            .iter()
            .map(|v| Sample::from([("events_per_s", *v)]))
            .collect();
        let f = Figure::new("send", "1 senders".into(), Value::Null, samples);
        assert_eq!(f.median["events_per_s"], 2.0);
        assert_eq!(f.min["events_per_s"], 1.0);
        assert_eq!(f.max["events_per_s"], 3.0);
        assert!(f.json_line().contains("\"scenario\":\"send\""));
    }

    #[test]
    fn quantiles_use_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 50.0);
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert_eq!(quantile(&v, 1.0), 100.0);
    }

    #[test]
    fn numbers_are_grouped() {
        assert_eq!(num(98_383.4), "98,383");
        assert_eq!(num(1.234), "1.23");
    }

    #[test]
    fn reads_own_memory() {
        if std::path::Path::new("/proc/self/status").exists() {
            assert!(proc_status_kb("self", "VmRSS").is_some_and(|kb| kb > 0));
        }
    }
}
