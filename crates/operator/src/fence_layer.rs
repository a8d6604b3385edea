//! A tower layer on the operator's Kubernetes client that refuses every write while this
//! replica does not hold the leader lease, except the writes to the Lease itself.
//!
//! It sits below the client's retry layer (see [`crate::cluster::connect`]), so a retry is
//! checked again: a 429 retried after a long `Retry-After` cannot slip past the deadline.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use forgerunner_core::{Fence, Fenced};
use http::{Method, Request};
use tower::{BoxError, Layer, Service};

/// The Lease a replica may always write: campaigning and renewing need it while not leading.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRef {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
}

/// Why a request never left the process.
#[derive(Debug, thiserror::Error)]
#[error("refusing {method} {path}: {source}")]
pub struct FencedRequest {
    method: Method,
    path: String,
    #[source]
    source: Fenced,
}

/// Reads are never fenced: a standby keeps its caches warm.
fn is_write(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Whether `path` is the Lease itself (any write) or its collection (create).
fn is_own_lease(method: &Method, path: &str, lease: &LeaseRef) -> bool {
    let collection = format!(
        "/apis/coordination.k8s.io/v1/namespaces/{}/leases",
        lease.namespace
    );
    let Some(rest) = path.strip_prefix(collection.as_str()) else {
        return false;
    };
    match rest {
        "" | "/" => *method == Method::POST,
        _ => rest.strip_prefix('/') == Some(lease.name.as_str()),
    }
}

/// The pure decision: may this request be sent now?
pub fn admits(method: &Method, path: &str, fence_held: bool, lease: Option<&LeaseRef>) -> bool {
    fence_held || !is_write(method) || lease.is_some_and(|l| is_own_lease(method, path, l))
}

/// Wraps a client service with the fence check.
#[derive(Clone, Debug)]
pub struct FenceLayer {
    fence: Fence,
    lease: Option<LeaseRef>,
}

impl FenceLayer {
    /// Fences writes by `fence`; `lease` (when leader election is on) stays writable.
    pub fn new(fence: Fence, lease: Option<LeaseRef>) -> FenceLayer {
        FenceLayer { fence, lease }
    }
}

impl<S> Layer<S> for FenceLayer {
    type Service = FenceService<S>;

    fn layer(&self, inner: S) -> FenceService<S> {
        FenceService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`FenceLayer`] builds.
#[derive(Clone, Debug)]
pub struct FenceService<S> {
    inner: S,
    layer: FenceLayer,
}

impl<S, B> Service<Request<B>> for FenceService<S>
where
    S: Service<Request<B>>,
    S::Response: Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        // Checked at the last moment before the request goes out, against the monotonic clock.
        let held = self.layer.fence.is_held();
        let (method, path) = (req.method(), req.uri().path());
        if !admits(method, path, held, self.layer.lease.as_ref()) {
            let refused = FencedRequest {
                method: method.clone(),
                path: path.to_owned(),
                source: Fenced,
            };
            tracing::debug!(error = %refused, "write refused; not leading");
            return Box::pin(std::future::ready(Err(BoxError::from(refused))));
        }
        let call = self.inner.call(req);
        Box::pin(async move { call.await.map_err(Into::into) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease() -> LeaseRef {
        LeaseRef {
            namespace: "ops".into(),
            name: "forgerunner".into(),
        }
    }

    const JOBS: &str = "/apis/batch/v1/namespaces/ci/jobs";
    const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/ops/leases";

    #[test]
    fn a_holder_may_do_anything() {
        for m in [
            Method::GET,
            Method::POST,
            Method::PUT,
            Method::PATCH,
            Method::DELETE,
        ] {
            assert!(admits(&m, JOBS, true, Some(&lease())), "{m}");
        }
    }

    #[test]
    fn without_the_fence_only_reads_and_the_own_lease_pass() {
        let l = lease();
        for m in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            assert!(!admits(&m, JOBS, false, Some(&l)), "{m} jobs");
            assert!(
                !admits(&m, "/api/v1/namespaces/ci/secrets/x", false, Some(&l)),
                "{m} secret"
            );
            assert!(
                !admits(&m, "/apis/events.k8s.io/v1/namespaces/ci/events", false, Some(&l)),
                "{m} event"
            );
        }
        assert!(admits(&Method::GET, JOBS, false, Some(&l)));
        assert!(admits(&Method::GET, &format!("{JOBS}?watch=true"), false, None));
        assert!(admits(&Method::POST, LEASES, false, Some(&l)), "create the lease");
        assert!(admits(
            &Method::PUT,
            &format!("{LEASES}/forgerunner"),
            false,
            Some(&l)
        ));
        assert!(admits(
            &Method::DELETE,
            &format!("{LEASES}/forgerunner"),
            false,
            Some(&l)
        ));
    }

    #[test]
    fn other_leases_are_fenced_like_anything_else() {
        let l = lease();
        assert!(!admits(&Method::PUT, &format!("{LEASES}/other"), false, Some(&l)));
        assert!(!admits(
            &Method::PUT,
            &format!("{LEASES}/forgerunner-x"),
            false,
            Some(&l)
        ));
        assert!(!admits(
            &Method::PUT,
            &format!("{LEASES}/forgerunner/x"),
            false,
            Some(&l)
        ));
        assert!(!admits(
            &Method::PUT,
            "/apis/coordination.k8s.io/v1/namespaces/ci/leases/forgerunner",
            false,
            Some(&l)
        ));
        assert!(
            !admits(&Method::POST, LEASES, false, None),
            "no lease without election"
        );
    }

    #[tokio::test]
    async fn the_service_refuses_before_calling_the_inner_service() {
        let fence = Fence::closed();
        let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = calls.clone();
        let inner = tower::service_fn(move |_req: Request<()>| {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async { Ok::<_, BoxError>(http::Response::new(())) }
        });
        let mut svc = FenceLayer::new(fence.clone(), Some(lease())).layer(inner);
        let post = || Request::post(JOBS).body(()).expect("request");
        let err = svc.call(post()).await.expect_err("refused");
        assert!(
            err.to_string()
                .contains("refusing POST /apis/batch/v1/namespaces/ci/jobs")
        );
        assert!(err.to_string().contains("does not hold the leader lease"));
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 0);
        fence.hold_until(tokio::time::Instant::now() + std::time::Duration::from_secs(60));
        svc.call(post()).await.expect("admitted while held");
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
