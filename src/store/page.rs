//! Pages of the newest-first lists: sizes, the opaque keyset [`Cursor`] and a [`Page`] of rows.
//!
//! Lists are newest first and keyset-paginated: a page ends with a [`Cursor`] naming the last row
//! shown, and the next page starts strictly after it, so concurrent inserts never shift pages and
//! a walk over every page sees each row once. Every list query uses an index.

use std::fmt;
use std::str::FromStr;

use base64::Engine as _;
use serde::Serialize;

/// Rows per page when the caller does not say.
pub const DEFAULT_LIMIT: usize = 50;

/// Most rows per page.
pub const MAX_LIMIT: usize = 500;

/// Clamps a requested page size to `1..=MAX_LIMIT`.
pub fn clamp_limit(limit: usize) -> usize {
    limit.clamp(1, MAX_LIMIT)
}

/// An opaque position in a newest-first list: the next page starts after it.
///
/// It prints as a short URL-safe string; [`Cursor::from_str`] reads it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cursor(i64);

/// A cursor string that was not produced by Flare.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid cursor: pass the nextCursor value of the previous page unchanged")]
pub struct InvalidCursor;

impl Cursor {
    /// The cursor after the row with storage sequence number `seq`.
    pub(crate) fn after(seq: i64) -> Self {
        Self(seq)
    }

    /// The storage sequence number: rows with a smaller one come next.
    pub(crate) fn seq(self) -> i64 {
        self.0
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = format!("v1:{}", self.0);
        f.write_str(&base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text))
    }
}

impl FromStr for Cursor {
    type Err = InvalidCursor;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(s)
            .map_err(|_| InvalidCursor)?;
        let text = String::from_utf8(bytes).map_err(|_| InvalidCursor)?;
        let seq: i64 = text
            .strip_prefix("v1:")
            .and_then(|n| n.parse().ok())
            .ok_or(InvalidCursor)?;
        if seq < 1 {
            return Err(InvalidCursor);
        }
        Ok(Self(seq))
    }
}

impl Serialize for Cursor {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// One page of a list.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Page<T> {
    /// The rows, newest first.
    pub items: Vec<T>,
    /// Where the next page starts; `None` on the last page.
    pub next_cursor: Option<Cursor>,
}

impl<T> Page<T> {
    /// No rows, and no next page.
    pub fn empty() -> Self {
        Self {
            items: Vec::new(),
            next_cursor: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_reject_garbage() {
        let c = Cursor::after(12345);
        let text = c.to_string();
        assert!(!text.contains("12345"), "{text} should be opaque");
        assert_eq!(text.parse::<Cursor>(), Ok(c));
        for bad in ["", "12345", "!!", "djE6", "djE6LTE", "eDox"] {
            assert_eq!(bad.parse::<Cursor>(), Err(InvalidCursor), "{bad:?}");
        }
    }
}
