//! Catch-up subscriptions: every event after a position, or after a named
//! consumer's stored checkpoint, delivered at least once and in position
//! order; then the events other processes append, found by polling.
//!
//! ```no_run
//! # fn main() -> sandlog_eventstore::Result<()> {
//! use std::time::Duration;
//! use sandlog_eventstore::LogFilter;
//! use sandlog_sqlite::{EventStore, OpenOptions, SubscribeFrom};
//!
//! let store = EventStore::open("sandlog.db".as_ref(), OpenOptions::default())?;
//! let mut events = store.subscribe(SubscribeFrom::Checkpoint("indexer".into()), LogFilter::default())?;
//! while let Some(envelope) = events.next_event(Duration::from_secs(5))? {
//!     println!("{} {}", envelope.position, envelope.kind);
//!     // Asking for the next event tells the subscription this one is
//!     // processed; its position is stored when the subscription next
//!     // reads the log.
//! }
//! events.commit()?;
//! # Ok(()) }
//! ```
//!
//! # Guarantees
//!
//! * Position order, no gaps: the log's positions are gapless and commit in
//!   order (SQLite has one writer), so once the head is seen at `H` every
//!   event up to `H` is visible, and the subscription reads each stretch up
//!   to the head it saw first.
//! * At least once: a checkpoint stores a position only after the caller
//!   has asked for the event after it (or called [`Subscription::commit`]),
//!   so a consumer killed at any point resumes at or before the first event
//!   it had not finished. Events after the stored checkpoint may be
//!   delivered again; none is skipped.
//! * Checkpoints only move forward (a trigger refuses anything else; a
//!   commit behind the stored position leaves it), never past the head,
//!   and are ordinary rows beside the log: they are not events, not
//!   hashed, not part of `verify`.
//!
//! A subscription reads pages of at most [`crate::PAGE_EVENTS`] events, so
//! its memory is bounded however far behind it starts; while caught up it
//! looks for new events every [`SUBSCRIBE_POLL`].

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rusqlite::OptionalExtension;
use sandlog_core::{Envelope, Position};
use sandlog_eventstore::error::{EventStoreError, Result};
use sandlog_eventstore::read::{LogFilter, PAGE_EVENTS};

use super::EventStore;
use crate::store::SqlResult;

/// How long a caught-up subscription waits between looks for new events:
/// short enough to feel live, long enough that an idle follower costs
/// nothing (one indexed read of the head).
pub const SUBSCRIBE_POLL: Duration = Duration::from_millis(200);

/// Longest consumer name, in bytes. Names are chosen by programs
/// (`indexer`, `billing-export`), never by guests.
pub const CONSUMER_NAME_BYTES_MAX: usize = 256;

/// Where a subscription starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubscribeFrom {
    /// Every event after this position ([`Position::ZERO`]: the whole
    /// log). Nothing is stored; [`Subscription::commit`] does nothing.
    After(Position),
    /// Every event after the named consumer's stored checkpoint (the whole
    /// log if it has none). Progress is stored under that name.
    Checkpoint(String),
}

/// Checks a consumer name: non-empty, at most [`CONSUMER_NAME_BYTES_MAX`]
/// bytes, no control characters.
///
/// # Errors
///
/// [`EventStoreError::InvalidConsumer`] naming what is wrong.
pub fn check_consumer_name(name: &str) -> Result<()> {
    let refuse = |reason: &str| EventStoreError::InvalidConsumer {
        name: name.chars().take(64).collect(),
        reason: reason.to_owned(),
    };
    if name.is_empty() {
        return Err(refuse("it is empty; name the consumer (`indexer`)"));
    }
    if name.len() > CONSUMER_NAME_BYTES_MAX {
        return Err(refuse(&format!(
            "it is longer than {CONSUMER_NAME_BYTES_MAX} bytes"
        )));
    }
    if name.chars().any(char::is_control) {
        return Err(refuse("it contains control characters"));
    }
    Ok(())
}

/// A catch-up subscription (see the [module](self) documentation). Made by
/// [`EventStore::subscribe`]; borrows the store's read connection only
/// while it reads a page.
#[derive(Debug)]
pub struct Subscription<'a> {
    store: &'a EventStore,
    filter: LogFilter,
    consumer: Option<String>,
    /// Every event at or before it is in `buffer`, was handed out, or does
    /// not match the filter.
    scanned: Position,
    /// The position stored for the consumer (or the start).
    committed: Position,
    buffer: VecDeque<Envelope>,
}

impl Subscription<'_> {
    /// The next event, waiting up to `timeout` for one to be appended
    /// (`Duration::ZERO`: only what is already there). `Ok(None)`: nothing
    /// new within the timeout; call again to keep following.
    ///
    /// Asking for the next event acknowledges the ones before it: when the
    /// subscription has handed out everything it read and reads the log
    /// again, it first stores how far it got under the consumer's name.
    ///
    /// # Errors
    ///
    /// The store's errors (a row that does not decode is
    /// [`EventStoreError::Corrupt`]); the subscription can be asked again.
    pub fn next_event(&mut self, timeout: Duration) -> Result<Option<Envelope>> {
        let started = Instant::now();
        loop {
            if let Some(envelope) = self.buffer.pop_front() {
                return Ok(Some(envelope));
            }
            self.commit()?;
            self.fill()?;
            if !self.buffer.is_empty() {
                continue;
            }
            let remaining = timeout.saturating_sub(started.elapsed());
            if remaining.is_zero() {
                return Ok(None);
            }
            std::thread::sleep(remaining.min(SUBSCRIBE_POLL));
        }
    }

    /// Stores, under the consumer's name, that every event handed out so
    /// far is processed; a no-op for [`SubscribeFrom::After`] or when
    /// nothing new was handed out. Returns the stored position (another
    /// process sharing the name may have stored a later one).
    ///
    /// # Errors
    ///
    /// The store's errors; nothing is stored then.
    pub fn commit(&mut self) -> Result<Position> {
        let done = match self.buffer.front() {
            Some(next) => Position(next.position.0.saturating_sub(1)),
            None => self.scanned,
        };
        if let Some(name) = &self.consumer
            && done > self.committed
        {
            self.committed = self.store.commit_consumer_checkpoint(name, done)?;
        }
        Ok(self.committed)
    }

    /// The position stored for the consumer when the subscription started
    /// or last committed (for [`SubscribeFrom::After`], the start).
    pub fn committed(&self) -> Position {
        self.committed
    }

    /// The consumer's name, if progress is stored.
    pub fn consumer(&self) -> Option<&str> {
        self.consumer.as_deref()
    }

    /// Reads the next page after `scanned`, up to the head as it is now.
    fn fill(&mut self) -> Result<()> {
        let head = self.store.head()?.position;
        if head <= self.scanned {
            return Ok(());
        }
        let filter = LogFilter {
            to: Some(head),
            ..self.filter.clone()
        };
        let page = self.store.page(&filter, self.scanned, PAGE_EVENTS)?;
        self.scanned = match page.last() {
            Some(last) if page.len() == PAGE_EVENTS => last.position,
            // A short page read everything up to `head`.
            _ => head,
        };
        self.buffer.extend(page);
        Ok(())
    }
}

impl EventStore {
    /// A catch-up subscription to the events matching `filter` (its
    /// `from`, `to` and `limit` do not apply: the start is `from`, and a
    /// subscription has no end).
    ///
    /// # Errors
    ///
    /// [`EventStoreError::InvalidConsumer`] for a bad consumer name;
    /// [`EventStoreError::CheckpointCorrupt`] if the stored checkpoint is
    /// not a position of this log; the store's errors.
    pub fn subscribe(&self, from: SubscribeFrom, filter: LogFilter) -> Result<Subscription<'_>> {
        let (start, consumer) = match from {
            SubscribeFrom::After(position) => (position, None),
            SubscribeFrom::Checkpoint(name) => {
                let stored = self.consumer_checkpoint(&name)?.unwrap_or(Position::ZERO);
                (stored, Some(name))
            }
        };
        Ok(Subscription {
            store: self,
            filter: LogFilter {
                from: None,
                to: None,
                limit: None,
                ..filter
            },
            consumer,
            scanned: start,
            committed: start,
            buffer: VecDeque::new(),
        })
    }

    /// The position stored for a consumer, if any.
    ///
    /// # Errors
    ///
    /// [`EventStoreError::InvalidConsumer`] for a bad name;
    /// [`EventStoreError::CheckpointCorrupt`] for a stored value that is
    /// not a position of this log (negative, past the head).
    pub fn consumer_checkpoint(&self, name: &str) -> Result<Option<Position>> {
        check_consumer_name(name)?;
        let connection = self.lock_reader();
        let stored: Option<rusqlite::types::Value> = connection
            .query_row(
                "SELECT position FROM consumer_checkpoints WHERE name = ?1",
                [name],
                |row| row.get(0),
            )
            .optional()
            .sql()?;
        let Some(stored) = stored else {
            return Ok(None);
        };
        let corrupt = |reason: String| EventStoreError::CheckpointCorrupt {
            name: name.to_owned(),
            reason,
        };
        let position = match stored {
            rusqlite::types::Value::Integer(value) => u64::try_from(value)
                .map(Position)
                .map_err(|_| corrupt(format!("its position {value} is negative")))?,
            _ => return Err(corrupt("its position is not an integer".to_owned())),
        };
        let head = super::rows::read_head(&connection)?.position;
        if position > head {
            return Err(corrupt(format!(
                "its position {position} is past the log's last event ({head}): the log is not \
                 the one it was stored against"
            )));
        }
        Ok(Some(position))
    }

    /// Stores that consumer `name` has processed every event up to
    /// `position`. A checkpoint only moves forward: a position behind the
    /// stored one leaves it. Returns the position stored now.
    ///
    /// # Errors
    ///
    /// [`EventStoreError::InvalidConsumer`] for a bad name or a position
    /// past the log's head; the store's errors.
    pub fn commit_consumer_checkpoint(&self, name: &str, position: Position) -> Result<Position> {
        check_consumer_name(name)?;
        let now = self.clock.now().unix_micros();
        self.with_write_transaction(|transaction| {
            let head = super::rows::read_head(transaction)?.position;
            if position > head {
                return Err(EventStoreError::InvalidConsumer {
                    name: name.to_owned(),
                    reason: format!(
                        "position {position} is past the log's last event ({head}); a consumer \
                         can only have processed events that exist"
                    ),
                });
            }
            let stored =
                i64::try_from(position.0).map_err(|_| EventStoreError::InvalidConsumer {
                    name: name.to_owned(),
                    reason: format!("position {position} is out of range"),
                })?;
            transaction.execute(
                "INSERT INTO consumer_checkpoints (name, position, updated_at) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (name) DO UPDATE SET position = excluded.position, \
                 updated_at = excluded.updated_at \
                 WHERE excluded.position > consumer_checkpoints.position",
                rusqlite::params![name, stored, now],
            ).sql()?;
            let now_stored: i64 = transaction
                .query_row(
                    "SELECT position FROM consumer_checkpoints WHERE name = ?1",
                    [name],
                    |row| row.get(0),
                )
                .sql()?;
            u64::try_from(now_stored).map(Position).map_err(|_| {
                EventStoreError::CheckpointCorrupt {
                    name: name.to_owned(),
                    reason: format!("its position {now_stored} is negative"),
                }
            })
        })
    }
}
