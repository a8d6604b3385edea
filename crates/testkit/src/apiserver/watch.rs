//! Watch streams: history replay from a resourceVersion, live fan-out, selector transitions,
//! BOOKMARKs, `sendInitialEvents`, 410 Gone as an ERROR event, timeouts and server-initiated
//! disconnects.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use futures::StreamExt;
use http::{HeaderMap, HeaderValue, header};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;

use super::partial;
use super::registry::ResourceDef;
use super::selector::Selectors;
use super::server::{Params, Target, error_response, wants_table};
use super::shared::{Shared, lock};
use super::status::ApiError;
use super::store::{EventKind, WatchEvent};
use super::table;
use super::verbs::{present, selectors};

/// Filters and renders events for one watcher.
struct Filter {
    def: Arc<ResourceDef>,
    ns: Option<String>,
    sel: Selectors,
    table: bool,
    /// Send `PartialObjectMetadata` objects (a metadata watch).
    metadata_only: bool,
    first: bool,
}

impl Filter {
    fn visible(&self, obj: &Value) -> bool {
        let ns_ok = self
            .ns
            .as_deref()
            .is_none_or(|ns| obj.pointer("/metadata/namespace").and_then(Value::as_str) == Some(ns));
        ns_ok && self.sel.matches(obj)
    }

    /// The event type this watcher sees, if any: entering or leaving the selection turns a
    /// modification into ADDED or DELETED, as the real watch cache does.
    fn classify(&self, ev: &WatchEvent) -> Option<&'static str> {
        let now = self.visible(&ev.object);
        match ev.kind {
            EventKind::Modified => {
                let before = ev.old.as_deref().is_some_and(|o| self.visible(o));
                match (before, now) {
                    (true, true) => Some("MODIFIED"),
                    (false, true) => Some("ADDED"),
                    (true, false) => Some("DELETED"),
                    (false, false) => None,
                }
            }
            other => now.then_some(other.as_str()),
        }
    }

    fn line(&mut self, kind: &str, obj: &Value, rv: u64) -> Bytes {
        let object = if self.table {
            let t = table::table(&self.def, &[Arc::new(obj.clone())], Some(rv), None, self.first);
            self.first = false;
            t
        } else if self.metadata_only {
            partial::object(&present(&self.def, obj))
        } else {
            present(&self.def, obj).into_owned()
        };
        encode(kind, &object)
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end && let Some(m) = meta.as_object_mut() {
            m.insert("annotations".into(), json!({"k8s.io/initial-events-end": "true"}));
        }
        encode(
            "BOOKMARK",
            &json!({"kind": self.def.kind, "apiVersion": self.def.api_version(), "metadata": meta}),
        )
    }
}

fn encode(kind: &str, object: &Value) -> Bytes {
    let mut v = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

/// Starts a watch: answers at once with a chunked JSON stream fed by a background task.
pub fn start(
    shared: &Arc<Shared>,
    t: &Target,
    params: &Params,
    headers: &HeaderMap,
    drop_after: Option<Duration>,
) -> Response {
    let sel = match selectors(&t.def, params) {
        Ok(s) => s,
        Err(e) => return error_response(&e, None),
    };
    let mut ns = t.ns.clone();
    let mut sel = sel;
    if let Some(name) = &t.name {
        // A watch on one object is a watch of the collection filtered to that name.
        let extra = format!("metadata.name={name}");
        match super::selector::FieldSelector::parse(&extra, &[]) {
            Ok(f) if sel.fields == Default::default() => sel.fields = f,
            _ => {}
        }
        if !t.def.namespaced {
            ns = None;
        }
    }
    let mut filter = Filter {
        def: t.def.clone(),
        ns,
        sel,
        table: wants_table(headers),
        metadata_only: partial::wanted(headers),
        first: true,
    };
    let bookmarks = params.get("allowWatchBookmarks").is_some_and(|b| b == "true");
    let send_initial = params.get("sendInitialEvents").is_some_and(|b| b == "true");
    let timeout = params
        .get("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_secs);
    let rv_param = params.get("resourceVersion").cloned().unwrap_or_default();
    let tk = t.def.type_key();

    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let mut initial: Vec<Bytes> = Vec::new();
    let subscription = {
        let mut store = lock(&shared.store);
        let snapshot = rv_param.is_empty() || rv_param == "0" || send_initial;
        let from = if snapshot {
            Ok(store.current_rv())
        } else {
            rv_param.parse::<u64>().map_err(|_| ())
        };
        match from {
            Err(()) => Err(ApiError::bad_request(format!(
                "invalid resource version: {rv_param}"
            ))),
            Ok(from) => match store.subscribe(&tk, from) {
                Err(e) => Err(e),
                Ok((past, live)) => {
                    if snapshot {
                        let (objs, _) =
                            store.list(&tk, filter.ns.as_deref(), |o| filter.sel.matches(o), None, None);
                        for o in objs {
                            let line = filter.line("ADDED", &o, from);
                            initial.push(line);
                        }
                        if send_initial && bookmarks {
                            initial.push(filter.bookmark(from, true));
                        }
                    }
                    for ev in past {
                        if let Some(kind) = filter.classify(&ev) {
                            let line = filter.line(kind, &ev.object, ev.rv);
                            initial.push(line);
                        }
                    }
                    Ok(live)
                }
            },
        }
    };
    let live = match subscription {
        Ok(live) => live,
        Err(e) if e.code == 410 => {
            // Like the real server: 200, then one ERROR event carrying a 410 Status.
            let mut status = e.to_status();
            if let Some(m) = status.as_object_mut() {
                m.insert("reason".into(), json!("Expired"));
            }
            return stream_response(Body::from(encode("ERROR", &status)));
        }
        Err(e) => return error_response(&e, None),
    };
    let shared = shared.clone();
    let max = [timeout, shared.config.watch_max_duration, drop_after]
        .into_iter()
        .flatten()
        .min();
    tokio::spawn(async move {
        for line in initial {
            if tx.send(line).await.is_err() {
                return;
            }
        }
        pump(shared, filter, live, tx, bookmarks, max).await;
    });
    stream_response(Body::from_stream(
        ReceiverStream::new(rx).map(Ok::<Bytes, std::convert::Infallible>),
    ))
}

fn stream_response(body: Body) -> Response {
    let mut resp = Response::new(body);
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    resp
}

async fn pump(
    shared: Arc<Shared>,
    mut filter: Filter,
    mut live: broadcast::Receiver<Arc<WatchEvent>>,
    tx: mpsc::Sender<Bytes>,
    bookmarks: bool,
    max: Option<Duration>,
) {
    let deadline = max.map(|d| tokio::time::Instant::now() + d);
    let dropped = lock(&shared.drop_all).clone();
    let mut tick = tokio::time::interval(shared.config.bookmark_interval);
    tick.tick().await;
    loop {
        let sleep = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let line = tokio::select! {
            _ = shared.shutdown.cancelled() => return,
            _ = dropped.cancelled() => return,
            _ = tx.closed() => return,
            _ = sleep => return,
            _ = tick.tick(), if bookmarks => {
                // Only claim a resourceVersion once every event up to it reached this watcher.
                let store = lock(&shared.store);
                if !live.is_empty() { continue; }
                let rv = store.current_rv();
                drop(store);
                filter.bookmark(rv, false)
            }
            ev = live.recv() => match ev {
                Ok(ev) => match filter.classify(&ev) {
                    Some(kind) => filter.line(kind, &ev.object, ev.rv),
                    None => continue,
                },
                // A watcher that fell behind is closed; the client re-watches or re-lists.
                Err(_) => return,
            },
        };
        if tx.send(line).await.is_err() {
            return;
        }
    }
}
