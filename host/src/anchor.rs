//! The root anchor: `<root>/sandlog.anchor`, a small file outside the
//! database that says this root has a log (its id and the hash of its
//! genesis event), so a deleted, emptied or replaced `sandlog.db` is an
//! integrity failure instead of a silently recreated, empty log.
//!
//! Life of an anchor:
//! * `Engine::init` writes it with the root's id and no genesis hash yet
//!   (the genesis event is appended by the first open, on the opener's
//!   clock, so `recorded_at` stays on the embedder's time line).
//! * The first open appends `root.initialized` (the root id as payload and
//!   as event id, so two concurrent first opens append it once) and
//!   rewrites the anchor with that event's hash.
//! * Every open checks that `sandlog.db` exists, is non-empty and that its
//!   event at position 1 has the anchor's genesis hash.
//! * A root made before anchors existed (a database, no anchor) gets one
//!   written from its database.
//! * `Engine::reset_log` is the operator's explicit way out: the old anchor
//!   is kept as `sandlog.anchor.replaced-<time>` and the current database
//!   (or a new one) becomes the root's log.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use sandlog_core::{EventId, Hash, NewEvent, Position, StreamId, Timestamp};
use sandlog_eventstore::{Backend, EventStoreError, ExpectedVersion, LogFilter};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::{Result, RuntimeError};
use crate::workspace::fsync_dir;

/// The anchor file under the root.
pub const ANCHOR_FILE: &str = "sandlog.anchor";

/// Prefix of an anchor set aside by `reset_log` (`-<time>` follows).
pub const ANCHOR_REPLACED_PREFIX: &str = "sandlog.anchor.replaced-";

/// Kind of the genesis event, in the `system` stream.
pub const ROOT_INITIALIZED_KIND: &str = "root.initialized";

/// The anchor's format version; an anchor of another version is refused.
pub const ANCHOR_FORMAT: u32 = 1;

/// Largest anchor file read, bytes. A real anchor is about 200 bytes; a
/// larger file is not ours and is refused rather than read into memory.
pub const ANCHOR_BYTES_MAX: u64 = 4096;

/// What the anchor file holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Anchor {
    /// [`ANCHOR_FORMAT`].
    pub format: u32,
    /// The root's id (also the genesis event's id and payload).
    pub root_id: Uuid,
    /// Hex hash of the event at position 1; `None` until the first open
    /// appends it.
    pub genesis_hash: Option<String>,
    /// When the anchor was first written (RFC 3339).
    pub created_at: String,
    /// For a node of a shared log: that log's name (a database name, never
    /// credentials). Its root's SQLite file is a replica, opened only with
    /// the shared log; `None` for a root that keeps its own log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_log: Option<String>,
}

/// The genesis event's payload.
#[derive(Debug, Serialize, Deserialize)]
struct RootInitialized {
    root_id: Uuid,
}

/// The anchor's path under `root`.
pub fn path(root: &Path) -> PathBuf {
    root.join(ANCHOR_FILE)
}

/// Whether something (anything, even a dangling symlink) is at the
/// anchor's path.
pub fn exists(root: &Path) -> bool {
    std::fs::symlink_metadata(path(root)).is_ok()
}

/// Reads the anchor; `None` if there is none. Anything at the path that is
/// not a regular file holding a valid anchor is an integrity error.
pub fn read(root: &Path) -> Result<Option<Anchor>> {
    let path = path(root);
    let unreadable = |reason: String| RuntimeError::AnchorUnreadable {
        path: path.clone(),
        reason,
    };
    let metadata = match std::fs::symlink_metadata(&path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(unreadable(error.to_string())),
    };
    if !metadata.file_type().is_file() {
        return Err(unreadable("not a regular file".into()));
    }
    if metadata.len() > ANCHOR_BYTES_MAX {
        return Err(unreadable(format!(
            "{} bytes; an anchor is at most {ANCHOR_BYTES_MAX}",
            metadata.len()
        )));
    }
    let mut text = Vec::new();
    std::fs::File::open(&path)
        .and_then(|file| file.take(ANCHOR_BYTES_MAX).read_to_end(&mut text))
        .map_err(|error| unreadable(error.to_string()))?;
    let anchor: Anchor =
        serde_json::from_slice(&text).map_err(|error| unreadable(error.to_string()))?;
    if anchor.format != ANCHOR_FORMAT {
        return Err(unreadable(format!(
            "format {} (this sandlog reads format {ANCHOR_FORMAT})",
            anchor.format
        )));
    }
    if let Some(hash) = &anchor.genesis_hash {
        Hash::from_hex(hash).map_err(|error| unreadable(format!("genesis_hash: {error}")))?;
    }
    Ok(Some(anchor))
}

/// Writes the anchor atomically: a temporary file (created new, never
/// through a symlink), fsynced, renamed over the anchor, directory fsynced.
pub fn write(root: &Path, anchor: &Anchor) -> Result<()> {
    let target = path(root);
    let temporary = root.join(format!("{ANCHOR_FILE}.tmp-{}", Uuid::new_v4()));
    let text = serde_json::to_vec_pretty(anchor).map_err(|error| RuntimeError::Io {
        context: "encoding the anchor".into(),
        source: std::io::Error::other(error),
    })?;
    let result = (|| -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temporary)?;
        file.write_all(&text)?;
        file.write_all(b"\n")?;
        file.sync_all()?;
        std::fs::rename(&temporary, &target)?;
        fsync_dir(root)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    result.map_err(RuntimeError::io(format!("writing {}", target.display())))
}

/// A new anchor with no genesis yet.
pub fn new_anchor(now: Timestamp) -> Anchor {
    Anchor {
        format: ANCHOR_FORMAT,
        root_id: Uuid::new_v4(),
        genesis_hash: None,
        created_at: now.to_string(),
        shared_log: None,
    }
}

/// Whether the database file is there and not empty (a zero-byte file is
/// what an emptied database looks like; SQLite would silently make it a
/// new one).
pub fn database_present(database: &Path) -> bool {
    std::fs::metadata(database).is_ok_and(|metadata| metadata.len() > 0)
}

/// The error for a database that is gone while the anchor says there was a
/// log.
pub fn log_missing(root: &Path, anchor: &Anchor, reason: impl Into<String>) -> RuntimeError {
    RuntimeError::LogMissing {
        root: root.to_owned(),
        reason: reason.into(),
        root_id: anchor.root_id.to_string(),
        genesis: anchor
            .genesis_hash
            .clone()
            .unwrap_or_else(|| "not yet appended".to_owned()),
    }
}

/// Checks the opened log against the anchor, appending the genesis event
/// and completing the anchor when this is the root's first open, or
/// writing an anchor for a root made before anchors existed.
pub fn check(
    root: &Path,
    store: &dyn Backend,
    anchor: Option<Anchor>,
    now: Timestamp,
    actor: &str,
) -> Result<()> {
    let first = first_event(store)?;
    match anchor {
        Some(anchor) => {
            let Some(first) = first else {
                if anchor.genesis_hash.is_some() {
                    // The root's own file, or a shared database.
                    let reason = if store.name().ends_with(crate::layout::DATABASE_FILE) {
                        "sandlog.db has no events".to_owned()
                    } else {
                        format!("the shared log ({}) has no events", store.name())
                    };
                    return Err(log_missing(root, &anchor, &reason));
                }
                return append_genesis(root, store, anchor, actor);
            };
            match &anchor.genesis_hash {
                Some(expected) if *expected == first.hash.to_hex() => Ok(()),
                Some(_) => Err(mismatch(root, &anchor, &first.hash)),
                None if genesis_root_id(&first) == Some(anchor.root_id) => {
                    // A first open that appended the genesis event and
                    // stopped before completing the anchor.
                    write(
                        root,
                        &Anchor {
                            genesis_hash: Some(first.hash.to_hex()),
                            ..anchor
                        },
                    )
                }
                None => Err(mismatch(root, &anchor, &first.hash)),
            }
        }
        None => {
            let first = match first {
                Some(first) => first,
                None => match append_genesis(root, store, new_anchor(now), actor) {
                    // Another root's first open appended the genesis of a
                    // shared log first: this root joins that log.
                    Err(
                        conflict @ RuntimeError::Store(EventStoreError::VersionConflict { .. }),
                    ) => match first_event(store)? {
                        Some(first) => first,
                        None => return Err(conflict),
                    },
                    other => return other,
                },
            };
            let anchor = Anchor {
                root_id: genesis_root_id(&first).unwrap_or_else(Uuid::new_v4),
                genesis_hash: Some(first.hash.to_hex()),
                ..new_anchor(now)
            };
            tracing::info!(root_id = %anchor.root_id, "writing the anchor of a root made before anchors");
            write(root, &anchor)
        }
    }
}

fn mismatch(root: &Path, anchor: &Anchor, found: &Hash) -> RuntimeError {
    RuntimeError::AnchorMismatch {
        root: root.to_owned(),
        found: found.to_hex(),
        root_id: anchor.root_id.to_string(),
        genesis: anchor
            .genesis_hash
            .clone()
            .unwrap_or_else(|| "not yet appended".to_owned()),
    }
}

fn genesis_root_id(first: &sandlog_core::Envelope) -> Option<Uuid> {
    if first.kind != ROOT_INITIALIZED_KIND {
        return None;
    }
    serde_json::from_slice::<RootInitialized>(&first.payload)
        .ok()
        .map(|payload| payload.root_id)
}

/// The log's first event, if any.
fn first_event(store: &dyn Backend) -> Result<Option<sandlog_core::Envelope>> {
    let first = store.query_page(&LogFilter {
        from: Some(Position(1)),
        limit: Some(1),
        ..LogFilter::default()
    })?;
    Ok(first.into_iter().next())
}

fn append_genesis(root: &Path, store: &dyn Backend, anchor: Anchor, actor: &str) -> Result<()> {
    let payload = serde_json::to_vec(&RootInitialized {
        root_id: anchor.root_id,
    })
    .map_err(|error| RuntimeError::Io {
        context: "encoding root.initialized".into(),
        source: std::io::Error::other(error),
    })?;
    let event = NewEvent {
        // The root id as event id: a concurrent first open's append is a
        // retry of this one, not a second genesis.
        event_id: EventId(anchor.root_id),
        kind: ROOT_INITIALIZED_KIND.to_owned(),
        schema: 1,
        actor: actor.to_owned(),
        correlation_id: None,
        causation_id: None,
        payload,
    };
    let stored = store.append(StreamId::System, ExpectedVersion::NoStream, &[event])?;
    let genesis = stored
        .first()
        .filter(|envelope| envelope.position == Position(1))
        .map(|envelope| envelope.hash.to_hex());
    let Some(genesis) = genesis else {
        // Another event got to position 1 first: the log is not this
        // anchor's.
        let found = first_event(store)?.map(|first| first.hash);
        return Err(mismatch(root, &anchor, &found.unwrap_or(Hash::GENESIS)));
    };
    write(
        root,
        &Anchor {
            genesis_hash: Some(genesis),
            ..anchor
        },
    )
}

/// Sets the anchor aside as `sandlog.anchor.replaced-<time>`; returns the
/// new name (`None` if there was no anchor).
pub fn set_aside(root: &Path, now: Timestamp) -> Result<Option<PathBuf>> {
    if !exists(root) {
        return Ok(None);
    }
    let stamp = now.to_string().replace(':', "-");
    let aside = root.join(format!("{ANCHOR_REPLACED_PREFIX}{stamp}"));
    std::fs::rename(path(root), &aside).map_err(RuntimeError::io(format!(
        "setting aside {}",
        path(root).display()
    )))?;
    fsync_dir(root).map_err(RuntimeError::io(format!("syncing {}", root.display())))?;
    Ok(Some(aside))
}
