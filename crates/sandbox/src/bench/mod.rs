//! The benchmark: named scenarios against the real operator in its own process, each printing
//! one JSON object (see [`report::Report`] for the keys).

pub mod harness;
pub mod report;
pub mod scenarios;
pub mod stages;
