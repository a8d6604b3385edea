//! Pieces the forge fakes (Gitea, Forgejo) share because the real forges share them: Forgejo is
//! a Gitea fork, so the REST paging, token header, connect-JSON runner RPC framing and the fault
//! middleware are the same in both. The GitHub fakes use the HTTP plumbing too, and their fronts
//! before the `scaleset` emulator forward through [`forward`]. All three fakes answer to one
//! trait, [`FakeForgeServer`], so a world built on them is generic over forges.

pub mod fake_server;
pub mod faults;
pub mod forward;
pub mod http;
pub mod rpc;

pub use fake_server::{FakeForgeServer, JobPhase, PoolJob, PoolRunner, PoolSnapshot};
pub use faults::{Fault, LoggedRequest};
pub use rpc::Conclusion;
