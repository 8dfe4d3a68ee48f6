//! sandlog-eventstore (being built).
