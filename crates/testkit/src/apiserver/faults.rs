//! Fault injection per verb, resource and namespace, and the request log (counts per verb and
//! resource, per namespace, and the user agent of every request for RBAC coverage).

use std::collections::BTreeMap;
use std::time::Duration;

/// An API verb, as RBAC names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verb {
    /// GET of one object.
    Get,
    /// GET of a collection.
    List,
    /// GET with watch=true.
    Watch,
    /// POST.
    Create,
    /// PUT.
    Update,
    /// PATCH (including server-side apply).
    Patch,
    /// DELETE of one object.
    Delete,
    /// DELETE of a collection.
    DeleteCollection,
}

impl Verb {
    /// The RBAC spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        }
    }
}

/// What an injected fault does to a matching request.
#[derive(Clone, Debug, PartialEq)]
pub enum FaultAction {
    /// Answer with this HTTP status and a matching `Status` body; 429 and 503 carry Retry-After.
    Error {
        /// HTTP status code (500, 503, 429, 409, ...).
        code: u16,
        /// Seconds for the `Retry-After` header.
        retry_after: Option<u64>,
    },
    /// Delay the request before serving it.
    Latency(Duration),
    /// Close a watch stream after this long (zero: right after it starts).
    DropWatch(Duration),
}

/// One injected fault; the `None` filters match anything.
#[derive(Clone, Debug, PartialEq)]
pub struct Fault {
    /// Only this verb.
    pub verb: Option<Verb>,
    /// Only this resource (`pods`, `pods/status`, `runnergroups`).
    pub resource: Option<String>,
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only clients whose User-Agent contains this text (one operator replica of several).
    pub user_agent: Option<String>,
    /// The effect.
    pub action: FaultAction,
    /// How many requests it still affects (None = until cleared).
    pub remaining: Option<u32>,
}

impl Fault {
    /// A fault answering with `code`.
    pub fn error(code: u16) -> Fault {
        let retry_after = matches!(code, 429 | 503).then_some(1);
        Fault::with(FaultAction::Error { code, retry_after })
    }

    /// A fault delaying requests.
    pub fn latency(d: Duration) -> Fault {
        Fault::with(FaultAction::Latency(d))
    }

    /// A fault closing watches after `d`.
    pub fn drop_watch(d: Duration) -> Fault {
        Fault::with(FaultAction::DropWatch(d)).verb(Verb::Watch)
    }

    fn with(action: FaultAction) -> Fault {
        Fault {
            verb: None,
            resource: None,
            namespace: None,
            user_agent: None,
            action,
            remaining: None,
        }
    }

    /// Restricts to one verb.
    pub fn verb(mut self, v: Verb) -> Fault {
        self.verb = Some(v);
        self
    }

    /// Restricts to one resource.
    pub fn resource(mut self, r: &str) -> Fault {
        self.resource = Some(r.to_string());
        self
    }

    /// Restricts to one namespace.
    pub fn namespace(mut self, ns: &str) -> Fault {
        self.namespace = Some(ns.to_string());
        self
    }

    /// Restricts to clients whose User-Agent contains `text`.
    pub fn user_agent(mut self, text: &str) -> Fault {
        self.user_agent = Some(text.to_string());
        self
    }

    /// Affects only the next `n` matching requests.
    pub fn times(mut self, n: u32) -> Fault {
        self.remaining = Some(n);
        self
    }

    /// Sets the Retry-After seconds of an error fault.
    pub fn retry_after(mut self, secs: u64) -> Fault {
        if let FaultAction::Error { retry_after, .. } = &mut self.action {
            *retry_after = Some(secs);
        }
        self
    }

    fn matches(&self, req: &FaultTarget<'_>) -> bool {
        self.verb.is_none_or(|v| v == req.verb)
            && self.resource.as_deref().is_none_or(|r| r == req.resource)
            && self.namespace.as_deref().is_none_or(|n| Some(n) == req.namespace)
            && self
                .user_agent
                .as_deref()
                .is_none_or(|ua| req.user_agent.contains(ua))
    }
}

/// What a fault is matched against: one request.
#[derive(Clone, Copy, Debug)]
pub struct FaultTarget<'a> {
    /// The verb.
    pub verb: Verb,
    /// Resource, with `/subresource` when addressed.
    pub resource: &'a str,
    /// Namespace, if namespaced.
    pub namespace: Option<&'a str>,
    /// The client's User-Agent.
    pub user_agent: &'a str,
}

/// The faults that hit one request.
#[derive(Clone, Debug, Default)]
pub struct Hit {
    /// Total added latency.
    pub latency: Duration,
    /// The error to answer with, if any.
    pub error: Option<(u16, Option<u64>)>,
    /// For watches: close after this long.
    pub drop_watch: Option<Duration>,
}

/// The active faults.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    list: Vec<Fault>,
}

impl Faults {
    /// Adds a fault.
    pub fn add(&mut self, f: Fault) {
        self.list.push(f);
    }

    /// Removes every fault.
    pub fn clear(&mut self) {
        self.list.clear();
    }

    /// Consumes the faults matching a request.
    pub fn hit(&mut self, req: &FaultTarget<'_>) -> Hit {
        let mut hit = Hit::default();
        for f in self.list.iter_mut().filter(|f| f.matches(req)) {
            if f.remaining == Some(0) {
                continue;
            }
            match &f.action {
                FaultAction::Latency(d) => hit.latency += *d,
                FaultAction::Error { code, retry_after } if hit.error.is_none() => {
                    hit.error = Some((*code, *retry_after))
                }
                FaultAction::DropWatch(d) if hit.drop_watch.is_none() => hit.drop_watch = Some(*d),
                _ => continue,
            }
            if let Some(n) = &mut f.remaining {
                *n -= 1;
            }
        }
        self.list.retain(|f| f.remaining != Some(0));
        hit
    }
}

/// One served request.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestRecord {
    /// The verb, or None for discovery and other non-resource paths.
    pub verb: Option<Verb>,
    /// HTTP method.
    pub method: String,
    /// Request path without the query.
    pub path: String,
    /// The query string as sent (percent-encoded, without the `?`; empty when none), so tests
    /// can check selectors and limits.
    pub query: String,
    /// API group ("" for core).
    pub group: String,
    /// Resource, with `/subresource` when addressed.
    pub resource: String,
    /// Namespace of the request, if namespaced.
    pub namespace: Option<String>,
    /// Object name, if addressed.
    pub name: Option<String>,
    /// The client's User-Agent header.
    pub user_agent: String,
    /// HTTP status returned (200 for watches that started).
    pub status: u16,
    /// When the request arrived (the server's monotonic clock).
    pub at: std::time::Instant,
}

/// Everything the server was asked.
#[derive(Clone, Debug, Default)]
pub struct RequestLog {
    /// Every request in arrival order.
    pub records: Vec<RequestRecord>,
    /// CEL rules skipped instead of evaluated, across all writes.
    pub cel_skipped: u64,
}

impl RequestLog {
    /// Requests with this verb on this resource (e.g. `pods`, `pods/status`).
    pub fn count(&self, verb: Verb, resource: &str) -> usize {
        self.records
            .iter()
            .filter(|r| r.verb == Some(verb) && r.resource == resource)
            .count()
    }

    /// Requests with this verb on this resource in this namespace.
    pub fn count_in(&self, verb: Verb, resource: &str, ns: &str) -> usize {
        self.records
            .iter()
            .filter(|r| r.verb == Some(verb) && r.resource == resource && r.namespace.as_deref() == Some(ns))
            .count()
    }

    /// Counts per (verb, resource).
    pub fn counts(&self) -> BTreeMap<(Verb, String), usize> {
        let mut out = BTreeMap::new();
        for r in &self.records {
            if let Some(v) = r.verb {
                *out.entry((v, r.resource.clone())).or_insert(0) += 1;
            }
        }
        out
    }

    /// Counts per (verb, resource, namespace); cluster-wide requests use "".
    pub fn counts_by_namespace(&self) -> BTreeMap<(Verb, String, String), usize> {
        let mut out = BTreeMap::new();
        for r in &self.records {
            if let Some(v) = r.verb {
                let ns = r.namespace.clone().unwrap_or_default();
                *out.entry((v, r.resource.clone(), ns)).or_insert(0) += 1;
            }
        }
        out
    }

    /// The distinct (group, resource, verb) triples a user agent (prefix) used: its RBAC footprint.
    pub fn rbac_footprint(&self, user_agent_prefix: &str) -> Vec<(String, String, Verb)> {
        let mut out: Vec<(String, String, Verb)> = self
            .records
            .iter()
            .filter(|r| r.user_agent.starts_with(user_agent_prefix))
            .filter_map(|r| r.verb.map(|v| (r.group.clone(), r.resource.clone(), v)))
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target<'a>(ua: &'a str) -> FaultTarget<'a> {
        FaultTarget {
            verb: Verb::Update,
            resource: "leases",
            namespace: Some("ops"),
            user_agent: ua,
        }
    }

    #[test]
    fn a_user_agent_fault_hits_only_that_replica() {
        let mut faults = Faults::default();
        faults.add(Fault::error(500).resource("leases").user_agent("(op-a)"));
        assert_eq!(faults.hit(&target("forgerunner/0.1.0 (op-b)")).error, None);
        assert_eq!(
            faults.hit(&target("forgerunner/0.1.0 (op-a)")).error,
            Some((500, None))
        );
    }
}
