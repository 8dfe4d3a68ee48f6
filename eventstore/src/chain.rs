//! What a verification of the hash chain reports, and digests: a pinned
//! head a user keeps somewhere the database's writer cannot reach. Each
//! backend walks its own rows.

use std::fmt;
use std::str::FromStr;

use sandlog_core::{CoreError, Hash, Position};

/// A pinned head: "the log had `position` events and its last hash was
/// `hash`". Store it outside the database (a ticket, a WORM bucket, a
/// printout); `sandlog_sqlite::EventStore::verify_against` then proves the log still
/// extends it. A chain alone cannot prove that: whoever can write the file
/// can recompute every hash after a rewrite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Digest {
    /// The position pinned.
    pub position: Position,
    /// The hash of the event at that position.
    pub hash: Hash,
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.position, self.hash)
    }
}

impl FromStr for Digest {
    type Err = CoreError;

    /// Parses `POS:HASH`, as printed by `sandlog digest`.
    fn from_str(input: &str) -> std::result::Result<Self, Self::Err> {
        let invalid = || CoreError::InvalidHash {
            input: input.to_owned(),
        };
        let (position, hash) = input.split_once(':').ok_or_else(invalid)?;
        let position = position.trim().parse::<u64>().map_err(|_| invalid())?;
        Ok(Digest {
            position: Position(position),
            hash: Hash::from_hex(hash)?,
        })
    }
}

/// What a successful verification covered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifyReport {
    /// Events checked.
    pub events: u64,
    /// The head position.
    pub head: Position,
    /// The head hash.
    pub head_hash: Hash,
}
