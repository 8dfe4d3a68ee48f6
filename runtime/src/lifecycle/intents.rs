//! Deleting a session and finishing intents: the second phase of a prune
//! or delete (removal, then completion), pending intents finished on open
//! or by `reconcile`, and failures recorded once.

use std::time::Duration;

use sandlog_core::event::{
    Event, SessionDeleteRequested, SessionDeleted, SessionIntentFailed, SessionPruneFailed,
    SessionPruned,
};
use sandlog_core::{SessionId, StreamVersion};
use sandlog_eventstore::{EventStoreError, ExpectedVersion, LogFilter};
use sandlog_projections::SessionStatus;
use sandlog_sqlite::query;
use uuid::Uuid;

use crate::engine::Engine;
use sandlog_host::error::{Result, RuntimeError};
use sandlog_host::lease::{DELETE_WAIT_DEFAULT, Lease, LeaseMode};

use super::*;

impl Engine {
    /// Deletes a session (S6): intent, removal, completion. Waits up to
    /// [`DELETE_WAIT_DEFAULT`] for a running execution or write to finish.
    pub fn delete_session(&self, session_id: SessionId, reason: &str) -> Result<DeleteReport> {
        self.delete_session_waiting(session_id, reason, DELETE_WAIT_DEFAULT)
    }

    /// Deletes a session, waiting up to `wait` (zero: not at all) for the
    /// session's lease; still held then, fails with [`RuntimeError::Busy`]
    /// and changes nothing. A removal that fails is recorded once as
    /// `session.intent.failed`; the intent stays pending for `reconcile`.
    pub fn delete_session_waiting(
        &self,
        session_id: SessionId,
        reason: &str,
        wait: Duration,
    ) -> Result<DeleteReport> {
        let lock = self.lock_session(session_id);
        let _guard = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // Checked before the lease so that an unknown or finished session
        // never gets a lease file; read again under the lease.
        let session = self.session(session_id)?;
        self.check_own(session_id, session.node.as_deref())?;
        if !session.status.has_workspace() {
            return Err(RuntimeError::SessionNotActive {
                session_id,
                status: session.status,
            });
        }
        if let Some(reason) = session.held {
            return Err(RuntimeError::Held { session_id, reason });
        }
        let lease =
            Lease::acquire_or_busy(&self.layout.root, session_id, LeaseMode::Exclusive, wait)?;
        let session = self.session(session_id)?;
        // The completion names the intent as its cause.
        let (version, intent_id) = match session.status {
            SessionStatus::Active => {
                let intent = self.event(&Event::SessionDeleteRequested(SessionDeleteRequested {
                    reason: reason.to_owned(),
                }));
                let intent_id = intent.event_id.0;
                self.append_log(
                    session_id.stream(),
                    ExpectedVersion::Exact(session.version),
                    std::slice::from_ref(&intent),
                )
                .map_err(|error| match error {
                    EventStoreError::VersionConflict { .. } => RuntimeError::Conflict(session_id),
                    other => other.into(),
                })?;
                (session.version.next(), Some(intent_id))
            }
            SessionStatus::Deleting => (
                session.version,
                self.pending_intent(session_id)?.map(|intent| intent.0),
            ),
            status => return Err(RuntimeError::SessionNotActive { session_id, status }),
        };
        let bytes = match self.remove_workspace(session_id) {
            Ok(bytes) => bytes,
            Err(error) => {
                self.record_intent_failure(session_id, SessionStatus::Deleting, None, &error);
                return Err(error);
            }
        };
        let mut done = self.event(&Event::SessionDeleted(SessionDeleted {
            reason: reason.to_owned(),
            reclaimed_bytes: bytes,
        }));
        done.causation_id = intent_id;
        self.append_log(
            session_id.stream(),
            ExpectedVersion::Exact(version),
            &[done],
        )?;
        tracing::info!(target: "sandlog::lifecycle", event = "session.deleted", %session_id, bytes, "session deleted");
        if let Err(error) = lease.remove() {
            tracing::warn!(%session_id, %error, "removing the lease file failed");
        }
        Ok(DeleteReport {
            session_id,
            reclaimed_bytes: bytes,
        })
    }

    /// Finishes every pending prune or delete intent (C1, C2): removes the
    /// directory and appends the completion as the applier. Returns how
    /// many it finished. Safe to run from several processes: a completion
    /// expects the intent's version, so only one lands. An intent that
    /// fails is recorded (once) and skipped; the others are still finished.
    /// A session whose lease is held (another process is finishing it) is
    /// left for later.
    pub fn finish_pending_intents(&self) -> Result<u64> {
        let mut finished = 0;
        for status in [SessionStatus::Pruning, SessionStatus::Deleting] {
            for session in query::sessions(&self.store, Some(status))? {
                // Another node's intent removes a directory on its disk.
                if !self.is_own(session.node.as_deref()) {
                    continue;
                }
                match self.finish_intent(session.session_id, status, session.version) {
                    Ok(true) => finished += 1,
                    Ok(false) => {}
                    Err(error) => {
                        tracing::warn!(target: "sandlog::applier", session_id = %session.session_id, %error, "a pending intent could not be finished; it stays pending");
                    }
                }
            }
        }
        Ok(finished)
    }

    /// Finishes one pending intent under the session's exclusive lease
    /// (`Ok(false)`: the lease is held elsewhere, or another process
    /// finished it first). A failure is recorded as `session.intent.failed`
    /// unless the stream already ends with the same failure.
    pub(crate) fn finish_intent(
        &self,
        session_id: SessionId,
        status: SessionStatus,
        version: StreamVersion,
    ) -> Result<bool> {
        let lock = self.lock_session(session_id);
        let _guard = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some(lease) = Lease::acquire(
            &self.layout.root,
            session_id,
            LeaseMode::Exclusive,
            Duration::ZERO,
        )?
        else {
            tracing::info!(target: "sandlog::applier", %session_id, "pending intent left for later: its lease is held");
            return Ok(false);
        };
        match self.finish_intent_leased(session_id, status, version) {
            Ok(Some(terminal)) => {
                if terminal && let Err(error) = lease.remove() {
                    tracing::warn!(%session_id, %error, "removing the lease file failed");
                }
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(error) => {
                let run_id = match status {
                    SessionStatus::Pruning => self.pending_run_id(session_id).ok().flatten(),
                    _ => None,
                };
                self.record_intent_failure(session_id, status, run_id, &error);
                Err(error)
            }
        }
    }

    /// The body of [`Engine::finish_intent`]: `Some(terminal)` when a
    /// completion was recorded (`terminal`: the workspace is gone), `None`
    /// when another process recorded one first.
    pub(super) fn finish_intent_leased(
        &self,
        session_id: SessionId,
        status: SessionStatus,
        version: StreamVersion,
    ) -> Result<Option<bool>> {
        let intent = self.pending_intent(session_id)?;
        let applier = |event: &Event| {
            let mut new = self.event(event);
            new.actor = "applier".to_owned();
            new.causation_id = intent.map(|(intent_id, _)| intent_id);
            new
        };
        let event = match status {
            SessionStatus::Pruning => {
                let run_id = intent.and_then(|(_, run_id)| run_id);
                match self.remove_workspace(session_id) {
                    Ok(bytes) => Event::SessionPruned(SessionPruned {
                        run_id,
                        reclaimed_bytes: bytes,
                    }),
                    Err(error) => Event::SessionPruneFailed(SessionPruneFailed {
                        run_id,
                        error: error.to_string(),
                    }),
                }
            }
            SessionStatus::Deleting => {
                let bytes = self.remove_workspace(session_id)?;
                Event::SessionDeleted(SessionDeleted {
                    reason: "finished by the applier".to_owned(),
                    reclaimed_bytes: bytes,
                })
            }
            _ => return Ok(None),
        };
        match self.append_log(
            session_id.stream(),
            ExpectedVersion::Exact(version),
            &[applier(&event)],
        ) {
            Ok(_) => {
                tracing::info!(target: "sandlog::applier", %session_id, kind = event.kind(), "finished a pending intent");
                Ok(Some(!matches!(event, Event::SessionPruneFailed(_))))
            }
            Err(EventStoreError::VersionConflict { .. }) => Ok(None),
            Err(error) => Err(error.into()),
        }
    }

    /// The last `session.intent.failed` of a session's stream, if any.
    pub(super) fn last_intent_failure(
        &self,
        session_id: SessionId,
    ) -> Result<Option<(sandlog_core::Envelope, SessionIntentFailed)>> {
        let filter = LogFilter {
            stream: Some(session_id.stream()),
            kinds: vec!["session.intent.failed".to_owned()],
            ..LogFilter::default()
        };
        let mut last = None;
        for envelope in self.store.query(filter) {
            let envelope = envelope?;
            if let Some(Event::SessionIntentFailed(failed)) = envelope.event()? {
                last = Some((envelope, failed));
            }
        }
        Ok(last)
    }

    /// Records that finishing a pending intent failed, unless the stream
    /// already ends with the same failure (so a root reopened a thousand
    /// times records it once). Never fails: a failure to record is logged,
    /// and the intent is retried anyway.
    pub(super) fn record_intent_failure(
        &self,
        session_id: SessionId,
        status: SessionStatus,
        run_id: Option<Uuid>,
        error: &RuntimeError,
    ) {
        let intent = intent_name(status);
        let message = error.to_string();
        tracing::error!(target: "sandlog::applier", event = "session.intent.failed", %session_id, intent, error = %message, "finishing a pending intent failed");
        let record = || -> Result<()> {
            let session = self.session(session_id)?;
            if !session.status.is_pending() {
                return Ok(());
            }
            if let Some((envelope, last)) = self.last_intent_failure(session_id)?
                && envelope.version == session.version
                && last.intent == intent
                && last.error == message
            {
                return Ok(());
            }
            let failed = Event::SessionIntentFailed(SessionIntentFailed {
                intent: intent.to_owned(),
                run_id,
                error: message.clone(),
            });
            let mut event = self.event(&failed);
            event.actor = "applier".to_owned();
            event.causation_id = self.pending_intent(session_id)?.map(|intent| intent.0);
            self.append_log(
                session_id.stream(),
                ExpectedVersion::Exact(session.version),
                &[event],
            )?;
            Ok(())
        };
        if let Err(record_error) = record() {
            tracing::error!(target: "sandlog::applier", %session_id, %record_error, "recording the intent failure failed");
        }
    }

    /// Pending intents whose last attempt to finish failed: sessions still
    /// `pruning` or `deleting` whose stream ends with
    /// `session.intent.failed`. For `reconcile` and `stats`.
    pub fn failed_intents(&self) -> Result<Vec<FailedIntent>> {
        let mut failed = Vec::new();
        for status in [SessionStatus::Pruning, SessionStatus::Deleting] {
            for session in query::sessions(&self.store, Some(status))? {
                if let Some((envelope, last)) = self.last_intent_failure(session.session_id)?
                    && envelope.version == session.version
                {
                    failed.push(FailedIntent {
                        session_id: session.session_id,
                        intent: last.intent,
                        error: last.error,
                        recorded_at: envelope.recorded_at,
                        position: envelope.position.0,
                    });
                }
            }
        }
        Ok(failed)
    }

    pub(super) fn pending_run_id(&self, session_id: SessionId) -> Result<Option<Uuid>> {
        Ok(self
            .pending_intent(session_id)?
            .and_then(|(_, run_id)| run_id))
    }

    /// The session's last prune or delete intent: its event id (what its
    /// completion names as cause) and, for a prune, the run's id.
    pub(super) fn pending_intent(
        &self,
        session_id: SessionId,
    ) -> Result<Option<(Uuid, Option<Uuid>)>> {
        let filter = LogFilter {
            stream: Some(session_id.stream()),
            kinds: vec![
                "session.prune.requested".to_owned(),
                "session.delete.requested".to_owned(),
            ],
            ..LogFilter::default()
        };
        let mut intent = None;
        for envelope in self.store.query(filter) {
            let envelope = envelope?;
            let run_id = match envelope.event() {
                Ok(Some(Event::SessionPruneRequested(requested))) => Some(requested.run_id),
                _ => None,
            };
            intent = Some((envelope.event_id.0, run_id));
        }
        Ok(intent)
    }
}
