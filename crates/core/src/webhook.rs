//! What every forge's webhook path shares: the delivery id a forge stamps on each delivery, and
//! a bounded, time-limited memory of the deliveries already acted on.
//!
//! Forges retry a delivery they think failed (a timeout, a 5xx, a redelivery from the UI), so
//! the same event can arrive more than once. A duplicate must not wake groups again: it is
//! answered 200 and triggers nothing. Only *verified* deliveries are remembered, so an
//! unauthenticated caller cannot make a genuine delivery look like a duplicate.
//!
//! A delivery is known by its id *and* by the digest of its body ([`DeliveryKey`]): the id is a
//! header the signature does not cover, so a captured signed body sent again under a fresh id
//! is still the same body, and counts once.

use std::collections::{HashSet, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Longest delivery id kept; forges send UUIDs (36 characters), so anything longer is not one.
pub const MAX_DELIVERY_ID_LEN: usize = 128;

/// How long a delivery is remembered by default; forges give up retrying well within it.
pub const DEFAULT_DELIVERY_TTL: Duration = Duration::from_secs(3600);

/// How many keys are remembered at most by default (a delivery has up to two: its id and its
/// body's digest); the oldest go first.
pub const DEFAULT_DELIVERY_CAPACITY: usize = 32_768;

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

/// One way of recognising a delivery seen before.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DeliveryKey {
    /// The id the forge stamps in a header ([`delivery_id`]); not covered by the signature.
    Id(String),
    /// The SHA-256 of the body, which the signature covers (computed by the caller).
    BodySha256([u8; 32]),
}

/// Deliveries seen recently: at most `capacity` keys, each for `ttl`.
#[derive(Debug)]
pub struct RecentDeliveries {
    ttl: Duration,
    capacity: usize,
    seen: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    keys: HashSet<DeliveryKey>,
    /// Insertion order, so expiry and eviction pop from the front.
    order: VecDeque<(Instant, DeliveryKey)>,
}

impl Seen {
    fn forget_oldest(&mut self) {
        if let Some((_, old)) = self.order.pop_front() {
            self.keys.remove(&old);
        }
    }
}

impl Default for RecentDeliveries {
    fn default() -> Self {
        RecentDeliveries::new(DEFAULT_DELIVERY_TTL, DEFAULT_DELIVERY_CAPACITY)
    }
}

impl RecentDeliveries {
    /// A memory of at most `capacity` keys (at least one), each kept for `ttl`.
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        RecentDeliveries {
            ttl,
            capacity: capacity.max(1),
            seen: Mutex::default(),
        }
    }

    /// Records the delivery known by `keys` at `now`: `true` the first time within the ttl,
    /// `false` for a duplicate, i.e. when *any* of its keys was recorded before.
    ///
    /// A duplicate records nothing: replays under ever new ids would otherwise push the keys of
    /// the genuine delivery out of the bounded memory and then count again.
    pub fn first_time(&self, keys: &[DeliveryKey], now: Instant) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        while let Some((at, _)) = seen.order.front() {
            if now.saturating_duration_since(*at) < self.ttl {
                break;
            }
            seen.forget_oldest();
        }
        if keys.iter().any(|k| seen.keys.contains(k)) {
            return false;
        }
        for key in keys {
            if seen.order.len() >= self.capacity {
                seen.forget_oldest();
            }
            // `insert` is false for a key given twice in `keys`: keep one entry per key.
            if seen.keys.insert(key.clone()) {
                seen.order.push_back((now, key.clone()));
            }
        }
        true
    }

    /// Forgets every delivery (a new leader starts from nothing).
    pub fn clear(&self) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.keys.clear();
        seen.order.clear();
    }

    /// How many keys are remembered now.
    pub fn len(&self) -> usize {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys
            .len()
    }

    /// Whether nothing is remembered.
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

    fn id(s: &str) -> [DeliveryKey; 1] {
        [DeliveryKey::Id(s.to_owned())]
    }

    fn body(b: u8) -> DeliveryKey {
        DeliveryKey::BodySha256([b; 32])
    }

    #[test]
    fn a_delivery_counts_once_within_the_ttl() {
        let d = RecentDeliveries::new(Duration::from_secs(60), 10);
        let t0 = Instant::now();
        assert!(d.first_time(&id("a"), t0));
        assert!(!d.first_time(&id("a"), t0 + Duration::from_secs(59)));
        assert!(d.first_time(&id("b"), t0 + Duration::from_secs(30)));
        assert!(
            d.first_time(&id("a"), t0 + Duration::from_secs(60)),
            "expired ids count again"
        );
        assert_eq!(d.len(), 2);
        d.clear();
        assert!(d.is_empty());
        assert!(d.first_time(&id("a"), t0));
    }

    #[test]
    fn memory_is_bounded_and_evicts_the_oldest() {
        let d = RecentDeliveries::new(Duration::from_secs(3600), 3);
        let t0 = Instant::now();
        for n in ["1", "2", "3", "4"] {
            assert!(d.first_time(&id(n), t0));
        }
        assert_eq!(d.len(), 3);
        assert!(d.first_time(&id("1"), t0), "the oldest was evicted");
        assert!(!d.first_time(&id("4"), t0));
    }

    /// The id is a header outside the signature: the same body under a fresh id (a replay) or
    /// with none is the same delivery, and a replay leaves the memory as it was.
    #[test]
    fn a_delivery_is_a_duplicate_when_any_of_its_keys_was_seen() {
        let d = RecentDeliveries::new(Duration::from_secs(60), 10);
        let t0 = Instant::now();
        let first = [DeliveryKey::Id("d-1".into()), body(1)];
        assert!(d.first_time(&first, t0));
        assert_eq!(d.len(), 2);
        for n in 2..6 {
            let replay = [DeliveryKey::Id(format!("d-{n}")), body(1)];
            assert!(!d.first_time(&replay, t0), "replay {n}");
        }
        assert!(!d.first_time(&[body(1)], t0), "the body without an id");
        assert!(
            !d.first_time(&[DeliveryKey::Id("d-1".into()), body(2)], t0),
            "a retry by id"
        );
        assert_eq!(d.len(), 2, "duplicates record nothing");
        assert!(d.first_time(&[DeliveryKey::Id("d-9".into()), body(3)], t0));
        assert!(
            d.first_time(&[body(4), body(4)], t0),
            "a key given twice is one key"
        );
        assert_eq!(d.len(), 5);
        assert!(
            d.first_time(&[body(1)], t0 + Duration::from_secs(60)),
            "expired bodies count again"
        );
    }
}
