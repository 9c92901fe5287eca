//! Summarised log lines for what repeats at request speed: what hostile clients can repeat at will
//! (rejected webhooks, failed sign-ins), and storage failures, where every operation fails alike
//! (a full disk once wrote 32,881 ERROR lines in 20 s, a PostgreSQL outage 3,230 in 17 s, and
//! each failed `/readyz` poll a WARN line). Without it, a fuzzer, a brute-force run or an outage
//! writes one line per request.
//!
//! [`LogThrottle::admit`] lets the first line of a kind through, then at most one line per
//! [`LogThrottle::interval_ms`] per kind, and tells that line how many of its kind were held back
//! since the last one written. The count of a burst that stops is reported by the next line of
//! that kind, whenever it comes (no timer). The caller passes the time, so tests drive it with a
//! `ManualClock` (or plain numbers) instead of sleeping.
//!
//! Kinds are short, fixed strings chosen by the code (`"webhook:payments:400"`, `"login"`), never
//! client input; the map is still capped at [`MAX_KINDS`].
//!
//! Storage failures, logged by the store, the engine and the HTTP layer alike, go through one
//! process-wide throttle: [`storage_failure`] with a kind per place that logs (`"sqlite:batch"`,
//! `"engine:claim"`, `"readyz"`), timed by the system clock or, in tests, by the clock given to
//! [`set_storage_clock`].

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, RwLock};

use crate::clock::{Clock, SharedClock, SystemClock};

/// The default spacing of two lines of one kind, ms.
pub const DEFAULT_INTERVAL_MS: i64 = 10_000;
/// Most kinds tracked at once; past it, kinds quiet for an interval are dropped, and a kind that
/// still finds no room is let through with nothing counted.
pub const MAX_KINDS: usize = 256;

/// One kind's state: when its last line was written, and how many were held back since.
#[derive(Debug, Clone, Copy)]
struct Kind {
    last_written_ms: i64,
    suppressed: u64,
}

/// Lets through the first line of each kind, then one per interval with the number held back.
#[derive(Debug)]
pub struct LogThrottle {
    interval_ms: i64,
    kinds: Mutex<HashMap<String, Kind>>,
}

impl Default for LogThrottle {
    fn default() -> Self {
        Self::new(DEFAULT_INTERVAL_MS)
    }
}

impl LogThrottle {
    /// A throttle writing at most one line per `interval_ms` per kind.
    pub fn new(interval_ms: i64) -> Self {
        Self {
            interval_ms,
            kinds: Mutex::new(HashMap::new()),
        }
    }

    /// The spacing of two lines of one kind, ms.
    pub fn interval_ms(&self) -> i64 {
        self.interval_ms
    }

    /// Whether a line of `kind` should be written at `now_ms`: `Some(n)` with the `n` lines of
    /// that kind held back since the last one written (0 for the first), `None` to hold this one
    /// back (it is counted).
    pub fn admit(&self, kind: &str, now_ms: i64) -> Option<u64> {
        let Ok(mut kinds) = self.kinds.lock() else {
            return Some(0);
        };
        if let Some(k) = kinds.get_mut(kind) {
            if now_ms.saturating_sub(k.last_written_ms) < self.interval_ms {
                k.suppressed += 1;
                return None;
            }
            let suppressed = k.suppressed;
            *k = Kind {
                last_written_ms: now_ms,
                suppressed: 0,
            };
            return Some(suppressed);
        }
        if kinds.len() >= MAX_KINDS {
            let interval = self.interval_ms;
            // A dropped kind's held-back count is lost; its next line starts afresh.
            kinds.retain(|_, k| now_ms.saturating_sub(k.last_written_ms) < interval);
        }
        if kinds.len() < MAX_KINDS {
            kinds.insert(
                kind.to_string(),
                Kind {
                    last_written_ms: now_ms,
                    suppressed: 0,
                },
            );
        }
        Some(0)
    }
}

/// The process's throttle for storage failures.
pub fn storage() -> &'static LogThrottle {
    static THROTTLE: OnceLock<LogThrottle> = OnceLock::new();
    THROTTLE.get_or_init(LogThrottle::default)
}

fn storage_clock() -> &'static RwLock<SharedClock> {
    static CLOCK: OnceLock<RwLock<SharedClock>> = OnceLock::new();
    CLOCK.get_or_init(|| RwLock::new(std::sync::Arc::new(SystemClock)))
}

/// The time [`storage`] is given: the system's, or the clock of [`set_storage_clock`].
pub fn storage_now_ms() -> i64 {
    match storage_clock().read() {
        Ok(clock) => clock.now_ms(),
        Err(_) => SystemClock.now_ms(),
    }
}

/// Whether a storage failure's line of `kind` should be written now, through [`storage`]: `Some`
/// with the number held back since the last line of that kind, `None` to hold it back.
pub fn storage_failure(kind: &'static str) -> Option<u64> {
    storage().admit(kind, storage_now_ms())
}

/// Times [`storage_failure`] by `clock` from now on (tests: a `ManualClock`, so a test moves
/// past the interval instead of sleeping). The process's whole storage throttle follows it.
pub fn set_storage_clock(clock: SharedClock) {
    if let Ok(mut c) = storage_clock().write() {
        *c = clock;
    }
}

/// The lines `f` logs (tracing, without colours), for tests of what is logged.
#[cfg(test)]
pub(crate) fn logged(f: impl FnOnce()) -> Vec<String> {
    #[derive(Clone, Default)]
    struct Lines(std::sync::Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    let text = String::from_utf8(lines.0.lock().expect("lock").clone()).expect("utf-8");
    text.lines().map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_line_passes_then_one_per_interval_with_the_count_held_back() {
        let t = LogThrottle::new(10_000);
        assert_eq!(t.admit("login", 1_000), Some(0));
        for ms in 1_001..1_101 {
            assert_eq!(t.admit("login", ms), None);
        }
        assert_eq!(t.admit("login", 10_999), None, "not a full interval yet");
        assert_eq!(t.admit("login", 11_000), Some(101));
        assert_eq!(t.admit("login", 11_001), None);
        assert_eq!(t.admit("login", 60_000), Some(1));
        assert_eq!(t.admit("login", 80_000), Some(0), "a quiet interval");
    }

    #[test]
    fn kinds_are_counted_apart() {
        let t = LogThrottle::default();
        assert_eq!(t.admit("webhook:payments:400", 0), Some(0));
        assert_eq!(t.admit("webhook:auth:400", 1), Some(0));
        assert_eq!(t.admit("webhook:payments:400", 2), None);
        assert_eq!(t.admit("webhook:payments:503", 3), Some(0));
        assert_eq!(
            t.admit("webhook:auth:400", DEFAULT_INTERVAL_MS + 1),
            Some(0)
        );
        assert_eq!(
            t.admit("webhook:payments:400", DEFAULT_INTERVAL_MS),
            Some(1)
        );
    }

    #[test]
    fn the_kinds_kept_are_capped() {
        let t = LogThrottle::new(10);
        for n in 0..MAX_KINDS {
            assert_eq!(t.admit(&format!("k{n}"), 0), Some(0));
        }
        // Full, every kind recent: a new kind passes untracked.
        assert_eq!(t.admit("new", 5), Some(0));
        assert_eq!(t.admit("new", 6), Some(0));
        // Once the others are quiet, they make room.
        assert_eq!(t.admit("new", 20), Some(0));
        assert_eq!(t.admit("new", 21), None);
        assert!(t.kinds.lock().expect("lock").len() <= MAX_KINDS);
    }
}
