//! Deletion: finalizers, deletionTimestamp, propagation policies and garbage collection of
//! dependents through ownerReferences, and namespace termination.

use std::sync::Arc;

use serde_json::{Value, json};

use super::ops::finalizer_list;
use super::registry::{Builtin, ResourceDef, TypeKey};
use super::status::{ApiError, ApiResult};
use super::store::{ObjKey, Store, now_rfc3339, owner_uids, uid_of};

const FOREGROUND: &str = "foregroundDeletion";
const ORPHAN: &str = "orphan";

/// `propagationPolicy` of a delete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Propagation {
    /// Delete the owner now, dependents afterwards.
    Background,
    /// Delete dependents first, then the owner.
    Foreground,
    /// Keep dependents, removing their ownerReference.
    Orphan,
}

impl Propagation {
    /// Parses the query parameter value.
    pub fn parse(s: &str) -> Option<Propagation> {
        match s {
            "Background" => Some(Propagation::Background),
            "Foreground" => Some(Propagation::Foreground),
            "Orphan" => Some(Propagation::Orphan),
            _ => None,
        }
    }
}

/// Delete preconditions (`preconditions` in DeleteOptions).
#[derive(Clone, Debug, Default)]
pub struct Preconditions {
    /// Required UID.
    pub uid: Option<String>,
    /// Required resourceVersion.
    pub resource_version: Option<String>,
}

/// What a delete did.
#[derive(Clone, Debug)]
pub struct Deleted {
    /// The object: its final state if removed, else its state with deletionTimestamp.
    pub object: Arc<Value>,
    /// Whether the object is gone.
    pub removed: bool,
    /// Warnings to return to the client.
    pub warnings: Vec<String>,
}

fn ns_key(name: &str) -> ObjKey {
    ObjKey {
        tk: TypeKey {
            group: String::new(),
            plural: "namespaces".into(),
        },
        ns: String::new(),
        name: name.into(),
    }
}

fn with_finalizers(obj: &Value, f: Vec<String>) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.pointer_mut("/metadata").and_then(Value::as_object_mut) {
        if f.is_empty() {
            m.remove("finalizers");
        } else {
            m.insert("finalizers".into(), json!(f));
        }
    }
    o
}

fn mark_deleting(obj: &Value, extra_finalizer: Option<&str>) -> Value {
    let mut f = finalizer_list(obj);
    if let Some(x) = extra_finalizer
        && !f.iter().any(|e| e == x)
    {
        f.push(x.to_string());
    }
    let mut o = with_finalizers(obj, f);
    if let Some(m) = o.pointer_mut("/metadata").and_then(Value::as_object_mut)
        && !m.contains_key("deletionTimestamp")
    {
        m.insert("deletionTimestamp".into(), json!(now_rfc3339()));
        m.insert("deletionGracePeriodSeconds".into(), json!(0));
    }
    o
}

impl Store {
    /// Deletes one object with the given policy (None = the type's default).
    pub fn delete(
        &mut self,
        def: &ResourceDef,
        key: &ObjKey,
        policy: Option<Propagation>,
        pre: &Preconditions,
    ) -> ApiResult<Deleted> {
        let current = self
            .get(key)
            .ok_or_else(|| ApiError::not_found(&def.group, &def.plural, &key.name))?;
        let uid = uid_of(&current);
        if let Some(want) = &pre.uid
            && *want != uid
        {
            return Err(
                ApiError::conflict(&def.group, &def.plural, &key.name).with_message(format!(
                    "Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"
                )),
            );
        }
        let rv = current
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if let Some(want) = &pre.resource_version
            && want != rv
        {
            return Err(ApiError::conflict(&def.group, &def.plural, &key.name).with_message(format!(
                "Precondition failed: ResourceVersion in precondition: {want}, ResourceVersion in object meta: {rv}"
            )));
        }
        let mut warnings = Vec::new();
        let policy = policy.unwrap_or_else(|| {
            if def.builtin == Some(Builtin::Job) {
                warnings.push(
                    "child pods are preserved by default when jobs are deleted; set propagationPolicy=Background \
                     to remove them or set propagationPolicy=Orphan to suppress this warning"
                        .to_string(),
                );
                Propagation::Orphan
            } else {
                Propagation::Background
            }
        });
        if def.builtin == Some(Builtin::Namespace) {
            return Ok(Deleted {
                object: self.delete_namespace(key),
                removed: self.get(key).is_none(),
                warnings,
            });
        }
        if current.pointer("/metadata/deletionTimestamp").is_some() {
            return Ok(Deleted {
                object: current,
                removed: false,
                warnings,
            });
        }
        match policy {
            Propagation::Orphan => self.orphan_dependents(&uid),
            Propagation::Foreground if !self.dependents_of(&uid).is_empty() => {
                let obj = self.put(key, mark_deleting(&current, Some(FOREGROUND)));
                for dep in self.dependents_of(&uid) {
                    self.delete_dependent(&dep, Propagation::Foreground);
                }
                self.check_foreground(&uid);
                let removed = self.get(key).is_none();
                return Ok(Deleted {
                    object: obj,
                    removed,
                    warnings,
                });
            }
            _ => {}
        }
        if !finalizer_list(&current).is_empty() {
            let obj = self.put(key, mark_deleting(&current, None));
            return Ok(Deleted {
                object: obj,
                removed: false,
                warnings,
            });
        }
        let last = self.remove_and_collect(key).unwrap_or(current);
        Ok(Deleted {
            object: last,
            removed: true,
            warnings,
        })
    }

    fn delete_dependent(&mut self, key: &ObjKey, policy: Propagation) {
        if let Some(def) = self.def_for(&key.tk) {
            // A dependent that vanished meanwhile is simply done.
            let _ = self.delete(&def, key, Some(policy), &Preconditions::default());
        }
    }

    fn orphan_dependents(&mut self, owner_uid: &str) {
        for dep in self.dependents_of(owner_uid) {
            let Some(obj) = self.get(&dep) else { continue };
            let mut o = (*obj).clone();
            if let Some(refs) = o
                .pointer_mut("/metadata/ownerReferences")
                .and_then(Value::as_array_mut)
            {
                refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(owner_uid));
            }
            self.put(&dep, o);
        }
    }

    /// Removes an object whose finalizers are all gone, if it is being deleted.
    pub fn finalize_if_done(&mut self, key: &ObjKey) {
        let Some(obj) = self.get(key) else { return };
        if obj.pointer("/metadata/deletionTimestamp").is_some() && finalizer_list(&obj).is_empty() {
            self.remove_and_collect(key);
        }
    }

    /// Collects a just-created object whose owners are all gone already (a controller acting on
    /// a stale cache, e.g. a pod for a Job deleted a moment before), as the real garbage
    /// collector does with dependents of a dangling owner.
    pub(super) fn collect_if_orphaned(&mut self, key: &ObjKey) {
        let Some(obj) = self.get(key) else { return };
        let owners = owner_uids(&obj);
        if !owners.is_empty() && owners.iter().all(|o| self.key_of_uid(o).is_none()) {
            self.delete_dependent(key, Propagation::Background);
        }
    }

    /// Removes an object, then collects dependents whose owners are all gone, releases owners
    /// waiting in foreground deletion and finishes terminating namespaces.
    pub fn remove_and_collect(&mut self, key: &ObjKey) -> Option<Arc<Value>> {
        let last = self.remove(key)?;
        if key.tk.group == "apiextensions.k8s.io" && key.tk.plural == "customresourcedefinitions" {
            super::crd::on_removed(self, &last);
        }
        let uid = uid_of(&last);
        for dep in self.dependents_of(&uid) {
            let Some(obj) = self.get(&dep) else { continue };
            let alive = owner_uids(&obj).iter().any(|o| self.key_of_uid(o).is_some());
            if !alive {
                self.delete_dependent(&dep, Propagation::Background);
            }
        }
        for owner in owner_uids(&last) {
            self.check_foreground(&owner);
        }
        if !key.ns.is_empty() {
            let nk = ns_key(&key.ns);
            if let Some(ns) = self.get(&nk)
                && ns.pointer("/metadata/deletionTimestamp").is_some()
                && self.namespace_is_empty(&key.ns)
            {
                self.remove(&nk);
            }
        }
        Some(last)
    }

    fn check_foreground(&mut self, owner_uid: &str) {
        let Some(key) = self.key_of_uid(owner_uid).cloned() else {
            return;
        };
        let Some(owner) = self.get(&key) else { return };
        let f = finalizer_list(&owner);
        if !f.iter().any(|x| x == FOREGROUND) || !self.dependents_of(owner_uid).is_empty() {
            return;
        }
        let rest: Vec<String> = f.into_iter().filter(|x| x != FOREGROUND && x != ORPHAN).collect();
        self.put(&key, with_finalizers(&owner, rest));
        self.finalize_if_done(&key);
    }

    fn delete_namespace(&mut self, key: &ObjKey) -> Arc<Value> {
        let Some(current) = self.get(key) else {
            return Arc::new(Value::Null);
        };
        let mut o = mark_deleting(&current, None);
        if let Some(s) = o.as_object_mut() {
            s.insert("status".into(), json!({"phase": "Terminating"}));
        }
        let obj = self.put(key, o);
        for k in self.keys_in_namespace(&key.name) {
            self.delete_dependent(&k, Propagation::Background);
        }
        if self.namespace_is_empty(&key.name) {
            self.remove(key);
        }
        obj
    }
}
