//! Wrong API keys per client: the dashboard's sign-in (`POST /login`) and every other protected
//! route (a wrong `Authorization: Bearer` key, a wrong key in the Inngest path) share one count.
//!
//! A client is an IP address (an IPv6 address counts by its /64, which one host usually holds
//! whole): the peer's, or behind a trusted proxy the one it forwarded ([`super::client_ip`]);
//! without one (the router driven in-process, with no `ConnectInfo`) every attempt counts
//! against one shared client. [`MAX_FAILURES`] wrong keys within [`WINDOW_MS`] lock the client
//! out for [`WINDOW_MS`]: its wrong keys then get 429 with `Retry-After` and are not counted
//! further. A lockout never refuses the right key (the callers check it first), and the right
//! key does not clear the count either: a guesser sharing an address with a busy client that
//! holds the key would otherwise have its count reset by every request of that client.
//!
//! Memory is bounded: at most [`MAX_CLIENTS`] are tracked; past it, clients whose window and lock
//! are over are dropped first, then the one seen least recently. Time is the caller's (the
//! client's clock), so tests move it instead of sleeping.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Mutex;

use crate::log_throttle::LogThrottle;

/// Wrong keys a client may send within [`WINDOW_MS`] before it is locked out.
pub const MAX_FAILURES: u32 = 5;
/// The window failures are counted in, and how long a lock-out lasts, ms (a minute).
pub const WINDOW_MS: i64 = 60_000;
/// Most clients tracked at once.
pub const MAX_CLIENTS: usize = 10_000;

/// Who is signing in: the peer address (IPv6 by /64), or unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientId(Option<IpAddr>);

impl ClientId {
    /// The client of a peer address, if the server knows it.
    pub fn of(peer: Option<IpAddr>) -> Self {
        Self(peer.map(|ip| match ip {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => {
                    let s = v6.segments();
                    IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
                }
            },
            v4 => v4,
        }))
    }
}

impl std::fmt::Display for ClientId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(IpAddr::V6(ip)) => write!(f, "{ip}/64"),
            Some(ip) => write!(f, "{ip}"),
            None => f.write_str("unknown"),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    /// When the current counting window began.
    window_start_ms: i64,
    failures: u32,
    /// Locked out until then.
    locked_until_ms: Option<i64>,
    last_seen_ms: i64,
}

impl Entry {
    fn is_over(&self, now_ms: i64) -> bool {
        now_ms - self.window_start_ms >= WINDOW_MS
            && self.locked_until_ms.is_none_or(|until| now_ms >= until)
    }
}

/// Failed sign-ins by client, and the throttle for their log lines.
#[derive(Debug, Default)]
pub struct LoginAttempts {
    clients: Mutex<HashMap<ClientId, Entry>>,
    /// Log lines for failed and refused sign-ins.
    pub log: LogThrottle,
}

impl LoginAttempts {
    /// `Err(seconds)` while `client` is locked out at `now_ms`: how long until it may try again
    /// (at least 1).
    pub fn check(&self, client: ClientId, now_ms: i64) -> Result<(), u64> {
        let Ok(clients) = self.clients.lock() else {
            return Ok(());
        };
        match clients.get(&client).and_then(|e| e.locked_until_ms) {
            Some(until) if until > now_ms => {
                let ms = u64::try_from(until - now_ms).unwrap_or(0);
                Err(ms.div_ceil(1000).max(1))
            }
            _ => Ok(()),
        }
    }

    /// Counts a wrong key from `client`; `true` when this one locks it out.
    pub fn failed(&self, client: ClientId, now_ms: i64) -> bool {
        let Ok(mut clients) = self.clients.lock() else {
            return false;
        };
        if !clients.contains_key(&client) && clients.len() >= MAX_CLIENTS {
            clients.retain(|_, e| !e.is_over(now_ms));
            if clients.len() >= MAX_CLIENTS {
                if let Some(oldest) = clients
                    .iter()
                    .min_by_key(|(_, e)| e.last_seen_ms)
                    .map(|(c, _)| *c)
                {
                    clients.remove(&oldest);
                }
            }
        }
        let entry = clients.entry(client).or_insert(Entry {
            window_start_ms: now_ms,
            failures: 0,
            locked_until_ms: None,
            last_seen_ms: now_ms,
        });
        if entry.is_over(now_ms) {
            *entry = Entry {
                window_start_ms: now_ms,
                failures: 0,
                locked_until_ms: None,
                last_seen_ms: now_ms,
            };
        }
        entry.failures += 1;
        entry.last_seen_ms = now_ms;
        if entry.failures >= MAX_FAILURES {
            entry.locked_until_ms = Some(now_ms + WINDOW_MS);
            entry.window_start_ms = now_ms;
            entry.failures = 0;
            return true;
        }
        false
    }

    /// Clients tracked now.
    pub fn tracked(&self) -> usize {
        self.clients.lock().map(|c| c.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> ClientId {
        ClientId::of(Some(s.parse().expect("ip")))
    }

    #[test]
    fn five_failures_in_a_minute_lock_the_client_out_for_a_minute() {
        let a = LoginAttempts::default();
        let c = ip("203.0.113.7");
        for n in 1..MAX_FAILURES {
            assert!(!a.failed(c, i64::from(n) * 1_000), "failure {n}");
            assert_eq!(a.check(c, i64::from(n) * 1_000), Ok(()));
        }
        assert!(a.failed(c, 5_000), "the fifth locks");
        assert_eq!(a.check(c, 5_000), Err(60));
        assert_eq!(a.check(c, 64_001), Err(1));
        assert_eq!(a.check(ip("203.0.113.8"), 6_000), Ok(()), "others go on");
        assert_eq!(a.check(c, 65_000), Ok(()), "the lock ends");
        assert!(!a.failed(c, 65_000), "and counting starts again");
    }

    #[test]
    fn failures_spread_over_more_than_a_minute_do_not_lock() {
        let a = LoginAttempts::default();
        let c = ip("198.51.100.1");
        for n in 0..20 {
            // Three per minute at most.
            assert!(!a.failed(c, n * 20_000), "failure at {}s", n * 20);
        }
        let b = ip("198.51.100.2");
        for n in 0..4 {
            assert!(!a.failed(b, n * 1_000));
        }
        assert!(!a.failed(b, 61_000), "a new window");
    }

    #[test]
    fn ipv6_counts_by_64_and_mapped_ipv4_as_ipv4() {
        assert_eq!(ip("2001:db8:1:2:aaaa::1"), ip("2001:db8:1:2:bbbb::2"));
        assert_ne!(ip("2001:db8:1:2::1"), ip("2001:db8:1:3::1"));
        assert_eq!(ip("::ffff:192.0.2.1"), ip("192.0.2.1"));
        assert_eq!(ip("2001:db8:1:2::1").to_string(), "2001:db8:1:2::/64");
        assert_eq!(ClientId::of(None).to_string(), "unknown");
    }

    #[test]
    fn memory_is_bounded() {
        let a = LoginAttempts::default();
        for n in 0..(MAX_CLIENTS as u32 + 50) {
            let c = ClientId::of(Some(IpAddr::V4(n.into())));
            a.failed(c, i64::from(n));
        }
        assert_eq!(a.tracked(), MAX_CLIENTS);
        // The oldest were dropped, the newest kept.
        let newest = ClientId::of(Some(IpAddr::V4((MAX_CLIENTS as u32 + 49).into())));
        for _ in 1..MAX_FAILURES - 1 {
            assert!(!a.failed(newest, 20_000));
        }
        assert!(a.failed(newest, 20_000), "its count was kept");
        // Once windows are over, stale clients make room before anyone recent is dropped.
        a.failed(ip("10.9.9.9"), 200_000);
        assert!(a.tracked() <= MAX_CLIENTS);
    }
}
