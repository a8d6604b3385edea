//! What the Forgejo runner image needs from its pod for the restricted Pod Security profile and
//! `containerMode: dind`: the profile forgejo-runner shares with Gitea's act_runner, which it
//! was forked from ([`forgerunner_http::act_runner`]). Forgejo's runners have no `kubernetes`
//! mode (validation rejects it).

pub use forgerunner_http::act_runner::{PROFILE, RUN_AS, finish_pod};

#[cfg(test)]
mod tests;
