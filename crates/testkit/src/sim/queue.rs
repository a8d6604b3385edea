//! A deduplicating work queue with delayed re-queues and per-key exclusion, like client-go's:
//! a key is never handed out twice at once, and a key added while in flight is re-run after.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::hash::Hash;

use tokio::time::Instant;

/// Keys waiting, in flight, and scheduled for later.
#[derive(Debug)]
pub struct WorkQueue<K> {
    ready: VecDeque<K>,
    queued: HashSet<K>,
    in_flight: HashSet<K>,
    dirty: HashSet<K>,
    delayed: BTreeMap<(Instant, u64), K>,
    delayed_at: HashMap<K, (Instant, u64)>,
    seq: u64,
}

impl<K> Default for WorkQueue<K> {
    fn default() -> Self {
        WorkQueue {
            ready: VecDeque::new(),
            queued: HashSet::new(),
            in_flight: HashSet::new(),
            dirty: HashSet::new(),
            delayed: BTreeMap::new(),
            delayed_at: HashMap::new(),
            seq: 0,
        }
    }
}

impl<K: Clone + Eq + Hash> WorkQueue<K> {
    /// Queues `key` now (no-op if already queued; deferred if in flight).
    pub fn add(&mut self, key: K) {
        if self.in_flight.contains(&key) {
            self.dirty.insert(key);
        } else if self.queued.insert(key.clone()) {
            self.ready.push_back(key);
        }
    }

    /// Queues `key` at `at`, keeping only the earliest pending time per key.
    pub fn add_at(&mut self, key: K, at: Instant) {
        if let Some(existing) = self.delayed_at.get(&key) {
            if existing.0 <= at {
                return;
            }
            let old = *existing;
            self.delayed.remove(&old);
        }
        self.seq += 1;
        let slot = (at, self.seq);
        self.delayed.insert(slot, key.clone());
        self.delayed_at.insert(key, slot);
    }

    /// Moves due delayed keys to the ready queue, then hands out the next key (now in flight).
    pub fn pop(&mut self, now: Instant) -> Option<K> {
        while let Some(entry) = self.delayed.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let key = entry.remove();
            self.delayed_at.remove(&key);
            self.add(key);
        }
        let key = self.ready.pop_front()?;
        self.queued.remove(&key);
        self.in_flight.insert(key.clone());
        Some(key)
    }

    /// Marks `key` done; re-queues it if it was added while in flight.
    pub fn done(&mut self, key: &K) {
        self.in_flight.remove(key);
        if self.dirty.remove(key) {
            self.add(key.clone());
        }
    }

    /// Drops any delayed re-queue of `key` (e.g. its object is gone).
    pub fn forget(&mut self, key: &K) {
        if let Some(slot) = self.delayed_at.remove(key) {
            self.delayed.remove(&slot);
        }
    }

    /// The earliest delayed time, for the caller's timer.
    pub fn next_due(&self) -> Option<Instant> {
        self.delayed.first_key_value().map(|(slot, _)| slot.0)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn dedups_and_excludes_in_flight() {
        let now = Instant::now();
        let mut q = WorkQueue::default();
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(q.pop(now), Some("a"));
        q.add("a");
        assert_eq!(q.pop(now), Some("b"));
        assert_eq!(q.pop(now), None, "a is in flight");
        q.done(&"a");
        assert_eq!(q.pop(now), Some("a"), "re-run after the dirty add");
        q.done(&"a");
        assert_eq!(q.pop(now), None);
    }

    #[test]
    fn delayed_keys_fire_in_order_and_keep_earliest() {
        let now = Instant::now();
        let mut q = WorkQueue::default();
        q.add_at("late", now + Duration::from_secs(5));
        q.add_at("soon", now + Duration::from_secs(2));
        q.add_at("soon", now + Duration::from_secs(4));
        assert_eq!(q.next_due(), Some(now + Duration::from_secs(2)));
        assert_eq!(q.pop(now), None);
        assert_eq!(q.pop(now + Duration::from_secs(3)), Some("soon"));
        q.done(&"soon");
        assert_eq!(
            q.pop(now + Duration::from_secs(4)),
            None,
            "later duplicate was dropped"
        );
        q.add_at("late", now + Duration::from_secs(1));
        assert_eq!(q.pop(now + Duration::from_secs(1)), Some("late"));
        q.done(&"late");
        assert_eq!(q.next_due(), None);
        q.add_at("x", now);
        q.forget(&"x");
        assert_eq!(q.pop(now + Duration::from_secs(9)), None);
    }
}
