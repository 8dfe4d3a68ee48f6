//! Plain types shared by several modules of the store, below all of them:
//! what an append expects of a stream and the head of the log.

use std::fmt;

use sandlog_core::{Hash, Position, StreamVersion, Timestamp};

/// What the caller believes about a stream's version before appending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpectedVersion {
    /// Append whatever the version.
    Any,
    /// The stream must not exist yet (creating a session).
    NoStream,
    /// The stream must exist and be exactly at this version.
    Exact(StreamVersion),
}

impl fmt::Display for ExpectedVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExpectedVersion::Any => f.write_str("any version"),
            ExpectedVersion::NoStream => f.write_str("no stream"),
            ExpectedVersion::Exact(version) => write!(f, "version {version}"),
        }
    }
}

/// The last event of the log: where the next append goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// Position of the last event ([`Position::ZERO`] when empty).
    pub position: Position,
    /// Its hash ([`Hash::GENESIS`] when empty).
    pub hash: Hash,
    /// When it was recorded (none when empty).
    pub recorded_at: Option<Timestamp>,
}
