//! A stateful fake Kubernetes API server on loopback.
