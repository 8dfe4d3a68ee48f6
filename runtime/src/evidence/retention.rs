//! Legal holds, erasure and evidence retention.
//!
//! Erasing removes kept bytes (blobs) but never an event or a hash: the
//! chain and the Merkle tree still verify, and every reader of erased
//! content is told when, by whom and why it was erased. A held session is
//! never pruned, deleted or erased, and a blob a held session names is left
//! in place by every erasure and retention run.

use std::time::Duration;

use sandlog_core::event::{EvidenceErased, SessionHeld, SessionReleased};
use sandlog_core::human::format_duration;
use sandlog_core::{Event, Hash, NewEvent, SessionId, StreamId, WorkspacePath};
use sandlog_eventstore::{ExpectedVersion, UnitOfWork};
use sandlog_sqlite::evidence as refs;
use serde::Serialize;

use crate::engine::Engine;
use sandlog_host::error::{Result, RuntimeError};

/// Blobs named by one `evidence.erased` event; an erasure of more is
/// recorded in several events appended together, so each stays far under
/// the payload limit.
pub const ERASED_BLOBS_PER_EVENT_MAX: usize = 1_000;

/// Longest hold or erasure reason, bytes.
pub const REASON_BYTES_MAX: usize = 4 * 1024;

/// What an erasure did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EraseReport {
    /// Blobs whose bytes were erased.
    pub erased: u64,
    /// Their raw bytes.
    pub bytes: u64,
    /// Blobs left in place because a held session names them.
    pub kept_for_hold: u64,
    /// Whether the write-ahead log was emptied too (false when a reader
    /// kept it busy: the next checkpoint finishes it).
    pub wal_cleared: bool,
}

/// What `gc` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GcReport {
    /// Blobs no event names, removed.
    pub blobs_removed: u64,
    /// Bytes those freed (as stored).
    pub bytes_freed: u64,
    /// Blobs past the retention period whose bytes were erased.
    pub blobs_erased: u64,
    /// Their raw bytes.
    pub bytes_erased: u64,
    /// Whether the write-ahead log was emptied.
    pub wal_cleared: bool,
}

fn check_reason(reason: &str, what: &str) -> Result<()> {
    if reason.trim().is_empty() || reason.len() > REASON_BYTES_MAX {
        return Err(RuntimeError::Invalid(
            sandlog_core::CoreError::InvalidPayload {
                kind: what.to_owned(),
                schema: 0,
                reason: format!(
                    "give a reason of 1 to {REASON_BYTES_MAX} bytes (--reason TEXT): it is recorded in the log"
                ),
            },
        ));
    }
    Ok(())
}

impl Engine {
    /// Puts a session under a legal hold (`session hold`): it is never
    /// pruned, deleted or erased until released. Any session, whatever
    /// its status: the evidence of a deleted session can be held too.
    pub fn hold(&self, session_id: SessionId, reason: &str) -> Result<()> {
        check_reason(reason, "session.held")?;
        let session = self.session(session_id)?;
        let event = Event::SessionHeld(SessionHeld {
            reason: reason.to_owned(),
        });
        self.append_log(
            session_id.stream(),
            ExpectedVersion::Exact(session.version),
            &[self.event(&event)],
        )?;
        tracing::info!(target: "sandlog::lifecycle", event = "session.held", %session_id, "held");
        Ok(())
    }

    /// Lifts a legal hold (`session release`).
    pub fn release(&self, session_id: SessionId, reason: Option<&str>) -> Result<()> {
        if let Some(reason) = reason {
            check_reason(reason, "session.released")?;
        }
        let session = self.session(session_id)?;
        let event = Event::SessionReleased(SessionReleased {
            reason: reason.map(str::to_owned),
        });
        self.append_log(
            session_id.stream(),
            ExpectedVersion::Exact(session.version),
            &[self.event(&event)],
        )?;
        tracing::info!(target: "sandlog::lifecycle", event = "session.released", %session_id, "released");
        Ok(())
    }

    /// Refuses when the session is held.
    pub(crate) fn refuse_if_held(&self, session_id: SessionId) -> Result<()> {
        match self.session(session_id)?.held {
            Some(reason) => Err(RuntimeError::Held { session_id, reason }),
            None => Ok(()),
        }
    }

    /// Erases the kept bytes of a session (every blob its events name, or
    /// only the file contents at `path` and below) and records
    /// `evidence.erased` on its stream, in one transaction; then empties
    /// the write-ahead log so the bytes survive nowhere in the database's
    /// files. Blobs a held session also names are left and counted.
    pub fn erase(
        &self,
        session_id: SessionId,
        path: Option<&WorkspacePath>,
        reason: &str,
    ) -> Result<EraseReport> {
        check_reason(reason, "evidence.erased")?;
        self.refuse_if_held(session_id)?;
        let mut report = EraseReport::default();
        let mut wanted: Vec<Hash> = refs::session_refs(&self.store, session_id)?
            .into_iter()
            .filter(|blob| match path {
                None => true,
                Some(path) => blob.path.as_ref().is_some_and(|p| p.starts_with(path)),
            })
            .map(|blob| blob.hash)
            .collect();
        wanted.sort_unstable();
        wanted.dedup();
        self.write_log(|write| -> Result<()> {
            // Checked under the write lock: no hold can land meanwhile
            // (with a shared log, the replica first copies every hold
            // committed before the lock).
            self.sync()?;
            self.refuse_if_held(session_id)?;
            let version = self.session(session_id)?.version;
            let (erased, kept_for_hold, bytes) = self.erase_blobs(write, &wanted)?;
            report.erased = erased.len() as u64;
            report.kept_for_hold = kept_for_hold.len() as u64;
            report.bytes = bytes;
            let events = erasure_events(self, reason, path, &erased, &kept_for_hold, bytes);
            if !events.is_empty() {
                write.append(
                    session_id.stream(),
                    ExpectedVersion::Exact(version),
                    &events,
                )?;
            }
            Ok(())
        })?;
        report.wal_cleared = self.store.checkpoint_wal()?;
        tracing::info!(target: "sandlog::lifecycle", event = "evidence.erased", %session_id, blobs = report.erased, bytes = report.bytes, "evidence erased");
        Ok(report)
    }

    /// Erases each blob of `hashes` that no held session names; returns
    /// those erased, those kept for a hold, and the bytes erased.
    fn erase_blobs(
        &self,
        write: &mut dyn UnitOfWork,
        hashes: &[Hash],
    ) -> Result<(Vec<Hash>, Vec<Hash>, u64)> {
        let mut erased = Vec::new();
        let mut kept_for_hold = Vec::new();
        let mut bytes = 0u64;
        for hash in hashes {
            if !refs::held_sessions_naming(&self.store, hash)?.is_empty() {
                kept_for_hold.push(*hash);
                continue;
            }
            if let Some(blob) = write.erase_blob(hash)? {
                erased.push(*hash);
                bytes += blob.size;
            }
        }
        Ok((erased, kept_for_hold, bytes))
    }

    /// Removes blobs no event names (left by a crash of an older version,
    /// or stored alone by an embedder) and, with `evidence_older_than`,
    /// erases the bytes of evidence whose newest reference is older than
    /// that, except what held sessions name (`gc`). Retention erasures
    /// are recorded as `evidence.erased` on the `system` stream.
    pub fn gc(&self, evidence_older_than: Option<Duration>) -> Result<GcReport> {
        let mut report = GcReport::default();
        // What gc keeps is what the blob references name: a table that
        // lost rows would let it destroy kept evidence, so it must agree
        // with the log first.
        self.sync()?;
        if let Some(mismatch) = self.blob_refs_mismatch()? {
            return Err(RuntimeError::Projection(
                sandlog_projections::ProjectionError::Corrupt(format!(
                    "{mismatch}; gc removed nothing. Rebuild the read models (`sandlog rebuild`) and run it again"
                )),
            ));
        }
        let candidates: Vec<Hash> = self
            .backend()
            .blob_hashes()?
            .into_iter()
            .map(|(hash, _)| hash)
            .collect();
        self.write_log(|write| -> Result<()> {
            // Under the write lock no event can start naming a blob, so a
            // blob found unreferenced here stays so until it is removed.
            // With a shared log the lock is the shared log's: the replica,
            // where references are looked up, first copies every event
            // committed before it (other nodes' too).
            self.sync()?;
            for hash in &candidates {
                if refs::is_referenced(&self.store, hash)? {
                    continue;
                }
                if let Some(removed) = write.remove_blob(hash)? {
                    report.blobs_removed += 1;
                    report.bytes_freed += removed.stored_bytes;
                }
            }
            Ok(())
        })?;
        if let Some(age) = evidence_older_than {
            self.sync()?;
            let cutoff = self.options.clock.now().saturating_sub(age);
            let position = self.store.position_before(cutoff)?;
            let expired = refs::expired_blobs(&self.store, position)?;
            let reason = format!("retention: evidence older than {}", format_duration(age));
            self.write_log(|write| -> Result<()> {
                let (erased, kept_for_hold, bytes) = self.erase_blobs(write, &expired)?;
                report.blobs_erased = erased.len() as u64;
                report.bytes_erased = bytes;
                let events = erasure_events(self, &reason, None, &erased, &kept_for_hold, bytes);
                if !events.is_empty() {
                    write.append(StreamId::System, ExpectedVersion::Any, &events)?;
                }
                Ok(())
            })?;
        }
        report.wal_cleared = self.store.checkpoint_wal()?;
        Ok(report)
    }
}

/// The `evidence.erased` events recording an erasure, split so each names
/// at most [`ERASED_BLOBS_PER_EVENT_MAX`] blobs. None when nothing was
/// erased or kept.
fn erasure_events(
    engine: &Engine,
    reason: &str,
    path: Option<&WorkspacePath>,
    erased: &[Hash],
    kept_for_hold: &[Hash],
    bytes: u64,
) -> Vec<NewEvent> {
    if erased.is_empty() && kept_for_hold.is_empty() {
        return Vec::new();
    }
    let mut events = Vec::new();
    let mut erased_parts = erased.chunks(ERASED_BLOBS_PER_EVENT_MAX);
    let mut kept_parts = kept_for_hold.chunks(ERASED_BLOBS_PER_EVENT_MAX);
    let mut first = true;
    loop {
        let blobs = erased_parts.next();
        let kept = kept_parts.next();
        if blobs.is_none() && kept.is_none() && !first {
            break;
        }
        events.push(engine.event(&Event::EvidenceErased(EvidenceErased {
            reason: reason.to_owned(),
            path: path.cloned(),
            blobs: blobs.map(<[Hash]>::to_vec).unwrap_or_default(),
            // The total is on the first event only, so a sum over the
            // events is the erasure's.
            bytes: if first { bytes } else { 0 },
            kept_for_hold: kept.map(<[Hash]>::to_vec).unwrap_or_default(),
        })));
        first = false;
    }
    events
}
