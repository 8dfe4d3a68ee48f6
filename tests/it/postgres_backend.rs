//! The PostgreSQL backend's own concerns, on a real server (see
//! `support::pg`): many writer processes on one log, SIGKILL of a writer
//! mid-transaction, the two append locks side by side, migrations under
//! concurrency, foreign and newer databases, the append-only triggers,
//! and errors classified by SQLSTATE. What both backends share is in
//! `backend_conformance`.
#![cfg(test)]

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use sandlog_core::{EventId, Position, SessionId, StreamId};
use sandlog_eventstore::{EventStoreError, ExpectedVersion, LogFilter};
use sandlog_postgres::{APPEND_ATTEMPTS_MAX, AppendLock, PgEventStore, PgOptions, SCHEMA_VERSION};
use sandlog_tests::pg::{self, PgDatabase};
use sandlog_tests::{check_log_shape, new_event};
use serde_json::json;

fn database() -> PgDatabase {
    pg::database().unwrap_or_else(|reason| panic!("{reason}"))
}

fn spawn_child(
    url: &str,
    shared: StreamId,
    n: u64,
) -> (Child, BufReader<std::process::ChildStdout>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pg-child"))
        .arg(url)
        .arg(shared.to_string())
        .arg(n.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    (child, stdout)
}

/// Waits for every child's `ready`, then lets them all go at once.
fn start_together(children: &mut [(Child, BufReader<std::process::ChildStdout>)]) {
    for (child, stdout) in children.iter_mut() {
        let mut ready = String::new();
        stdout.read_line(&mut ready).unwrap();
        if ready != "ready\n" {
            let mut stderr = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
            panic!("child did not start: {ready:?} {stderr}");
        }
    }
    for (child, _) in children.iter_mut() {
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    }
}

/// `(event id, position)` of every `ack` line.
fn acks(output: &str) -> Vec<(EventId, Position)> {
    output
        .lines()
        .filter_map(|line| line.strip_prefix("ack "))
        .map(|rest| {
            let (id, position) = rest.split_once(' ').unwrap();
            (
                EventId(uuid::Uuid::parse_str(id).unwrap()),
                Position(position.parse().unwrap()),
            )
        })
        .collect()
}

/// Issue 15: 8 processes append at once to a shared stream (with
/// read-decide-append conflicts) and to streams of their own: every
/// acknowledged event is stored once at the position acknowledged, the
/// positions are exactly 1..=n, and the chain and the Merkle tree verify.
#[test]
fn eight_processes_append_to_one_log_without_losing_or_duplicating() {
    const CHILDREN: usize = 8;
    const EACH: u64 = 15;
    let db = database();
    // Migrated once before the children race to open it too.
    let store = PgEventStore::connect(&db.url).unwrap();
    let shared = StreamId::Session(SessionId::new_v4());
    let mut children: Vec<_> = (0..CHILDREN)
        .map(|_| spawn_child(&db.url, shared, EACH))
        .collect();
    start_together(&mut children);
    let mut acknowledged = Vec::new();
    for (child, mut stdout) in children {
        let mut output = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut output).unwrap();
        let finished = child.wait_with_output().unwrap();
        assert!(
            finished.status.success(),
            "child failed: {}",
            String::from_utf8_lossy(&finished.stderr)
        );
        assert!(output.ends_with("done\n"), "{output}");
        acknowledged.extend(acks(&output));
    }
    let total = CHILDREN as u64 * EACH * 2;
    assert_eq!(acknowledged.len() as u64, total);
    let log = store.query_page(&LogFilter::default()).unwrap();
    assert_eq!(log.len() as u64, total);
    check_log_shape(&log).unwrap();
    let by_id: HashMap<EventId, Position> = log.iter().map(|e| (e.event_id, e.position)).collect();
    for (id, position) in &acknowledged {
        assert_eq!(
            by_id.get(id),
            Some(position),
            "acknowledged {id} at {position}"
        );
    }
    let positions: HashSet<Position> = acknowledged.iter().map(|(_, p)| *p).collect();
    assert_eq!(
        positions.len() as u64,
        total,
        "no position acknowledged twice"
    );
    assert_eq!(
        store.stream_version(shared).unwrap().map(|v| v.0),
        Some(CHILDREN as u64 * EACH)
    );
    assert_eq!(store.verify(None).unwrap().events, total);
    // The tree the children grew in turns is the tree of the log.
    let mut frontier = sandlog_core::merkle::Frontier::new();
    for envelope in &log {
        frontier.append(&envelope.hash.0);
    }
    assert_eq!(store.merkle_root(total).unwrap(), frontier.root());
}

/// SIGKILL of writers mid-transaction: everything acknowledged before the
/// kill is stored at its position, the log has no gap, the chain verifies,
/// and the survivors (and a new writer) carry on.
#[test]
fn sigkill_of_a_writer_mid_transaction_loses_nothing_acknowledged() {
    const CHILDREN: usize = 4;
    let db = database();
    let store = PgEventStore::connect(&db.url).unwrap();
    let shared = StreamId::Session(SessionId::new_v4());
    let mut children: Vec<_> = (0..CHILDREN)
        .map(|_| spawn_child(&db.url, shared, 0))
        .collect();
    start_together(&mut children);
    // Let them run, then kill them one by one at staggered moments: with
    // appends back to back, each is almost surely inside a transaction.
    let readers: Vec<_> = children
        .into_iter()
        .map(|(child, mut stdout)| {
            let reader = std::thread::spawn(move || {
                let mut output = String::new();
                let _ = std::io::Read::read_to_string(&mut stdout, &mut output);
                output
            });
            (child, reader)
        })
        .collect();
    let mut acknowledged = Vec::new();
    for (i, (mut child, reader)) in readers.into_iter().enumerate() {
        std::thread::sleep(Duration::from_millis(300 + 37 * i as u64));
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert!(!status.success(), "the child was killed, not finished");
        acknowledged.extend(acks(&reader.join().unwrap()));
    }
    assert!(acknowledged.len() > 10, "the children got work done first");
    let log = store.query_page(&LogFilter::default()).unwrap();
    check_log_shape(&log).unwrap();
    let by_id: HashMap<EventId, Position> = log.iter().map(|e| (e.event_id, e.position)).collect();
    for (id, position) in &acknowledged {
        assert_eq!(
            by_id.get(id),
            Some(position),
            "acknowledged {id} at {position}"
        );
    }
    store.verify(None).unwrap();
    // The killed sessions' locks are gone with their connections (a
    // transaction whose COMMIT was sent before the kill may still land,
    // unacknowledged: the log read above can be one short of the final).
    let next = store
        .append(
            shared,
            ExpectedVersion::Any,
            &[new_event("after.kill", &json!({}))],
        )
        .unwrap();
    let log = store.query_page(&LogFilter::default()).unwrap();
    check_log_shape(&log).unwrap();
    assert_eq!(log.last(), next.last());
    assert_eq!(store.verify(None).unwrap().events, log.len() as u64);
}

/// Two handles with different append locks on one log, from many threads:
/// the position's primary key still serialises them (the loser retries), so
/// the log stays gapless and verifies.
#[test]
fn writers_with_different_locks_still_keep_one_chain() {
    let db = database();
    let advisory = Arc::new(PgEventStore::connect(&db.url).unwrap());
    let head_row = Arc::new(
        PgEventStore::connect_with(&db.url, PgOptions::default().lock(AppendLock::HeadRow))
            .unwrap(),
    );
    assert_eq!(head_row.append_lock(), AppendLock::HeadRow);
    const THREADS: usize = 6;
    const EACH: usize = 20;
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let store = if i % 2 == 0 {
                Arc::clone(&advisory)
            } else {
                Arc::clone(&head_row)
            };
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                let stream = StreamId::Session(SessionId::new_v4());
                let mut gave_up = 0;
                for n in 0..EACH {
                    let event = new_event("t", &json!({ "n": n }));
                    loop {
                        match store.append(
                            stream,
                            ExpectedVersion::Any,
                            std::slice::from_ref(&event),
                        ) {
                            Ok(_) => break,
                            // Lost the race APPEND_ATTEMPTS_MAX times in a
                            // row: classified as retryable, and a retry
                            // with the same ids is safe.
                            Err(error) if error.is_retryable() => {
                                assert_eq!(error.kind(), "busy");
                                gave_up += 1;
                            }
                            Err(error) => panic!("{error:?}"),
                        }
                    }
                }
                gave_up
            })
        })
        .collect();
    let gave_up: u32 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    eprintln!("appends that lost {APPEND_ATTEMPTS_MAX} races in a row: {gave_up}");
    let log = advisory.query_page(&LogFilter::default()).unwrap();
    assert_eq!(log.len(), THREADS * EACH);
    check_log_shape(&log).unwrap();
    assert_eq!(
        head_row.verify(None).unwrap().events,
        (THREADS * EACH) as u64
    );
}

/// Several processes' worth of connections opening a fresh database at once
/// migrate it once; a database migrated by a newer sandlog, or holding
/// another application's `events`, is refused.
#[test]
fn migrations_are_safe_concurrently_and_refuse_foreign_or_newer_databases() {
    let db = database();
    let barrier = Arc::new(Barrier::new(6));
    let handles: Vec<_> = (0..6)
        .map(|_| {
            let url = db.url.clone();
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                PgEventStore::connect(&url).map(|_| ())
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap().unwrap();
    }
    let mut client = db.client().unwrap();
    let version: i64 = client
        .query_one("SELECT version FROM sandlog_schema", &[])
        .unwrap()
        .get(0);
    assert_eq!(version, SCHEMA_VERSION);
    client
        .batch_execute("UPDATE sandlog_schema SET version = version + 1")
        .unwrap();
    match PgEventStore::connect(&db.url) {
        Err(EventStoreError::SchemaTooNew {
            found, supported, ..
        }) => {
            assert_eq!((found, supported), (SCHEMA_VERSION + 1, SCHEMA_VERSION));
        }
        other => panic!("{other:?}"),
    }

    let foreign = database();
    foreign
        .client()
        .unwrap()
        .batch_execute("CREATE TABLE events (id INT)")
        .unwrap();
    let error = PgEventStore::connect(&foreign.url).unwrap_err();
    assert!(
        matches!(error, EventStoreError::NotADatabase { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("another application"), "{error}");
}

/// UPDATE, DELETE and TRUNCATE of events are refused by the triggers, with
/// their own SQLSTATE.
#[test]
fn events_are_append_only_for_every_client() {
    let db = database();
    let store = PgEventStore::connect(&db.url).unwrap();
    store
        .append(
            StreamId::Session(SessionId::new_v4()),
            ExpectedVersion::NoStream,
            &[new_event("x", &json!({}))],
        )
        .unwrap();
    let mut client = db.client().unwrap();
    for sql in [
        "UPDATE events SET payload = '\\x00'",
        "DELETE FROM events",
        "TRUNCATE events",
    ] {
        let error = client.batch_execute(sql).unwrap_err();
        assert_eq!(
            error.code(),
            Some(&postgres::error::SqlState::RESTRICT_VIOLATION),
            "{sql}: {error}"
        );
    }
    assert_eq!(store.verify(None).unwrap().events, 1);
}

/// A server that cannot be reached is an I/O error (not a database error,
/// not a panic), and a bad URL is refused before any connection.
#[test]
fn connection_failures_are_io_errors() {
    let missing = std::env::temp_dir().join(format!("sandlog-no-server-{}", std::process::id()));
    std::fs::create_dir_all(&missing).unwrap();
    let error = PgEventStore::connect(&format!(
        "host={} port=5432 user=nobody dbname=nothing",
        missing.display()
    ))
    .unwrap_err();
    assert!(matches!(error, EventStoreError::Io { .. }), "{error:?}");
    assert_eq!(error.kind(), "io");
    let error = PgEventStore::connect("postgresql://[::1").unwrap_err();
    assert!(!matches!(error, EventStoreError::Io { .. }), "{error:?}");
    std::fs::remove_dir_all(&missing).unwrap();
}

/// The writer's connection dying (the server terminates it) fails that one
/// call as an I/O error; the next call reconnects and the log carries on.
#[test]
fn a_terminated_connection_is_reopened() {
    let db = database();
    let store = PgEventStore::connect(&db.url).unwrap();
    let stream = StreamId::Session(SessionId::new_v4());
    store
        .append(
            stream,
            ExpectedVersion::NoStream,
            &[new_event("x", &json!({}))],
        )
        .unwrap();
    let mut admin = db.client().unwrap();
    admin
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
            &[],
        )
        .unwrap();
    // The first call on each dead connection may fail; none may panic or
    // corrupt, and within a few calls the store works again.
    let mut appended = None;
    for _ in 0..3 {
        match store.append(stream, ExpectedVersion::Any, &[new_event("y", &json!({}))]) {
            Ok(envelopes) => {
                appended = Some(envelopes);
                break;
            }
            Err(error) => assert!(matches!(error, EventStoreError::Io { .. }), "{error:?}"),
        }
    }
    assert_eq!(appended.unwrap()[0].position, Position(2));
    assert_eq!(store.head().unwrap().position, Position(2));
    assert_eq!(store.verify(None).unwrap().events, 2);
}

/// The unit of work: a blob and the event naming it commit together, or,
/// when the append fails after the blob was put, neither is stored.
#[test]
fn a_write_commits_its_blobs_and_events_together_or_not_at_all() {
    let db = database();
    let store = PgEventStore::connect(&db.url).unwrap();
    let stream = StreamId::Session(SessionId::new_v4());
    let code = b"print(1)\n".to_vec();
    let failed = store.write(|write| {
        let put = write.put_blob(&code)?;
        assert!(!put.deduplicated);
        write.append(
            stream,
            ExpectedVersion::Exact(sandlog_core::StreamVersion(3)),
            &[new_event(
                "execution.started",
                &json!({ "code": put.hash.to_hex() }),
            )],
        )
    });
    assert!(
        matches!(failed, Err(EventStoreError::VersionConflict { .. })),
        "{failed:?}"
    );
    let code_hash = sandlog_core::Hash::of(&code);
    assert_eq!(
        store.blob_state(&code_hash).unwrap(),
        sandlog_eventstore::BlobState::Missing
    );
    assert_eq!(store.head().unwrap().position, Position::ZERO);

    let (put, envelopes) = store
        .write(|write| {
            let put = write.put_blob(&code)?;
            let envelopes = write.append(
                stream,
                ExpectedVersion::NoStream,
                &[new_event(
                    "execution.started",
                    &json!({ "code": put.hash.to_hex() }),
                )],
            )?;
            // The same bytes again in the same transaction: stored once.
            assert!(write.put_blob(&code)?.deduplicated);
            Ok::<_, EventStoreError>((put, envelopes))
        })
        .unwrap();
    assert_eq!(put.hash, code_hash);
    assert_eq!(envelopes[0].position, Position(1));
    assert_eq!(store.get_blob(&code_hash).unwrap(), Some(code));
    assert_eq!(store.verify(None).unwrap().events, 1);
    let mut frontier = sandlog_core::merkle::Frontier::new();
    frontier.append(&envelopes[0].hash.0);
    assert_eq!(store.merkle_root(1).unwrap(), frontier.root());
}

/// Goal: a PostgreSQL log from before the map of stream heads (schema 2)
/// gains it when a newer sandlog connects, built from the log in the
/// migration's transaction: the same root the appends made at the head.
/// Method: append to a few streams, drop the map's tables and set the
/// schema back to 2, reconnect, compare.
#[test]
fn a_log_from_before_the_map_gets_it_on_connect() {
    let db = database();
    let store = PgEventStore::connect(&db.url).unwrap();
    for n in 1..=4usize {
        let events: Vec<_> = (0..n)
            .map(|i| new_event("test.event", &json!({ "i": i })))
            .collect();
        store
            .append(
                StreamId::Session(SessionId::new_v4()),
                ExpectedVersion::NoStream,
                &events,
            )
            .unwrap();
    }
    let head = store.head().unwrap().position.0;
    let before = store.map_root(head).unwrap();
    assert_ne!(before, sandlog_core::map::EMPTY);
    drop(store);
    db.client()
        .unwrap()
        .batch_execute(
            "DROP TABLE map_nodes; DROP TABLE map_roots; UPDATE sandlog_schema SET version = 2",
        )
        .unwrap();
    let store = PgEventStore::connect(&db.url).unwrap();
    assert_eq!(store.map_root(head).unwrap(), before);
}
