//! Bounded exponential backoff with jitter, shared by request retries and the listener.

use std::time::Duration;

use rand::Rng;

/// Exponential backoff settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// Wait before the first retry.
    pub base: Duration,
    /// Upper bound of any wait.
    pub cap: Duration,
}

impl Backoff {
    /// The wait before retry number `attempt` (0-based): `base·2^attempt`, capped, with the
    /// upper half jittered so that many listeners do not retry in lockstep.
    pub fn delay(&self, attempt: u32) -> Duration {
        let exp = self.base.saturating_mul(1u32 << attempt.min(16));
        let full = exp.min(self.cap);
        let half = full / 2;
        let jitter_ms = u64::try_from(half.as_millis()).unwrap_or(u64::MAX);
        let extra = if jitter_ms == 0 {
            0
        } else {
            rand::rng().random_range(0..=jitter_ms)
        };
        half + Duration::from_millis(extra)
    }

    /// The wait before retry `attempt`, but at least what the server asked for (`Retry-After`),
    /// itself bounded by `cap`.
    pub fn delay_with_retry_after(&self, attempt: u32, retry_after: Option<u64>) -> Duration {
        let own = self.delay(attempt);
        match retry_after {
            Some(secs) => own.max(Duration::from_secs(secs).min(self.cap)),
            None => own,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_and_stays_bounded() {
        let b = Backoff {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(2),
        };
        for attempt in 0..40 {
            let d = b.delay(attempt);
            assert!(d <= Duration::from_secs(2), "attempt {attempt}: {d:?}");
        }
        let first = b.delay(0);
        assert!(first >= Duration::from_millis(50) && first <= Duration::from_millis(100));
        assert!(b.delay(10) >= Duration::from_secs(1));
    }

    #[test]
    fn honours_retry_after_within_cap() {
        let b = Backoff {
            base: Duration::from_millis(10),
            cap: Duration::from_secs(5),
        };
        assert!(b.delay_with_retry_after(0, Some(3)) >= Duration::from_secs(3));
        assert!(b.delay_with_retry_after(0, Some(3600)) <= Duration::from_secs(5));
    }
}
