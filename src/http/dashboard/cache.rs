//! A small cache for the dashboard's aggregate reads (statistics, job success rates), which count
//! every run finished in their window: ~1.5 s at a million runs in the window, where the lists
//! cost under a millisecond (BENCHMARKS.md).
//!
//! Stale-while-revalidate: a value younger than the time-to-live is served as is; an older one is
//! served too while one background task computes the next (so the live refresh never waits on a
//! count); only the first request for a key computes inline. Times come from the client's clock.
//! Keys include the database URL, so servers on different databases in one process never share.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use crate::store;

/// How long a computed value is served without refreshing it, ms.
pub const TTL_MS: i64 = 10_000;

struct Entry<T> {
    at: i64,
    value: T,
    refreshing: bool,
}

/// Values by key (see the module docs).
pub struct Cache<T> {
    entries: Arc<Mutex<HashMap<String, Entry<T>>>>,
}

impl<T> Default for Cache<T> {
    fn default() -> Self {
        Self {
            entries: Arc::new(Mutex::new(HashMap::new())),
        }
    }
}

impl<T: Clone + Send + 'static> Cache<T> {
    /// Drops the value of `key`, so the next read computes it (after an action that changes it).
    pub fn forget(&self, key: &str) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.remove(key);
        }
    }

    /// The value for `key` and when it was computed (ms): cached, or computed by `compute`.
    pub async fn get<F, Fut>(&self, key: String, now: i64, compute: F) -> store::Result<(T, i64)>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = store::Result<T>> + Send + 'static,
    {
        let stale = {
            let Ok(mut entries) = self.entries.lock() else {
                return compute().await.map(|v| (v, now));
            };
            match entries.get_mut(&key) {
                Some(e) if now - e.at < TTL_MS => return Ok((e.value.clone(), e.at)),
                Some(e) => {
                    let refresh = !e.refreshing;
                    e.refreshing = true;
                    Some((e.value.clone(), e.at, refresh))
                }
                None => None,
            }
        };
        match stale {
            Some((value, at, refresh)) => {
                if refresh {
                    let entries = Arc::clone(&self.entries);
                    tokio::spawn(async move {
                        let result = compute().await;
                        if let Ok(mut entries) = entries.lock() {
                            match result {
                                Ok(value) => {
                                    entries.insert(
                                        key,
                                        Entry {
                                            at: now,
                                            value,
                                            refreshing: false,
                                        },
                                    );
                                }
                                Err(e) => {
                                    if let Some(suppressed) =
                                        crate::log_throttle::storage_failure("dashboard:stats")
                                    {
                                        tracing::warn!(error = %e, suppressed, "dashboard statistics refresh failed");
                                    }
                                    if let Some(entry) = entries.get_mut(&key) {
                                        entry.refreshing = false;
                                    }
                                }
                            }
                        }
                    });
                }
                Ok((value, at))
            }
            None => {
                let value = compute().await?;
                if let Ok(mut entries) = self.entries.lock() {
                    entries.insert(
                        key,
                        Entry {
                            at: now,
                            value: value.clone(),
                            refreshing: false,
                        },
                    );
                }
                Ok((value, now))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    async fn counted(cache: &Cache<u32>, calls: &Arc<AtomicU32>, now: i64) -> (u32, i64) {
        let calls = Arc::clone(calls);
        cache
            .get("k".into(), now, move || async move {
                Ok(calls.fetch_add(1, Ordering::SeqCst) + 1)
            })
            .await
            .expect("value")
    }

    #[tokio::test]
    async fn fresh_values_are_served_stale_ones_refreshed_in_the_background() {
        let cache = Cache::default();
        let calls = Arc::new(AtomicU32::new(0));
        assert_eq!(
            counted(&cache, &calls, 0).await,
            (1, 0),
            "a miss computes inline"
        );
        assert_eq!(
            counted(&cache, &calls, TTL_MS - 1).await,
            (1, 0),
            "fresh: cached"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        // Stale: the old value now, the new one once the background refresh ran.
        assert_eq!(counted(&cache, &calls, TTL_MS).await, (1, 0));
        for _ in 0..100 {
            if calls.load(Ordering::SeqCst) == 2 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(calls.load(Ordering::SeqCst), 2, "refreshed once");
        let mut got = (0, 0);
        for _ in 0..100 {
            got = counted(&cache, &calls, TTL_MS + 1).await;
            if got.0 == 2 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(got, (2, TTL_MS));
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }
}
