//! sandlog-projections (being built).
