//! Test support for forgerunner, never shipped: a fake Kubernetes API server, a cluster
//! simulator whose runner pods really take work from the forge fakes, and the forge fakes.
//! It does not depend on the operator, so core and forge tests build without it; the
//! sandbox, the benchmark and the end-to-end world live in `forgerunner-sandbox`.

pub mod apiserver;
pub mod forge_common;
pub mod forgejo;
pub mod gitea;
pub mod github;
pub mod kubectl;
pub mod sim;
pub mod standalone;
