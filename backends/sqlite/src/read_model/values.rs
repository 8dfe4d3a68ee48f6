//! How stored read-model values are encoded and read back: the leaf both
//! the session row and the other rows use.

use sandlog_core::event::ReadonlyDir;
use sandlog_projections::error::{ProjectionError, Result};

/// The `readonly` column: NULL for none, else a JSON array.
pub(crate) fn encode_readonly(readonly: &[ReadonlyDir]) -> Result<Option<String>> {
    if readonly.is_empty() {
        return Ok(None);
    }
    serde_json::to_string(readonly)
        .map(Some)
        .map_err(|error| corrupt(error.to_string()))
}

/// Reads the `readonly` column back.
pub(crate) fn decode_readonly(text: Option<&str>) -> serde_json::Result<Vec<ReadonlyDir>> {
    match text {
        None => Ok(Vec::new()),
        Some(text) => serde_json::from_str(text),
    }
}

pub(crate) fn corrupt(what: impl Into<String>) -> ProjectionError {
    ProjectionError::Corrupt(what.into())
}

pub(crate) fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A stored count, size or position: a negative one is damage, named by
/// its column, never read as zero.
pub(crate) fn stored_u64(value: i64, column: &str) -> Result<u64> {
    u64::try_from(value).map_err(|_| corrupt(format!("{column} holds {value}")))
}
