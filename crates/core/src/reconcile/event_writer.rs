//! Writes the groups' Events as kube's `Recorder` does, without its cache.
//!
//! kube-runtime 5.0's `Recorder` (`src/events.rs`, `publish`) keeps a clone of every Event it
//! wrote, with its key, for six minutes, only to turn a repeat into a `series` patch: at a
//! thousand groups that cache held some 14 KiB per group. Core filters repeats itself
//! ([`super::events::RecentEvents`]) and keeps the little a series needs (the Event's name and
//! count) there, so this writer keeps nothing: it creates the Event the Recorder would create
//! (same fields, same name scheme) and patches a series the way the Recorder would.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Reporter};

/// Namespace of an Event whose object names none (kube's Recorder does the same).
const DEFAULT_NAMESPACE: &str = "default";

/// Creates Events and counts their repeats; cheap to clone.
#[derive(Clone)]
pub struct EventWriter {
    client: Client,
    reporter: Reporter,
}

impl EventWriter {
    /// A writer reporting as `reporter`.
    pub fn new(client: Client, reporter: Reporter) -> EventWriter {
        EventWriter { client, reporter }
    }

    /// Creates `ev` about `regarding`; returns the new Event's name (what a repeat patches).
    pub async fn create(&self, ev: &Event, regarding: &ObjectReference) -> Result<String, kube::Error> {
        let event = self.new_event(ev, regarding, Timestamp::now());
        let name = event.metadata.name.clone().unwrap_or_default();
        self.api(regarding).create(&PostParams::default(), &event).await?;
        Ok(name)
    }

    /// Records that the Event `name` about `regarding` was observed again, `count` times in all.
    /// The Recorder merge-patches the whole cached Event with its new `series`; every other
    /// field is what the server holds already (and `ValidateEventUpdate` keeps them immutable),
    /// so the `series` alone changes the same.
    pub async fn count(
        &self,
        regarding: &ObjectReference,
        name: &str,
        count: i32,
    ) -> Result<(), kube::Error> {
        let series = series_patch(count, Timestamp::now());
        self.api(regarding)
            .patch(name, &PatchParams::default(), &Patch::Merge(&series))
            .await?;
        Ok(())
    }

    fn api(&self, regarding: &ObjectReference) -> Api<K8sEvent> {
        let ns = regarding.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE);
        Api::namespaced(self.client.clone(), ns)
    }

    /// The Event kube's Recorder builds (`generate_event`): named after the object and the
    /// time in nanoseconds (hex), reported by this controller and instance.
    fn new_event(&self, ev: &Event, regarding: &ObjectReference, now: Timestamp) -> K8sEvent {
        let controller = &self.reporter.controller;
        K8sEvent {
            action: Some(ev.action.clone()),
            reason: Some(ev.reason.clone()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            note: ev.note.clone(),
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(format!(
                    "{}.{:x}",
                    regarding.name.as_ref().unwrap_or(controller),
                    now.as_nanosecond()
                )),
                ..Default::default()
            },
            reporting_controller: Some(controller.clone()),
            reporting_instance: Some(
                self.reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| controller.clone()),
            ),
            type_: Some(type_name(ev.type_).to_owned()),
            related: ev.secondary.clone(),
            ..Default::default()
        }
    }
}

/// The Event `type` of `t`.
fn type_name(t: EventType) -> &'static str {
    match t {
        EventType::Normal => "Normal",
        EventType::Warning => "Warning",
    }
}

/// The merge patch that sets an Event's series.
fn series_patch(count: i32, now: Timestamp) -> serde_json::Value {
    serde_json::json!({
        "series": EventSeries {
            count,
            last_observed_time: MicroTime(now),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::Resource;
    use kube::api::ListParams;
    use kube::runtime::events::Recorder;

    fn reporter() -> Reporter {
        Reporter {
            controller: "forgerunner".into(),
            instance: Some("pod-0".into()),
        }
    }

    async fn config_map(client: &Client, name: &str) -> ObjectReference {
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<ConfigMap>::namespaced(client.clone(), "default")
            .create(&PostParams::default(), &cm)
            .await
            .expect("config map")
            .object_ref(&())
    }

    async fn event_about(events: &Api<K8sEvent>, object: &str) -> K8sEvent {
        let list = events.list(&ListParams::default()).await.expect("list");
        let mut found: Vec<K8sEvent> = list
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(object))
            .collect();
        assert_eq!(found.len(), 1, "one Event about {object}");
        found.remove(0)
    }

    /// The stored Event and its series are what kube's Recorder writes for the same Event
    /// (kube-runtime 5.0 `src/events.rs`, `generate_event` and `publish`), but for the name
    /// and times, which hold the moment of writing, and the object it is about.
    #[tokio::test]
    async fn events_and_series_are_the_ones_kubes_recorder_writes() {
        let srv = forgerunner_testkit::apiserver::FakeApiServer::start()
            .await
            .expect("start");
        let client = srv.client().expect("client");
        let (ours, theirs) = (
            config_map(&client, "ours").await,
            config_map(&client, "theirs").await,
        );
        let ev = Event {
            type_: EventType::Warning,
            reason: "RunnerFailed".into(),
            note: Some("2 runners failed (a, b); 2 in a row".into()),
            action: "RemoveRunners-0badf00d".into(),
            secondary: None,
        };
        let writer = EventWriter::new(client.clone(), reporter());
        let recorder = Recorder::new(client.clone(), reporter());

        let name = writer.create(&ev, &ours).await.expect("create");
        writer.count(&ours, &name, 2).await.expect("count");
        recorder.publish(&ev, &theirs).await.expect("first");
        recorder.publish(&ev, &theirs).await.expect("repeat");

        let events: Api<K8sEvent> = Api::namespaced(client, "default");
        let (mut a, mut b) = (
            event_about(&events, "ours").await,
            event_about(&events, "theirs").await,
        );
        assert_eq!(a.metadata.name.as_deref(), Some(name.as_str()));
        assert!(name.starts_with("ours."), "{name}");
        assert_eq!(a.series.as_ref().map(|s| s.count), Some(2));
        assert!(a.event_time.is_some());
        // What differs by design: the object, the name and the times.
        for e in [&mut a, &mut b] {
            e.metadata = ObjectMeta::default();
            e.regarding = None;
            e.event_time = None;
            if let Some(s) = e.series.as_mut() {
                s.last_observed_time = MicroTime(Timestamp::UNIX_EPOCH);
            }
        }
        assert_eq!(a, b);
        srv.shutdown().await;
    }

    #[test]
    fn the_series_patch_sets_only_the_series() {
        let patch = series_patch(3, Timestamp::UNIX_EPOCH);
        let fields: Vec<&String> = patch.as_object().expect("object").keys().collect();
        assert_eq!(fields, ["series"]);
        assert_eq!(patch["series"]["count"], 3);
        assert!(patch["series"]["lastObservedTime"].is_string());
    }
}
