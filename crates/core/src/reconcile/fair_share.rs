//! Reconcile slots shared fairly between forge instances and namespaces.
//!
//! Every group of the operator shares the controller's reconcile slots. A forge that accepts
//! connections and never answers holds each slot a pass of its groups takes for as long as the
//! pass waits; with enough such groups, no other group was reconciled at all. A pass therefore
//! first takes a turn of its forge instance and one of its namespace: an instance gets at most
//! a quarter of the slots and a namespace at most half, so one slow forge, or one tenant with
//! many, leaves the rest to everyone else. A pass that does not get its turns within
//! [`TURN_WAIT`] gives its slot back and comes again later ([`FairShare::enter`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Longest a pass waits for its turns while holding a reconcile slot. Passes of a healthy forge
/// take milliseconds, so a turn comes quickly unless the instance's turns are held by passes
/// that wait on the forge: then the slot is better spent on another group.
pub const TURN_WAIT: Duration = Duration::from_secs(1);

/// Turns of one kind (forge instance or namespace), each key with the same number.
#[derive(Debug)]
struct Turns {
    per_key: usize,
    keys: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl Turns {
    fn new(per_key: usize) -> Turns {
        Turns {
            per_key: per_key.max(1),
            keys: Mutex::new(HashMap::new()),
        }
    }

    /// The semaphore of `key`. Keys nobody holds or waits for are forgotten whenever a new key
    /// comes, so the map is as large as the keys in use, not every key ever seen.
    fn of(&self, key: &str) -> Arc<Semaphore> {
        let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(turns) = keys.get(key) {
            return turns.clone();
        }
        keys.retain(|_, s| Arc::strong_count(s) > 1);
        keys.entry(key.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(self.per_key)))
            .clone()
    }

    fn len(&self) -> usize {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

/// The forge instance and namespace turns of the whole process (shared by every watched
/// namespace's controller, like the reconcile slots themselves).
#[derive(Debug)]
pub struct FairShare {
    instances: Turns,
    namespaces: Turns,
}

/// A pass's turns; dropping it ends them.
#[derive(Debug)]
pub struct Turn {
    _instance: OwnedSemaphorePermit,
    _namespace: OwnedSemaphorePermit,
}

impl FairShare {
    /// Turns for a controller of `slots` reconcile slots: a quarter per forge instance, half
    /// per namespace (at least one each). Zero slots is kube's "no limit", and so is the share.
    pub fn for_slots(slots: usize) -> FairShare {
        let slots = if slots == 0 { Semaphore::MAX_PERMITS } else { slots };
        FairShare {
            instances: Turns::new(slots / 4),
            namespaces: Turns::new(slots / 2),
        }
    }

    /// Turns most passes of one forge instance and of one namespace hold at once.
    pub fn limits(&self) -> (usize, usize) {
        (self.instances.per_key, self.namespaces.per_key)
    }

    /// Waits up to `wait` for a turn of forge instance `instance` and of `namespace`; `None`
    /// when either stayed taken that long.
    pub async fn enter(&self, instance: &str, namespace: &str, wait: Duration) -> Option<Turn> {
        let (instance, namespace) = (self.instances.of(instance), self.namespaces.of(namespace));
        let both = async {
            // Never closed, so `ok()` only drops an impossible error.
            let instance = instance.acquire_owned().await.ok()?;
            let namespace = namespace.acquire_owned().await.ok()?;
            Some(Turn {
                _instance: instance,
                _namespace: namespace,
            })
        };
        tokio::time::timeout(wait, both).await.ok().flatten()
    }

    /// Forge instances and namespaces with turns remembered (for tests of the map's bound).
    pub fn keys_held(&self) -> (usize, usize) {
        (self.instances.len(), self.namespaces.len())
    }
}

/// The forge instance a group's calls go to, as a key of [`FairShare`]: the origin
/// (`scheme://host:port`) of its first outbound URL, so two forges on one host are two
/// instances. A group without a parseable URL gets the empty key: such a spec fails its checks
/// before any forge call.
pub fn instance_key(urls: &[crate::forge::OutboundUrl]) -> String {
    urls.first()
        .and_then(|u| url::Url::parse(u.url.trim()).ok())
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forge::OutboundUrl;

    const NO_WAIT: Duration = Duration::from_millis(10);

    #[tokio::test]
    async fn one_instance_gets_a_quarter_and_one_namespace_half() {
        let share = FairShare::for_slots(16);
        assert_eq!(share.limits(), (4, 8));
        let mut held = Vec::new();
        for _ in 0..4 {
            held.push(share.enter("http://slow:80", "a", NO_WAIT).await.expect("a turn"));
        }
        assert!(
            share.enter("http://slow:80", "b", NO_WAIT).await.is_none(),
            "the instance's turns are all taken"
        );
        // Another forge in the same namespace still gets turns, up to the namespace's half.
        for _ in 0..4 {
            held.push(
                share
                    .enter("http://other:80", "a", NO_WAIT)
                    .await
                    .expect("a turn"),
            );
        }
        assert!(
            share.enter("http://third:80", "a", NO_WAIT).await.is_none(),
            "the namespace's turns are all taken"
        );
        assert!(
            share.enter("http://third:80", "b", NO_WAIT).await.is_some(),
            "another namespace goes on"
        );
        held.clear();
        assert!(
            share.enter("http://slow:80", "a", NO_WAIT).await.is_some(),
            "turns come back when dropped"
        );
    }

    #[tokio::test]
    async fn a_waiting_pass_gets_the_next_turn() {
        let share = Arc::new(FairShare::for_slots(4));
        let first = share.enter("http://f:80", "ns", NO_WAIT).await.expect("a turn");
        let waiter = {
            let share = share.clone();
            tokio::spawn(async move {
                share
                    .enter("http://f:80", "ns", Duration::from_secs(30))
                    .await
                    .is_some()
            })
        };
        tokio::task::yield_now().await;
        drop(first);
        assert!(
            waiter.await.expect("joined"),
            "the waiter got the turn given back"
        );
    }

    #[tokio::test]
    async fn unused_keys_are_forgotten() {
        let share = FairShare::for_slots(8);
        for i in 0..100 {
            let turn = share
                .enter(&format!("http://h{i}:80"), &format!("ns{i}"), NO_WAIT)
                .await;
            assert!(turn.is_some());
        }
        let (instances, namespaces) = share.keys_held();
        assert!(
            instances <= 2 && namespaces <= 2,
            "kept {instances} instances, {namespaces} namespaces"
        );
    }

    #[test]
    fn the_instance_is_the_first_urls_origin() {
        let url = |u: &str| OutboundUrl {
            field: "spec.gitea.url",
            url: u.to_owned(),
        };
        assert_eq!(
            instance_key(&[url("https://Git.Example.com/sub/")]),
            "https://git.example.com"
        );
        assert_eq!(
            instance_key(&[url("http://10.0.0.1:3000")]),
            "http://10.0.0.1:3000"
        );
        assert_ne!(
            instance_key(&[url("http://127.0.0.1:1")]),
            instance_key(&[url("http://127.0.0.1:2")]),
            "two forges on one host are two instances"
        );
        assert_eq!(instance_key(&[]), "");
        assert_eq!(instance_key(&[url("not a url")]), "");
    }
}
