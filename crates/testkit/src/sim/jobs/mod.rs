//! The Job controller stand-in: pure decisions ([`logic`]), pod construction ([`podgen`]) and
//! the watch-driven controller loop.

pub(crate) mod controller;
pub(crate) mod events;
pub mod failure_policy;
pub mod logic;
pub mod podgen;
pub mod quota;
