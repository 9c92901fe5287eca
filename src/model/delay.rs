//! Delays: how long an event waits before it is delivered, in Rust (`Delay`) and as sent over
//! HTTP (`DelaySpec`: `{"hours": 1, "minutes": 30}` or `"1h30m"`).

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

/// Longest delay an event may be scheduled with.
pub const MAX_DELAY: Duration = Duration::from_secs(365 * 24 * 3600);
/// How long to wait before delivering an event. Units combine: `Delay::hours(1) + Delay::minutes(30)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Delay(Duration);

impl Delay {
    /// A delay of `n` seconds.
    pub fn seconds(n: u64) -> Self {
        Self(Duration::from_secs(n))
    }
    /// A delay of `n` minutes.
    pub fn minutes(n: u64) -> Self {
        Self(Duration::from_secs(n.saturating_mul(60)))
    }
    /// A delay of `n` hours.
    pub fn hours(n: u64) -> Self {
        Self(Duration::from_secs(n.saturating_mul(3600)))
    }
    /// A delay of `n` days.
    pub fn days(n: u64) -> Self {
        Self(Duration::from_secs(n.saturating_mul(86_400)))
    }
    /// The delay as a [`Duration`].
    pub fn as_duration(self) -> Duration {
        self.0
    }

    /// Parses a human delay such as `90s`, `15m`, `2h`, `1d` or `1h30m`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("empty delay".into());
        }
        let mut total = Duration::ZERO;
        let mut digits = String::new();
        for c in text.chars() {
            if c.is_ascii_digit() {
                digits.push(c);
                continue;
            }
            let n: u64 = digits
                .parse()
                .map_err(|_| format!("invalid delay {text:?}: expected a number before '{c}'"))?;
            digits.clear();
            // Saturating: a huge delay is refused by the 365-day limit instead of overflowing.
            total = total.saturating_add(match c {
                's' => Duration::from_secs(n),
                'm' => Duration::from_secs(n.saturating_mul(60)),
                'h' => Duration::from_secs(n.saturating_mul(3600)),
                'd' => Duration::from_secs(n.saturating_mul(86_400)),
                _ => {
                    return Err(format!(
                        "invalid delay {text:?}: unknown unit '{c}' (use s, m, h or d)"
                    ))
                }
            });
        }
        if !digits.is_empty() {
            return Err(format!(
                "invalid delay {text:?}: missing unit after {digits} (use s, m, h or d)"
            ));
        }
        Ok(Self(total))
    }
}

impl std::ops::Add for Delay {
    type Output = Delay;
    fn add(self, rhs: Delay) -> Delay {
        Delay(self.0.saturating_add(rhs.0))
    }
}

impl From<Duration> for Delay {
    fn from(d: Duration) -> Self {
        Self(d)
    }
}

/// A delay as sent over HTTP: `{"hours": 1, "minutes": 30}` or `"1h30m"`.
#[derive(Debug)]
pub enum DelaySpec {
    /// `"2h"`, `"90s"`, `"1d"`, `"1h30m"`.
    Text(String),
    /// Units that add up; each a number ≥ 0 (fractions allowed).
    Units(DelayUnits),
    /// Anything else: refused with a clear message.
    Other(Value),
}

/// Picks the form from the JSON value itself rather than with `#[serde(untagged)]`, which would
/// read [`DelayUnits`] from serde's buffer and so take an array (`[1, 2]`: 1 s and 2 min) for the
/// object form (see [`crate::strict_json`]).
impl<'de> Deserialize<'de> for DelaySpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match Value::deserialize(d)? {
            Value::String(text) => DelaySpec::Text(text),
            object @ Value::Object(_) => crate::strict_json::from_value(object.clone())
                .map_or(DelaySpec::Other(object), DelaySpec::Units),
            other => DelaySpec::Other(other),
        })
    }
}

/// The object form of a delay.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelayUnits {
    /// Seconds.
    #[serde(default)]
    pub seconds: Option<f64>,
    /// Minutes.
    #[serde(default)]
    pub minutes: Option<f64>,
    /// Hours.
    #[serde(default)]
    pub hours: Option<f64>,
    /// Days.
    #[serde(default)]
    pub days: Option<f64>,
}

const DELAY_SHAPE: &str =
    "`delay` must be an object such as {\"hours\": 1, \"minutes\": 30} (seconds, minutes, hours, days; numbers ≥ 0) or a string such as \"2h\"";

impl DelaySpec {
    /// The delay, or a 400 message.
    pub fn to_delay(&self) -> Result<Delay, String> {
        match self {
            DelaySpec::Text(text) => Delay::parse(text),
            DelaySpec::Units(units) => units.to_delay(),
            DelaySpec::Other(_) => Err(DELAY_SHAPE.into()),
        }
    }
}

impl DelayUnits {
    /// Adds the units up; each must be a finite number ≥ 0, the total at most 365 days.
    pub fn to_delay(&self) -> Result<Delay, String> {
        let parts = [
            ("seconds", self.seconds, 1.0),
            ("minutes", self.minutes, 60.0),
            ("hours", self.hours, 3600.0),
            ("days", self.days, 86_400.0),
        ];
        let mut total = 0.0_f64;
        for (unit, value, factor) in parts {
            let Some(v) = value else { continue };
            if !v.is_finite() || v < 0.0 {
                return Err(format!("`delay.{unit}` must be a number ≥ 0"));
            }
            total += v * factor;
        }
        let max = MAX_DELAY.as_secs_f64();
        if total > max {
            return Err("the maximum delay is 365 days".into());
        }
        Duration::try_from_secs_f64(total)
            .map(Delay::from)
            .map_err(|_| DELAY_SHAPE.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn delays_combine_and_parse() {
        assert_eq!(Delay::hours(1) + Delay::minutes(30), Delay::minutes(90));
        assert_eq!(Delay::days(1), Delay::hours(24));
        assert_eq!(Delay::parse("1h30m"), Ok(Delay::minutes(90)));
        assert_eq!(Delay::parse("45s"), Ok(Delay::seconds(45)));
        assert_eq!(Delay::parse("2d"), Ok(Delay::days(2)));
        assert!(Delay::parse("2").unwrap_err().contains("missing unit"));
        assert!(Delay::parse("2w").unwrap_err().contains("unknown unit"));
        assert!(Delay::parse("h").is_err());
    }

    /// Found by `tests/ingest/trigger_fuzz.rs`: units that add up past `Duration::MAX` panicked
    /// ("overflow when adding durations") instead of being refused by the 365-day limit.
    #[test]
    fn huge_delays_saturate_instead_of_overflowing() {
        let max = Delay::from(Duration::MAX);
        assert_eq!(Delay::parse("18446744073709551615s1s"), Ok(max));
        assert_eq!(
            Delay::parse("99999999999999999d99999999999999999d"),
            Ok(max)
        );
    }

    fn units(s: f64, m: f64, h: f64, d: f64) -> DelayUnits {
        DelayUnits {
            seconds: Some(s),
            minutes: Some(m),
            hours: Some(h),
            days: Some(d),
        }
    }

    #[test]
    fn delay_units_add_up_and_refuse_negative_or_huge() {
        assert_eq!(
            units(1.0, 1.0, 1.0, 1.0).to_delay(),
            Ok(Delay::seconds(86_400 + 3600 + 60 + 1))
        );
        assert_eq!(
            DelayUnits {
                hours: Some(1.5),
                ..DelayUnits::default()
            }
            .to_delay(),
            Ok(Delay::minutes(90))
        );
        assert!(units(-1.0, 0.0, 0.0, 0.0)
            .to_delay()
            .unwrap_err()
            .contains("delay.seconds"));
        assert!(units(0.0, 0.0, 0.0, 366.0)
            .to_delay()
            .unwrap_err()
            .contains("365 days"));
        assert!(units(0.0, 0.0, 0.0, f64::MAX).to_delay().is_err());
        assert_eq!(DelayUnits::default().to_delay(), Ok(Delay::seconds(0)));
    }

    #[test]
    fn delay_accepts_text_and_refuses_other_shapes() {
        let text: DelaySpec = serde_json::from_value(json!("1h30m")).expect("parses");
        assert_eq!(text.to_delay(), Ok(Delay::minutes(90)));
        let number: DelaySpec = serde_json::from_value(json!(60)).expect("parses");
        assert!(number.to_delay().unwrap_err().contains("must be an object"));
        let unknown: DelaySpec = serde_json::from_value(json!({"weeks": 1})).expect("parses");
        assert!(unknown.to_delay().is_err());
        // An array is not the object form.
        let array: DelaySpec = serde_json::from_value(json!([1, 2])).expect("parses");
        assert!(array.to_delay().unwrap_err().contains("must be an object"));
    }
}
