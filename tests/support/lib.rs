//! Shared test support for sandlog-tests: temporary stores, event builders,
//! a log-shape checker, the tamperer's raw connection, and proptest
//! strategies.
//!
//! Everything here is generic over what a test is about, so every module of
//! the `it` binary (and the benches) can use it. It is not test code to
//! clippy (it is a library), so it follows the production rules: no
//! `unwrap`, no indexing, errors as `Result`.

/// A real PostgreSQL server and a database per test.
pub mod pg;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sandlog_core::{
    Envelope, EventId, ManualClock, NewEvent, Position, SessionId, StreamId, StreamVersion,
    Timestamp,
};
use sandlog_eventstore::EventStoreError;
use sandlog_sqlite::{Durability, EventStore, OpenOptions, Upgrade, UpgradeEvent, UpgradeObserver};

/// The instant every test clock starts at (2023-11-14T22:13:20Z): fixed, so
/// `recorded_at` values are reproducible.
pub const TEST_EPOCH: Timestamp = Timestamp::from_unix_micros(1_700_000_000_000_000);

/// The file name of a temporary store inside its directory.
pub const STORE_FILE_NAME: &str = "sandlog.db";

/// The actor stamped on events built by [`new_event`].
pub const TEST_ACTOR: &str = "api:test";

/// An [`EventStore`] in its own temporary directory, with a [`ManualClock`]
/// the test can move. The directory is deleted when this is dropped (after
/// the store is closed: fields drop in declaration order).
pub struct TempStore {
    /// The open store.
    pub store: EventStore,
    /// The clock stamping `recorded_at`; clones share its time.
    pub clock: ManualClock,
    /// The durability the store was opened with (kept for [`TempStore::reopen`]).
    pub durability: Durability,
    dir: tempfile::TempDir,
}

impl std::fmt::Debug for TempStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TempStore")
            .field("path", &self.path())
            .field("durability", &self.durability)
            .finish_non_exhaustive()
    }
}

impl TempStore {
    /// The database file.
    pub fn path(&self) -> PathBuf {
        self.dir.path().join(STORE_FILE_NAME)
    }

    /// The temporary directory holding the file (and its `-wal`/`-shm`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Closes the store and opens the same file again, with the same clock
    /// and durability: what a restart sees.
    pub fn reopen(self) -> Result<TempStore, EventStoreError> {
        let TempStore {
            store,
            clock,
            durability,
            dir,
        } = self;
        drop(store);
        let store = EventStore::open(
            &dir.path().join(STORE_FILE_NAME),
            open_options(&clock, durability),
        )?;
        Ok(TempStore {
            store,
            clock,
            durability,
            dir,
        })
    }

    /// Every event of the log, in position order.
    pub fn envelopes(&self) -> Result<Vec<Envelope>, EventStoreError> {
        envelopes(&self.store)
    }

    /// A plain rusqlite connection to the file, with the append-only
    /// triggers dropped: a tamperer who can write the file. See
    /// [`open_tamperer`].
    pub fn tamperer(&self) -> rusqlite::Result<rusqlite::Connection> {
        open_tamperer(&self.path())
    }
}

/// Open options with `clock` and `durability`, defaults otherwise.
pub fn open_options(clock: &ManualClock, durability: Durability) -> OpenOptions {
    OpenOptions::default()
        .clock(Arc::new(clock.clone()))
        .durability(durability)
}

/// A fresh store with [`Durability::Normal`] and a [`ManualClock`] at
/// [`TEST_EPOCH`].
///
/// Normal, not the default Full: tests check logic, not power loss, and an
/// fsync per append (several milliseconds on a VM disk) would make property
/// tests of thousands of appends take minutes. Tests of the durable default
/// use [`temp_store_with`].
pub fn temp_store() -> Result<TempStore, EventStoreError> {
    temp_store_with(Durability::Normal)
}

/// A fresh store with the given durability and a [`ManualClock`] at
/// [`TEST_EPOCH`].
pub fn temp_store_with(durability: Durability) -> Result<TempStore, EventStoreError> {
    let dir = tempfile::Builder::new()
        .prefix("sandlog-test-")
        .tempdir()
        .map_err(|source| EventStoreError::Io {
            context: "creating a temporary directory".into(),
            source,
        })?;
    let clock = ManualClock::new(TEST_EPOCH);
    let store = EventStore::open(
        &dir.path().join(STORE_FILE_NAME),
        open_options(&clock, durability),
    )?;
    Ok(TempStore {
        store,
        clock,
        durability,
        dir,
    })
}

/// A new event of `kind` with `payload` serialised as JSON, a fresh id,
/// schema 1 and actor [`TEST_ACTOR`].
pub fn new_event(kind: &str, payload: &serde_json::Value) -> NewEvent {
    new_event_bytes(kind, payload.to_string().into_bytes())
}

/// A new event of `kind` whose payload is exactly `payload` (the store
/// hashes bytes; it never re-serialises), with a fresh id, schema 1 and
/// actor [`TEST_ACTOR`].
pub fn new_event_bytes(kind: &str, payload: Vec<u8>) -> NewEvent {
    NewEvent {
        event_id: EventId::now(),
        kind: kind.to_owned(),
        schema: 1,
        actor: TEST_ACTOR.to_owned(),
        correlation_id: None,
        causation_id: None,
        payload,
    }
}

/// Every event of `store`'s log, in position order.
pub fn envelopes(store: &EventStore) -> Result<Vec<Envelope>, EventStoreError> {
    store.read_all_after(Position::ZERO).collect()
}

/// Checks the shape every log must have, whatever was appended: positions
/// are exactly `1..=n` in order, each stream's versions are exactly `1..=m`
/// in order, each `prev_hash` is the previous event's `hash`, and no event
/// id appears twice. Returns the first violation, described.
///
/// This is a cheap restatement of the invariants from the envelopes the
/// store returns; it does not replace [`EventStore::verify`], which
/// recomputes every hash from the stored rows.
pub fn check_log_shape(envelopes: &[Envelope]) -> Result<(), String> {
    let mut versions = std::collections::HashMap::<StreamId, StreamVersion>::new();
    let mut ids = std::collections::HashSet::<EventId>::new();
    let mut prev_hash = sandlog_core::Hash::GENESIS;
    for (index, envelope) in envelopes.iter().enumerate() {
        let expected_position = Position(index as u64 + 1);
        if envelope.position != expected_position {
            return Err(format!(
                "event #{index} is at position {}, expected {expected_position}",
                envelope.position
            ));
        }
        let version = versions.entry(envelope.stream).or_default();
        *version = version.next();
        if envelope.version != *version {
            return Err(format!(
                "event at position {} has version {} in {}, expected {}",
                envelope.position, envelope.version, envelope.stream, version
            ));
        }
        if !ids.insert(envelope.event_id) {
            return Err(format!(
                "event id {} appears twice (again at position {})",
                envelope.event_id, envelope.position
            ));
        }
        if envelope.prev_hash != prev_hash {
            return Err(format!(
                "event at position {} does not link to the previous hash",
                envelope.position
            ));
        }
        prev_hash = envelope.hash;
    }
    Ok(())
}

/// Opens a plain rusqlite connection to a store's file and drops the
/// triggers that make `events` append-only, as anyone who can write the
/// file can. Tamper tests then change rows with ordinary SQL and check that
/// `verify` finds it.
pub fn open_tamperer(path: &Path) -> rusqlite::Result<rusqlite::Connection> {
    let connection = rusqlite::Connection::open(path)?;
    connection.busy_timeout(std::time::Duration::from_secs(5))?;
    connection.execute_batch(
        "DROP TRIGGER IF EXISTS events_are_append_only_update;
         DROP TRIGGER IF EXISTS events_are_append_only_delete;",
    )?;
    Ok(connection)
}

/// An observer that writes down what it is told about upgrades, one line
/// each (`started schema 4->5 3`, `finished read-models 5->6`), and the
/// lines so far.
pub fn upgrade_recorder() -> (UpgradeObserver, Arc<std::sync::Mutex<Vec<String>>>) {
    let told = Arc::new(std::sync::Mutex::new(Vec::new()));
    let written = Arc::clone(&told);
    let observer = UpgradeObserver::new(move |event| {
        let what = |upgrade: Upgrade| match upgrade {
            Upgrade::Schema { from, to } => format!("schema {from}->{to}"),
            Upgrade::ReadModels { from, to } => format!("read-models {from}->{to}"),
        };
        let line = match event {
            UpgradeEvent::Started {
                upgrade, events, ..
            } => format!("started {} {events}", what(upgrade)),
            UpgradeEvent::Finished { upgrade, .. } => format!("finished {}", what(upgrade)),
        };
        if let Ok(mut lines) = written.lock() {
            lines.push(line);
        }
    });
    (observer, told)
}

/// SQL that turns a store file of the current schema into one as schema 4
/// wrote it: `events` indexed by `UNIQUE(stream, version)`, no `streams`
/// table, no map of stream heads. Migration tests start from it (and go
/// further back from there).
pub const AS_SCHEMA_4: &str = "
    CREATE TABLE events_v4 (
        position       INTEGER PRIMARY KEY,
        stream         TEXT    NOT NULL,
        version        INTEGER NOT NULL,
        event_id       BLOB    NOT NULL UNIQUE,
        kind           TEXT    NOT NULL,
        schema         INTEGER NOT NULL,
        recorded_at    INTEGER NOT NULL,
        actor          TEXT    NOT NULL,
        correlation_id BLOB,
        causation_id   BLOB,
        payload        BLOB    NOT NULL,
        prev_hash      BLOB    NOT NULL,
        hash           BLOB    NOT NULL,
        UNIQUE (stream, version)
    );
    INSERT INTO events_v4 SELECT position, stream, version, event_id, kind, schema, recorded_at,
        actor, correlation_id, causation_id, payload, prev_hash, hash FROM events ORDER BY position;
    DROP TABLE events;
    ALTER TABLE events_v4 RENAME TO events;
    CREATE INDEX events_by_recorded_at ON events (recorded_at);
    CREATE INDEX events_by_kind ON events (kind, position);
    CREATE INDEX events_by_correlation ON events (correlation_id, position)
        WHERE correlation_id IS NOT NULL;
    DROP TABLE streams;
    DROP TABLE map_nodes;
    DROP TABLE map_roots;
    PRAGMA user_version = 4;
";

/// A fixed set of streams addressed by small indices, so strategies can pick
/// streams without generating UUIDs (which would shrink towards one
/// colliding value): index 0 is `system`, index `i >= 1` is session
/// `(i - 1) % n`.
#[derive(Debug, Clone)]
pub struct StreamPool {
    sessions: Vec<SessionId>,
}

impl StreamPool {
    /// `system` plus `n_sessions` fresh session streams.
    pub fn new(n_sessions: usize) -> StreamPool {
        StreamPool {
            sessions: (0..n_sessions).map(|_| SessionId::new_v4()).collect(),
        }
    }

    /// How many streams, `system` included.
    pub fn len(&self) -> usize {
        self.sessions.len() + 1
    }

    /// Never empty: `system` is always there.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The stream at `index` (wrapping).
    pub fn stream(&self, index: usize) -> StreamId {
        match index.checked_sub(1) {
            None => StreamId::System,
            Some(session_index) => self
                .sessions
                .get(session_index % self.sessions.len().max(1))
                .map_or(StreamId::System, |session| StreamId::Session(*session)),
        }
    }
}

/// proptest strategies for events and payloads.
pub mod strategies {
    use proptest::prelude::*;
    use sandlog_core::{EventId, NewEvent};
    use serde_json::Value;

    /// Any JSON value, nested up to three levels: null, booleans, integers,
    /// finite floats, arbitrary Unicode strings, arrays and objects.
    pub fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("JSON has no NaN or infinity", |f| f.is_finite())
                .prop_map(Value::from),
            ".{0,24}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 32, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::vec((".{0,8}", inner), 0..6)
                    .prop_map(|entries| Value::Object(entries.into_iter().collect())),
            ]
        })
    }

    /// JSON payload bytes: an object holding a [`json_value`], written
    /// compactly or pretty-printed (the store must keep the exact bytes
    /// either way).
    pub fn json_payload() -> impl Strategy<Value = Vec<u8>> {
        (json_value(), any::<bool>()).prop_map(|(value, pretty)| {
            let object = serde_json::json!({ "value": value });
            let written = if pretty {
                serde_json::to_vec_pretty(&object)
            } else {
                serde_json::to_vec(&object)
            };
            // Serialising a `Value` cannot fail; `{}` keeps the payload
            // JSON if it somehow did.
            written.unwrap_or_else(|_| b"{}".to_vec())
        })
    }

    /// A dotted, lower-case event kind such as `session.prune.requested`.
    pub fn event_kind() -> impl Strategy<Value = String> {
        "[a-z]{1,10}(\\.[a-z_]{1,10}){0,3}"
    }

    /// An actor of one of the shapes the CLI and library record (a user
    /// name, a prefixed name, a component).
    pub fn actor() -> impl Strategy<Value = String> {
        prop_oneof![
            "cli:[a-z]{1,8}",
            "api:[a-z]{1,8}",
            Just("applier".to_owned()),
            Just("guest".to_owned()),
        ]
    }

    /// A new event with a random kind, actor, optional correlation and
    /// causation ids, schema and JSON payload. The event id is fresh
    /// (`EventId::now`) on every generation, never drawn from the
    /// strategy: shrinking would otherwise collapse ids into one value and
    /// turn a failure into an `EventIdReused`.
    pub fn new_event() -> impl Strategy<Value = NewEvent> {
        (
            event_kind(),
            actor(),
            proptest::option::of(any::<u128>()),
            proptest::option::of(any::<u128>()),
            1u32..4,
            json_payload(),
        )
            .prop_map(
                |(kind, actor, correlation, causation, schema, payload)| NewEvent {
                    event_id: EventId::now(),
                    kind,
                    schema,
                    actor,
                    correlation_id: correlation.map(uuid::Uuid::from_u128),
                    causation_id: causation.map(uuid::Uuid::from_u128),
                    payload,
                },
            )
    }

    /// A batch of `1..=max_events` new events.
    pub fn batch(max_events: usize) -> impl Strategy<Value = Vec<NewEvent>> {
        proptest::collection::vec(new_event(), 1..=max_events.max(1))
    }
}

/// The `sandlog` binary set up for a test root (the CLI tests' harness).
pub mod cli;
pub mod engine;
/// Projections support: event builders, a manual-clock store, random
/// valid histories (used by `it/projections.rs` and `benches/projections.rs`).
pub mod events;
