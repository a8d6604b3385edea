//! Which behaviour plays a pod: a named behaviour picked by pod label, else the longest matching
//! image prefix.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use super::behaviour::ContainerBehaviour;

/// Pod label that selects a behaviour registered with [`BehaviourRegistry::register_named`].
pub const BEHAVIOUR_LABEL: &str = "testkit.forgerunner.dev/behaviour";

#[derive(Default)]
struct Entries {
    /// Image prefix → behaviour; a prefix registered twice keeps the newest.
    by_prefix: Vec<(String, Arc<dyn ContainerBehaviour>)>,
    by_name: HashMap<String, Arc<dyn ContainerBehaviour>>,
}

/// Thread-safe table of behaviours; registration may happen while pods run.
#[derive(Default)]
pub struct BehaviourRegistry {
    entries: RwLock<Entries>,
}

impl BehaviourRegistry {
    /// Registers `behaviour` for every image starting with `image_prefix` (longest prefix wins).
    pub fn register_prefix(&self, image_prefix: &str, behaviour: Arc<dyn ContainerBehaviour>) {
        let mut entries = self
            .entries
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        entries.by_prefix.retain(|(prefix, _)| prefix != image_prefix);
        entries.by_prefix.push((image_prefix.to_owned(), behaviour));
    }

    /// Registers `behaviour` under `name`, chosen by the pod label [`BEHAVIOUR_LABEL`].
    pub fn register_named(&self, name: &str, behaviour: Arc<dyn ContainerBehaviour>) {
        let mut entries = self
            .entries
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        entries.by_name.insert(name.to_owned(), behaviour);
    }

    /// The behaviour for a pod: the label wins over the image; `None` means "driven from outside".
    pub fn resolve(
        &self,
        image: &str,
        labels: &BTreeMap<String, String>,
    ) -> Option<Arc<dyn ContainerBehaviour>> {
        let entries = self
            .entries
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(name) = labels.get(BEHAVIOUR_LABEL) {
            // A label naming an unknown behaviour falls back to the image, so a typo is visible
            // as "pod stays Running" rather than a silent different behaviour.
            if let Some(found) = entries.by_name.get(name) {
                return Some(found.clone());
            }
        }
        entries
            .by_prefix
            .iter()
            .filter(|(prefix, _)| image.starts_with(prefix.as_str()))
            .max_by_key(|(prefix, _)| prefix.len())
            .map(|(_, behaviour)| behaviour.clone())
    }
}

#[cfg(test)]
mod tests {
    use async_trait::async_trait;

    use super::*;
    use crate::sim::behaviour::PodInfo;

    struct Exit(i32);

    #[async_trait]
    impl ContainerBehaviour for Exit {
        async fn run(&self, _pod: PodInfo) -> i32 {
            self.0
        }
    }

    fn code_of(found: Option<Arc<dyn ContainerBehaviour>>) -> Option<i32> {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let pod = PodInfo {
            namespace: "ns".into(),
            name: "p".into(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            image: "i".into(),
            command: Vec::new(),
            args: Vec::new(),
            env: BTreeMap::new(),
            files: BTreeMap::new(),
            cancel: Default::default(),
            container: "runner".into(),
            init: false,
            scratch: Default::default(),
        };
        found.map(|b| rt.block_on(b.run(pod)))
    }

    #[test]
    fn longest_prefix_wins() {
        let reg = BehaviourRegistry::default();
        reg.register_prefix("ghcr.io/", Arc::new(Exit(1)));
        reg.register_prefix("ghcr.io/actions/actions-runner", Arc::new(Exit(2)));
        let labels = BTreeMap::new();
        assert_eq!(
            code_of(reg.resolve("ghcr.io/actions/actions-runner:2.3", &labels)),
            Some(2)
        );
        assert_eq!(code_of(reg.resolve("ghcr.io/other", &labels)), Some(1));
        assert_eq!(code_of(reg.resolve("docker.io/x", &labels)), None);
    }

    #[test]
    fn re_registering_a_prefix_replaces_it() {
        let reg = BehaviourRegistry::default();
        reg.register_prefix("img", Arc::new(Exit(1)));
        reg.register_prefix("img", Arc::new(Exit(3)));
        assert_eq!(code_of(reg.resolve("img:1", &BTreeMap::new())), Some(3));
    }

    #[test]
    fn label_beats_image_and_unknown_label_falls_back() {
        let reg = BehaviourRegistry::default();
        reg.register_prefix("img", Arc::new(Exit(1)));
        reg.register_named("fail", Arc::new(Exit(7)));
        let mut labels = BTreeMap::new();
        labels.insert(BEHAVIOUR_LABEL.to_owned(), "fail".to_owned());
        assert_eq!(code_of(reg.resolve("img", &labels)), Some(7));
        labels.insert(BEHAVIOUR_LABEL.to_owned(), "nope".to_owned());
        assert_eq!(code_of(reg.resolve("img", &labels)), Some(1));
    }
}
