//! What every forge's webhook path shares: the delivery id a forge stamps on each delivery, and
//! a bounded, time-limited memory of the ids already acted on.
//!
//! Forges retry a delivery they think failed (a timeout, a 5xx, a redelivery from the UI), so
//! the same event can arrive more than once. A duplicate must not wake groups again: it is
//! answered 200 and triggers nothing. Only ids of *verified* deliveries are remembered, so an
//! unauthenticated caller cannot make a genuine delivery look like a duplicate.

use std::collections::{HashSet, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Longest delivery id kept; forges send UUIDs (36 characters), so anything longer is not one.
pub const MAX_DELIVERY_ID_LEN: usize = 128;

/// How long a delivery id is remembered by default; forges give up retrying well within it.
pub const DEFAULT_DELIVERY_TTL: Duration = Duration::from_secs(3600);

/// How many delivery ids are remembered at most by default; the oldest go first.
pub const DEFAULT_DELIVERY_CAPACITY: usize = 16_384;

/// The delivery id of a request: the first non-blank value of the headers `names` (the ones
/// the forge stamps, in the order to read them) that is at most [`MAX_DELIVERY_ID_LEN`] long;
/// `None` when there is none.
pub fn delivery_id<'a>(headers: &'a http::HeaderMap, names: &[&str]) -> Option<&'a str> {
    names.iter().find_map(|h| {
        headers
            .get(*h)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty() && v.len() <= MAX_DELIVERY_ID_LEN)
    })
}

/// Delivery ids seen recently: at most `capacity` of them, each for `ttl`.
#[derive(Debug)]
pub struct RecentDeliveries {
    ttl: Duration,
    capacity: usize,
    seen: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    ids: HashSet<String>,
    /// Insertion order, so expiry and eviction pop from the front.
    order: VecDeque<(Instant, String)>,
}

impl Default for RecentDeliveries {
    fn default() -> Self {
        RecentDeliveries::new(DEFAULT_DELIVERY_TTL, DEFAULT_DELIVERY_CAPACITY)
    }
}

impl RecentDeliveries {
    /// A memory of at most `capacity` ids (at least one), each kept for `ttl`.
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        RecentDeliveries {
            ttl,
            capacity: capacity.max(1),
            seen: Mutex::default(),
        }
    }

    /// Records `id` at `now`; `true` the first time within the ttl, `false` for a duplicate.
    pub fn first_time(&self, id: &str, now: Instant) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        while let Some((at, _)) = seen.order.front() {
            if now.saturating_duration_since(*at) < self.ttl {
                break;
            }
            if let Some((_, old)) = seen.order.pop_front() {
                seen.ids.remove(&old);
            }
        }
        if seen.ids.contains(id) {
            return false;
        }
        if seen.order.len() >= self.capacity
            && let Some((_, old)) = seen.order.pop_front()
        {
            seen.ids.remove(&old);
        }
        seen.ids.insert(id.to_owned());
        seen.order.push_back((now, id.to_owned()));
        true
    }

    /// Forgets every id (a new leader starts from nothing).
    pub fn clear(&self) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.ids.clear();
        seen.order.clear();
    }

    /// How many ids are remembered now.
    pub fn len(&self) -> usize {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner).ids.len()
    }

    /// Whether no id is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use http::{HeaderMap, HeaderValue};

    use super::*;

    #[test]
    fn delivery_id_reads_the_named_headers_in_order_and_ignores_junk() {
        let names = ["x-one-delivery", "x-two-delivery", "x-three-delivery"];
        let mut h = HeaderMap::new();
        assert_eq!(delivery_id(&h, &names), None);
        h.insert("x-three-delivery", HeaderValue::from_static("3"));
        assert_eq!(delivery_id(&h, &names), Some("3"));
        h.insert("x-two-delivery", HeaderValue::from_static("2"));
        assert_eq!(delivery_id(&h, &names), Some("2"));
        h.insert("x-one-delivery", HeaderValue::from_static(" 1 "));
        assert_eq!(delivery_id(&h, &names), Some("1"));
        h.insert("x-one-delivery", HeaderValue::from_static("  "));
        assert_eq!(
            delivery_id(&h, &names),
            Some("2"),
            "a blank header does not count"
        );
        assert_eq!(delivery_id(&h, &names[..1]), None, "only the named headers count");
        let long = "a".repeat(MAX_DELIVERY_ID_LEN + 1);
        let mut h = HeaderMap::new();
        h.insert("x-one-delivery", HeaderValue::from_str(&long).expect("ascii"));
        assert_eq!(delivery_id(&h, &names), None, "an oversized id is not an id");
    }

    #[test]
    fn a_delivery_counts_once_within_the_ttl() {
        let d = RecentDeliveries::new(Duration::from_secs(60), 10);
        let t0 = Instant::now();
        assert!(d.first_time("a", t0));
        assert!(!d.first_time("a", t0 + Duration::from_secs(59)));
        assert!(d.first_time("b", t0 + Duration::from_secs(30)));
        assert!(
            d.first_time("a", t0 + Duration::from_secs(60)),
            "expired ids count again"
        );
        assert_eq!(d.len(), 2);
        d.clear();
        assert!(d.is_empty());
        assert!(d.first_time("a", t0));
    }

    #[test]
    fn memory_is_bounded_and_evicts_the_oldest() {
        let d = RecentDeliveries::new(Duration::from_secs(3600), 3);
        let t0 = Instant::now();
        for id in ["1", "2", "3", "4"] {
            assert!(d.first_time(id, t0));
        }
        assert_eq!(d.len(), 3);
        assert!(d.first_time("1", t0), "the oldest was evicted");
        assert!(!d.first_time("4", t0));
    }
}
