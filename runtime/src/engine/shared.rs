//! A root whose log lives in a database shared by several nodes
//! ([`EngineOptions::store`](crate::EngineOptions::store)), and the one
//! path by which every command writes the log, shared or not.
//!
//! **The shared log is the log.** Positions, hashes, expected versions and
//! blobs are decided there, under its append lock, so many processes on
//! many hosts append to one chain. The root's SQLite file becomes this
//! node's *replica*: the same events, byte for byte, with the Merkle nodes
//! and the read models folded from them. Reads of events and projections
//! stay local and fast; reads of blobs go to the shared log (the replica
//! holds none).
//!
//! **Write, then copy.** A command's unit of work commits in the shared log
//! first; the events it appended (and any other node's since the last
//! copy) are then copied into the replica, checked link by link against the
//! chain the replica already holds ([`EventStore::replicate_from`]). A
//! replica that falls behind (a crash between the two steps, another
//! node's appends) catches up on the next write or [`Engine::sync`]; one
//! that disagrees with the shared log is an integrity error, never
//! overwritten.

use sandlog_core::{Envelope, NewEvent, StreamId};
use sandlog_eventstore::{Backend, EventStoreError, ExpectedVersion, UnitOfWork};

use crate::engine::Engine;
use sandlog_host::error::Result;
#[cfg(not(feature = "postgres"))]
use sandlog_host::error::RuntimeError;

/// Whether `store` names a database to share rather than a file: a
/// `postgres://` or `postgresql://` URL, or a `key=value` connection
/// string.
pub fn is_database_url(store: &str) -> bool {
    matches!(
        crate::lifecycle::migrate::LogLocation::parse(store),
        crate::lifecycle::migrate::LogLocation::Postgres(_)
    )
}

impl Engine {
    /// Connects to the shared log at `url`.
    #[cfg(feature = "postgres")]
    pub(crate) fn connect_shared(
        url: &str,
        clock: std::sync::Arc<dyn sandlog_core::Clock>,
    ) -> Result<Box<dyn Backend>> {
        use sandlog_postgres::{PgEventStore, PgOptions};
        let store = PgEventStore::connect_with(url, PgOptions::default().clock(clock))?;
        Ok(Box::new(store))
    }

    /// Without PostgreSQL support there is no shared log to connect to.
    #[cfg(not(feature = "postgres"))]
    pub(crate) fn connect_shared(
        url: &str,
        _clock: std::sync::Arc<dyn sandlog_core::Clock>,
    ) -> Result<Box<dyn Backend>> {
        Err(RuntimeError::BadLocation {
            location: crate::lifecycle::migrate::LogLocation::parse(url).describe(),
            reason: "this build has no PostgreSQL support (sandlog-runtime's `postgres` feature); \
                     rebuild with it, or leave the store unset to keep the log in the root"
                .into(),
        })
    }

    /// The log: the shared database when there is one, else the root's
    /// file. Blobs are read here.
    pub(crate) fn backend(&self) -> &dyn Backend {
        match &self.shared {
            Some(shared) => shared.as_ref(),
            None => &self.store,
        }
    }

    /// Whether this root's log is shared with other nodes.
    pub fn is_shared(&self) -> bool {
        self.shared.is_some()
    }

    /// Copies into this node's replica every event the shared log holds
    /// that it does not yet (a no-op without a shared log). Returns how
    /// many. Commands that write do this themselves; call it before reads
    /// that must see other nodes' latest events.
    pub fn sync(&self) -> Result<u64> {
        match &self.shared {
            Some(shared) => Ok(self.store.replicate_from(shared.as_ref())?),
            None => Ok(0),
        }
    }

    /// Before a read that should see other nodes' latest events: the
    /// replica copies what it lacks. A shared log that cannot be reached
    /// leaves the reads on the replica as it is (with a warning); one that
    /// disagrees with it fails. Returns how many events were copied.
    pub(crate) fn refresh(&self) -> Result<u64> {
        let Some(shared) = &self.shared else {
            return Ok(0);
        };
        match self.store.replicate_from(shared.as_ref()) {
            Ok(copied) => Ok(copied),
            Err(error) if error.is_integrity() => Err(error.into()),
            Err(error) => {
                tracing::warn!(%error, "the shared log cannot be read; reading this node's replica as it is");
                Ok(0)
            }
        }
    }

    /// After a commit in the shared log: the replica follows. The write
    /// is acknowledged by the shared log already, so a replica that cannot
    /// copy now (a busy or full local disk) is left behind, to catch up on
    /// the next write or open; only a replica that disagrees with the
    /// shared log fails the command.
    fn follow(&self) -> std::result::Result<(), EventStoreError> {
        let Some(shared) = &self.shared else {
            return Ok(());
        };
        match self.store.replicate_from(shared.as_ref()) {
            Ok(_) => Ok(()),
            Err(error) if error.is_integrity() => Err(error),
            Err(error) => {
                tracing::warn!(%error, "this node's replica could not copy the shared log yet; it catches up on the next write");
                Ok(())
            }
        }
    }

    /// Runs `f` in one write transaction of the log (see
    /// [`sandlog_sqlite::EventStore::write`]): every append and blob it
    /// makes commits together or not at all.
    pub(crate) fn write_log<T, E>(
        &self,
        f: impl FnOnce(&mut dyn UnitOfWork) -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E>
    where
        E: From<EventStoreError>,
    {
        let started = std::time::Instant::now();
        let Some(shared) = &self.shared else {
            let value = self.store.write(|write| f(write))?;
            self.metrics.append(started.elapsed());
            return Ok(value);
        };
        let mut f = Some(f);
        let mut outcome = None;
        shared.write_unit(&mut |unit| {
            let Some(f) = f.take() else {
                return Ok(false);
            };
            let value = f(unit);
            let commit = value.is_ok();
            outcome = Some(value);
            Ok(commit)
        })?;
        match outcome {
            Some(Ok(value)) => {
                self.metrics.append(started.elapsed());
                self.follow()?;
                Ok(value)
            }
            Some(Err(error)) => Err(error),
            None => Err(EventStoreError::InvalidBatch(
                "the shared log's write transaction ended before it ran".into(),
            )
            .into()),
        }
    }

    /// Appends `events` to `stream` if it is at `expected` (see
    /// [`sandlog_sqlite::EventStore::append`]).
    pub(crate) fn append_log(
        &self,
        stream: StreamId,
        expected: ExpectedVersion,
        events: &[NewEvent],
    ) -> sandlog_eventstore::Result<Vec<Envelope>> {
        let started = std::time::Instant::now();
        let Some(shared) = &self.shared else {
            let envelopes = self.store.append(stream, expected, events)?;
            self.metrics.append(started.elapsed());
            return Ok(envelopes);
        };
        let envelopes = shared.append(stream, expected, events)?;
        self.metrics.append(started.elapsed());
        self.follow()?;
        Ok(envelopes)
    }

    /// Appends to several streams in one transaction (see
    /// [`sandlog_sqlite::EventStore::append_batch`]).
    pub(crate) fn append_log_batch(
        &self,
        batch: &[(StreamId, ExpectedVersion, Vec<NewEvent>)],
    ) -> sandlog_eventstore::Result<Vec<Envelope>> {
        let started = std::time::Instant::now();
        let Some(shared) = &self.shared else {
            let envelopes = self.store.append_batch(batch)?;
            self.metrics.append(started.elapsed());
            return Ok(envelopes);
        };
        let envelopes = shared.append_batch(batch)?;
        self.metrics.append(started.elapsed());
        self.follow()?;
        Ok(envelopes)
    }
}
