//! The addresses Flare calls endpoints at. Operators' applications live on private networks
//! (10/8, 172.16/12, 192.168/16, loopback), so those are allowed. What an endpoint URL must not
//! reach is the cloud machine's own secrets: **link-local** addresses (169.254.0.0/16,
//! fe80::/10), **cloud metadata** addresses and names (169.254.169.254, fd00:ec2::254,
//! `metadata.google.internal`, …) and the **unspecified** address (0.0.0.0, ::, which reaches
//! this machine). They are refused unless the operator allows them ([`AllowList`]:
//! `--endpoint-allow <CIDR or host>`, `FLARE_ENDPOINT_ALLOW`).
//!
//! The rule is applied twice: to the URL as written ([`AllowList::check_url`]: at registration,
//! a clear 400, and again before every call), and to the addresses a name resolves to, at
//! connect time ([`Resolver`], the DNS resolver of the endpoints' HTTP client), so that a name
//! that resolves, or is re-pointed, to a metadata address is refused too.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::Url;

/// Cloud metadata services' addresses: AWS, GCP, Azure, Oracle, DigitalOcean, Hetzner and others
/// (169.254.169.254), AWS ECS task metadata (169.254.170.2), AWS IPv6 (fd00:ec2::254), Alibaba
/// Cloud (100.100.100.200) and Azure's platform address (168.63.129.16).
const METADATA_ADDRESSES: [IpAddr; 5] = [
    IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254)),
    IpAddr::V4(Ipv4Addr::new(169, 254, 170, 2)),
    IpAddr::V4(Ipv4Addr::new(100, 100, 100, 200)),
    IpAddr::V4(Ipv4Addr::new(168, 63, 129, 16)),
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)),
];

/// Cloud metadata services' names (GCP, AWS), compared without case or a trailing dot.
const METADATA_NAMES: [&str; 5] = [
    "metadata",
    "metadata.google.internal",
    "metadata.goog",
    "instance-data",
    "instance-data.ec2.internal",
];

/// Why an address or name is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// 169.254.0.0/16 or fe80::/10.
    LinkLocal,
    /// A cloud metadata service's address or name.
    Metadata,
    /// 0.0.0.0/8 or `::`.
    Unspecified,
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Reason::LinkLocal => "a link-local address (169.254.0.0/16, fe80::/10)",
            Reason::Metadata => "a cloud metadata service",
            Reason::Unspecified => {
                "the unspecified address (0.0.0.0, ::), which reaches this machine"
            }
        })
    }
}

/// An endpoint address refused: `what` (an address, a name, or a name and the address it
/// resolves to) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} is {reason}: Flare does not call it unless --endpoint-allow/FLARE_ENDPOINT_ALLOW allows it")]
pub struct Refused {
    /// The address or name, as shown.
    pub what: String,
    /// Why.
    pub reason: Reason,
}

/// `ip` as a plain IPv4 address when it carries one: an IPv4-mapped IPv6 address
/// (`::ffff:a.b.c.d`) or one of the NAT64 prefix `64:ff9b::/96`.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return IpAddr::V4(v4);
            }
            let s = v6.segments();
            if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                let [a, b] = s[6].to_be_bytes();
                let [c, d] = s[7].to_be_bytes();
                return IpAddr::V4(Ipv4Addr::new(a, b, c, d));
            }
            ip
        }
        IpAddr::V4(_) => ip,
    }
}

/// Why `ip` is refused by default, if it is.
pub fn refused_ip(ip: IpAddr) -> Option<Reason> {
    let ip = canonical(ip);
    if METADATA_ADDRESSES.contains(&ip) {
        return Some(Reason::Metadata);
    }
    match ip {
        IpAddr::V4(v4) if v4.octets()[0] == 0 => Some(Reason::Unspecified),
        IpAddr::V4(v4) if v4.is_link_local() => Some(Reason::LinkLocal),
        IpAddr::V6(v6) if v6.is_unspecified() => Some(Reason::Unspecified),
        IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80 => Some(Reason::LinkLocal),
        _ => None,
    }
}

/// `name` lowercase, without a trailing dot.
fn normal_name(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

/// Whether `name` is a cloud metadata service's name.
fn is_metadata_name(name: &str) -> bool {
    METADATA_NAMES.contains(&normal_name(name).as_str())
}

/// A network in CIDR notation (`10.0.0.0/8`, `fe80::/10`); an address alone is its own network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cidr {
    net: IpAddr,
    prefix: u8,
}

impl Cidr {
    fn parse(text: &str) -> Option<Cidr> {
        let (addr, prefix) = match text.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text, None),
        };
        let addr = addr
            .strip_prefix('[')
            .and_then(|a| a.strip_suffix(']'))
            .unwrap_or(addr);
        let net: IpAddr = addr.parse().ok()?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                p.parse::<u8>().ok().filter(|&p| p <= max)?
            }
            Some(_) => return None,
        };
        Some(Cidr { net, prefix })
    }

    fn contains(&self, ip: IpAddr) -> bool {
        let bits = |ip: IpAddr| -> (u128, u32) {
            match ip {
                IpAddr::V4(v4) => (u128::from(u32::from(v4)), 32),
                IpAddr::V6(v6) => (u128::from(v6), 128),
            }
        };
        let ((net, width), (addr, addr_width)) = (bits(self.net), bits(ip));
        if width != addr_width {
            return false;
        }
        let shift = width - u32::from(self.prefix);
        shift >= width || (net >> shift) == (addr >> shift)
    }
}

/// What an operator allowed besides the default: networks (`169.254.0.0/16`, an address alone)
/// and host names (`metadata.google.internal`: the name, whatever it resolves to).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    nets: Vec<Cidr>,
    hosts: Vec<String>,
}

impl AllowList {
    /// Reads `--endpoint-allow` entries: each a CIDR network, an address or a host name.
    /// Empty entries are skipped; the error names the entry that is none of these.
    pub fn parse<S: AsRef<str>>(entries: impl IntoIterator<Item = S>) -> Result<Self, String> {
        let mut allow = AllowList::default();
        for entry in entries {
            let entry = entry.as_ref().trim();
            if entry.is_empty() {
                continue;
            }
            if let Some(cidr) = Cidr::parse(entry) {
                allow.nets.push(cidr);
                continue;
            }
            let name = normal_name(entry);
            let is_name = !name.is_empty()
                && name.split('.').all(|label| {
                    !label.is_empty()
                        && label
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                });
            if !is_name {
                return Err(format!(
                    "{entry:?} is not a network (169.254.0.0/16), an address or a host name"
                ));
            }
            allow.hosts.push(name);
        }
        Ok(allow)
    }

    fn allows_ip(&self, ip: IpAddr) -> bool {
        let plain = canonical(ip);
        self.nets
            .iter()
            .any(|net| net.contains(ip) || net.contains(plain))
    }

    fn allows_name(&self, name: &str) -> bool {
        self.hosts.contains(&normal_name(name))
    }

    /// Checks an address: refused by default and not allowed.
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), Refused> {
        match refused_ip(ip) {
            Some(reason) if !self.allows_ip(ip) => Err(Refused {
                what: ip.to_string(),
                reason,
            }),
            _ => Ok(()),
        }
    }

    /// Checks the host of `url` as written: an address by [`AllowList::check_ip`], a name
    /// against the metadata names. (What a name resolves to is checked at connect time.)
    pub fn check_url(&self, url: &Url) -> Result<(), Refused> {
        // The parser writes an http(s) URL's address host in its plain form: dotted IPv4,
        // bracketed IPv6.
        let host = url.host_str().unwrap_or("");
        let literal = host.strip_prefix('[').and_then(|h| h.strip_suffix(']'));
        if let Ok(ip) = literal.unwrap_or(host).parse::<IpAddr>() {
            return self.check_ip(ip);
        }
        if is_metadata_name(host) && !self.allows_name(host) {
            return Err(Refused {
                what: host.to_string(),
                reason: Reason::Metadata,
            });
        }
        Ok(())
    }

    /// The addresses `name` resolved to that may be called: all of them for an allowed name,
    /// else those not refused; an error when every one is refused.
    pub fn filter_resolved(
        &self,
        name: &str,
        addrs: Vec<SocketAddr>,
    ) -> Result<Vec<SocketAddr>, Refused> {
        if self.allows_name(name) {
            return Ok(addrs);
        }
        if is_metadata_name(name) {
            return Err(Refused {
                what: name.to_string(),
                reason: Reason::Metadata,
            });
        }
        let mut first_refused = None;
        let kept: Vec<SocketAddr> = addrs
            .into_iter()
            .filter(|a| match self.check_ip(a.ip()) {
                Ok(()) => true,
                Err(refused) => {
                    first_refused.get_or_insert(refused);
                    false
                }
            })
            .collect();
        match first_refused {
            Some(refused) if kept.is_empty() => Err(Refused {
                what: format!("{name} (it resolves to {})", refused.what),
                reason: refused.reason,
            }),
            _ => Ok(kept),
        }
    }
}

/// The DNS resolver of the endpoints' HTTP client: the system's resolver, whose answers pass
/// [`AllowList::filter_resolved`] before a connection is made.
#[derive(Debug, Clone, Default)]
pub struct Resolver {
    allow: Arc<AllowList>,
    /// Fixed answers instead of the system's (tests: names that resolve to given addresses).
    fixed: Option<Arc<HashMap<String, Vec<IpAddr>>>>,
}

impl Resolver {
    /// A resolver that refuses what `allow` does not allow.
    pub fn new(allow: Arc<AllowList>) -> Self {
        Self { allow, fixed: None }
    }

    /// A resolver answering from `hosts` instead of the system's resolver (a name missing there
    /// does not resolve); for tests.
    pub fn with_hosts(allow: Arc<AllowList>, hosts: HashMap<String, Vec<IpAddr>>) -> Self {
        Self {
            allow,
            fixed: Some(Arc::new(hosts)),
        }
    }
}

impl Resolve for Resolver {
    fn resolve(&self, name: Name) -> Resolving {
        let this = self.clone();
        let name = name.as_str().to_string();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> = match &this.fixed {
                Some(hosts) => hosts
                    .get(&normal_name(&name))
                    .map(|ips| ips.iter().map(|ip| SocketAddr::new(*ip, 0)).collect())
                    .ok_or_else(|| {
                        std::io::Error::new(std::io::ErrorKind::NotFound, "unknown test host")
                    })?,
                None => tokio::net::lookup_host((name.as_str(), 0)).await?.collect(),
            };
            let kept = this.allow.filter_resolved(&name, addrs)?;
            Ok(Box::new(kept.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> Url {
        Url::parse(text).expect("a URL")
    }

    fn refused(allow: &AllowList, text: &str) -> Option<Reason> {
        allow.check_url(&url(text)).err().map(|r| r.reason)
    }

    #[test]
    fn link_local_metadata_and_unspecified_urls_are_refused() {
        let none = AllowList::default();
        for (text, reason) in [
            ("http://169.254.169.254/latest/meta-data/", Reason::Metadata),
            ("http://169.254.170.2/v2/credentials", Reason::Metadata),
            ("http://[fd00:ec2::254]/", Reason::Metadata),
            ("http://100.100.100.200/", Reason::Metadata),
            (
                "http://metadata.google.internal/computeMetadata/v1/",
                Reason::Metadata,
            ),
            ("http://METADATA/", Reason::Metadata),
            ("http://metadata.google.internal./", Reason::Metadata),
            ("http://instance-data/", Reason::Metadata),
            ("http://169.254.1.2:4000/flare", Reason::LinkLocal),
            ("http://[fe80::1]/", Reason::LinkLocal),
            ("http://[febf::1]/", Reason::LinkLocal),
            ("http://0.0.0.0:4000/", Reason::Unspecified),
            ("http://0/", Reason::Unspecified),
            ("http://[::]/", Reason::Unspecified),
            // Other spellings of the same addresses, which the URL parser normalises.
            ("http://2852039166/", Reason::Metadata),
            ("http://0xa9.0xfe.0xa9.0xfe/", Reason::Metadata),
            ("http://[::ffff:169.254.169.254]/", Reason::Metadata),
            ("http://[64:ff9b::a9fe:a9fe]/", Reason::Metadata),
        ] {
            assert_eq!(refused(&none, text), Some(reason), "{text}");
        }
        let message = none
            .check_url(&url("http://169.254.169.254/"))
            .expect_err("refused")
            .to_string();
        assert!(
            message.contains("169.254.169.254 is a cloud metadata service")
                && message.contains("--endpoint-allow"),
            "{message}"
        );
    }

    #[test]
    fn private_and_loopback_networks_stay_allowed() {
        let none = AllowList::default();
        for text in [
            "http://10.1.2.3:4000/flare",
            "http://10.255.255.255/",
            "http://172.16.0.1/",
            "http://192.168.1.20:8080/jobs",
            "http://127.0.0.1:4000/flare",
            "http://localhost:4000/flare",
            "http://[::1]:4000/",
            "http://[fd12:3456::1]/",
            "http://100.64.0.1/",
            "https://jobs.example.com/flare",
            "http://metadata.example.com/",
            "http://169.255.0.1/",
            "http://[fec0::1]/",
        ] {
            assert_eq!(refused(&none, text), None, "{text}");
        }
    }

    #[test]
    fn the_allow_list_takes_networks_addresses_and_names() {
        let allow = AllowList::parse([
            " 169.254.0.0/16 ",
            "",
            "[fe80::]/10",
            "::",
            "Metadata.Google.Internal.",
        ])
        .expect("valid");
        for text in [
            "http://169.254.169.254/",
            "http://169.254.7.7/",
            "http://[fe80::1]/",
            "http://[::]/",
            "http://metadata.google.internal/",
            "http://[::ffff:169.254.169.254]/",
        ] {
            assert_eq!(refused(&allow, text), None, "{text}");
        }
        assert_eq!(
            refused(&allow, "http://0.0.0.0/"),
            Some(Reason::Unspecified),
            "only what is listed"
        );
        assert_eq!(refused(&allow, "http://metadata/"), Some(Reason::Metadata));
        let one = AllowList::parse(["169.254.169.254"]).expect("an address");
        assert_eq!(refused(&one, "http://169.254.169.254/"), None);
        assert_eq!(
            refused(&one, "http://169.254.169.253/"),
            Some(Reason::LinkLocal)
        );
        let everything = AllowList::parse(["0.0.0.0/0"]).expect("every IPv4 address");
        assert_eq!(refused(&everything, "http://169.254.169.254/"), None);
        for bad in [
            "10.0.0.0/33",
            "fe80::/129",
            "10.0.0.0/",
            "a b",
            "http://x/",
            "-/8",
        ] {
            let err = AllowList::parse([bad]).expect_err(bad);
            assert!(err.contains(&format!("{bad:?}")), "{err}");
        }
    }

    fn addrs(ips: &[&str]) -> Vec<SocketAddr> {
        ips.iter()
            .map(|ip| SocketAddr::new(ip.parse().expect("an address"), 0))
            .collect()
    }

    #[test]
    fn resolved_addresses_are_filtered() {
        let none = AllowList::default();
        let err = none
            .filter_resolved("evil.example", addrs(&["169.254.169.254"]))
            .expect_err("only a metadata address");
        assert_eq!(err.reason, Reason::Metadata);
        assert!(
            err.to_string()
                .contains("evil.example (it resolves to 169.254.169.254)"),
            "{err}"
        );
        assert_eq!(
            none.filter_resolved("mixed.example", addrs(&["fe80::1", "10.0.0.7"])),
            Ok(addrs(&["10.0.0.7"])),
            "the refused address is left out, the private one kept"
        );
        assert_eq!(
            none.filter_resolved("app.internal", addrs(&["10.1.2.3", "192.168.0.9"])),
            Ok(addrs(&["10.1.2.3", "192.168.0.9"]))
        );
        assert!(none
            .filter_resolved("metadata.google.internal", addrs(&["10.0.0.1"]))
            .is_err());
        let by_name = AllowList::parse(["metadata.google.internal"]).expect("valid");
        assert_eq!(
            by_name.filter_resolved("metadata.google.internal", addrs(&["169.254.169.254"])),
            Ok(addrs(&["169.254.169.254"])),
            "an allowed name is called whatever it resolves to"
        );
        let by_net = AllowList::parse(["169.254.0.0/16"]).expect("valid");
        assert!(by_net
            .filter_resolved("evil.example", addrs(&["169.254.169.254"]))
            .is_ok());
    }
}
