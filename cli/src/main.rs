//! The sandlog admin CLI (being built).
fn main() {}
