//! One conformance suite for the log's storage contract (`Backend`), run
//! on SQLite and on PostgreSQL (a real server: see `support::pg`), and a
//! check that both store the same input as the same log, event for event,
//! hash for hash, with the same Merkle roots and proofs and the same maps
//! of stream heads.
//!
//! Each test runs its checks on both backends in turn; a PostgreSQL server
//! that cannot be had fails the test, saying why.
#![cfg(test)]

use std::sync::Arc;
use std::time::Duration;

use sandlog_core::merkle::{self, Frontier};
use sandlog_core::{
    Clock, Envelope, Hash, ManualClock, NewEvent, Position, SessionId, StreamId, StreamVersion,
};
use sandlog_eventstore::blobs::CHUNK_BYTES;
use sandlog_eventstore::{
    Backend, BlobState, ChainProblem, Digest, EventStoreError, ExpectedVersion, LogFilter,
};
use sandlog_postgres::{PgEventStore, PgOptions};
use sandlog_tests::pg::{self, PgDatabase};
use sandlog_tests::{TEST_EPOCH, TempStore, new_event, new_event_bytes, temp_store};
use serde_json::json;

/// A backend under test, with the tamperer's raw access to its storage.
trait Subject {
    fn name(&self) -> &'static str;
    fn backend(&self) -> &dyn Backend;
    fn clock(&self) -> &ManualClock;
    /// Rewrites an event's payload behind the store's back.
    fn tamper_payload(&self, position: Position, payload: &[u8]);
    /// Deletes an event behind the store's back.
    fn delete_event(&self, position: Position);
    /// Flips a byte of a blob's first chunk.
    fn corrupt_blob(&self, hash: &Hash);
}

struct Sqlite(TempStore);

impl Subject for Sqlite {
    fn name(&self) -> &'static str {
        "sqlite"
    }
    fn backend(&self) -> &dyn Backend {
        &self.0.store
    }
    fn clock(&self) -> &ManualClock {
        &self.0.clock
    }
    fn tamper_payload(&self, position: Position, payload: &[u8]) {
        let tamperer = self.0.tamperer().unwrap();
        let changed = tamperer
            .execute(
                "UPDATE events SET payload = ?1 WHERE position = ?2",
                rusqlite::params![payload, position.0 as i64],
            )
            .unwrap();
        assert_eq!(changed, 1);
    }
    fn delete_event(&self, position: Position) {
        let tamperer = self.0.tamperer().unwrap();
        let changed = tamperer
            .execute(
                "DELETE FROM events WHERE position = ?1",
                [position.0 as i64],
            )
            .unwrap();
        assert_eq!(changed, 1);
    }
    fn corrupt_blob(&self, hash: &Hash) {
        let tamperer = self.0.tamperer().unwrap();
        let changed = tamperer
            .execute(
                "UPDATE blob_chunks SET data = zeroblob(length(data)) WHERE hash = ?1 AND seq = 0",
                [hash.0.as_slice()],
            )
            .unwrap();
        assert_eq!(changed, 1);
    }
}

struct Postgres {
    store: PgEventStore,
    clock: ManualClock,
    database: PgDatabase,
}

impl Postgres {
    /// The tamperer: the server's superuser with the append-only triggers
    /// switched off.
    fn tamper(&self, sql: &str, params: &[&(dyn postgres::types::ToSql + Sync)]) {
        let mut client = self.database.client().unwrap();
        let mut transaction = client.transaction().unwrap();
        transaction
            .batch_execute("ALTER TABLE events DISABLE TRIGGER USER")
            .unwrap();
        let changed = transaction.execute(sql, params).unwrap();
        assert_eq!(changed, 1, "{sql}");
        transaction
            .batch_execute("ALTER TABLE events ENABLE TRIGGER USER")
            .unwrap();
        transaction.commit().unwrap();
    }
}

impl Subject for Postgres {
    fn name(&self) -> &'static str {
        "postgres"
    }
    fn backend(&self) -> &dyn Backend {
        &self.store
    }
    fn clock(&self) -> &ManualClock {
        &self.clock
    }
    fn tamper_payload(&self, position: Position, payload: &[u8]) {
        self.tamper(
            "UPDATE events SET payload = $1 WHERE position = $2",
            &[&payload, &(position.0 as i64)],
        );
    }
    fn delete_event(&self, position: Position) {
        self.tamper(
            "DELETE FROM events WHERE position = $1",
            &[&(position.0 as i64)],
        );
    }
    fn corrupt_blob(&self, hash: &Hash) {
        self.tamper(
            "UPDATE blob_chunks SET data = decode(repeat('00', length(data)), 'hex') \
             WHERE hash = $1 AND seq = 0",
            &[&hash.0.as_slice()],
        );
    }
}

/// A fresh store on a fresh database of the test server, with a manual
/// clock at [`TEST_EPOCH`].
fn postgres() -> Postgres {
    let database = pg::database().unwrap_or_else(|reason| panic!("{reason}"));
    let clock = ManualClock::new(TEST_EPOCH);
    let store = PgEventStore::connect_with(
        &database.url,
        PgOptions::default().clock(Arc::new(clock.clone())),
    )
    .unwrap();
    Postgres {
        store,
        clock,
        database,
    }
}

/// Both backends, fresh and empty, with clocks at the same instant.
fn subjects() -> Vec<Box<dyn Subject>> {
    vec![
        Box::new(Sqlite(temp_store().unwrap())),
        Box::new(postgres()),
    ]
}

fn session() -> StreamId {
    StreamId::Session(SessionId::new_v4())
}

fn events(kind: &str, n: usize) -> Vec<NewEvent> {
    (0..n)
        .map(|i| new_event(kind, &json!({ "n": i })))
        .collect()
}

fn all(backend: &dyn Backend) -> Vec<Envelope> {
    backend.query_page(&LogFilter::default()).unwrap()
}

#[test]
fn appends_and_conflicts_behave_alike() {
    for subject in subjects() {
        let name = subject.name();
        let store = subject.backend();
        let a = session();
        let b = session();
        assert_eq!(store.head().unwrap().position, Position::ZERO, "{name}");
        assert_eq!(store.head().unwrap().hash, Hash::GENESIS, "{name}");

        let created = store
            .append(a, ExpectedVersion::NoStream, &events("session.created", 1))
            .unwrap();
        assert_eq!(created[0].position, Position(1), "{name}");
        assert_eq!(created[0].version, StreamVersion(1), "{name}");
        assert_eq!(created[0].prev_hash, Hash::GENESIS, "{name}");

        // Creating it again conflicts, naming where the stream is.
        match store.append(a, ExpectedVersion::NoStream, &events("session.created", 1)) {
            Err(EventStoreError::VersionConflict {
                stream,
                expected: ExpectedVersion::NoStream,
                actual: Some(StreamVersion(1)),
            }) => assert_eq!(stream, a, "{name}"),
            other => panic!("{name}: {other:?}"),
        }
        // Exact on a missing stream and a stale version conflict.
        assert!(
            matches!(
                store.append(b, ExpectedVersion::Exact(StreamVersion(1)), &events("x", 1)),
                Err(EventStoreError::VersionConflict { actual: None, .. })
            ),
            "{name}"
        );
        let more = store
            .append(a, ExpectedVersion::Exact(StreamVersion(1)), &events("x", 3))
            .unwrap();
        assert_eq!(
            more.iter().map(|e| e.position.0).collect::<Vec<_>>(),
            [2, 3, 4],
            "{name}"
        );
        assert_eq!(more[0].prev_hash, created[0].hash, "{name}");
        assert!(matches!(
            store.append(a, ExpectedVersion::Exact(StreamVersion(1)), &events("x", 1)),
            Err(EventStoreError::VersionConflict {
                actual: Some(StreamVersion(4)),
                ..
            })
        ));
        store
            .append(a, ExpectedVersion::Any, &events("x", 1))
            .unwrap();
        assert_eq!(store.stream_version(a).unwrap(), Some(StreamVersion(5)));
        assert_eq!(store.stream_version(b).unwrap(), None);

        // A batch over several streams is all or nothing: the second
        // stream's conflict leaves the first unwritten.
        let head = store.head().unwrap();
        let failed = store.append_batch(&[
            (b, ExpectedVersion::NoStream, events("y", 2)),
            (a, ExpectedVersion::Exact(StreamVersion(2)), events("y", 1)),
        ]);
        assert!(
            matches!(failed, Err(EventStoreError::VersionConflict { stream, .. }) if stream == a),
            "{name}"
        );
        assert_eq!(store.head().unwrap(), head, "{name}");
        assert_eq!(store.stream_version(b).unwrap(), None, "{name}");
        let both = store
            .append_batch(&[
                (b, ExpectedVersion::NoStream, events("y", 2)),
                (a, ExpectedVersion::Exact(StreamVersion(5)), events("y", 1)),
            ])
            .unwrap();
        assert_eq!(
            both.iter().map(|e| e.position.0).collect::<Vec<_>>(),
            [6, 7, 8],
            "{name}"
        );
        assert_eq!(both[2].version, StreamVersion(6), "{name}");

        // Invalid batches write nothing.
        let mut twice = events("z", 2);
        twice[1].event_id = twice[0].event_id;
        let invalid: [Result<Vec<Envelope>, EventStoreError>; 4] = [
            store.append(a, ExpectedVersion::Any, &twice),
            store.append(a, ExpectedVersion::Any, &[new_event("", &json!({}))]),
            store.append(
                a,
                ExpectedVersion::Any,
                &[new_event_bytes("big", vec![b'x'; 1024 * 1024 + 1])],
            ),
            store.append_batch(&[
                (b, ExpectedVersion::Any, events("z", 1)),
                (b, ExpectedVersion::Any, events("z", 1)),
            ]),
        ];
        for outcome in invalid {
            assert!(
                matches!(outcome, Err(EventStoreError::InvalidBatch(_))),
                "{name}: {outcome:?}"
            );
        }
        assert!(
            store
                .append(a, ExpectedVersion::Any, &[])
                .unwrap()
                .is_empty()
        );
        assert_eq!(store.head().unwrap().position, Position(8), "{name}");
        sandlog_tests::check_log_shape(&all(store)).unwrap();
        assert_eq!(store.verify(None).unwrap().events, 8, "{name}");
    }
}

#[test]
fn idempotent_retries_behave_alike() {
    for subject in subjects() {
        let name = subject.name();
        let store = subject.backend();
        let a = session();
        let batch = events("x", 3);
        let first = store.append(a, ExpectedVersion::NoStream, &batch).unwrap();
        // The same batch again (its expected version is stale now) is a
        // retry: the stored envelopes, nothing appended.
        subject.clock().advance(Duration::from_secs(5));
        let again = store.append(a, ExpectedVersion::NoStream, &batch).unwrap();
        assert_eq!(again, first, "{name}");
        assert_eq!(store.head().unwrap().position, Position(3), "{name}");
        // Also inside a several-stream batch.
        let b = session();
        let mixed = store
            .append_batch(&[
                (a, ExpectedVersion::NoStream, batch.clone()),
                (b, ExpectedVersion::NoStream, events("y", 1)),
            ])
            .unwrap();
        assert_eq!(mixed[..3], first[..], "{name}");
        assert_eq!(mixed[3].position, Position(4), "{name}");

        // A changed event under a stored id is a reused id.
        let mut changed = batch.clone();
        changed[1].payload = b"{}".to_vec();
        match store.append(a, ExpectedVersion::Any, &changed) {
            Err(EventStoreError::EventIdReused { event_id, position }) => {
                assert_eq!(event_id, batch[1].event_id, "{name}");
                assert_eq!(position, Position(2), "{name}");
            }
            other => panic!("{name}: {other:?}"),
        }
        // Only part of the batch stored.
        let mut longer = batch.clone();
        longer.push(new_event("x", &json!({"n": 9})));
        assert!(
            matches!(
                store.append(a, ExpectedVersion::Any, &longer),
                Err(EventStoreError::EventIdReused {
                    position: Position(1),
                    ..
                })
            ),
            "{name}"
        );
        // A stored id later in a new batch.
        let reuse = vec![new_event("x", &json!({})), batch[2].clone()];
        match store.append(a, ExpectedVersion::Any, &reuse) {
            Err(EventStoreError::EventIdReused { event_id, position }) => {
                assert_eq!(event_id, batch[2].event_id, "{name}");
                assert_eq!(position, Position(3), "{name}");
            }
            other => panic!("{name}: {other:?}"),
        }
        // ...but the expected version is checked first, as on a new batch.
        assert!(
            matches!(
                store.append(a, ExpectedVersion::NoStream, &reuse),
                Err(EventStoreError::VersionConflict { .. })
            ),
            "{name}"
        );
        // The retry of the same batch on another stream is a reused id.
        assert!(
            matches!(
                store.append(session(), ExpectedVersion::Any, &batch),
                Err(EventStoreError::EventIdReused { .. })
            ),
            "{name}"
        );
        assert_eq!(store.head().unwrap().position, Position(4), "{name}");
        store.verify(None).unwrap();
    }
}

#[test]
fn reads_by_range_stream_time_and_kind_behave_alike() {
    for subject in subjects() {
        let name = subject.name();
        let store = subject.backend();
        let a = session();
        let b = session();
        let t0 = subject.clock().now();
        store
            .append(a, ExpectedVersion::NoStream, &events("session.created", 1))
            .unwrap();
        subject.clock().advance(Duration::from_secs(10));
        let t1 = subject.clock().now();
        store
            .append(b, ExpectedVersion::NoStream, &events("session.created", 1))
            .unwrap();
        store
            .append(
                a,
                ExpectedVersion::Any,
                &events("session.prune.intended", 2),
            )
            .unwrap();
        subject.clock().advance(Duration::from_secs(10));
        let t2 = subject.clock().now();
        store
            .append(b, ExpectedVersion::Any, &events("execution.finished", 2))
            .unwrap();
        // A clock that goes backwards does not move recorded_at back.
        subject.clock().set(t0);
        let late = store
            .append(b, ExpectedVersion::Any, &events("execution.finished", 1))
            .unwrap();
        assert_eq!(late[0].recorded_at, t2, "{name}");

        let positions = |filter: LogFilter| -> Vec<u64> {
            store
                .query_page(&filter)
                .unwrap()
                .iter()
                .map(|e| e.position.0)
                .collect()
        };
        assert_eq!(
            positions(LogFilter::default()),
            [1, 2, 3, 4, 5, 6, 7],
            "{name}"
        );
        let range = LogFilter {
            from: Some(Position(2)),
            to: Some(Position(4)),
            ..LogFilter::default()
        };
        assert_eq!(positions(range), [2, 3, 4], "{name}");
        let stream = LogFilter {
            stream: Some(a),
            ..LogFilter::default()
        };
        assert_eq!(positions(stream), [1, 3, 4], "{name}");
        let time = LogFilter {
            since: Some(t1),
            until: Some(t2),
            ..LogFilter::default()
        };
        assert_eq!(positions(time), [2, 3, 4], "{name}");
        let exact = LogFilter {
            kinds: vec!["session.created".into(), "execution.finished".into()],
            ..LogFilter::default()
        };
        assert_eq!(positions(exact), [1, 2, 5, 6, 7], "{name}");
        let prefix = LogFilter {
            kinds: vec!["session.prune.*".into()],
            ..LogFilter::default()
        };
        assert_eq!(positions(prefix), [3, 4], "{name}");
        let combined = LogFilter {
            stream: Some(b),
            kinds: vec!["execution.*".into()],
            from: Some(Position(6)),
            limit: Some(1),
            ..LogFilter::default()
        };
        assert_eq!(positions(combined), [6], "{name}");
        let none = LogFilter {
            limit: Some(0),
            ..LogFilter::default()
        };
        assert!(positions(none).is_empty(), "{name}");
    }
}

#[test]
fn reads_by_correlation_id_behave_alike() {
    for subject in subjects() {
        let name = subject.name();
        let store = subject.backend();
        let task = uuid::Uuid::from_u128(42);
        let other = uuid::Uuid::from_u128(43);
        let mut batch = events("session.created", 6);
        for (index, event) in batch.iter_mut().enumerate() {
            event.correlation_id = [Some(task), Some(other), None]
                .get(index % 3)
                .copied()
                .flatten();
        }
        store
            .append(session(), ExpectedVersion::NoStream, &batch)
            .unwrap();
        let found = store
            .query_page(&LogFilter {
                correlation: Some(task),
                ..LogFilter::default()
            })
            .unwrap();
        let positions: Vec<u64> = found.iter().map(|e| e.position.0).collect();
        assert_eq!(positions, [1, 4], "{name}");
        assert!(
            found.iter().all(|e| e.correlation_id == Some(task)),
            "{name}"
        );
    }
}

#[test]
fn reads_page_through_a_log_longer_than_a_page() {
    let n = sandlog_eventstore::PAGE_EVENTS + 100;
    for subject in subjects() {
        let name = subject.name();
        let store = subject.backend();
        let a = session();
        store
            .append(a, ExpectedVersion::NoStream, &events("x", n))
            .unwrap();
        let read = all(store);
        assert_eq!(read.len(), n, "{name}");
        sandlog_tests::check_log_shape(&read).unwrap();
        let limited = store
            .query_page(&LogFilter {
                from: Some(Position(10)),
                limit: Some(sandlog_eventstore::PAGE_EVENTS as u64 + 1),
                ..LogFilter::default()
            })
            .unwrap();
        assert_eq!(limited.len(), sandlog_eventstore::PAGE_EVENTS + 1, "{name}");
        assert_eq!(limited[0].position, Position(10), "{name}");
        assert_eq!(store.verify(None).unwrap().events, n as u64, "{name}");
    }
}

#[test]
fn verify_names_the_first_tampered_position_alike() {
    for subject in subjects() {
        let name = subject.name();
        let store = subject.backend();
        let a = session();
        store
            .append(a, ExpectedVersion::NoStream, &events("x", 6))
            .unwrap();
        let report = store.verify(None).unwrap();
        assert_eq!(report.events, 6, "{name}");
        assert_eq!(report.head_hash, store.head().unwrap().hash, "{name}");
        let digest = Digest {
            position: Position(4),
            hash: all(store)[3].hash,
        };
        store.verify(Some(digest)).unwrap();
        let wrong = Digest {
            position: Position(4),
            hash: Hash::of(b"not it"),
        };
        assert!(matches!(
            store.verify(Some(wrong)),
            Err(EventStoreError::ChainBroken {
                position: Position(4),
                problem: ChainProblem::DigestMismatch { .. }
            })
        ));
        let beyond = Digest {
            position: Position(9),
            hash: Hash::of(b"later"),
        };
        assert!(matches!(
            store.verify(Some(beyond)),
            Err(EventStoreError::ChainBroken {
                problem: ChainProblem::Truncated { head: Position(6) },
                ..
            })
        ));

        subject.tamper_payload(Position(3), br#"{"n":99}"#);
        match store.verify(None) {
            Err(EventStoreError::ChainBroken {
                position: Position(3),
                problem: ChainProblem::HashMismatch,
            }) => {}
            other => panic!("{name}: {other:?}"),
        }
        subject.delete_event(Position(2));
        match store.verify(None) {
            Err(EventStoreError::ChainBroken {
                position: Position(2),
                problem: ChainProblem::Missing { found: Position(3) },
            }) => {}
            other => panic!("{name}: {other:?}"),
        }
    }
}

#[test]
fn blobs_round_trip_and_corruption_is_caught_alike() {
    let small = b"print('hello')\n".to_vec();
    let compressible = vec![b'a'; 3 * CHUNK_BYTES + 17];
    let random: Vec<u8> = (0..CHUNK_BYTES + 5)
        .map(|i| (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes()[7])
        .collect();
    for subject in subjects() {
        let name = subject.name();
        let store = subject.backend();
        for bytes in [
            Vec::new(),
            small.clone(),
            compressible.clone(),
            random.clone(),
        ] {
            let hash = store.put_blob(&bytes).unwrap();
            assert_eq!(hash, Hash::of(&bytes), "{name}");
            assert_eq!(store.put_blob(&bytes).unwrap(), hash, "{name}: idempotent");
            assert_eq!(
                store.get_blob(&hash).unwrap().as_deref(),
                Some(&bytes[..]),
                "{name}"
            );
            let mut out = Vec::new();
            match store.read_blob(&hash, &mut out).unwrap() {
                BlobState::Kept { size, .. } => assert_eq!(size, bytes.len() as u64, "{name}"),
                other => panic!("{name}: {other:?}"),
            }
            assert_eq!(out, bytes, "{name}");
        }
        // Compression applies, with the same stored size on both.
        match store.blob_state(&Hash::of(&compressible)).unwrap() {
            BlobState::Kept { stored_bytes, .. } => {
                assert!(stored_bytes < compressible.len() as u64 / 10, "{name}")
            }
            other => panic!("{name}: {other:?}"),
        }
        let unknown = Hash::of(b"never stored");
        assert_eq!(store.blob_state(&unknown).unwrap(), BlobState::Missing);
        assert_eq!(store.get_blob(&unknown).unwrap(), None, "{name}");

        let hash = Hash::of(&small);
        subject.corrupt_blob(&hash);
        assert!(
            matches!(store.get_blob(&hash), Err(EventStoreError::BlobCorrupt { hash: h, .. }) if h == hash),
            "{name}"
        );
        let hash = Hash::of(&random);
        subject.corrupt_blob(&hash);
        let mut out = Vec::new();
        assert!(
            matches!(
                store.read_blob(&hash, &mut out),
                Err(EventStoreError::BlobCorrupt { .. })
            ),
            "{name}"
        );
        assert!(
            out.is_empty(),
            "{name}: no bytes of a bad chunk are written"
        );
    }
}

#[test]
fn merkle_roots_and_proofs_behave_alike() {
    for subject in subjects() {
        let name = subject.name();
        let store = subject.backend();
        // Enough events for several stored levels (16 leaves and up).
        for round in 0..5 {
            store
                .append(
                    session(),
                    ExpectedVersion::NoStream,
                    &events("x", 7 + round * 11),
                )
                .unwrap();
        }
        let envelopes = all(store);
        let size = envelopes.len() as u64;
        let mut frontier = Frontier::new();
        let mut roots = vec![merkle::empty_root()];
        for envelope in &envelopes {
            frontier.append(&envelope.hash.0);
            roots.push(frontier.root());
        }
        for n in [0, 1, 2, 15, 16, 17, 31, 32, 33, size] {
            assert_eq!(
                store.merkle_root(n).unwrap(),
                roots[n as usize],
                "{name}: size {n}"
            );
        }
        assert!(store.merkle_root(size + 1).is_err(), "{name}");
        for (position, n) in [(1, 1), (1, size), (16, 17), (33, 40), (size, size)] {
            let proof = store.inclusion_proof(Position(position), n).unwrap();
            let leaf = merkle::leaf_hash(&envelopes[position as usize - 1].hash.0);
            merkle::verify_inclusion(&leaf, position - 1, n, &proof, &roots[n as usize])
                .unwrap_or_else(|error| panic!("{name}: {position} in {n}: {error}"));
        }
        for (old, new) in [(1, 2), (16, 32), (17, size), (5, 5), (31, 33)] {
            let proof = store.consistency_proof(old, new).unwrap();
            merkle::verify_consistency(
                old,
                new,
                &proof,
                &roots[old as usize],
                &roots[new as usize],
            )
            .unwrap_or_else(|error| panic!("{name}: {old} to {new}: {error}"));
        }
        assert!(store.consistency_proof(2, size + 1).is_err(), "{name}");
    }
}

/// The same appends with the same clock, on both backends: the same
/// envelopes (positions, versions, times, hashes), roots, proofs, blob
/// states and errors.
#[test]
fn both_backends_store_the_same_input_as_the_same_log() {
    let subjects = subjects();
    let streams: Vec<StreamId> = (0..4).map(|_| session()).collect();
    let mut script: Vec<Vec<(StreamId, ExpectedVersion, Vec<NewEvent>)>> = Vec::new();
    for round in 0..12u64 {
        let stream = streams[(round % 4) as usize];
        let expected = if round < 4 {
            ExpectedVersion::NoStream
        } else {
            ExpectedVersion::Any
        };
        let mut batch = vec![(stream, expected, events("step", 1 + (round % 5) as usize))];
        if round % 3 == 0 {
            let mut correlated = new_event("other", &json!({"round": round}));
            correlated.correlation_id = Some(uuid::Uuid::new_v4());
            correlated.causation_id = Some(uuid::Uuid::new_v4());
            batch.push((session(), ExpectedVersion::NoStream, vec![correlated]));
        }
        script.push(batch);
    }
    let conflict = (streams[0], ExpectedVersion::NoStream, events("late", 1));
    let blob = vec![7u8; CHUNK_BYTES + 3];
    let mut logs = Vec::new();
    for subject in &subjects {
        let store = subject.backend();
        let mut returned = Vec::new();
        // The map of stream heads at each commit, stored and recomputed
        // from the returned envelopes alone.
        let mut map_roots = Vec::new();
        let mut recomputed = sandlog_core::map::MemoryMap::new();
        for (step, batch) in script.iter().enumerate() {
            subject
                .clock()
                .advance(Duration::from_millis(250 * step as u64));
            let appended = store.append_batch(batch).unwrap();
            let mut heads = sandlog_core::map::HeadFold::default();
            for envelope in &appended {
                heads.push(
                    &envelope.stream.to_string(),
                    envelope.version.0,
                    envelope.position.0,
                    envelope.hash,
                );
            }
            let expected = recomputed.apply(&heads.take()).unwrap();
            let size = appended.last().map_or(0, |last| last.position.0);
            let stored = store.map_root(size).unwrap();
            assert_eq!(stored, expected, "{}: map root at {size}", subject.name());
            map_roots.push((size, stored));
            returned.extend(appended);
            // Retries of every batch return what was stored.
            assert_eq!(
                store.append_batch(batch).unwrap().len(),
                batch.iter().map(|b| b.2.len()).sum::<usize>()
            );
        }
        let error = store
            .append_batch(std::slice::from_ref(&conflict))
            .unwrap_err()
            .to_string();
        store.put_blob(&blob).unwrap();
        let envelopes = all(store);
        assert_eq!(returned, envelopes, "{}", subject.name());
        let size = envelopes.len() as u64;
        let roots: Vec<_> = (0..=size).map(|n| store.merkle_root(n).unwrap()).collect();
        let inclusions: Vec<_> = (1..=size)
            .map(|p| store.inclusion_proof(Position(p), size).unwrap())
            .collect();
        let consistencies: Vec<_> = (1..=size)
            .map(|old| store.consistency_proof(old, size).unwrap())
            .collect();
        logs.push((
            envelopes,
            store.head().unwrap(),
            store.verify(None).unwrap(),
            roots,
            inclusions,
            consistencies,
            error,
            store.blob_state(&Hash::of(&blob)).unwrap(),
            map_roots,
        ));
    }
    let (sqlite, postgres) = (&logs[0], &logs[1]);
    assert!(sqlite.0.len() > 30);
    for (left, right) in sqlite.0.iter().zip(&postgres.0) {
        assert_eq!(left, right, "event at position {}", left.position);
    }
    assert_eq!(sqlite.0.len(), postgres.0.len());
    assert_eq!(sqlite.1, postgres.1, "heads");
    assert_eq!(sqlite.2, postgres.2, "verify reports");
    assert_eq!(sqlite.3, postgres.3, "Merkle roots");
    assert_eq!(sqlite.4, postgres.4, "inclusion proofs");
    assert_eq!(sqlite.5, postgres.5, "consistency proofs");
    assert_eq!(sqlite.6, postgres.6, "conflict errors");
    assert_eq!(sqlite.7, postgres.7, "blob states");
    assert_eq!(sqlite.8, postgres.8, "map roots");
}

/// What one random operation asks for: a stream (of four), an expectation
/// (any, no stream, the version the stream is at, a stale version), a
/// batch, and whether to send it twice (a retry).
type Operation = (usize, u8, Vec<NewEvent>, bool);

fn operations() -> impl proptest::strategy::Strategy<Value = Vec<Operation>> {
    proptest::collection::vec(
        (
            0..4usize,
            0..4u8,
            sandlog_tests::strategies::batch(5),
            proptest::bool::weighted(0.2),
        ),
        1..16,
    )
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        // Each case makes a PostgreSQL database: a few cases, many
        // operations each.
        cases: 8,
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// Random appends (conflicts, retries and all) give the same outcome
    /// on both backends, call by call, and the same log, head and Merkle
    /// root.
    #[test]
    fn random_appends_give_the_same_log_on_both(operations in operations()) {
        let subjects = subjects();
        let streams: Vec<StreamId> = (0..4).map(|_| session()).collect();
        let mut outcomes: Vec<Vec<String>> = Vec::new();
        for subject in &subjects {
            let store = subject.backend();
            let mut seen = Vec::new();
            for (step, (stream, expectation, batch, retry)) in operations.iter().enumerate() {
                subject.clock().advance(Duration::from_millis(step as u64 * 7));
                let stream = streams[*stream];
                let current = store.stream_version(stream).unwrap();
                let expected = match expectation {
                    0 => ExpectedVersion::Any,
                    1 => ExpectedVersion::NoStream,
                    2 => current.map_or(ExpectedVersion::NoStream, ExpectedVersion::Exact),
                    _ => ExpectedVersion::Exact(StreamVersion(current.map_or(1, |v| v.0 + 1))),
                };
                let sends = if *retry { 2 } else { 1 };
                for _ in 0..sends {
                    seen.push(match store.append(stream, expected, batch) {
                        Ok(envelopes) => format!("{envelopes:?}"),
                        Err(error) => format!("error: {error}"),
                    });
                }
            }
            let log = all(store);
            let size = log.len() as u64;
            seen.push(format!("{log:?}"));
            seen.push(format!("{:?}", store.head().unwrap()));
            seen.push(format!("{:?}", store.merkle_root(size).unwrap()));
            seen.push(format!("{:?}", store.map_root(size).unwrap()));
            seen.push(format!("{:?}", store.verify(None).unwrap()));
            outcomes.push(seen);
        }
        proptest::prop_assert_eq!(&outcomes[0], &outcomes[1]);
    }
}
