//! GitHub runner scale set backend.
