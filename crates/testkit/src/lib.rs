//! Test support for forgerunner, never shipped: a fake Kubernetes API server, a cluster
//! simulator whose runner pods really take work from the forge fakes, and the forge fakes.

pub mod apiserver;
pub mod bench;
pub mod gitea;
pub mod github;
pub mod sim;
pub mod world;
