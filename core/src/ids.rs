//! Identifiers: sessions, events, streams, positions and stream versions.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use uuid::Uuid;

use crate::error::CoreError;

/// A session's id: a UUID, shown hyphenated and lower-case. New sessions get
/// a random (v4) id; adopted workspaces keep the UUID their directory had.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionId(Uuid);

impl SessionId {
    /// A fresh random (v4) id.
    pub fn new_v4() -> Self {
        SessionId(Uuid::new_v4())
    }

    /// Parses the canonical hyphenated form (36 characters, either case).
    /// Other forms uuid accepts (braced, URN, simple) are refused so a
    /// directory name and an id are the same text.
    pub fn parse(input: &str) -> Result<Self, CoreError> {
        let invalid = || CoreError::InvalidSessionId {
            input: input.to_owned(),
        };
        if input.len() != 36 {
            return Err(invalid());
        }
        Uuid::try_parse(input).map(SessionId).map_err(|_| invalid())
    }

    /// [`SessionId::parse`] of ASCII bytes, such as a stored text column,
    /// without first checking them as UTF-8 (a prune scan parses 100,000
    /// ids). `None` for anything `parse` refuses.
    pub fn parse_ascii(input: &[u8]) -> Option<Self> {
        if input.len() != 36 {
            return None;
        }
        Uuid::try_parse_ascii(input).ok().map(SessionId)
    }

    /// The UUID.
    pub fn as_uuid(&self) -> &Uuid {
        &self.0
    }

    /// The 16 raw bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        self.0.as_bytes()
    }

    /// The session's stream.
    pub fn stream(self) -> StreamId {
        StreamId::Session(self)
    }
}

impl From<Uuid> for SessionId {
    fn from(uuid: Uuid) -> Self {
        SessionId(uuid)
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

impl FromStr for SessionId {
    type Err = CoreError;
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        SessionId::parse(input)
    }
}

impl Serialize for SessionId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for SessionId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        SessionId::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// An event's id. An append whose event id is already stored is a no-op
/// that returns the stored envelope, which makes retries safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EventId(pub Uuid);

impl EventId {
    /// A fresh id, time-ordered (UUIDv7: milliseconds since the epoch, then
    /// random bits). Ids made one after another sort together, so the
    /// log's unique index on event ids grows at its right edge; random ids
    /// dirtied one index page per event, which a batch append then wrote
    /// whole to the WAL. Uniqueness rests on the 74 random bits, as it did
    /// on a v4's 122; nothing treats an event id as a secret, and the
    /// moment it shows is what the event's `recorded_at` records anyway.
    pub fn now() -> Self {
        EventId(Uuid::now_v7())
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

/// A stream: the unit of optimistic concurrency. Each session has one; runs
/// that span sessions (prune, reconcile) write to `system`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StreamId {
    /// `system`: prune runs, reconcile runs, orphans.
    System,
    /// `session/<uuid>`.
    Session(SessionId),
}

const SESSION_STREAM_PREFIX: &str = "session/";
const SYSTEM_STREAM: &str = "system";

impl StreamId {
    /// Parses `system` or `session/<uuid>`.
    pub fn parse(input: &str) -> Result<Self, CoreError> {
        if input == SYSTEM_STREAM {
            return Ok(StreamId::System);
        }
        match input.strip_prefix(SESSION_STREAM_PREFIX) {
            Some(id) => {
                SessionId::parse(id)
                    .map(StreamId::Session)
                    .map_err(|_| CoreError::InvalidStream {
                        input: input.to_owned(),
                    })
            }
            None => Err(CoreError::InvalidStream {
                input: input.to_owned(),
            }),
        }
    }

    /// The session this stream belongs to, if any.
    pub fn session(&self) -> Option<SessionId> {
        match self {
            StreamId::Session(id) => Some(*id),
            StreamId::System => None,
        }
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StreamId::System => f.write_str(SYSTEM_STREAM),
            StreamId::Session(id) => write!(f, "{SESSION_STREAM_PREFIX}{id}"),
        }
    }
}

impl Serialize for StreamId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for StreamId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        StreamId::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// A global, gapless position in the log; the first event is at 1.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Position(pub u64);

impl Position {
    /// Before the first event: an empty log's head.
    pub const ZERO: Position = Position(0);

    /// The next position.
    pub fn next(self) -> Position {
        Position(self.0.saturating_add(1))
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A version within one stream; the first event of a stream is version 1.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct StreamVersion(pub u64);

impl StreamVersion {
    /// The next version.
    pub fn next(self) -> StreamVersion {
        StreamVersion(self.0.saturating_add(1))
    }
}

impl fmt::Display for StreamVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_id_round_trips_through_display() {
        let id = SessionId::new_v4();
        assert_eq!(SessionId::parse(&id.to_string()).unwrap(), id);
        assert_eq!(id.as_uuid().get_version_num(), 4);
    }

    /// Event ids sort in the order they were made (so the log's index on
    /// them grows at one end), across a millisecond boundary too, and
    /// never repeat.
    #[test]
    fn event_ids_are_time_ordered_and_distinct() {
        let started = std::time::Instant::now();
        let mut ids = vec![EventId::now()];
        while started.elapsed() < std::time::Duration::from_millis(3) || ids.len() < 1000 {
            ids.push(EventId::now());
        }
        assert!(ids.iter().all(|id| id.0.get_version_num() == 7));
        assert!(
            ids.windows(2).all(|pair| pair[0] < pair[1]),
            "not increasing"
        );
        let first_ms = ids
            .first()
            .and_then(|id| id.0.get_timestamp())
            .map(|t| t.to_unix());
        let last_ms = ids
            .last()
            .and_then(|id| id.0.get_timestamp())
            .map(|t| t.to_unix());
        assert_ne!(
            first_ms, last_ms,
            "the ids should span several milliseconds"
        );
    }

    #[test]
    fn session_id_rejects_non_canonical_forms() {
        for input in [
            "",
            "not-a-uuid",
            "550e8400e29b41d4a716446655440000",
            "{550e8400-e29b-41d4-a716-446655440000}",
            "550e8400-e29b-41d4-a716-44665544000g",
            "550e8400-e29b-41d4-a716_446655440000",
        ] {
            assert_eq!(
                SessionId::parse(input),
                Err(CoreError::InvalidSessionId {
                    input: input.to_owned()
                }),
                "{input}"
            );
            assert_eq!(SessionId::parse_ascii(input.as_bytes()), None, "{input}");
        }
        let id = SessionId::new_v4();
        for text in [id.to_string(), id.to_string().to_uppercase()] {
            assert_eq!(SessionId::parse_ascii(text.as_bytes()), Some(id));
            assert_eq!(SessionId::parse(&text).ok(), Some(id));
        }
    }

    #[test]
    fn stream_ids_parse_and_display() {
        let id = SessionId::new_v4();
        let stream = StreamId::Session(id);
        assert_eq!(StreamId::parse(&stream.to_string()).unwrap(), stream);
        assert_eq!(StreamId::parse("system").unwrap(), StreamId::System);
        assert!(StreamId::parse("session/nope").is_err());
        assert!(StreamId::parse("sessions").is_err());
    }
}
