//! The seam to core's generic controller; the rest of the binary imports it from here only.

pub use forgerunner_core::reconcile::{ControllerError, ControllerOptions, ForgeSet, run_controller};
