//! Cluster simulator: a Job controller and a kubelet stand-in on top of the fake API server.

pub mod behaviour;
pub mod env;
pub mod jobs;
pub mod registry;
