//! Verification for operators: the hash chain (optionally against a stored
//! digest) and the read models against a fold of the whole log (A1).

use sandlog_eventstore::Digest;
use sandlog_projections::{State, apply};
use sandlog_sqlite::query::{self, StoreStats};
use serde::Serialize;

use crate::engine::Engine;
use sandlog_host::error::Result;

/// What `verify` found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerifyOutcome {
    /// Whether everything checked out.
    pub ok: bool,
    /// Events checked.
    pub events: u64,
    /// The head hash.
    pub head: String,
    /// The head position.
    pub position: u64,
    /// Whether a digest was checked.
    pub digest_checked: bool,
    /// Differences between the read models and a fold of the log (empty
    /// when they agree). A difference means the read models were changed
    /// outside sandlog or by a bug; `sandlog` rebuilds them on request.
    pub read_model_mismatches: Vec<String>,
    /// Blobs named by events as stored whose bytes are neither stored nor
    /// erased (a damaged or tampered database); empty when all are there.
    pub missing_blobs: Vec<String>,
}

/// Most read-model differences listed; the rest are counted.
const MISMATCHES_LISTED_MAX: usize = 20;

impl Engine {
    /// Verifies the chain (and the digest, if given), then compares the
    /// read models with a fresh in-memory fold of the log. A broken chain
    /// is an `Err` naming the first bad position.
    pub fn verify(&self, digest: Option<Digest>, progress: &dyn Fn(u64)) -> Result<VerifyOutcome> {
        let outcome = self.verify_unmetered(digest, progress);
        self.metrics.verify_run(match &outcome {
            Ok(outcome) if outcome.ok => "ok",
            Ok(_) => "mismatch",
            Err(error) if error.is_integrity() => "broken",
            Err(_) => "error",
        });
        outcome
    }

    fn verify_unmetered(
        &self,
        digest: Option<Digest>,
        progress: &dyn Fn(u64),
    ) -> Result<VerifyOutcome> {
        self.sync()?;
        let report = self.store.verify_with_progress(digest, progress)?;
        let mut mismatches = Vec::new();
        if let Some(shared) = &self.shared {
            // The shared log is walked too, and must hold the replica's
            // head at its position (other nodes may have appended since).
            shared.verify(digest)?;
            let at_head = shared.query_page(&sandlog_eventstore::LogFilter {
                from: Some(report.head),
                limit: Some(1),
                ..sandlog_eventstore::LogFilter::default()
            })?;
            let same = report.head == sandlog_core::Position::ZERO
                || at_head.first().is_some_and(|envelope| {
                    envelope.position == report.head && envelope.hash == report.head_hash
                });
            if !same {
                mismatches.push(format!(
                    "the shared log does not hold this node's head (position {}) with the same hash",
                    report.head
                ));
            }
        }
        let mut folded = State::default();
        for envelope in self.store.read_all_after(sandlog_core::Position::ZERO) {
            apply(&mut folded, &envelope?);
        }
        let stored = query::all_sessions_with_files(&self.store)?;
        for (session_id, expected) in &folded.sessions {
            match stored.get(session_id) {
                None => {
                    mismatches.push(format!("session {session_id}: missing from the read model"))
                }
                Some(actual) if actual != expected => mismatches.push(format!(
                    "session {session_id}: read model differs from the log"
                )),
                Some(_) => {}
            }
        }
        for session_id in stored.keys() {
            if !folded.sessions.contains_key(session_id) {
                mismatches.push(format!(
                    "session {session_id}: in the read model but not in the log"
                ));
            }
        }
        let stats: StoreStats = query::stats(&self.store)?;
        if stats.cleanup != folded.stats {
            mismatches.push("cleanup statistics differ from the log".to_owned());
        }
        if let Some(mismatch) = self.blob_refs_mismatch()? {
            mismatches.push(mismatch);
        }
        let mut missing_blobs = Vec::new();
        for hash in sandlog_sqlite::evidence::referenced_blobs(&self.store)? {
            if self.backend().blob_state(&hash)? == sandlog_eventstore::BlobState::Missing {
                missing_blobs.push(hash.to_hex());
            }
        }
        if missing_blobs.len() > MISMATCHES_LISTED_MAX {
            let more = missing_blobs.len() - MISMATCHES_LISTED_MAX;
            missing_blobs.truncate(MISMATCHES_LISTED_MAX);
            missing_blobs.push(format!("… and {more} more"));
        }
        if mismatches.len() > MISMATCHES_LISTED_MAX {
            let more = mismatches.len() - MISMATCHES_LISTED_MAX;
            mismatches.truncate(MISMATCHES_LISTED_MAX);
            mismatches.push(format!("… and {more} more"));
        }
        Ok(VerifyOutcome {
            ok: mismatches.is_empty() && missing_blobs.is_empty(),
            events: report.events,
            head: report.head_hash.to_hex(),
            position: report.head.0,
            digest_checked: digest.is_some(),
            read_model_mismatches: mismatches,
            missing_blobs,
        })
    }

    /// Whether the read model's blob references (what `gc` keeps, what
    /// `erase` and a hold act on) are exactly those the log's events make;
    /// `Some` says how they differ. One streaming pass over the log and
    /// one over the table, in bounded memory.
    pub(crate) fn blob_refs_mismatch(&self) -> Result<Option<String>> {
        let from_log = sandlog_projections::evidence::log_refs_digest(
            self.store.read_all_after(sandlog_core::Position::ZERO),
        )?;
        let stored = sandlog_sqlite::evidence::stored_refs_digest(&self.store)?;
        Ok((from_log != stored).then(|| {
            format!(
                "blob references differ from the log: the read model holds {}, the log's events make {}",
                stored.count, from_log.count
            )
        }))
    }

    /// Drops and rebuilds the read models from the log.
    pub fn rebuild_read_models(&self) -> Result<u64> {
        Ok(sandlog_sqlite::rebuild(&self.store)?)
    }
}
