//! The runnable world of forgerunner's tests: the real operator (embedded, run as a child
//! process) against the testkit's fake API server, cluster simulator and forge fakes. The
//! sandbox and the benchmark are built on it, and so are the operator's end-to-end suites.
//!
//! Kept apart from `forgerunner-testkit` so that the core and forge test suites, which need only
//! the fakes, never build the operator binary.

pub mod bench;
pub mod chaos;
pub mod world;
