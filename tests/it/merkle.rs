//! The stored Merkle tree: it equals the RFC 6962 tree of the events after
//! any mix of appends (single, batched, from two stores on one file), its
//! proofs verify with the pure verifier, an old store gains it on open,
//! damage is found and repaired by a rebuild, and a log rewritten with
//! recomputed chain hashes is caught by a consistency proof against a root
//! recorded earlier.

use proptest::prelude::*;
use sandlog_core::merkle::{self, Frontier, MerkleHash};
use sandlog_core::{Position, StreamId};
use sandlog_eventstore::{EventStoreError, ExpectedVersion};
use sandlog_sqlite::EventStore;
use sandlog_tests::{StreamPool, new_event, open_options, temp_store};
use serde_json::json;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The root of the events' hashes computed in memory, independent of the
/// store's node table.
fn expected_root(store: &EventStore, size: u64) -> Result<MerkleHash, EventStoreError> {
    let mut frontier = Frontier::new();
    for envelope in sandlog_tests::envelopes(store)?.iter().take(size as usize) {
        frontier.append(&envelope.hash.0);
    }
    Ok(frontier.root())
}

fn append_n(store: &EventStore, stream: StreamId, n: usize) -> Result<(), EventStoreError> {
    let events: Vec<_> = (0..n)
        .map(|i| new_event("test.event", &json!({ "i": i })))
        .collect();
    store.append(stream, ExpectedVersion::Any, &events)?;
    Ok(())
}

/// Every inclusion proof of the first `size` events verifies against the
/// root the store reports, and the leaf is the event's own hash.
fn check_all_inclusions(store: &EventStore, size: u64) -> TestResult {
    let root = store.merkle_root(size)?;
    assert_eq!(
        root,
        expected_root(store, size)?,
        "stored root at size {size}"
    );
    let envelopes = sandlog_tests::envelopes(store)?;
    for envelope in envelopes.iter().take(size as usize) {
        let proof = store.inclusion_proof(envelope.position, size)?;
        merkle::verify_inclusion(
            &merkle::leaf_hash(&envelope.hash.0),
            envelope.position.0 - 1,
            size,
            &proof,
            &root,
        )?;
    }
    Ok(())
}

/// Goal: the tree follows single and batched appends of every size around
/// the stored-level boundary (16 leaves), and all proofs verify.
#[test]
fn stored_tree_equals_the_tree_of_the_events_after_mixed_appends() -> TestResult {
    let temp = temp_store()?;
    let stream = StreamId::System;
    for batch in [1usize, 1, 3, 11, 16, 17, 1, 31, 64, 5] {
        append_n(&temp.store, stream, batch)?;
        let (size, root) = temp.store.merkle_head()?;
        assert_eq!(root, expected_root(&temp.store, size)?);
    }
    let (size, _) = temp.store.merkle_head()?;
    assert_eq!(size, 150);
    check_all_inclusions(&temp.store, size)?;
    check_all_inclusions(&temp.store, 37)?;
    let report = temp.store.verify_merkle()?;
    assert_eq!(report.size, 150);
    assert!(report.nodes_checked >= 9, "{report:?}");
    Ok(())
}

/// Goal: two stores on one file (as two processes) appending in turn keep
/// one correct tree: each notices the other's appends instead of trusting
/// the right edge it remembers.
#[test]
fn two_writers_on_one_file_keep_one_correct_tree() -> TestResult {
    let temp = temp_store()?;
    let other = EventStore::open(&temp.path(), open_options(&temp.clock, temp.durability))?;
    for round in 0..20 {
        let writer = if round % 3 == 0 { &other } else { &temp.store };
        append_n(writer, StreamId::System, 1 + round % 7)?;
    }
    let (size, root) = temp.store.merkle_head()?;
    assert_eq!(other.merkle_head()?, (size, root));
    assert_eq!(root, expected_root(&temp.store, size)?);
    temp.store.verify_merkle()?;
    Ok(())
}

/// Goal: consistency proofs between sizes of a real log verify, and one
/// against a different old root does not.
#[test]
fn consistency_proofs_of_the_stored_tree_verify() -> TestResult {
    let temp = temp_store()?;
    append_n(&temp.store, StreamId::System, 70)?;
    let roots: Vec<MerkleHash> = (0..=70)
        .map(|size| temp.store.merkle_root(size))
        .collect::<Result<_, _>>()?;
    for (old, new) in [
        (0, 70),
        (1, 70),
        (16, 70),
        (17, 33),
        (32, 64),
        (69, 70),
        (70, 70),
    ] {
        let proof = temp.store.consistency_proof(old, new)?;
        merkle::verify_consistency(old, new, &proof, &roots[old as usize], &roots[new as usize])?;
    }
    let proof = temp.store.consistency_proof(17, 70)?;
    assert!(merkle::verify_consistency(17, 70, &proof, &roots[18], &roots[70]).is_err());
    assert!(matches!(
        temp.store.consistency_proof(10, 71),
        Err(EventStoreError::Merkle(_))
    ));
    assert!(matches!(
        temp.store.inclusion_proof(Position(0), 5),
        Err(EventStoreError::Merkle(_))
    ));
    Ok(())
}

/// Goal: a store written before the tree existed (schema 1) gains a
/// complete tree when opened. Method: drop the table and set
/// `user_version` back to 1, as such a file looks, then reopen.
#[test]
fn a_store_from_before_the_tree_gets_it_on_open() -> TestResult {
    let temp = temp_store()?;
    append_n(&temp.store, StreamId::System, 100)?;
    let before = temp.store.merkle_head()?;
    {
        let connection = rusqlite::Connection::open(temp.path())?;
        connection.execute_batch(sandlog_tests::AS_SCHEMA_4)?;
        connection.execute_batch(
            "DROP TABLE merkle_nodes; DROP TABLE checkpoints; DROP TABLE blob_index; DROP TABLE blob_chunks; \
             CREATE TABLE blobs (hash BLOB PRIMARY KEY, size INTEGER NOT NULL, data BLOB NOT NULL); \
             DROP TABLE consumer_checkpoints; DROP INDEX events_by_correlation; \
             PRAGMA user_version = 1;",
        )?;
    }
    let temp = temp.reopen()?;
    assert_eq!(temp.store.merkle_head()?, before);
    temp.store.verify_merkle()?;
    append_n(&temp.store, StreamId::System, 3)?;
    check_all_inclusions(&temp.store, 103)?;
    Ok(())
}

/// Goal: a store from before the map of stream heads (schema 5 and
/// older) gains it on open, built from the log: the same root the appends
/// made, at the head and at a stored checkpoint's size, and appends go on
/// from it. Method: record the roots, turn the file back into schema 4,
/// reopen, compare; then damage the stored root and see `verify_map`
/// refuse it.
#[test]
fn a_store_from_before_the_map_gets_it_on_open() -> TestResult {
    let temp = temp_store()?;
    let streams: Vec<StreamId> = (0..5)
        .map(|_| StreamId::Session(sandlog_core::SessionId::new_v4()))
        .collect();
    for (i, stream) in streams.iter().enumerate() {
        append_n(&temp.store, *stream, 3 + i)?;
    }
    let (middle, tree_root, middle_map) = temp.store.checkpoint_head()?;
    temp.store
        .store_checkpoint(middle, &tree_root, "a stored note")?;
    append_n(&temp.store, streams[0], 2)?;
    let (head, _, head_map) = temp.store.checkpoint_head()?;
    assert_ne!(middle_map, head_map);
    {
        let connection = rusqlite::Connection::open(temp.path())?;
        connection.execute_batch(sandlog_tests::AS_SCHEMA_4)?;
    }
    let temp = temp.reopen()?;
    assert_eq!(temp.store.map_root(head)?, head_map);
    assert_eq!(temp.store.map_root(middle)?, middle_map);
    assert_eq!(temp.store.verify_map()?, head_map);
    append_n(&temp.store, streams[4], 1)?;
    let proof = temp
        .store
        .stream_head_proof(&streams[4].to_string(), head + 1)?;
    assert_eq!(proof.head.map(|head| head.version), Some(8));
    // A stored root that disagrees with the events is found.
    temp.tamperer()?.execute(
        "UPDATE map_roots SET root = zeroblob(32) WHERE size = ?1",
        [(head + 1) as i64],
    )?;
    let error = temp.store.verify_map().unwrap_err();
    assert!(error.to_string().contains("the events make"), "{error}");
    Ok(())
}

/// Goal: a changed, deleted or extra node is reported by `verify_merkle`,
/// and `rebuild_merkle` restores the tree.
#[test]
fn damaged_nodes_are_found_and_a_rebuild_repairs_them() -> TestResult {
    let temp = temp_store()?;
    append_n(&temp.store, StreamId::System, 80)?;
    let good = temp.store.merkle_head()?;
    let damages = [
        "UPDATE merkle_nodes SET hash = zeroblob(32) WHERE level = 4 AND idx = 2",
        "DELETE FROM merkle_nodes WHERE level = 6 AND idx = 0",
        "INSERT INTO merkle_nodes VALUES (9, 9, zeroblob(32))",
    ];
    for damage in damages {
        temp.tamperer()?.execute_batch(damage)?;
        assert!(
            matches!(
                temp.store.verify_merkle(),
                Err(EventStoreError::MerkleDamaged { .. })
            ),
            "not found: {damage}"
        );
        assert_eq!(temp.store.rebuild_merkle()?, 80);
        assert_eq!(temp.store.merkle_head()?, good);
        temp.store.verify_merkle()?;
    }
    Ok(())
}

/// Goal: the point of the tree. An attacker rewrites an early event and
/// recomputes every later chain hash and the whole tree, so `verify` of
/// the chain passes; a consistency proof against the root an auditor
/// recorded before cannot be made to verify.
#[test]
fn a_rewritten_history_with_recomputed_hashes_fails_consistency() -> TestResult {
    let temp = temp_store()?;
    let pool = StreamPool::new(3);
    for i in 0..40 {
        append_n(&temp.store, pool.stream(i % 4), 1)?;
    }
    let (old_size, old_root) = temp.store.merkle_head()?;
    append_n(&temp.store, StreamId::System, 5)?;

    // Rewrite event 3's payload and re-chain everything after it.
    let envelopes = temp.envelopes()?;
    let tamperer = temp.tamperer()?;
    let mut prev = envelopes[1].hash;
    for envelope in &envelopes[2..] {
        let mut envelope = envelope.clone();
        if envelope.position.0 == 3 {
            envelope.payload = br#"{"i":"rewritten"}"#.to_vec();
        }
        envelope.prev_hash = prev;
        let stream_text = envelope.stream.to_string();
        let fields = envelope.fields(&stream_text);
        envelope.hash = sandlog_core::chain_hash(&prev, &fields);
        tamperer.execute(
            "UPDATE events SET payload = ?1, prev_hash = ?2, hash = ?3 WHERE position = ?4",
            rusqlite::params![
                envelope.payload,
                envelope.prev_hash.0.as_slice(),
                envelope.hash.0.as_slice(),
                envelope.position.0 as i64
            ],
        )?;
        prev = envelope.hash;
    }
    drop(tamperer);
    let temp = temp.reopen()?;
    temp.store.rebuild_merkle()?;
    temp.store.verify()?; // the chain alone cannot tell
    temp.store.verify_merkle()?; // nor the tree against itself

    let (new_size, new_root) = temp.store.merkle_head()?;
    let proof = temp.store.consistency_proof(old_size, new_size)?;
    assert_eq!(
        merkle::verify_consistency(old_size, new_size, &proof, &old_root, &new_root),
        Err(merkle::MerkleError::RootMismatch)
    );
    assert_ne!(temp.store.merkle_root(old_size)?, old_root);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// Random batch sizes across streams: the stored root always equals the
    /// in-memory root of the events, and the last event's proof verifies.
    #[test]
    fn stored_root_follows_random_batches(batches in proptest::collection::vec(1usize..40, 1..12)) {
        let temp = temp_store().unwrap();
        let pool = StreamPool::new(2);
        for (i, batch) in batches.iter().enumerate() {
            append_n(&temp.store, pool.stream(i % 3), *batch).unwrap();
            let (size, root) = temp.store.merkle_head().unwrap();
            prop_assert_eq!(root, expected_root(&temp.store, size).unwrap());
            let proof = temp.store.inclusion_proof(Position(size), size).unwrap();
            let last = sandlog_tests::envelopes(&temp.store).unwrap().pop().unwrap();
            prop_assert!(merkle::verify_inclusion(&merkle::leaf_hash(&last.hash.0), size - 1, size, &proof, &root).is_ok());
        }
    }
}
