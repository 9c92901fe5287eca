//! Who a request comes from, as the wrong-key throttle ([`super::login_attempts`]) counts it.
//!
//! By default the client is the connection's peer address ([`axum::extract::ConnectInfo`]) and
//! no header is believed: behind a reverse proxy every client then has the proxy's address and
//! shares its count of wrong keys. An operator whose proxies set `X-Forwarded-For` names them
//! with `--trusted-proxy <CIDR>` (repeatable) or `FLARE_TRUSTED_PROXIES` (comma-separated):
//! a request whose peer is in that set is attributed to the right-most address of
//! `X-Forwarded-For` that is not itself a trusted proxy. Each proxy appends the address it got
//! the request from, so the entries right of that one were written by trusted proxies, and
//! everything left of it is whatever the client sent (and may be forged). A peer outside the
//! set is the client whatever its headers say, so a forged `X-Forwarded-For` sent straight to
//! Flare counts against the sender. An entry that is not an address stops the walk at the last
//! trusted hop. `Forwarded` (RFC 7239) is not read.

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use axum::http::HeaderMap;

/// The header trusted proxies append the client's address to.
pub const FORWARDED_FOR: &str = "x-forwarded-for";

/// An address range: `10.0.0.0/8`, `fd00::/8`, or one address (`192.0.2.1` is `/32`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Whether `ip` is in the range (an IPv4-mapped IPv6 address counts as its IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                mask_v4(u32::from(ip), self.prefix) == u32::from(net)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                mask_v6(u128::from(ip), self.prefix) == u128::from(net)
            }
            _ => false,
        }
    }
}

/// `bits` with all but the first `prefix` bits cleared (`prefix` ≤ 32).
fn mask_v4(bits: u32, prefix: u8) -> u32 {
    bits & u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

/// `bits` with all but the first `prefix` bits cleared (`prefix` ≤ 128).
fn mask_v6(bits: u128, prefix: u8) -> u128 {
    bits & u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

impl FromStr for Cidr {
    type Err = String;

    /// An address, or an address and a prefix length; host bits are cleared (`10.1.2.3/8` is
    /// `10.0.0.0/8`).
    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let (addr, prefix) = match text.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("{text:?} is not an address or CIDR range such as 10.0.0.0/8"))?;
        let addr = addr.to_canonical();
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("{text:?}: the prefix length must be 0 to {max}"))?,
        };
        let network = match addr {
            IpAddr::V4(v4) => IpAddr::V4(mask_v4(u32::from(v4), prefix).into()),
            IpAddr::V6(v6) => IpAddr::V6(mask_v6(u128::from(v6), prefix).into()),
        };
        Ok(Cidr { network, prefix })
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// The reverse proxies whose `X-Forwarded-For` is believed; none by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<Cidr>);

impl TrustedProxies {
    /// Parses ranges as given (`--trusted-proxy`, each entry of `FLARE_TRUSTED_PROXIES`); empty
    /// entries are skipped. The error names the entry.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Self, String> {
        entries
            .iter()
            .map(AsRef::as_ref)
            .filter(|e| !e.trim().is_empty())
            .map(Cidr::from_str)
            .collect::<Result<Vec<_>, _>>()
            .map(TrustedProxies)
    }

    /// Whether no proxy is trusted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `ip` is a trusted proxy.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|c| c.contains(ip))
    }

    /// The client's address: `peer`, or, when `peer` is a trusted proxy, the right-most address
    /// of `X-Forwarded-For` that is not a trusted proxy (see the module docs). `None` without a
    /// peer (a router driven in-process), whatever the headers say.
    pub fn client_ip(&self, peer: Option<IpAddr>, headers: &HeaderMap) -> Option<IpAddr> {
        let mut client = peer?.to_canonical();
        if !self.contains(client) {
            return Some(client);
        }
        let mut entries: Vec<Option<IpAddr>> = Vec::new();
        for value in headers.get_all(FORWARDED_FOR) {
            match value.to_str() {
                Ok(text) => entries.extend(text.split(',').map(forwarded_address)),
                Err(_) => entries.push(None),
            }
        }
        for entry in entries.into_iter().rev() {
            let Some(ip) = entry else { break };
            client = ip;
            if !self.contains(ip) {
                break;
            }
        }
        Some(client)
    }
}

/// One `X-Forwarded-For` entry: `203.0.113.7`, `2001:db8::1`, and the forms with a port some
/// proxies write (`203.0.113.7:4711`, `[2001:db8::1]:4711`, `[2001:db8::1]`).
fn forwarded_address(entry: &str) -> Option<IpAddr> {
    let entry = entry.trim();
    let ip = entry
        .parse::<IpAddr>()
        .ok()
        .or_else(|| entry.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .or_else(|| {
            entry
                .strip_prefix('[')
                .and_then(|e| e.strip_suffix(']'))
                .and_then(|e| e.parse().ok())
        })?;
    Some(ip.to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    fn xff(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(FORWARDED_FOR, HeaderValue::from_str(v).expect("header"));
        }
        h
    }

    #[test]
    fn ranges_parse_and_contain() {
        let net: Cidr = "10.1.2.3/8".parse().expect("cidr");
        assert_eq!(net.to_string(), "10.0.0.0/8");
        assert!(net.contains(ip("10.200.0.1")));
        assert!(net.contains(ip("::ffff:10.0.0.1")), "mapped IPv4");
        assert!(!net.contains(ip("11.0.0.1")));
        assert!(!net.contains(ip("::1")));
        let one: Cidr = "192.0.2.1".parse().expect("address");
        assert!(one.contains(ip("192.0.2.1")) && !one.contains(ip("192.0.2.2")));
        let v6: Cidr = "fd00::/8".parse().expect("v6");
        assert!(v6.contains(ip("fd12::1")) && !v6.contains(ip("fe80::1")));
        let all: Cidr = "0.0.0.0/0".parse().expect("all");
        assert!(all.contains(ip("203.0.113.9")));
        for bad in [
            "",
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0/x",
            "example.com",
            "10.0.0/8",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
        let list = TrustedProxies::parse(&["10.0.0.0/8", " ", "::1"]).expect("list");
        assert!(list.contains(ip("::1")) && list.contains(ip("10.0.0.1")));
        let err = TrustedProxies::parse(&["10.0.0.0/8", "nope"]).expect_err("bad entry");
        assert!(err.contains("\"nope\""), "{err}");
    }

    #[test]
    fn without_trusted_proxies_the_peer_is_the_client() {
        let none = TrustedProxies::default();
        let h = xff(&["203.0.113.7"]);
        assert_eq!(
            none.client_ip(Some(ip("10.0.0.5")), &h),
            Some(ip("10.0.0.5"))
        );
        assert_eq!(none.client_ip(None, &h), None, "no peer: unknown");
    }

    #[test]
    fn a_trusted_peer_gives_the_right_most_untrusted_forwarded_address() {
        let trusted = TrustedProxies::parse(&["10.0.0.0/8", "fd00::/8"]).expect("list");
        let proxy = Some(ip("10.0.0.5"));
        let cases: [(&[&str], &str); 8] = [
            (&["203.0.113.7"], "203.0.113.7"),
            // The client may write anything left of what the proxy appended.
            (&["198.51.100.1, 203.0.113.7"], "203.0.113.7"),
            (&["198.51.100.1", "203.0.113.7"], "203.0.113.7"),
            // A chain of trusted proxies is walked through.
            (&["203.0.113.7, 10.0.0.9, fd00::2"], "203.0.113.7"),
            (&["203.0.113.7:4711"], "203.0.113.7"),
            (&["[2001:db8::1]:4711"], "2001:db8::1"),
            // Garbage stops the walk at the last trusted hop.
            (&["203.0.113.7, unknown, 10.0.0.9"], "10.0.0.9"),
            // Nothing forwarded: the proxy itself (a health check, say).
            (&[], "10.0.0.5"),
        ];
        for (values, want) in cases {
            assert_eq!(
                trusted.client_ip(proxy, &xff(values)),
                Some(ip(want)),
                "{values:?}"
            );
        }
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_forwards() {
        let trusted = TrustedProxies::parse(&["10.0.0.0/8"]).expect("list");
        let h = xff(&["10.0.0.7, 203.0.113.50"]);
        assert_eq!(
            trusted.client_ip(Some(ip("198.51.100.7")), &h),
            Some(ip("198.51.100.7"))
        );
    }
}
