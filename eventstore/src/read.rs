//! What a read of the log asks for, on every backend: a [`LogFilter`]
//! (stream, kinds, time range, position range, correlation id), read in
//! pages of [`PAGE_EVENTS`] so memory stays constant however long the log.

use sandlog_core::{Position, StreamId, Timestamp};
use uuid::Uuid;

/// The columns of an envelope, in the order every backend's row decoding
/// reads them.
pub const ENVELOPE_COLUMNS: &str = "position, stream, version, event_id, kind, schema, recorded_at, actor, \
     correlation_id, causation_id, payload, prev_hash, hash";

/// Events fetched per page when streaming the log. Big enough that the
/// per-query overhead vanishes against the rows' own cost, small enough that a page
/// of maximal payloads stays in the tens of MiB.
pub const PAGE_EVENTS: usize = 2048;

/// Which events `sandlog_sqlite::EventStore::query` returns. Every condition is optional;
/// all given ones must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogFilter {
    /// Only this stream.
    pub stream: Option<StreamId>,
    /// Only these kinds (any of them); a kind ending in `*` matches by
    /// prefix (`session.prune.*`).
    pub kinds: Vec<String>,
    /// Recorded at or after.
    pub since: Option<Timestamp>,
    /// Recorded strictly before.
    pub until: Option<Timestamp>,
    /// At or after this position.
    pub from: Option<Position>,
    /// At or before this position.
    pub to: Option<Position>,
    /// At most this many events.
    pub limit: Option<u64>,
    /// Only events with this correlation id.
    pub correlation: Option<Uuid>,
}
