//! A node that stops answering, played against the API server as the control plane handles it
//! (the steps and their sources: [`crate::sim::node_loss`]): `Ready=False`, then the taint
//! manager's `DisruptionTarget` and graceful delete that no kubelet confirms, and after
//! [`SimConfig::lost_node_gc_after`](crate::sim::SimConfig::lost_node_gc_after) PodGC's
//! `Failed` phase and forced delete. A deleted Node object goes to PodGC's step at once.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{Kubelet, is_not_found, sleep_or_cancel};
use crate::sim::config::SimError;
use crate::sim::node_loss::{
    NODE_CONTROLLER, NODE_NOT_READY_EVENT, TAINT_EVICTION_CONTROLLER, TAINT_EVICTION_EVENT,
    UNREACHABLE_HOLD_FINALIZER, mark_not_ready, mark_pod_gc_orphan, mark_taint_eviction,
};

/// An Event a controller records about `pod`.
struct PodEvent<'a> {
    type_: &'a str,
    reason: &'a str,
    message: String,
    component: &'a str,
}

/// Records `event` on `pod` as a core/v1 Event (what `kubectl get events` lists); a failure is
/// only logged, as the controllers' recorders do.
async fn record(client: &kube::Client, pod: &Pod, event: PodEvent<'_>) {
    let namespace = pod.namespace().unwrap_or_default();
    let now = Timestamp::now();
    let name = format!("{}.{:x}", pod.name_any(), now.as_nanosecond());
    let object = Event {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace.clone()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("Pod".to_owned()),
            name: Some(pod.name_any()),
            namespace: Some(namespace.clone()),
            uid: pod.uid(),
            ..ObjectReference::default()
        },
        reason: Some(event.reason.to_owned()),
        message: Some(event.message),
        type_: Some(event.type_.to_owned()),
        source: Some(EventSource {
            component: Some(event.component.to_owned()),
            host: None,
        }),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(1),
        reporting_component: Some(event.component.to_owned()),
        reporting_instance: Some(String::new()),
        ..Event::default()
    };
    let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
    if let Err(err) = api.create(&PostParams::default(), &object).await {
        tracing::debug!(pod = %pod.name_any(), reason = event.reason, error = %err, "recording a node-loss event failed");
    }
}

/// Writes `status`'s phase and conditions (the lists replaced whole).
async fn write_status(api: &Api<Pod>, name: &str, status: &PodStatus) -> Result<(), kube::Error> {
    let mut fields = serde_json::Map::new();
    fields.insert("conditions".to_owned(), json!(status.conditions));
    if let Some(phase) = &status.phase {
        fields.insert("phase".to_owned(), json!(phase));
    }
    let patch = json!({ "status": fields });
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

/// Sets the pod's finalizers to `finalizers`.
async fn write_finalizers(api: &Api<Pod>, name: &str, finalizers: Vec<String>) -> Result<(), kube::Error> {
    let patch = json!({"metadata": {"finalizers": finalizers}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

impl Kubelet {
    /// The node under `pod` stops answering (its containers are already stopped: the caller
    /// claimed the pod). Steps 1 to 3 now, PodGC's step 4 later in the background.
    pub(super) async fn lose_unreachable(&self, namespace: &str, name: &str) -> Result<(), SimError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let Some(pod) = api.get_opt(name).await? else {
            return Ok(());
        };
        let mut status = pod.status.clone().unwrap_or_default();
        if mark_not_ready(&mut status, Timestamp::now()) {
            write_status(&api, name, &status).await?;
            let event = PodEvent {
                type_: "Warning",
                reason: NODE_NOT_READY_EVENT,
                message: "Node is not ready".to_owned(),
                component: NODE_CONTROLLER,
            };
            record(&self.client, &pod, event).await;
        }
        // The toleration of `unreachable:NoExecute` (300 s by default) is taken as spent.
        let event = PodEvent {
            type_: "Normal",
            reason: TAINT_EVICTION_EVENT,
            message: format!("Marking for deletion Pod {namespace}/{name}"),
            component: TAINT_EVICTION_CONTROLLER,
        };
        record(&self.client, &pod, event).await;
        if mark_taint_eviction(&mut status, Timestamp::now()) {
            write_status(&api, name, &status).await?;
        }
        let mut finalizers = pod.finalizers().to_vec();
        finalizers.push(UNREACHABLE_HOLD_FINALIZER.to_owned());
        write_finalizers(&api, name, finalizers).await?;
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(err) if is_not_found(&err) => return Ok(()),
            Err(err) => return Err(err.into()),
        }
        let uid = pod.uid().unwrap_or_default();
        let delay = self.config.lost_node_gc_after;
        let shutdown = self.shutdown.clone();
        let name = name.to_owned();
        tokio::spawn(async move { collect_orphan(api, name, uid, delay, shutdown).await });
        Ok(())
    }

    /// The Node object under `pod` is deleted while the pod runs (its containers are already
    /// stopped: the caller claimed the pod): PodGC's step 4 now, no taint manager before it.
    pub(super) async fn lose_deleted_node(&self, namespace: &str, name: &str) -> Result<(), SimError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let Some(pod) = api.get_opt(name).await? else {
            return Ok(());
        };
        let mut status = pod.status.clone().unwrap_or_default();
        if mark_pod_gc_orphan(&mut status, Timestamp::now()) {
            write_status(&api, name, &status).await?;
        }
        match api.delete(name, &DeleteParams::default().grace_period(0)).await {
            Ok(_) => Ok(()),
            Err(err) if is_not_found(&err) => Ok(()),
            Err(err) => Err(err.into()),
        }
    }
}

/// PodGC, once the Node object is gone: `Failed` with PodGC's `DisruptionTarget`, then the
/// forced delete (here: the hold released, which ends the pending deletion).
async fn collect_orphan(
    api: Api<Pod>,
    name: String,
    uid: String,
    delay: Duration,
    shutdown: CancellationToken,
) {
    if !sleep_or_cancel(delay, &shutdown).await {
        return;
    }
    let pod = match api.get_opt(&name).await {
        Ok(Some(pod)) if pod.uid().as_deref() == Some(uid.as_str()) => pod,
        Ok(_) => return,
        Err(err) => {
            tracing::debug!(pod = %name, error = %err, "PodGC could not read the lost pod");
            return;
        }
    };
    let mut status = pod.status.clone().unwrap_or_default();
    if mark_pod_gc_orphan(&mut status, Timestamp::now())
        && let Err(err) = write_status(&api, &name, &status).await
    {
        tracing::debug!(pod = %name, error = %err, "PodGC could not mark the lost pod failed");
    }
    let rest: Vec<String> = pod
        .finalizers()
        .iter()
        .filter(|f| *f != UNREACHABLE_HOLD_FINALIZER)
        .cloned()
        .collect();
    if let Err(err) = write_finalizers(&api, &name, rest).await
        && !is_not_found(&err)
    {
        tracing::debug!(pod = %name, error = %err, "PodGC could not release the lost pod");
    }
    if let Err(err) = api.delete(&name, &DeleteParams::default().grace_period(0)).await
        && !is_not_found(&err)
    {
        tracing::debug!(pod = %name, error = %err, "PodGC could not delete the lost pod");
    }
}
