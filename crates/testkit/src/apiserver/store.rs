//! The in-memory object store: one global resourceVersion, a BTreeMap per type, a bounded watch
//! history per type and a broadcast channel per type for live watchers.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::registry::{Registry, ResourceDef, TypeKey};
use super::status::{ApiError, ApiResult};

/// The type of a watch event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// The object was created.
    Added,
    /// The object changed.
    Modified,
    /// The object was removed.
    Deleted,
}

impl EventKind {
    /// The `type` field of the watch event.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Added => "ADDED",
            EventKind::Modified => "MODIFIED",
            EventKind::Deleted => "DELETED",
        }
    }
}

/// One change, kept in history and fanned out to watchers.
#[derive(Debug)]
pub struct WatchEvent {
    /// What happened.
    pub kind: EventKind,
    /// The resourceVersion of the change.
    pub rv: u64,
    /// The object after the change (the last state for a deletion).
    pub object: Arc<Value>,
    /// The object before a modification, so selector-filtered watchers can synthesise
    /// ADDED/DELETED when an object enters or leaves their selection.
    pub old: Option<Arc<Value>>,
}

/// Events a new watcher must replay, and the receiver for what follows.
pub type Subscription = (Vec<Arc<WatchEvent>>, broadcast::Receiver<Arc<WatchEvent>>);

/// Sizing of the watch machinery.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// Events kept per type; a watch from before the window gets 410 Gone.
    pub history: usize,
    /// Live events buffered per watcher before a slow watcher is disconnected.
    pub broadcast_capacity: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            history: 20_000,
            broadcast_capacity: 16_384,
        }
    }
}

/// Addresses one stored object.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjKey {
    /// The type's storage key.
    pub tk: TypeKey,
    /// Namespace; empty for cluster-scoped objects.
    pub ns: String,
    /// Object name.
    pub name: String,
}

/// All objects of one type.
pub struct Table {
    /// Objects by (namespace, name), in list order.
    pub objects: BTreeMap<(String, String), Arc<Value>>,
    history: VecDeque<Arc<WatchEvent>>,
    compacted: u64,
    tx: broadcast::Sender<Arc<WatchEvent>>,
}

/// The whole cluster state.
pub struct Store {
    /// Served types.
    pub registry: Registry,
    rv: u64,
    tables: HashMap<TypeKey, Table>,
    uids: HashMap<String, ObjKey>,
    dependents: HashMap<String, BTreeSet<ObjKey>>,
    config: StoreConfig,
}

/// A fresh UID in the canonical 8-4-4-4-12 form.
pub fn new_uid() -> String {
    let a: u128 = rand::random();
    let h = format!("{a:032x}");
    format!(
        "{}-{}-4{}-a{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

/// The current time as Kubernetes formats `metav1.Time`.
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The owner UIDs named in an object's ownerReferences.
pub fn owner_uids(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// An object's `metadata.uid`.
pub fn uid_of(obj: &Value) -> String {
    obj.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

impl Store {
    /// A store holding the namespaces every cluster starts with.
    pub fn new(config: StoreConfig) -> Store {
        let mut store = Store {
            registry: Registry::with_builtins(),
            rv: 1,
            tables: HashMap::new(),
            uids: HashMap::new(),
            dependents: HashMap::new(),
            config,
        };
        let tk = TypeKey {
            group: String::new(),
            plural: "namespaces".into(),
        };
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let obj = json!({
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns, "uid": new_uid(), "creationTimestamp": now_rfc3339(),
                             "labels": {"kubernetes.io/metadata.name": ns}},
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            });
            store.put(
                &ObjKey {
                    tk: tk.clone(),
                    ns: String::new(),
                    name: ns.into(),
                },
                obj,
            );
        }
        store
    }

    /// The latest resourceVersion handed out.
    pub fn current_rv(&self) -> u64 {
        self.rv
    }

    fn table(&mut self, tk: &TypeKey) -> &mut Table {
        let cap = self.config.broadcast_capacity.max(16);
        self.tables.entry(tk.clone()).or_insert_with(|| Table {
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            compacted: 0,
            tx: broadcast::channel(cap).0,
        })
    }

    /// One object.
    pub fn get(&self, key: &ObjKey) -> Option<Arc<Value>> {
        self.tables
            .get(&key.tk)?
            .objects
            .get(&(key.ns.clone(), key.name.clone()))
            .cloned()
    }

    /// The key of the object with this UID, if it exists.
    pub fn key_of_uid(&self, uid: &str) -> Option<&ObjKey> {
        self.uids.get(uid)
    }

    /// Keys of the objects whose ownerReferences name `uid`.
    pub fn dependents_of(&self, uid: &str) -> Vec<ObjKey> {
        self.dependents
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Some served definition of the type (any version), for GC of stored objects.
    pub fn def_for(&self, tk: &TypeKey) -> Option<Arc<ResourceDef>> {
        self.registry
            .all()
            .find(|d| d.group == tk.group && d.plural == tk.plural)
            .cloned()
    }

    /// Objects in `ns` (all namespaces if None) after `after`, in key order, at most `limit`
    /// matches; also returns the key to continue from when more remain.
    pub fn list<F: Fn(&Value) -> bool>(
        &self,
        tk: &TypeKey,
        ns: Option<&str>,
        filter: F,
        limit: Option<usize>,
        after: Option<(String, String)>,
    ) -> (Vec<Arc<Value>>, Option<(String, String)>) {
        let Some(table) = self.tables.get(tk) else {
            return (Vec::new(), None);
        };
        use std::ops::Bound;
        let lower = match (&after, ns) {
            (Some(k), _) => Bound::Excluded(k.clone()),
            (None, Some(ns)) => Bound::Included((ns.to_string(), String::new())),
            (None, None) => Bound::Unbounded,
        };
        let mut out = Vec::new();
        let mut last = None;
        for (k, v) in table.objects.range((lower, Bound::Unbounded)) {
            if let Some(ns) = ns
                && k.0 != ns
            {
                break;
            }
            if !filter(v) {
                continue;
            }
            if let Some(limit) = limit
                && out.len() >= limit
            {
                return (out, last);
            }
            last = Some(k.clone());
            out.push(v.clone());
        }
        (out, None)
    }

    /// Whether `ns` holds no namespaced object of any type.
    pub fn namespace_is_empty(&self, ns: &str) -> bool {
        self.tables.values().all(|t| {
            t.objects
                .range((ns.to_string(), String::new())..)
                .next()
                .is_none_or(|(k, _)| k.0 != ns)
        })
    }

    /// Every key in a namespace across all types.
    pub fn keys_in_namespace(&self, ns: &str) -> Vec<ObjKey> {
        let mut out = Vec::new();
        for (tk, t) in &self.tables {
            for (k, _) in t.objects.range((ns.to_string(), String::new())..) {
                if k.0 != ns {
                    break;
                }
                out.push(ObjKey {
                    tk: tk.clone(),
                    ns: k.0.clone(),
                    name: k.1.clone(),
                });
            }
        }
        out
    }

    /// History since `rv` plus a receiver for what follows, or 410 if `rv` is compacted.
    pub fn subscribe(&mut self, tk: &TypeKey, rv: u64) -> ApiResult<Subscription> {
        let table = self.table(tk);
        if rv < table.compacted {
            return Err(ApiError::gone(rv));
        }
        let start = table.history.partition_point(|e| e.rv <= rv);
        let past = table.history.iter().skip(start).cloned().collect();
        Ok((past, table.tx.subscribe()))
    }

    /// The oldest resourceVersion a watch of the type may still start from.
    pub fn compacted_rv(&self, tk: &TypeKey) -> u64 {
        self.tables.get(tk).map_or(0, |t| t.compacted)
    }

    /// Forgets all watch history, so a watch from any earlier resourceVersion gets 410.
    pub fn compact_all(&mut self) {
        let rv = self.rv;
        for t in self.tables.values_mut() {
            t.history.clear();
            t.compacted = rv;
        }
    }

    fn emit(&mut self, tk: &TypeKey, ev: WatchEvent) {
        let limit = self.config.history.max(1);
        let table = self.table(tk);
        let ev = Arc::new(ev);
        table.history.push_back(ev.clone());
        while table.history.len() > limit {
            if let Some(old) = table.history.pop_front() {
                table.compacted = old.rv;
            }
        }
        // No receivers is fine: nobody watches this type right now.
        let _ = table.tx.send(ev);
    }

    fn index(&mut self, key: &ObjKey, old: Option<&Value>, new: Option<&Value>) {
        if let Some(old) = old {
            for o in owner_uids(old) {
                if let Some(set) = self.dependents.get_mut(&o) {
                    set.remove(key);
                    if set.is_empty() {
                        self.dependents.remove(&o);
                    }
                }
            }
            if new.is_none() {
                self.uids.remove(&uid_of(old));
            }
        }
        if let Some(new) = new {
            for o in owner_uids(new) {
                self.dependents.entry(o).or_default().insert(key.clone());
            }
            self.uids.insert(uid_of(new), key.clone());
        }
    }

    /// Stores `obj` under a new resourceVersion and emits ADDED or MODIFIED.
    pub fn put(&mut self, key: &ObjKey, mut obj: Value) -> Arc<Value> {
        self.rv += 1;
        let rv = self.rv;
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), json!(rv.to_string()));
        }
        let obj = Arc::new(obj);
        let old = self
            .table(&key.tk)
            .objects
            .insert((key.ns.clone(), key.name.clone()), obj.clone());
        self.index(key, old.as_deref(), Some(&obj));
        let kind = if old.is_some() {
            EventKind::Modified
        } else {
            EventKind::Added
        };
        self.emit(
            &key.tk,
            WatchEvent {
                kind,
                rv,
                object: obj.clone(),
                old,
            },
        );
        obj
    }

    /// Removes an object under a new resourceVersion and emits DELETED.
    pub fn remove(&mut self, key: &ObjKey) -> Option<Arc<Value>> {
        let old = self
            .table(&key.tk)
            .objects
            .remove(&(key.ns.clone(), key.name.clone()))?;
        self.rv += 1;
        let rv = self.rv;
        let mut last = (*old).clone();
        if let Some(meta) = last.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), json!(rv.to_string()));
        }
        let last = Arc::new(last);
        self.index(key, Some(&old), None);
        self.emit(
            &key.tk,
            WatchEvent {
                kind: EventKind::Deleted,
                rv,
                object: last.clone(),
                old: None,
            },
        );
        Some(last)
    }

    /// Drops a whole type's storage (its CRD was deleted).
    pub fn drop_type(&mut self, tk: &TypeKey) -> Vec<ObjKey> {
        self.tables
            .get(tk)
            .map(|t| {
                t.objects
                    .keys()
                    .map(|(ns, name)| ObjKey {
                        tk: tk.clone(),
                        ns: ns.clone(),
                        name: name.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}
