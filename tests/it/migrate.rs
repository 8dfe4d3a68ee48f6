//! `migrate`: a real root's log (sessions, Python runs, host writes with
//! blobs over several chunks, an erasure, a prune, a signed checkpoint)
//! copied SQLite → PostgreSQL → SQLite on a real server (see
//! `support::pg`): the same events byte for byte, head hash and Merkle
//! root on every side, blobs readable and erased ones still erased, and
//! the copy adopted by a root that then verifies. Non-empty destinations
//! and a tampered source are refused.
#![cfg(test)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use sandlog_core::{Envelope, Position, PrunePolicy, WorkspacePath};
use sandlog_eventstore::{Backend, BlobState, ChainProblem, EventStoreError, LogFilter};
use sandlog_postgres::PgEventStore;
use sandlog_runtime::migrate::{LogLocation, migrate};
use sandlog_runtime::{Engine, ExecRequest, RuntimeError};
use sandlog_sqlite::{EventStore, OpenOptions};
use sandlog_tests::engine::{FixtureError, TestRoot, options};
use sandlog_tests::pg;

fn path(text: &str) -> WorkspacePath {
    WorkspacePath::parse(text).unwrap()
}

fn existing(path: &Path) -> Result<EventStore, EventStoreError> {
    EventStore::open(
        path,
        OpenOptions {
            create: false,
            ..OpenOptions::default()
        },
    )
}

fn all_events(store: &dyn Backend) -> Result<Vec<Envelope>, EventStoreError> {
    let mut events = Vec::new();
    loop {
        let page = store.query_page(&LogFilter {
            from: Some(Position(events.len() as u64 + 1)),
            limit: Some(1000),
            ..LogFilter::default()
        })?;
        if page.is_empty() {
            return Ok(events);
        }
        events.extend(page);
    }
}

/// Every blob a store's events name, with its state and kept bytes.
fn blobs(store: &dyn Backend, hashes: &[sandlog_core::Hash]) -> Vec<(BlobState, Vec<u8>)> {
    hashes
        .iter()
        .map(|hash| {
            let mut bytes = Vec::new();
            let state = store.read_blob(hash, &mut bytes).unwrap();
            (state, bytes)
        })
        .collect()
}

/// Bytes that compress poorly, so a blob spans several stored chunks.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// A root with every kind of history.
fn busy_root() -> Result<TestRoot, FixtureError> {
    let root = TestRoot::new()?;
    let engine = &root.engine;
    let doomed = engine.create_session(BTreeMap::new())?.session_id;
    engine.write_file(doomed, &path("old.txt"), b"old", false)?;
    root.clock.advance(Duration::from_secs(7200));
    let kept = engine.create_session(BTreeMap::new())?.session_id;
    let erased = engine.create_session(BTreeMap::new())?.session_id;
    let run = engine.execute(
        kept,
        &ExecRequest::python("open('out.txt', 'w').write('hello ' * 1000)\nprint(6 * 7)"),
    )?;
    assert_eq!(run.outcome, sandlog_core::Outcome::Ok, "{run:?}");
    engine.write_file(kept, &path("data/big.bin"), &noise(3 << 20, 1), false)?;
    engine.write_file(kept, &path("small.txt"), b"small", false)?;
    engine.write_file(erased, &path("secret.bin"), &noise(10_000, 2), false)?;
    engine.erase(erased, None, "test: migrated erasures stay erased")?;
    let pruned = engine.prune(
        &PrunePolicy::older_than(Duration::from_secs(3600)),
        false,
        &|_, _| {},
    )?;
    assert!(pruned.deleted_sessions.contains(&doomed), "{pruned:?}");
    let key = sandlog_core::note::SignerKey::from_seed("sandlog.test/log", [3; 32])?;
    engine.sign_checkpoint(&key)?;
    Ok(root)
}

#[test]
fn round_trip_through_postgres_keeps_the_log_byte_for_byte() -> Result<(), FixtureError> {
    let root = busy_root()?;
    let database = root.engine.layout().database.clone();
    let source = existing(&database)?;
    let events = all_events(&source)?;
    let head = source.head()?;
    let merkle = source.merkle_root(head.position.0)?;
    let hashes: Vec<_> = source.blob_hashes()?.into_iter().map(|(h, _)| h).collect();
    let source_blobs = blobs(&source, &hashes);
    assert!(
        source_blobs
            .iter()
            .any(|(state, _)| matches!(state, BlobState::Erased { .. }))
    );
    assert!(source_blobs.iter().any(|(_, bytes)| bytes.len() == 3 << 20));

    let pg = pg::database()?;
    let to_pg = migrate(
        &LogLocation::Sqlite(database.clone()),
        &LogLocation::Postgres(pg.url.clone()),
        &mut |_| {},
    )?;
    assert_eq!(to_pg.to.events, events.len() as u64);
    assert_eq!(to_pg.head_position, head.position);
    assert_eq!(to_pg.to.head, head.hash);
    assert_eq!(to_pg.to.root, merkle);
    assert_eq!(
        to_pg.from,
        sandlog_runtime::migrate::SideReport {
            location: database.display().to_string(),
            ..to_pg.to.clone()
        }
    );
    assert_eq!(to_pg.blobs, hashes.len() as u64);
    assert!(to_pg.erased_blobs >= 1, "{to_pg:?}");
    assert!(to_pg.chunks >= 4, "{to_pg:?}");
    assert_eq!(to_pg.checkpoints, 1);

    let postgres = PgEventStore::connect(&pg.url)?;
    assert_eq!(all_events(&postgres)?, events);
    assert_eq!(postgres.verify(None)?.head_hash, head.hash);
    assert_eq!(postgres.merkle_root(head.position.0)?, merkle);
    assert_eq!(blobs(&postgres, &hashes), source_blobs);
    // Proofs over the copy are the proofs over the original.
    assert_eq!(
        postgres.inclusion_proof(Position(3), head.position.0)?,
        source.inclusion_proof(Position(3), head.position.0)?
    );

    // Into a non-empty store: refused, by name, nothing written.
    let again = migrate(
        &LogLocation::Sqlite(database.clone()),
        &LogLocation::Postgres(pg.url.clone()),
        &mut |_| {},
    );
    match again {
        Err(RuntimeError::Store(EventStoreError::ImportTargetNotEmpty {
            target,
            events: n,
            ..
        })) => {
            assert!(target.contains(&pg.name), "{target}");
            assert_eq!(n, events.len() as u64);
        }
        other => panic!("a non-empty destination was not refused: {other:?}"),
    }
    assert_eq!(all_events(&postgres)?.len(), events.len());

    // And back into a new SQLite file.
    let back_dir = tempfile::tempdir()?;
    let back = back_dir.path().join("sandlog.db");
    let to_sqlite = migrate(
        &LogLocation::Postgres(pg.url.clone()),
        &LogLocation::Sqlite(back.clone()),
        &mut |_| {},
    )?;
    assert_eq!(to_sqlite.to.head, head.hash);
    assert_eq!(to_sqlite.to.root, merkle);
    assert_eq!(to_sqlite.checkpoints, 1);
    let returned = existing(&back)?;
    assert_eq!(all_events(&returned)?, events);
    assert_eq!(returned.verify()?.head_hash, head.hash);
    assert_eq!(returned.verify_merkle()?.root, merkle);
    assert_eq!(blobs(&returned, &hashes), source_blobs);
    assert_eq!(
        returned.latest_checkpoint()?,
        source.latest_checkpoint()?,
        "the signed checkpoint moves with its note"
    );
    drop(returned);

    // The copy is a log the root can use: same genesis, so the anchor
    // accepts it; the read models are folded again on open.
    let adopted_dir = tempfile::tempdir()?;
    let adopted = adopted_dir.path().join("root");
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(root.path())
        .arg(&adopted)
        .status()?;
    assert!(copied.success());
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(adopted.join(format!("sandlog.db{suffix}")));
    }
    std::fs::copy(&back, adopted.join("sandlog.db"))?;
    let engine = Engine::open(&adopted, options(&root.clock))?;
    let verified = engine.verify(None, &|_| {})?;
    assert!(verified.ok, "{verified:?}");
    assert_eq!(engine.digest()?.hash, head.hash);
    Ok(())
}

#[test]
fn a_tampered_source_is_refused_at_the_first_bad_position() -> Result<(), FixtureError> {
    let root = TestRoot::new()?;
    let id = root.engine.create_session(BTreeMap::new())?.session_id;
    for index in 0..5 {
        root.engine
            .write_file(id, &path(&format!("{index}.txt")), b"x", false)?;
    }
    let database = root.engine.layout().database.clone();
    let head = existing(&database)?.head()?;
    assert!(head.position.0 > 6);
    let bad = Position(head.position.0 - 2);
    {
        let tamperer = sandlog_tests::open_tamperer(&database)?;
        tamperer.execute(
            "UPDATE events SET actor = 'someone else' WHERE position = ?1",
            [bad.0 as i64],
        )?;
    }
    let out = tempfile::tempdir()?;
    let refused = migrate(
        &LogLocation::Sqlite(database),
        &LogLocation::Sqlite(out.path().join("copy.db")),
        &mut |_| {},
    );
    match refused {
        Err(RuntimeError::Store(EventStoreError::ChainBroken { position, problem })) => {
            assert_eq!(position, bad);
            assert!(matches!(problem, ChainProblem::HashMismatch), "{problem:?}");
        }
        other => panic!("a tampered source was not refused: {other:?}"),
    }
    Ok(())
}
