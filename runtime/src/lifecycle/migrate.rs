//! `sandlog migrate`: a root's log copied, verbatim and checked, from
//! SQLite to PostgreSQL or back (see `sandlog_eventstore::import`).
//!
//! The copy keeps every event's position, ids, time and hashes, so the
//! head hash and the Merkle root are the same on both sides; both sides
//! are then verified (the chain end to end, and the Merkle root at the
//! head's size) and compared. A SQLite file made this way has the root's
//! genesis event, so it satisfies the root's anchor and can replace the
//! root's `sandlog.db` (the read models are folded again on the next open).

use std::path::PathBuf;

use sandlog_core::merkle::MerkleHash;
use sandlog_core::{Hash, Position};
use sandlog_eventstore::{Portable, VerifyReport, copy_log};
use sandlog_sqlite::{EventStore, OpenOptions};

use sandlog_host::error::{Result, RuntimeError};

/// Where a log lives, as named on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogLocation {
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL database: a `postgres://` or `postgresql://` URL or a
    /// `key=value` connection string.
    Postgres(String),
}

impl LogLocation {
    /// Reads `text`: a PostgreSQL URL or connection string (`host=… dbname=…`),
    /// otherwise a path to a SQLite file.
    pub fn parse(text: &str) -> LogLocation {
        let is_url = text.starts_with("postgres://") || text.starts_with("postgresql://");
        // A connection string is words of `key=value` with plain keys; a
        // path with `=` in a file name can be written `./name=…`.
        let is_conninfo = text.contains('=')
            && text.split_whitespace().all(|word| {
                word.split_once('=').is_some_and(|(key, _)| {
                    !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                })
            });
        if is_url || is_conninfo {
            LogLocation::Postgres(text.to_owned())
        } else {
            LogLocation::Sqlite(PathBuf::from(text))
        }
    }

    /// The location in messages, without a password.
    pub fn describe(&self) -> String {
        match self {
            LogLocation::Sqlite(path) => path.display().to_string(),
            LogLocation::Postgres(url) => redact(url),
        }
    }
}

/// `url` with any password replaced by `***`.
fn redact(url: &str) -> String {
    if let Some(rest) = url
        .strip_prefix("postgres://")
        .or_else(|| url.strip_prefix("postgresql://"))
    {
        let scheme = &url[..url.len() - rest.len()];
        if let Some((credentials, host)) = rest.split_once('@')
            && let Some((user, _)) = credentials.split_once(':')
        {
            return format!("{scheme}{user}:***@{host}");
        }
        return url.to_owned();
    }
    url.split_whitespace()
        .map(|word| match word.split_once('=') {
            Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
            _ => word.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// One side of a migration, after the copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SideReport {
    /// Where it is (without a password).
    pub location: String,
    /// Events (the chain walked end to end).
    pub events: u64,
    /// The head's hash.
    pub head: Hash,
    /// The Merkle root at the head's size.
    pub root: MerkleHash,
}

/// What [`migrate`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrateReport {
    /// The source, verified after the copy.
    pub from: SideReport,
    /// The destination, verified after the copy.
    pub to: SideReport,
    /// The head's position.
    pub head_position: Position,
    /// Blobs copied (kept and erased).
    pub blobs: u64,
    /// Of those, erased (copied as erased).
    pub erased_blobs: u64,
    /// Blob chunks copied.
    pub chunks: u64,
    /// Signed checkpoints copied.
    pub checkpoints: u64,
}

fn open(location: &LogLocation, create: bool) -> Result<Box<dyn Portable>> {
    match location {
        LogLocation::Sqlite(path) => {
            if !create && !path.is_file() {
                return Err(RuntimeError::BadLocation {
                    location: path.display().to_string(),
                    reason: "no SQLite database there: give the path of an existing log".into(),
                });
            }
            let options = OpenOptions {
                create,
                ..OpenOptions::default()
            };
            Ok(Box::new(EventStore::open(path, options)?))
        }
        #[cfg(feature = "postgres")]
        LogLocation::Postgres(url) => {
            match sandlog_postgres::PgEventStore::connect(url) {
                Ok(store) => Ok(Box::new(store)),
                // Say which server: the client's message does not.
                Err(sandlog_eventstore::EventStoreError::Io { context, source }) => Err(
                    RuntimeError::Store(sandlog_eventstore::EventStoreError::Io {
                        context: format!("{} ({context})", redact(url)),
                        source,
                    }),
                ),
                Err(error) => Err(error.into()),
            }
        }
        #[cfg(not(feature = "postgres"))]
        LogLocation::Postgres(url) => Err(RuntimeError::BadLocation {
            location: redact(url),
            reason: "this build has no PostgreSQL support (sandlog-runtime's `postgres` feature)"
                .into(),
        }),
    }
}

fn side(location: &LogLocation, store: &dyn Portable) -> Result<(SideReport, VerifyReport)> {
    let verified = store.verify(None)?;
    let root = store.merkle_root(verified.events)?;
    Ok((
        SideReport {
            location: location.describe(),
            events: verified.events,
            head: verified.head_hash,
            root,
        },
        verified,
    ))
}

/// Copies the log at `from` into the new, empty store at `to` (see
/// `sandlog_eventstore::import`), then verifies both: the chain of each,
/// and that both have the same number of events, head hash and Merkle
/// root. `progress` is called with the events copied so far.
///
/// A SQLite destination is created if missing; an existing file must be
/// an empty sandlog database.
///
/// Errors: the destination not empty (nothing written), the source's
/// chain broken (names the first bad position), either side failing
/// verification, or the two sides disagreeing
/// ([`RuntimeError::NotConsistent`]: an integrity failure).
pub fn migrate(
    from: &LogLocation,
    to: &LogLocation,
    progress: &mut dyn FnMut(u64),
) -> Result<MigrateReport> {
    let source = open(from, false)?;
    let destination = open(to, true)?;
    let copied = copy_log(source.as_ref(), destination.as_ref(), progress)?;
    let (from_side, _) = side(from, source.as_ref())?;
    let (to_side, _) = side(to, destination.as_ref())?;
    let disagree = |reason: String| RuntimeError::NotConsistent {
        checkpoint_size: from_side.events,
        log_size: to_side.events,
        reason,
    };
    if from_side.events != copied.events || to_side.events != copied.events {
        return Err(disagree(format!(
            "{} events were copied, but the source holds {} and the destination {}",
            copied.events, from_side.events, to_side.events
        )));
    }
    if from_side.head != to_side.head {
        return Err(disagree(format!(
            "the head hashes differ: source {}, destination {}",
            from_side.head, to_side.head
        )));
    }
    if from_side.root != to_side.root {
        return Err(disagree(format!(
            "the Merkle roots differ: source {}, destination {}",
            from_side.root, to_side.root
        )));
    }
    Ok(MigrateReport {
        from: from_side,
        to: to_side,
        head_position: copied.head,
        blobs: copied.blobs,
        erased_blobs: copied.erased_blobs,
        chunks: copied.chunks,
        checkpoints: copied.checkpoints,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_are_told_apart() {
        assert_eq!(
            LogLocation::parse("postgres://u:p@h/db"),
            LogLocation::Postgres("postgres://u:p@h/db".into())
        );
        assert_eq!(
            LogLocation::parse("host=/tmp dbname=x"),
            LogLocation::Postgres("host=/tmp dbname=x".into())
        );
        assert_eq!(
            LogLocation::parse("out/sandlog.db"),
            LogLocation::Sqlite(PathBuf::from("out/sandlog.db"))
        );
        assert_eq!(
            LogLocation::parse("a=b.db"),
            LogLocation::Postgres("a=b.db".into())
        );
        assert_eq!(
            LogLocation::parse("./a=b.db"),
            LogLocation::Sqlite(PathBuf::from("./a=b.db"))
        );
    }

    #[test]
    fn passwords_are_not_shown() {
        assert_eq!(redact("postgres://u:secret@h/db"), "postgres://u:***@h/db");
        assert_eq!(
            redact("host=h password=secret dbname=d"),
            "host=h password=*** dbname=d"
        );
    }
}
