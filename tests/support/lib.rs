//! Shared test support for sandlog-tests.
