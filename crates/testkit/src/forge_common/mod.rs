//! Pieces the forge fakes (Gitea, Forgejo) share because the real forges share them: Forgejo is
//! a Gitea fork, so the REST paging, token header, connect-JSON runner RPC framing and the fault
//! middleware are the same in both.

pub mod faults;
pub mod http;
pub mod rpc;

pub use faults::{Fault, LoggedRequest};
pub use rpc::Conclusion;
