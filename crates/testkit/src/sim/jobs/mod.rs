//! The Job controller stand-in: pure decisions ([`logic`]), pod construction ([`podgen`]) and
//! the watch-driven controller loop.

pub mod logic;
pub mod podgen;
