//! forgerunner core: the `RunnerGroup` resource, the `Forge` and `ForgeSession` traits, the pure
//! planner and the generic reconcile pipeline. Knows nothing of HTTP or of any particular forge.

pub mod budget;
pub mod cache_server;
pub mod conditions;
pub mod crd;
pub mod docker_cache;
pub mod embedded;
pub mod error;
pub mod fence;
pub mod forge;
pub mod forge_hosts;
pub mod job_identity;
pub mod labels;
pub mod metrics;
pub mod names;
pub mod plan;
pub mod reconcile;
pub mod runner_class;
pub mod runner_job;
pub mod runner_pod;
pub mod runner_version;
pub mod schedule;
pub mod stable_hash;
pub mod startup;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod validate;
pub mod webhook;

pub use crd::{ForgeKind, RunnerGroup, RunnerGroupSpec, RunnerGroupStatus};
pub use error::ErrorCategory;
pub use fence::{Fence, Fenced};
pub use forge::{Forge, ForgeError, ForgeProfile, ForgeSession, GroupContext, GroupKey};
