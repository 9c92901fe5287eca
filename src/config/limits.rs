//! The connection limits (`--max-connections`, timeouts) and the engine's settings (concurrency,
//! lease, retention, …), checked into `Limits` and `EngineConfig` or one clear error.

use std::time::Duration;

use super::error::Error;
use crate::engine::EngineConfig;

/// The connection limits of `serve` as given; `None` takes the default.
pub(super) struct RawLimits {
    pub(super) max_connections: Option<usize>,
    pub(super) max_connections_per_ip: Option<usize>,
    pub(super) first_byte_timeout_secs: Option<u64>,
    pub(super) header_timeout_secs: Option<u64>,
    pub(super) body_timeout_secs: Option<u64>,
}

/// The connection limits of `serve`, checked.
pub(super) fn connection_limits(raw: RawLimits) -> Result<crate::http::connections::Limits, Error> {
    let defaults = crate::http::connections::Limits::default();
    let at_least_one = |name: &'static str, v: u64| {
        if v == 0 {
            Err(Error::Value {
                name,
                reason: "must be at least 1".into(),
            })
        } else {
            Ok(v)
        }
    };
    let secs = |name: &'static str, given: Option<u64>, default: Duration| match given {
        Some(s) => at_least_one(name, s).map(Duration::from_secs),
        None => Ok(default),
    };
    let max_connections = match raw.max_connections {
        Some(n) => at_least_one("--max-connections", n as u64)? as usize,
        None => defaults.max_connections,
    };
    let max_connections_per_ip = match raw.max_connections_per_ip {
        Some(n) if n > max_connections => {
            return Err(Error::Value {
                name: "--max-connections-per-ip",
                reason: format!("must be at most --max-connections ({max_connections})"),
            })
        }
        Some(n) => Some(at_least_one("--max-connections-per-ip", n as u64)? as usize),
        None => None,
    };
    Ok(crate::http::connections::Limits {
        max_connections,
        max_connections_per_ip,
        first_byte_timeout: secs(
            "--first-byte-timeout-secs",
            raw.first_byte_timeout_secs,
            defaults.first_byte_timeout,
        )?,
        header_timeout: secs(
            "--header-timeout-secs",
            raw.header_timeout_secs,
            defaults.header_timeout,
        )?,
        body_timeout: secs(
            "--body-timeout-secs",
            raw.body_timeout_secs,
            defaults.body_timeout,
        )?,
    })
}

/// The engine settings both commands share, checked.
pub(super) fn engine_config(
    concurrency: usize,
    lease_secs: u64,
    retention_days: u64,
    shutdown_grace_secs: u64,
) -> Result<EngineConfig, Error> {
    if concurrency == 0 {
        return Err(Error::Value {
            name: "--concurrency",
            reason: "must be at least 1".into(),
        });
    }
    if lease_secs == 0 {
        return Err(Error::Value {
            name: "--lease-secs",
            reason: "must be at least 1".into(),
        });
    }
    let retention = match retention_days {
        0 => None,
        days => Some(Duration::from_secs(days.checked_mul(86_400).ok_or_else(
            || Error::Value {
                name: "--retention-days",
                reason: format!("{days} days is too long"),
            },
        )?)),
    };
    Ok(EngineConfig {
        concurrency,
        lease: Duration::from_secs(lease_secs),
        retention,
        shutdown_grace: Duration::from_secs(shutdown_grace_secs),
        ..EngineConfig::default()
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::raw;
    use super::super::*;
    use super::*;

    #[test]
    fn connection_limits_default_and_refuse_zero() {
        let c = raw("127.0.0.1:1").validate().expect("valid");
        assert_eq!(c.limits, crate::http::connections::Limits::default());
        let mut r = raw("127.0.0.1:1");
        r.max_connections = Some(8);
        r.header_timeout_secs = Some(2);
        r.body_timeout_secs = Some(3);
        let c = r.validate().expect("valid");
        assert_eq!(c.limits.max_connections, 8);
        assert_eq!(c.limits.per_ip(), 2, "a quarter by default");
        assert_eq!(c.limits.first_byte_timeout, Duration::from_secs(3));
        assert_eq!(c.limits.header_timeout, Duration::from_secs(2));
        assert_eq!(c.limits.body_timeout, Duration::from_secs(3));
        let mut r = raw("127.0.0.1:1");
        r.max_connections_per_ip = Some(512);
        r.first_byte_timeout_secs = Some(1);
        let c = r.validate().expect("valid");
        assert_eq!(c.limits.per_ip(), 512, "one client may have them all");
        assert_eq!(c.limits.first_byte_timeout, Duration::from_secs(1));
        for set in [
            |r: &mut RawServe| r.max_connections = Some(0),
            |r: &mut RawServe| r.max_connections_per_ip = Some(0),
            |r: &mut RawServe| r.max_connections_per_ip = Some(513),
            |r: &mut RawServe| r.first_byte_timeout_secs = Some(0),
            |r: &mut RawServe| r.header_timeout_secs = Some(0),
            |r: &mut RawServe| r.body_timeout_secs = Some(0),
        ] {
            let mut r = raw("127.0.0.1:1");
            set(&mut r);
            assert!(r.validate().is_err());
        }
    }
}
