//! Which events name which blobs: what `gc` keeps, what `erase` removes
//! and what a legal hold protects. The queries, over the read model's
//! `rm_blob_refs`, are each backend's (`sandlog_sqlite::evidence`).

use sandlog_core::event::Event;
use sandlog_core::{Envelope, Hash, Position, SessionId, StreamId, WorkspacePath};

/// The blobs `event` says were stored, as `(role, hash, path)`: the one
/// rule the read model's `rm_blob_refs` is written by and checked against.
pub fn named_blobs(event: &Event) -> Vec<(&'static str, Hash, Option<WorkspacePath>)> {
    match event {
        Event::SessionExecuted(executed) => {
            let mut named = vec![("code", executed.code_blake3, None)];
            if executed
                .evidence
                .is_some_and(|evidence| evidence.output_kept)
            {
                named.push(("stdout", executed.stdout_blake3, None));
                named.push(("stderr", executed.stderr_blake3, None));
            }
            named
        }
        Event::FileWritten(written) if written.content_stored() => {
            vec![("file", written.blake3, Some(written.path.clone()))]
        }
        _ => Vec::new(),
    }
}

/// A digest of a set of blob references, independent of where they come
/// from: the references in `(position, role, hash, path)` order, each
/// hashed as one line. Two sets are equal exactly when their digests are
/// (and so are their counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefsDigest {
    /// References.
    pub count: u64,
    /// blake3 over them in order.
    pub digest: Hash,
}

/// Builds a [`RefsDigest`] from references fed in `(position, role,
/// hash, path)` order.
#[derive(Debug, Default)]
pub struct RefsDigester {
    hasher: blake3::Hasher,
    count: u64,
}

impl RefsDigester {
    /// Adds one reference.
    pub fn add(
        &mut self,
        position: Position,
        session_id: SessionId,
        role: &str,
        hash: &Hash,
        path: Option<&str>,
    ) {
        self.count += 1;
        self.hasher.update(&position.0.to_be_bytes());
        self.hasher.update(session_id.to_string().as_bytes());
        self.hasher.update(role.as_bytes());
        self.hasher.update(&[0]);
        self.hasher.update(&hash.0);
        if let Some(path) = path {
            self.hasher.update(&[1]);
            self.hasher.update(path.as_bytes());
        }
        self.hasher.update(&[0xff]);
    }

    /// The digest of what was added.
    pub fn finish(&self) -> RefsDigest {
        RefsDigest {
            count: self.count,
            digest: Hash(*self.hasher.finalize().as_bytes()),
        }
    }
}

/// The references the log's events make, in digest order, for comparing
/// with [`stored_refs_digest`]. Undecodable events name nothing (as the
/// fold skips them).
pub fn log_refs_digest<E>(
    envelopes: impl Iterator<Item = std::result::Result<Envelope, E>>,
) -> std::result::Result<RefsDigest, E> {
    let mut digester = RefsDigester::default();
    for envelope in envelopes {
        let envelope = envelope?;
        let StreamId::Session(session_id) = envelope.stream else {
            continue;
        };
        let Ok(Some(event)) = envelope.event() else {
            continue;
        };
        let mut named = named_blobs(&event);
        named.sort_by(|a, b| {
            (a.0, a.1.0, a.2.as_ref().map(ToString::to_string)).cmp(&(
                b.0,
                b.1.0,
                b.2.as_ref().map(ToString::to_string),
            ))
        });
        for (role, hash, path) in named {
            digester.add(
                envelope.position,
                session_id,
                role,
                &hash,
                path.map(|path| path.to_string()).as_deref(),
            );
        }
    }
    Ok(digester.finish())
}

/// One event's reference to a blob whose bytes it says were stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobRef {
    /// The blob.
    pub hash: Hash,
    /// The session whose event names it.
    pub session_id: SessionId,
    /// The event.
    pub position: Position,
    /// `code`, `stdout`, `stderr` or `file`.
    pub role: String,
    /// The file's path, for `file`.
    pub path: Option<WorkspacePath>,
}
