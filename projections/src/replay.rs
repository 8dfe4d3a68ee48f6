//! As-of replay: the state as it was at a position or a time, folded in
//! memory from the log, without touching the read models (A2).

use sandlog_core::{Envelope, Position, SessionId, StreamId, Timestamp};
use sandlog_eventstore::LogFilter;

use crate::error::Result;
use crate::state::{SessionState, State, apply};

/// A log replay reads: streamed in position order (memory stays bounded
/// whatever the log's length), and a time mapped to a position. A backend
/// implements it for its store.
pub trait LogReader {
    /// The events matching `filter`, in position order, read lazily.
    fn stream(
        &self,
        filter: LogFilter,
    ) -> Box<dyn Iterator<Item = sandlog_eventstore::Result<Envelope>> + '_>;
    /// The last position recorded at or before `instant` (zero if none).
    fn position_before(&self, instant: Timestamp) -> sandlog_eventstore::Result<Position>;
}

/// Where to cut the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Up to and including this position.
    Position(Position),
    /// Every event recorded at or before this instant.
    Time(Timestamp),
}

impl Cut {
    /// The last position included.
    pub fn position(self, store: &(impl LogReader + ?Sized)) -> Result<Position> {
        match self {
            Cut::Position(position) => Ok(position),
            // recorded_at never decreases along the log, so a time cut is a
            // position cut.
            Cut::Time(instant) => Ok(store.position_before(instant)?),
        }
    }
}

/// The whole state as of `cut` (memory grows with the sessions, not the
/// events: the log is streamed).
pub fn state_at(store: &(impl LogReader + ?Sized), cut: Cut) -> Result<State> {
    state_at_with_progress(store, cut, |_, _| {})
}

/// Events folded between two calls of a replay's progress callback.
pub const PROGRESS_EVERY_EVENTS: u64 = 4096;

/// [`state_at`], calling `progress(events folded, events to fold)` every
/// [`PROGRESS_EVERY_EVENTS`] events and once at the end.
pub fn state_at_with_progress(
    store: &(impl LogReader + ?Sized),
    cut: Cut,
    mut progress: impl FnMut(u64, u64),
) -> Result<State> {
    let to = cut.position(store)?;
    // Positions are gapless from 1, so the cut position is the count.
    let total = to.0;
    let mut state = State::default();
    let mut folded = 0u64;
    for envelope in store.stream(LogFilter {
        to: Some(to),
        ..LogFilter::default()
    }) {
        apply(&mut state, &envelope?);
        folded += 1;
        if folded.is_multiple_of(PROGRESS_EVERY_EVENTS) {
            progress(folded, total);
        }
    }
    progress(folded, total.max(folded));
    Ok(state)
}

/// One session as of `cut`, folded from its own stream only.
pub fn session_at(
    store: &(impl LogReader + ?Sized),
    session_id: SessionId,
    cut: Cut,
) -> Result<Option<SessionState>> {
    let to = cut.position(store)?;
    let mut state = State::default();
    let filter = LogFilter {
        stream: Some(StreamId::Session(session_id)),
        to: Some(to),
        ..LogFilter::default()
    };
    for envelope in store.stream(filter) {
        apply(&mut state, &envelope?);
    }
    Ok(state.sessions.remove(&session_id))
}
