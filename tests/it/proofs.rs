//! Signed checkpoints and offline evidence bundles through the engine,
//! with real executions: a bundle verifies with nothing but the verifier
//! key and recomputes the session's state; one altered byte anywhere makes
//! it fail; a log rewritten after a checkpoint fails `verify_checkpoint`.

use std::collections::BTreeMap;

use sandlog_core::bundle::Bundle;
use sandlog_core::{Position, WorkspacePath};
use sandlog_runtime::proofs::{
    generate_key_file, read_signer_key, read_verifier_key, verify_bundle,
};
use sandlog_runtime::{ExecRequest, RuntimeError};
use sandlog_tests::engine::RawLog;
use sandlog_tests::engine::TestRoot;

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// A root with two sessions: one with a host write and a guest execution
/// that writes a file, one with a host write only.
fn populated()
-> Result<(TestRoot, sandlog_core::SessionId), Box<dyn std::error::Error + Send + Sync>> {
    let root = TestRoot::new()?;
    let session = root.engine.create_session(BTreeMap::new())?.session_id;
    let other = root.engine.create_session(BTreeMap::new())?.session_id;
    root.engine.write_file(
        session,
        &WorkspacePath::parse("notes.txt")?,
        b"host bytes",
        false,
    )?;
    root.engine
        .write_file(other, &WorkspacePath::parse("x")?, b"other", false)?;
    let run = root.engine.execute(
        session,
        &ExecRequest::python("open('/app/out.txt','w').write('guest'); print('hi')"),
    )?;
    assert_eq!(run.stdout, b"hi\n");
    Ok((root, session))
}

/// Goal: the whole chain of custody. Method: keygen to a file, sign a
/// checkpoint, export a bundle, verify it from its bytes with the verifier
/// key alone, and compare the recomputed state with the engine's.
#[test]
fn an_exported_bundle_verifies_offline_and_recomputes_the_session() -> TestResult {
    let (root, session) = populated()?;
    let key_path = root.path().join("log.key");
    let key = generate_key_file("sandlog.test/log", &key_path)?;
    let vkey_text = key.verifier().to_string();
    assert!(matches!(
        generate_key_file("sandlog.test/log", &key_path),
        Err(RuntimeError::Io { .. })
    ));
    let key = read_signer_key(&key_path)?;
    let bundle = root.engine.export_bundle(session, Some(&key))?;
    let bytes = serde_json::to_vec(&bundle)?;

    let vkey = read_verifier_key(&vkey_text)?;
    let report = verify_bundle(&bytes, &vkey)?;
    assert!(report.ok);
    assert_eq!(report.session_id, session);
    assert_eq!(report.events, root.engine.session_events(session)?.len());
    assert!(report.blobs >= 2, "code and host-written bytes: {report:?}");
    let state = report.state.expect("the session's state");
    let live = root.engine.session(session)?;
    assert_eq!(state.exec_count, live.exec_count);
    assert_eq!(state.files.len() as u64, live.file_count);
    assert_eq!(state.updated_at, live.updated_at);

    // Another session's events are not in it.
    let parsed = Bundle::parse(&bytes)?;
    assert!(
        parsed
            .events
            .iter()
            .all(|event| event.stream == session.stream().to_string())
    );
    Ok(())
}

/// Goal: "a bundle with one altered byte anywhere fails". Method: flip the
/// low bit of every byte in turn; each altered bundle must be refused.
#[test]
fn a_bundle_with_any_altered_byte_fails_verification() -> TestResult {
    let (root, session) = populated()?;
    let key = sandlog_core::note::SignerKey::from_seed("sandlog.test/log", [3; 32])?;
    let bytes = serde_json::to_vec(&root.engine.export_bundle(session, Some(&key))?)?;
    let vkey = key.verifier();
    verify_bundle(&bytes, &vkey)?;
    let mut accepted = Vec::new();
    for index in 0..bytes.len() {
        let mut altered = bytes.clone();
        altered[index] ^= 0x01;
        if verify_bundle(&altered, &vkey).is_ok() {
            accepted.push(index);
        }
    }
    assert!(
        accepted.is_empty(),
        "altered bytes accepted at {:?} of {}: {}",
        accepted.iter().take(5).collect::<Vec<_>>(),
        bytes.len(),
        accepted
            .first()
            .map_or(String::new(), |&i| String::from_utf8_lossy(
                &bytes[i.saturating_sub(60)..(i + 40).min(bytes.len())]
            )
            .into_owned())
    );
    Ok(())
}

/// Goal: a dropped event, a swapped key and a foreign checkpoint each
/// fail and say what failed.
#[test]
fn a_bundle_missing_an_event_or_checked_with_another_key_fails_by_name() -> TestResult {
    let (root, session) = populated()?;
    let key = sandlog_core::note::SignerKey::from_seed("sandlog.test/log", [3; 32])?;
    let mut bundle = root.engine.export_bundle(session, Some(&key))?;
    let other = sandlog_core::note::SignerKey::from_seed("sandlog.test/log", [4; 32])?;
    let error = verify_bundle(&serde_json::to_vec(&bundle)?, &other.verifier()).unwrap_err();
    assert!(error.to_string().contains("no signature by key"), "{error}");
    bundle.events.remove(1);
    let error = verify_bundle(&serde_json::to_vec(&bundle)?, &key.verifier()).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("an event in the middle is missing"),
        "{error}"
    );
    Ok(())
}

/// Goal: issue "a bundle missing its tail, its middle or its first event
/// is refused, naming what is missing"; a complete one says so. Method:
/// export a format 2 bundle, check `complete` and the proven head, then
/// drop the last, the first and a middle event in turn; each is refused
/// as incomplete (an integrity failure), naming the versions missing. The
/// same bundle stripped of its map proof (an old format 1 bundle) still
/// verifies, saying it proves inclusion only.
#[test]
fn a_bundle_missing_its_first_middle_or_last_event_is_refused() -> TestResult {
    let (root, session) = populated()?;
    let key = sandlog_core::note::SignerKey::from_seed("sandlog.test/log", [8; 32])?;
    let bundle = root.engine.export_bundle(session, Some(&key))?;
    let vkey = key.verifier();
    let events = bundle.events.len() as u64;
    assert!(events >= 4, "{events}");
    let report = verify_bundle(&serde_json::to_vec(&bundle)?, &vkey)?;
    assert!(report.complete);
    assert_eq!(report.proves, "inclusion and completeness");
    let head = report.head.ok_or("no proven head")?;
    assert_eq!(head.version, events);
    assert_eq!(
        Some(head.position),
        bundle.events.last().map(|e| e.position)
    );

    let cases: [(&str, usize, &str); 3] = [
        (
            "last",
            bundle.events.len() - 1,
            "its last events are missing",
        ),
        ("first", 0, "its first event is missing"),
        ("middle", 2, "an event in the middle is missing"),
    ];
    for (name, index, expected) in cases {
        let mut cut = bundle.clone();
        let removed = cut.events.remove(index);
        let error = verify_bundle(&serde_json::to_vec(&cut)?, &vkey).expect_err(name);
        let text = error.to_string();
        assert!(error.is_integrity(), "{name}: {text}");
        assert!(text.contains(expected), "{name}: {text}");
        assert!(
            text.contains(&format!("version {}", removed.version)),
            "{name}: {text}"
        );
    }

    // A head that claims less than the map proves does not verify.
    let mut shorter = bundle.clone();
    shorter.events.pop();
    if let (Some(head), Some(last)) = (shorter.head.as_mut(), shorter.events.last()) {
        head.version = last.version;
        head.position = last.position;
        head.hash = last.hash.clone();
    }
    let error = verify_bundle(&serde_json::to_vec(&shorter)?, &vkey).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("not proven by the checkpoint's map"),
        "{error}"
    );

    // An old-format bundle: inclusion only, and it says so.
    let mut old = bundle.clone();
    old.format = sandlog_core::bundle::BUNDLE_FORMAT_V1.to_owned();
    old.head = None;
    old.map_proof = None;
    let report = verify_bundle(&serde_json::to_vec(&old)?, &vkey)?;
    assert!(!report.complete);
    assert_eq!(report.proves, "inclusion only");
    assert!(report.head.is_none());
    // Cut at its end (with the blobs only the cut events named, which
    // would otherwise be refused as named by no event), an old bundle
    // cannot tell: the reason for format 2.
    old.events.pop();
    old.blobs.clear();
    assert!(!verify_bundle(&serde_json::to_vec(&old)?, &vkey)?.complete);
    Ok(())
}

/// Goal: issue "a non-membership proof for an unknown session verifies
/// and one for an existing session cannot be forged". Method: prove a
/// present session and an absent one at the head and at an older
/// checkpoint's size (before the second session existed); check each
/// against the signed map root with the pure verifier, and try every way
/// of turning the present session's proof into one of absence.
#[test]
fn session_proofs_show_heads_and_absence_and_absence_cannot_be_forged() -> TestResult {
    use sandlog_core::map::{self, MapProof, Terminal};
    use sandlog_core::merkle::MerkleHash;
    let root = TestRoot::new()?;
    let key = sandlog_core::note::SignerKey::from_seed("sandlog.test/log", [9; 32])?;
    let early = root.engine.create_session(BTreeMap::new())?.session_id;
    let old = root.engine.sign_checkpoint(&key)?;
    let late = root.engine.create_session(BTreeMap::new())?.session_id;
    for _ in 0..40 {
        root.engine.create_session(BTreeMap::new())?;
    }
    root.engine
        .write_file(early, &WorkspacePath::parse("a")?, b"a", false)?;
    let new = root.engine.sign_checkpoint(&key)?;
    let vkey = key.verifier();
    let map_root_of = |note: &str| -> Result<MerkleHash, Box<dyn std::error::Error + Send + Sync>> {
        let checkpoint = sandlog_core::note::Checkpoint::verify(note, &vkey)?;
        Ok(map::root_of_checkpoint(&checkpoint)?.ok_or("no map root line")?)
    };
    let hex32 = |text: &str| -> Result<[u8; 32], Box<dyn std::error::Error + Send + Sync>> {
        Ok(MerkleHash::from_hex(text)?.0)
    };
    let check = |proof: &sandlog_runtime::proofs::SessionProof,
                 note: &str|
     -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let map_root = map_root_of(note)?;
        assert_eq!(proof.map_root, map_root.to_hex());
        let key = map::key_of(&proof.session_id.stream().to_string());
        let siblings = proof
            .proof
            .iter()
            .map(|h| MerkleHash::from_hex(h))
            .collect::<Result<Vec<_>, _>>()?;
        if proof.present {
            let value = map::StreamHead {
                version: proof.version.ok_or("version")?,
                position: proof.position.ok_or("position")?,
                hash: sandlog_core::Hash::from_hex(proof.hash.as_deref().ok_or("hash")?)?,
            }
            .value();
            map::verify(
                &map_root,
                &key,
                Some(&value),
                &MapProof {
                    siblings,
                    terminal: Terminal::Leaf { key, value },
                },
            )?;
        } else {
            let terminal = match &proof.other_leaf {
                Some(other) => Terminal::Leaf {
                    key: hex32(&other.key)?,
                    value: MerkleHash(hex32(&other.value)?),
                },
                None => Terminal::Empty,
            };
            map::verify(&map_root, &key, None, &MapProof { siblings, terminal })?;
        }
        Ok(())
    };

    let present = root.engine.prove_session(early, None)?;
    assert!(present.present);
    assert_eq!(present.version, Some(2));
    assert_eq!(present.size, new.size);
    check(&present, &new.note)?;
    let then = root.engine.prove_session(early, Some(old.size))?;
    assert_eq!(then.version, Some(1));
    check(&then, &old.note)?;
    let not_yet = root.engine.prove_session(late, Some(old.size))?;
    assert!(!not_yet.present);
    check(&not_yet, &old.note)?;
    let unknown = sandlog_core::SessionId::new_v4();
    let absent = root.engine.prove_session(unknown, None)?;
    assert!(!absent.present && absent.version.is_none());
    check(&absent, &new.note)?;

    // Forging absence of a present session: its own siblings with an
    // empty end, or another absent session's proof, or its sibling list
    // ending on a neighbour's leaf: none reaches the signed root.
    let map_root = map_root_of(&new.note)?;
    let key_early = map::key_of(&early.stream().to_string());
    let siblings: Vec<MerkleHash> = present
        .proof
        .iter()
        .map(|h| MerkleHash::from_hex(h))
        .collect::<Result<_, _>>()?;
    let empty = MapProof {
        siblings: siblings.clone(),
        terminal: Terminal::Empty,
    };
    assert!(map::verify(&map_root, &key_early, None, &empty).is_err());
    for cut in 0..siblings.len() {
        let shorter = MapProof {
            siblings: siblings[siblings.len() - cut..].to_vec(),
            terminal: Terminal::Empty,
        };
        assert!(map::verify(&map_root, &key_early, None, &shorter).is_err());
    }
    let borrowed: Vec<MerkleHash> = absent
        .proof
        .iter()
        .map(|h| MerkleHash::from_hex(h))
        .collect::<Result<_, _>>()?;
    let terminal = match &absent.other_leaf {
        Some(other) => Terminal::Leaf {
            key: hex32(&other.key)?,
            value: MerkleHash(hex32(&other.value)?),
        },
        None => Terminal::Empty,
    };
    assert!(
        map::verify(
            &map_root,
            &key_early,
            None,
            &MapProof {
                siblings: borrowed,
                terminal
            }
        )
        .is_err()
    );

    // A rebuild from the log keeps the map at every checkpoint's size.
    root.engine.rebuild_merkle()?;
    let rebuilt = root.engine.prove_session(early, Some(old.size))?;
    assert_eq!(rebuilt, then);
    check(&rebuilt, &old.note)?;
    check(&root.engine.prove_session(late, None)?, &new.note)?;

    // Sizes the map is not kept at are refused, naming the rule.
    let error = root.engine.prove_session(early, Some(old.size + 1)).err();
    if let Some(error) = error {
        assert!(
            error.to_string().contains("no map of stream heads"),
            "{error}"
        );
    }
    Ok(())
}

/// Goal: issue "`audit` catches a tampered map root and a checkpoint of a
/// forked log", naming the first bad size. Method: an honest root audits
/// clean; then (each on a fresh root) a stored map root is changed, a
/// checkpoint is signed with a map root the log does not make, and a
/// checkpoint of a fork (a copy of the database that went another way)
/// is given; each is an integrity failure naming its size.
#[test]
fn audit_catches_a_tampered_map_root_and_a_forked_checkpoint() -> TestResult {
    let key = sandlog_core::note::SignerKey::from_seed("sandlog.test/log", [10; 32])?;
    let vkey = key.verifier();
    let (root, _) = populated()?;
    let first = root.engine.sign_checkpoint(&key)?;
    root.engine.create_session(BTreeMap::new())?;
    root.engine.sign_checkpoint(&key)?;
    let report = root.engine.audit(None, &vkey, &|_, _| {})?;
    assert_eq!(report.checkpoints, 2);
    assert!(report.map_roots >= 2, "{report:?}");
    assert_eq!(report.events, root.engine.raw_log()?.head()?.position.0);

    // A stored map root changed behind sandlog's back.
    {
        let tamperer = sandlog_tests::open_tamperer(&root.path().join("sandlog.db"))?;
        tamperer.execute(
            "UPDATE map_roots SET root = zeroblob(32) WHERE size = ?1",
            [first.size as i64],
        )?;
    }
    let error = root.engine.audit(None, &vkey, &|_, _| {}).unwrap_err();
    assert!(error.is_integrity(), "{error}");
    assert!(
        matches!(error, RuntimeError::AuditFailed { size, .. } if size == first.size),
        "{error}"
    );
    assert!(error.to_string().contains("stored map"), "{error}");

    // A checkpoint signing a map root the log does not make.
    let (root, _) = populated()?;
    let (size, tree_root, _) = root.engine.raw_log()?.checkpoint_head()?;
    let lying = sandlog_core::note::Checkpoint {
        origin: key.name().to_owned(),
        size,
        root: tree_root,
        extensions: vec![sandlog_core::map::checkpoint_line(
            &sandlog_core::merkle::MerkleHash([7; 32]),
        )],
    }
    .sign(&key)?;
    let error = root
        .engine
        .audit(Some(&lying), &vkey, &|_, _| {})
        .unwrap_err();
    assert!(
        matches!(error, RuntimeError::AuditFailed { size: at, .. } if at == size),
        "{error}"
    );
    assert!(error.to_string().contains("signs the map root"), "{error}");

    // A fork: a copy of the database that went another way, signed.
    let (root, _) = populated()?;
    let fork_dir = tempfile::tempdir()?;
    let fork_db = fork_dir.path().join("fork.db");
    rusqlite::Connection::open(root.path().join("sandlog.db"))?
        .execute("VACUUM INTO ?1", [fork_db.to_string_lossy()])?;
    let fork = sandlog_sqlite::EventStore::open(&fork_db, Default::default())?;
    let base = fork.head()?.position.0;
    fork.append(
        sandlog_core::StreamId::System,
        sandlog_eventstore::ExpectedVersion::Any,
        &[sandlog_core::NewEvent {
            event_id: sandlog_core::EventId::now(),
            kind: "test.forked".into(),
            schema: 1,
            actor: "cli:mallory".into(),
            correlation_id: None,
            causation_id: None,
            payload: b"{}".to_vec(),
        }],
    )?;
    let (fork_size, fork_root, fork_map) = fork.checkpoint_head()?;
    let forked = sandlog_core::note::Checkpoint {
        origin: key.name().to_owned(),
        size: fork_size,
        root: fork_root,
        extensions: vec![sandlog_core::map::checkpoint_line(&fork_map)],
    }
    .sign(&key)?;
    // The honest log grows past the fork's size the other way.
    root.engine.create_session(BTreeMap::new())?;
    root.engine.create_session(BTreeMap::new())?;
    let error = root
        .engine
        .audit(Some(&forked), &vkey, &|_, _| {})
        .unwrap_err();
    assert!(
        matches!(error, RuntimeError::AuditFailed { size, .. } if size == base + 1),
        "{error}"
    );
    assert!(error.to_string().contains("fork"), "{error}");
    Ok(())
}

/// Goal: `verify_checkpoint` passes on an honest log that grew, and fails
/// on a log whose history was rewritten with recomputed chain hashes and a
/// rebuilt tree.
#[test]
fn the_log_must_extend_an_earlier_checkpoint() -> TestResult {
    let (mut root, session) = populated()?;
    let key = sandlog_core::note::SignerKey::from_seed("sandlog.test/log", [5; 32])?;
    let signed = root.engine.sign_checkpoint(&key)?;
    assert_eq!(
        root.engine.latest_checkpoint()?.as_deref(),
        Some(signed.note.as_str())
    );
    root.engine.write_file(
        session,
        &WorkspacePath::parse("later.txt")?,
        b"later",
        false,
    )?;
    let check = root
        .engine
        .verify_checkpoint(&signed.note, &key.verifier())?;
    assert_eq!(check.checkpoint_size, signed.size);
    assert_eq!(check.log_size, signed.size + 1);

    let proof = root.engine.prove_inclusion(Position(2), None)?;
    assert_eq!(proof.size, check.log_size);
    let consistency = root.engine.prove_consistency(signed.size, None)?;
    assert_eq!(consistency.new, check.log_size);

    // Rewrite event 2 (the second session's creation) and re-chain.
    let db = root.path().join("sandlog.db");
    let envelopes = root
        .engine
        .raw_log()?
        .read_all_after(Position(0))
        .collect::<Result<Vec<_>, _>>()?;
    {
        let tamperer = sandlog_tests::open_tamperer(&db)?;
        let mut prev = envelopes[0].hash;
        for envelope in &envelopes[1..] {
            let mut envelope = envelope.clone();
            if envelope.position.0 == 2 {
                envelope.actor = "cli:mallory".into();
            }
            let stream = envelope.stream.to_string();
            envelope.prev_hash = prev;
            envelope.hash = sandlog_core::chain_hash(&prev, &envelope.fields(&stream));
            tamperer.execute(
                "UPDATE events SET actor = ?1, prev_hash = ?2, hash = ?3 WHERE position = ?4",
                rusqlite::params![
                    envelope.actor,
                    envelope.prev_hash.0.as_slice(),
                    envelope.hash.0.as_slice(),
                    envelope.position.0 as i64
                ],
            )?;
            prev = envelope.hash;
        }
    }
    root.reopen()?;
    root.engine.rebuild_merkle()?;
    root.engine.raw_log()?.verify()?;
    let error = root
        .engine
        .verify_checkpoint(&signed.note, &key.verifier())
        .unwrap_err();
    assert!(
        matches!(error, RuntimeError::NotConsistent { .. }),
        "{error}"
    );
    assert!(error.is_integrity());
    assert!(
        error.to_string().contains("history was rewritten"),
        "{error}"
    );
    Ok(())
}

/// Goal: altering, deleting or inserting any event after a checkpoint makes
/// `verify_checkpoint` fail, each with an integrity error naming the cause.
/// Method: one fresh root per tamper, applied with plain SQL.
#[test]
fn altered_deleted_or_inserted_events_fail_checkpoint_verification() -> TestResult {
    let tampers: [(&str, &str); 4] = [
        (
            "altered",
            "UPDATE events SET actor = 'cli:mallory' WHERE position = 2",
        ),
        ("deleted middle", "DELETE FROM events WHERE position = 2"),
        (
            "deleted last",
            "DELETE FROM events WHERE position = (SELECT max(position) FROM events)",
        ),
        (
            "inserted",
            "INSERT INTO events SELECT 1000, stream, 1000, randomblob(16), kind, schema, recorded_at, actor, \
             correlation_id, causation_id, payload, hash, hash, stream_key FROM events WHERE position = 1",
        ),
    ];
    for (name, sql) in tampers {
        let (mut root, _) = populated()?;
        let key = sandlog_core::note::SignerKey::from_seed("sandlog.test/log", [6; 32])?;
        let signed = root.engine.sign_checkpoint(&key)?;
        sandlog_tests::open_tamperer(&root.path().join("sandlog.db"))?.execute_batch(sql)?;
        root.reopen().ok();
        let error = root
            .engine
            .verify_checkpoint(&signed.note, &key.verifier())
            .expect_err(name);
        assert!(error.is_integrity(), "{name}: {error}");
    }
    Ok(())
}

/// Goal: checkpoints can be signed without an operator (issue: "every N
/// events or on every prune run, a root setting"). Method: set the key and
/// `checkpoint.every = 3`, append events and watch checkpoints appear at
/// the head; then `checkpoint.on_prune`, and a prune run signs one; bad
/// values are refused with the setting named.
#[test]
fn root_settings_sign_checkpoints_every_n_events_and_on_prune() -> TestResult {
    let root = TestRoot::new()?;
    let key_path = root.path().join("auto.key");
    generate_key_file("sandlog.test/auto", &key_path)?;
    assert!(root.engine.latest_checkpoint()?.is_none());
    let key_text = key_path.to_string_lossy().into_owned();
    root.engine.configure("checkpoint.key", Some(&key_text))?;
    // No trigger set yet: nothing is signed.
    root.engine.create_session(BTreeMap::new())?;
    assert!(root.engine.latest_checkpoint()?.is_none());

    root.engine.configure("checkpoint.every", Some("3"))?;
    for _ in 0..4 {
        root.engine.create_session(BTreeMap::new())?;
    }
    let stored = root
        .engine
        .raw_log()?
        .latest_checkpoint()?
        .ok_or("no checkpoint")?;
    let (head, _) = root.engine.raw_log()?.merkle_head()?;
    assert!(
        head - stored.size < 3,
        "head {head}, checkpoint {}",
        stored.size
    );
    assert!(
        stored.note.starts_with("sandlog.test/auto\n"),
        "{}",
        stored.note
    );

    root.engine.configure("checkpoint.every", None)?;
    root.engine.configure("checkpoint.on_prune", Some("true"))?;
    let before = root.engine.raw_log()?.latest_checkpoint()?.map(|c| c.size);
    let policy = sandlog_core::PrunePolicy::older_than(std::time::Duration::from_secs(3600));
    root.engine.prune(&policy, false, &|_, _| {})?;
    let after = root
        .engine
        .raw_log()?
        .latest_checkpoint()?
        .ok_or("no checkpoint")?;
    assert_ne!(Some(after.size), before);
    assert_eq!(after.size, root.engine.raw_log()?.merkle_head()?.0);

    for (key, value) in [
        ("checkpoint.every", "0"),
        ("checkpoint.every", "ten"),
        ("checkpoint.on_prune", "yes"),
        ("checkpoint.key", "/nonexistent/key"),
        ("evidence.budget", "lots"),
        ("no.such.setting", "1"),
    ] {
        let error = root.engine.configure(key, Some(value)).unwrap_err();
        assert!(
            error.to_string().contains(key) || error.to_string().contains(value),
            "{key}={value}: {error}"
        );
    }
    Ok(())
}

/// Goal: `verify` notices when bytes an event says were stored are gone
/// (a tampered or damaged database), not only a broken chain. Method: run
/// an execution that keeps its output, delete that blob behind sandlog's
/// back, and check verify names it; an erased blob is not missing.
#[test]
fn verify_names_a_blob_that_events_say_was_stored_but_is_gone() -> TestResult {
    let root = TestRoot::new()?;
    let session = root.engine.create_session(BTreeMap::new())?.session_id;
    let run = root
        .engine
        .execute(session, &ExecRequest::python("print('kept output 5a1f')"))?;
    assert_eq!(run.stdout, b"kept output 5a1f\n");
    assert!(root.engine.verify(None, &|_| {})?.ok);
    let stdout_hash = sandlog_core::Hash::of(b"kept output 5a1f\n");
    assert!(root.engine.raw_log()?.has_blob(&stdout_hash)?);

    let tamperer = rusqlite::Connection::open(&root.engine.layout().database)?;
    tamperer.execute(
        "DELETE FROM blob_chunks WHERE hash = ?1",
        [stdout_hash.0.as_slice()],
    )?;
    tamperer.execute(
        "DELETE FROM blob_index WHERE hash = ?1",
        [stdout_hash.0.as_slice()],
    )?;
    drop(tamperer);
    let outcome = root.engine.verify(None, &|_| {})?;
    assert!(!outcome.ok);
    assert_eq!(outcome.missing_blobs, vec![stdout_hash.to_hex()]);
    Ok(())
}
