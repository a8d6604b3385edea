//! `Retry-After`, parsed and clamped.
//!
//! The value comes from whatever server a group points at; unclamped, `Retry-After: 999999`
//! would park a group for eleven days (and a large enough one overflows timer arithmetic).

use std::time::Duration;

use reqwest::header::{HeaderMap, RETRY_AFTER};

/// Longest wait any forge may ask for: GitHub's primary rate limit resets within an hour, so
/// no honest server needs more, and a group retried hourly still recovers on its own.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// Clamps a wait in seconds to [`MAX_RETRY_AFTER`].
pub fn clamp_secs(secs: u64) -> u64 {
    secs.min(MAX_RETRY_AFTER.as_secs())
}

/// The `Retry-After` header in seconds (delta-seconds or an HTTP date, a date in the past
/// being 0), clamped to [`MAX_RETRY_AFTER`]; `None` when absent or unreadable.
pub fn retry_after_secs(headers: &HeaderMap) -> Option<u64> {
    let v = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(clamp_secs(secs));
    }
    let at = jiff::fmt::rfc2822::parse(v).ok()?;
    let secs = at.timestamp().as_second() - jiff::Timestamp::now().as_second();
    Some(clamp_secs(u64::try_from(secs).unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn with(v: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_static(v));
        h
    }

    #[test]
    fn parses_and_clamps_every_form() {
        assert_eq!(retry_after_secs(&HeaderMap::new()), None);
        assert_eq!(retry_after_secs(&with(" 7 ")), Some(7));
        assert_eq!(retry_after_secs(&with("999999")), Some(3600));
        assert_eq!(retry_after_secs(&with("18446744073709551615")), Some(3600));
        assert_eq!(retry_after_secs(&with("Wed, 21 Oct 2015 07:28:00 GMT")), Some(0));
        assert_eq!(
            retry_after_secs(&with("Fri, 01 Jan 2100 00:00:00 GMT")),
            Some(3600)
        );
        assert_eq!(retry_after_secs(&with("soon")), None);
        assert_eq!(retry_after_secs(&with("-5")), None);
        assert_eq!(clamp_secs(u64::MAX), 3600);
    }
}
