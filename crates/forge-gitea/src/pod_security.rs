//! What the Gitea runner image needs from its pod for the restricted Pod Security profile and
//! `containerMode: dind`: the profile Gitea's act_runner shares with its fork forgejo-runner
//! ([`forgerunner_http::act_runner`]). Gitea's runners have no `kubernetes` mode (validation
//! rejects it).

pub use forgerunner_http::act_runner::{PROFILE, RUN_AS, finish_pod};

#[cfg(test)]
mod tests;
