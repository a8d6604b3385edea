//! Which webhook secrets one delivery is checked against, shared fairly between tenants (pure).
//!
//! Checking a signature costs an HMAC of the whole body, so a delivery tries at most a few
//! distinct secrets. Every group that can see the delivery's repository on its instance offers
//! its secret, and any tenant can create groups naming any repository, so the few tries are
//! dealt out by namespace: one secret per namespace per round, the namespace's most specific
//! group first. However many groups one namespace makes, each other namespace gets a try as
//! long as there are fewer namespaces than tries.
//!
//! The order of the namespaces within a round turns with each delivery (`turn`, derived from the
//! body), so with more namespaces than tries no namespace name always comes last.

use std::collections::BTreeMap;

use forgerunner_core::forge::{GroupKey, SecretValue};

/// One group that may own the hook a delivery came from.
pub(crate) struct Offer<'a> {
    /// The group.
    pub(crate) key: &'a GroupKey,
    /// How narrow its scope is: the lower, the sooner it is tried within its namespace.
    pub(crate) rank: u8,
    /// Its webhook secret.
    pub(crate) secret: &'a SecretValue,
}

/// The secrets to try, each with the groups that use it, and how many distinct secrets were
/// left out.
pub(crate) struct Picked {
    /// At most `max` distinct secrets, in the order to try them.
    pub(crate) secrets: Vec<(SecretValue, Vec<GroupKey>)>,
    /// Distinct secrets (per namespace) not tried.
    pub(crate) left_out: usize,
}

/// The distinct secrets of one namespace, in the order to try them, each with its groups.
type Queue = Vec<(SecretValue, Vec<GroupKey>)>;

/// Deals at most `max` distinct secrets out of `offers`, round-robin over namespaces starting
/// `turn` places into their sorted order. A secret shared by groups (of any namespaces) is tried
/// once, for all of them, and counts once against `max`.
pub(crate) fn pick(mut offers: Vec<Offer<'_>>, turn: u64, max: usize) -> Picked {
    offers.sort_by(|a, b| {
        (&a.key.namespace, a.rank, &a.key.name).cmp(&(&b.key.namespace, b.rank, &b.key.name))
    });
    let mut queues: BTreeMap<&str, Queue> = BTreeMap::new();
    for o in &offers {
        let queue = queues.entry(o.key.namespace.as_str()).or_default();
        match queue.iter_mut().find(|(s, _)| s.expose() == o.secret.expose()) {
            Some((_, keys)) => keys.push(o.key.clone()),
            None => queue.push((o.secret.clone(), vec![o.key.clone()])),
        }
    }
    let mut queues: Vec<Queue> = queues.into_values().collect();
    if !queues.is_empty() {
        let len = queues.len();
        // In range: the remainder is below `len`, a `usize`.
        let start = usize::try_from(turn % len as u64).unwrap_or(0);
        queues.rotate_left(start);
    }
    let rounds = queues.iter().map(Vec::len).max().unwrap_or(0);
    let mut picked = Picked {
        secrets: Vec::new(),
        left_out: 0,
    };
    for round in 0..rounds {
        for queue in &mut queues {
            let Some((secret, keys)) = queue.get_mut(round) else {
                continue;
            };
            let keys = std::mem::take(keys);
            let tried = picked.secrets.len();
            match picked
                .secrets
                .iter_mut()
                .find(|(s, _)| s.expose() == secret.expose())
            {
                Some((_, shared)) => shared.extend(keys),
                None if tried < max => picked.secrets.push((secret.clone(), keys)),
                None => picked.left_out += 1,
            }
        }
    }
    picked
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(namespace: &str, name: &str) -> GroupKey {
        GroupKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// `(namespace, name, rank, secret)` per group.
    fn deal(groups: &[(&str, &str, u8, &str)], turn: u64, max: usize) -> (Vec<(String, Vec<String>)>, usize) {
        let keys: Vec<GroupKey> = groups.iter().map(|(ns, n, _, _)| key(ns, n)).collect();
        let secrets: Vec<SecretValue> = groups.iter().map(|(_, _, _, s)| SecretValue::new(*s)).collect();
        let offers = groups
            .iter()
            .enumerate()
            .map(|(i, (_, _, rank, _))| Offer {
                key: &keys[i],
                rank: *rank,
                secret: &secrets[i],
            })
            .collect();
        let p = pick(offers, turn, max);
        let secrets = p
            .secrets
            .into_iter()
            .map(|(s, keys)| {
                let names = keys
                    .into_iter()
                    .map(|k| format!("{}/{}", k.namespace, k.name))
                    .collect();
                (s.expose().to_owned(), names)
            })
            .collect();
        (secrets, p.left_out)
    }

    fn tried(d: &(Vec<(String, Vec<String>)>, usize)) -> Vec<&str> {
        d.0.iter().map(|(s, _)| s.as_str()).collect()
    }

    #[test]
    fn one_namespace_cannot_take_another_namespaces_try() {
        let mut groups: Vec<(&str, &str, u8, &str)> = vec![
            ("aa", "b0", 0, "b0"),
            ("aa", "b1", 0, "b1"),
            ("aa", "b2", 0, "b2"),
            ("aa", "b3", 0, "b3"),
            ("aa", "b4", 0, "b4"),
        ];
        groups.push(("zz", "victim", 2, "v"));
        for turn in 0..4 {
            let d = deal(&groups, turn, 4);
            assert!(tried(&d).contains(&"v"), "turn {turn}: {:?}", tried(&d));
            assert_eq!(d.0.len(), 4);
            assert_eq!(d.1, 2, "b3 and b4 (or b2) left out");
        }
    }

    #[test]
    fn within_a_namespace_the_narrowest_scope_goes_first() {
        let groups = [
            ("ns", "global", 2, "g"),
            ("ns", "org", 1, "o"),
            ("ns", "exact", 0, "e"),
        ];
        assert_eq!(tried(&deal(&groups, 0, 2)), ["e", "o"]);
    }

    #[test]
    fn a_shared_secret_is_tried_once_for_all_its_groups() {
        let groups = [
            ("a", "one", 0, "same"),
            ("a", "two", 1, "same"),
            ("b", "three", 0, "same"),
            ("b", "four", 1, "other"),
            ("c", "five", 0, "c"),
        ];
        let d = deal(&groups, 0, 2);
        assert_eq!(tried(&d), ["same", "c"], "b's shared secret takes no second try");
        assert_eq!(d.0[0].1, ["a/one", "a/two", "b/three"]);
        assert_eq!(d.1, 1, "b's own second secret");
    }

    /// With more namespaces than tries, which namespaces come first turns with the delivery.
    #[test]
    fn the_first_namespace_turns_with_the_delivery() {
        let groups = [("a", "g", 0, "a"), ("b", "g", 0, "b"), ("c", "g", 0, "c")];
        assert_eq!(tried(&deal(&groups, 0, 2)), ["a", "b"]);
        assert_eq!(tried(&deal(&groups, 1, 2)), ["b", "c"]);
        assert_eq!(tried(&deal(&groups, 2, 2)), ["c", "a"]);
        assert_eq!(tried(&deal(&groups, 5, 2)), ["c", "a"]);
        assert!(deal(&[], 7, 4).0.is_empty());
    }
}
