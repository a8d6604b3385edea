//! Helpers shared by the operator's integration tests (each test binary includes this module
//! with `mod common;`, and allows dead code where it uses only part of it).

pub mod chart;
pub mod e2e;
pub mod gitea_world;
pub mod group;
pub mod leader;
pub mod scrape;
