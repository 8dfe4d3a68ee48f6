//! Group commit (issue 38): concurrent appends of one process share an
//! fsync of the WAL, and each is acknowledged only once durable. A real
//! process with eight appending threads is SIGKILLed at moments spread
//! over its run; every append it acknowledged is then in the log, at the
//! position it was acknowledged at, and the log verifies.

#![cfg(test)]

use std::io::BufRead;
use std::process::{Command, Stdio};

use sandlog_core::Position;
use sandlog_sqlite::{EventStore, OpenOptions, SqlResult};

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// Appending threads in the child.
const THREADS: usize = 8;
/// Kills, each after a different number of acknowledgements.
const KILLS: [usize; 3] = [1, 150, 600];

#[test]
fn sigkill_loses_no_acknowledged_append_of_concurrent_writers() -> TestResult {
    let mut grouped = false;
    for after in KILLS {
        let dir = tempfile::tempdir()?;
        let database = dir.path().join("log.db");
        let mut child = Command::new(env!("CARGO_BIN_EXE_group-child"))
            .arg(&database)
            .arg(THREADS.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let mut stdout = std::io::BufReader::new(child.stdout.take().ok_or("no stdout")?);
        let mut acks: Vec<(u64, String)> = Vec::new();
        let mut counts = (0u64, 0u64);
        let mut line = String::new();
        let mut killed = false;
        loop {
            line.clear();
            if stdout.read_line(&mut line)? == 0 {
                break;
            }
            // Lines printed before the kill are whole; a cut one is not
            // an acknowledgement.
            let Some(text) = line.strip_suffix('\n') else {
                break;
            };
            let fields: Vec<&str> = text.split(' ').collect();
            match fields.as_slice() {
                ["ack", position, event_id] => {
                    acks.push((position.parse()?, (*event_id).to_owned()));
                }
                ["counts", syncs, commits] => counts = (syncs.parse()?, commits.parse()?),
                _ => return Err(format!("unexpected line from the child: {text:?}").into()),
            }
            if !killed && acks.len() >= after {
                child.kill()?;
                killed = true;
            }
        }
        let status = child.wait()?;
        assert!(killed, "the child ended by itself: {status}");
        let store = EventStore::open(&database, OpenOptions::default())?;
        let report = store.verify()?;
        for (position, event_id) in &acks {
            let envelope = store.get(Position(*position))?.ok_or_else(|| {
                format!(
                    "acknowledged position {position} is missing (head {})",
                    report.head
                )
            })?;
            assert_eq!(
                envelope.event_id.0.to_string(),
                *event_id,
                "position {position} holds another event than acknowledged"
            );
        }
        println!(
            "killed after {after}: {} acknowledged, all present; head {}; {} fsyncs for {} commits at the last count",
            acks.len(),
            report.head,
            counts.0,
            counts.1
        );
        grouped |= counts.0 < counts.1;
    }
    // Eight threads appending at once on two or more cores: some commits
    // land while another's fsync is in flight, and share the next one.
    assert!(grouped, "no fsync covered more than one commit");
    Ok(())
}

/// One writer: each append makes one fsync of its own (nothing to share),
/// and the writer connection is back at `synchronous = FULL` for every
/// other commit (read models, checkpoints) after each append.
#[test]
fn a_lone_append_syncs_once_and_leaves_the_writer_at_full() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = EventStore::open(&dir.path().join("log.db"), OpenOptions::default())?;
    assert_eq!(store.group_commit_counts(), (0, 0));
    let stream = sandlog_core::SessionId::new_v4().stream();
    for n in 0..3u64 {
        let event = sandlog_core::NewEvent {
            event_id: sandlog_core::EventId::now(),
            kind: "test.appended".to_owned(),
            schema: 1,
            actor: "api:test".to_owned(),
            correlation_id: None,
            causation_id: None,
            payload: b"{}".to_vec(),
        };
        store.append(stream, sandlog_eventstore::ExpectedVersion::Any, &[event])?;
        assert_eq!(store.group_commit_counts(), (n + 1, n + 1));
        let synchronous: i64 = store.with_write_transaction(|transaction| {
            transaction
                .query_row("PRAGMA synchronous", [], |row| row.get(0))
                .sql()
                .map_err(sandlog_eventstore::EventStoreError::from)
        })?;
        assert_eq!(synchronous, 2, "the writer is left at FULL");
    }
    // Without group commit (the opt-in `Normal`), no WAL fsync is made.
    let normal = EventStore::open(
        &dir.path().join("normal.db"),
        OpenOptions {
            durability: sandlog_sqlite::Durability::Normal,
            ..OpenOptions::default()
        },
    )?;
    normal.append(
        stream,
        sandlog_eventstore::ExpectedVersion::Any,
        &[sandlog_core::NewEvent {
            event_id: sandlog_core::EventId::now(),
            kind: "test.appended".to_owned(),
            schema: 1,
            actor: "api:test".to_owned(),
            correlation_id: None,
            causation_id: None,
            payload: b"{}".to_vec(),
        }],
    )?;
    assert_eq!(normal.group_commit_counts(), (0, 0));
    Ok(())
}
