//! The rules of an append that hold on every backend: the limits of a
//! batch, the expected-version check, what makes a retry idempotent, and
//! chaining new events after the head. Pure: each backend reads the head
//! and versions its own way, and inserts the envelopes returned here, so
//! the same input gives the same hashes on every backend.

use std::collections::HashSet;

use sandlog_core::envelope::EnvelopeFields;
use sandlog_core::limits::{ACTOR_BYTES_MAX, BATCH_EVENTS_MAX, KIND_BYTES_MAX, PAYLOAD_BYTES_MAX};
use sandlog_core::{Envelope, NewEvent, Position, StreamId, StreamVersion, Timestamp, chain_hash};

use crate::error::{EventStoreError, Result};
use crate::types::{ExpectedVersion, Head};

/// Checks one stream's events against the limits before any storage work.
pub fn validate_batch(events: &[NewEvent]) -> Result<()> {
    let invalid = |reason: String| Err(EventStoreError::InvalidBatch(reason));
    if events.len() > BATCH_EVENTS_MAX {
        return invalid(format!(
            "{} events in one append; the limit is {BATCH_EVENTS_MAX}",
            events.len()
        ));
    }
    let mut ids = HashSet::with_capacity(events.len());
    for event in events {
        if event.kind.is_empty() || event.kind.len() > KIND_BYTES_MAX {
            return invalid(format!(
                "event kind must be 1 to {KIND_BYTES_MAX} bytes, got {:?}",
                event.kind
            ));
        }
        if event.actor.len() > ACTOR_BYTES_MAX {
            return invalid(format!("actor is longer than {ACTOR_BYTES_MAX} bytes"));
        }
        if event.payload.len() > PAYLOAD_BYTES_MAX {
            return invalid(format!(
                "payload of {} is {} bytes; the limit is {PAYLOAD_BYTES_MAX}",
                event.kind,
                event.payload.len()
            ));
        }
        if !ids.insert(event.event_id) {
            return invalid(format!(
                "event id {} appears twice in the batch",
                event.event_id
            ));
        }
    }
    Ok(())
}

/// Checks a several-stream batch as a whole (total size, each stream
/// once, each id once); returns the number of events. Shared by every
/// backend.
pub fn validate_multi(batch: &[(StreamId, ExpectedVersion, Vec<NewEvent>)]) -> Result<usize> {
    let total: usize = batch.iter().map(|(_, _, events)| events.len()).sum();
    if total > BATCH_EVENTS_MAX {
        return Err(EventStoreError::InvalidBatch(format!(
            "{total} events in one append; the limit is {BATCH_EVENTS_MAX}"
        )));
    }
    let mut streams = HashSet::with_capacity(batch.len());
    let mut ids = HashSet::with_capacity(total);
    for (stream, _, events) in batch {
        if !events.is_empty() && !streams.insert(*stream) {
            return Err(EventStoreError::InvalidBatch(format!(
                "stream {stream} appears twice in the batch"
            )));
        }
        if let Some(event) = events.iter().find(|event| !ids.insert(event.event_id)) {
            return Err(EventStoreError::InvalidBatch(format!(
                "event id {} appears twice in the batch",
                event.event_id
            )));
        }
    }
    Ok(total)
}

/// The expected-version rule, given the stream's actual version. Shared by
/// every backend.
pub fn check_version(
    stream: StreamId,
    expected: ExpectedVersion,
    actual: Option<StreamVersion>,
) -> Result<()> {
    let matches = match expected {
        ExpectedVersion::Any => true,
        ExpectedVersion::NoStream => actual.is_none(),
        ExpectedVersion::Exact(version) => actual == Some(version),
    };
    if !matches {
        return Err(EventStoreError::VersionConflict {
            stream,
            expected,
            actual,
        });
    }
    Ok(())
}

/// Whether a stored envelope is the retry of `event` at
/// `expected_position` of `stream_text`: what makes a second append of the
/// same ids an idempotent retry rather than [`EventStoreError::EventIdReused`].
/// Shared by every backend.
pub fn is_same_event(
    envelope: &Envelope,
    event: &NewEvent,
    stream_text: &str,
    expected_position: Position,
) -> bool {
    envelope.position == expected_position
        && envelope.stream.to_string() == stream_text
        && envelope.kind == event.kind
        && envelope.schema == event.schema
        && envelope.payload == event.payload
        && envelope.actor == event.actor
        && envelope.correlation_id == event.correlation_id
        && envelope.causation_id == event.causation_id
}

/// The time a batch appended after `head` is recorded at: now, or the
/// head's time if the clock went back, so `recorded_at` never goes
/// backwards along the log and a time cut of the log is a position cut.
pub fn batch_recorded_at(head: &Head, now: Timestamp) -> Timestamp {
    head.recorded_at.map_or(now, |last| now.max(last))
}

/// The envelopes of `events` appended after `head` to `stream`, whose
/// version is `actual`: gapless positions and versions, chain hashes, all
/// recorded at `recorded_at`. Pure: each store inserts what it returns.
pub fn chain_batch(
    head: &Head,
    stream: StreamId,
    actual: Option<StreamVersion>,
    recorded_at: Timestamp,
    events: &[NewEvent],
) -> Vec<Envelope> {
    let stream_text = stream.to_string();
    let mut envelopes = Vec::with_capacity(events.len());
    let mut prev_hash = head.hash;
    let mut position = head.position;
    let mut version = actual.unwrap_or_default();
    for event in events {
        position = position.next();
        version = version.next();
        let fields = EnvelopeFields {
            position: position.0,
            stream: &stream_text,
            version: version.0,
            event_id: event.event_id.0.as_bytes(),
            kind: &event.kind,
            schema: event.schema,
            recorded_at_micros: recorded_at.unix_micros(),
            actor: &event.actor,
            correlation_id: event
                .correlation_id
                .as_ref()
                .map_or(&[], |id| id.as_bytes()),
            causation_id: event.causation_id.as_ref().map_or(&[], |id| id.as_bytes()),
            payload: &event.payload,
        };
        let hash = chain_hash(&prev_hash, &fields);
        envelopes.push(Envelope {
            position,
            stream,
            version,
            event_id: event.event_id,
            kind: event.kind.clone(),
            schema: event.schema,
            recorded_at,
            actor: event.actor.clone(),
            correlation_id: event.correlation_id,
            causation_id: event.causation_id,
            payload: event.payload.clone(),
            prev_hash,
            hash,
        });
        prev_hash = hash;
    }
    envelopes
}
