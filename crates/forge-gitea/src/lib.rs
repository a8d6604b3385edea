//! Gitea Actions backend.
