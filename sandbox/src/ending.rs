//! [`Ending`]: how a guest's `_start` returned, as an outcome; what a
//! one-shot run and a kernel both report.

use super::request::Outcome;

/// The outcome-related part of a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ending {
    pub(crate) outcome: Outcome,
    pub(crate) exit_code: Option<i32>,
    pub(crate) trap_message: Option<String>,
}
