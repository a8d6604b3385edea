//! Cluster simulator: a Job controller and a kubelet stand-in, as ordinary kube-rs clients, on
//! top of the fake API server (or any API server).
//!
//! Start it with [`Simulator::start`], register [`ContainerBehaviour`]s by image prefix or by
//! name, and create Jobs through the API: pods appear, run the behaviour and finish, and the
//! Job gets the status Kubernetes would give it.

pub mod behaviour;
pub mod cache_server;
mod config;
pub mod env;
mod handle;
pub mod jobs;
mod kubelet;
pub mod network;
pub mod node_loss;
pub mod podstatus;
mod queue;
pub mod registry;
mod scheduling;
mod sources;
mod stores;

pub use behaviour::{ContainerBehaviour, PodInfo, PodScratch};
pub use cache_server::client::{CacheJournal, CacheOutcome, CacheResult, RunnerCache};
pub use cache_server::protocol::CacheServerStats;
pub use config::{NodeLoss, SimConfig, SimError, SimStats};
pub use handle::{SimHandle, Simulator};
pub use jobs::quota::{FAILED_CREATE_REASON, JOB_CONTROLLER_COMPONENT, POD_QUOTA_NAME};
pub use registry::{BEHAVIOUR_LABEL, BehaviourRegistry};
