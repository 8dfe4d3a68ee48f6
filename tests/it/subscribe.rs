//! Catch-up subscriptions (`EventStore::subscribe`) and consumers'
//! checkpoints: order and completeness across pages, filters, the
//! checkpoint's rules, the correlation filter, the v3 → v4 migration, and
//! the acceptance test of issue 16 with real processes: one appends 10,000
//! events while another follows from position 0, and a follower SIGKILLed
//! at points spread over its run resumes from its checkpoint with nothing
//! missing.

#![cfg(test)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use sandlog_core::{Position, StreamId};
use sandlog_eventstore::{EventStoreError, ExpectedVersion, LogFilter, PAGE_EVENTS};
use sandlog_sqlite::{EventStore, OpenOptions, SubscribeFrom};
use sandlog_tests::{new_event, temp_store};
use serde_json::json;

type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Appends `count` events of `kind` to the system stream, in batches.
fn append(store: &EventStore, kind: &str, count: usize) -> TestResult {
    let events: Vec<_> = (0..count)
        .map(|n| new_event(kind, &json!({ "n": n })))
        .collect();
    for batch in events.chunks(1_000) {
        store.append(StreamId::System, ExpectedVersion::Any, batch)?;
    }
    Ok(())
}

/// Drains what a subscription has now.
fn drain(subscription: &mut sandlog_sqlite::Subscription<'_>) -> TestResult<Vec<u64>> {
    let mut positions = Vec::new();
    while let Some(envelope) = subscription.next_event(Duration::ZERO)? {
        positions.push(envelope.position.0);
    }
    Ok(positions)
}

#[test]
fn a_subscription_delivers_the_whole_log_in_order_across_pages_then_new_events() -> TestResult {
    let temp = temp_store()?;
    let count = PAGE_EVENTS * 2 + 7;
    append(&temp.store, "test.before", count)?;
    let mut subscription = temp
        .store
        .subscribe(SubscribeFrom::After(Position::ZERO), LogFilter::default())?;
    let seen = drain(&mut subscription)?;
    assert_eq!(seen, (1..=count as u64).collect::<Vec<_>>());
    // Nothing new: a zero timeout returns at once, a short one after it.
    let started = Instant::now();
    assert!(
        subscription
            .next_event(Duration::from_millis(50))?
            .is_none()
    );
    assert!(started.elapsed() >= Duration::from_millis(50));
    // Appended later (here from the same process; the acceptance test
    // below does it from another): delivered next, in order.
    append(&temp.store, "test.after", 3)?;
    assert_eq!(
        drain(&mut subscription)?,
        vec![count as u64 + 1, count as u64 + 2, count as u64 + 3]
    );
    // From a position: only what follows it.
    let mut later = temp.store.subscribe(
        SubscribeFrom::After(Position(count as u64)),
        LogFilter::default(),
    )?;
    assert_eq!(drain(&mut later)?.len(), 3);
    // A position-only subscription stores nothing.
    assert_eq!(later.commit()?, Position(count as u64));
    Ok(())
}

#[test]
fn a_filtered_consumer_commits_past_events_it_does_not_want() -> TestResult {
    let temp = temp_store()?;
    append(&temp.store, "test.other", PAGE_EVENTS + 10)?;
    append(&temp.store, "test.wanted", 2)?;
    append(&temp.store, "test.other", 5)?;
    let head = temp.store.head()?.position.0;
    let filter = LogFilter {
        kinds: vec!["test.wanted".to_owned()],
        // A subscription has no end and starts where it is told: these
        // do not apply.
        limit: Some(1),
        to: Some(Position(1)),
        ..LogFilter::default()
    };
    let name = "filtered";
    let mut subscription = temp
        .store
        .subscribe(SubscribeFrom::Checkpoint(name.to_owned()), filter.clone())?;
    assert_eq!(subscription.consumer(), Some(name));
    let wanted = drain(&mut subscription)?;
    let first = (PAGE_EVENTS + 11) as u64;
    assert_eq!(wanted, vec![first, first + 1]);
    // Everything up to the head was read: the checkpoint passes the five
    // unwanted events at the end too, so a restart does not read them
    // again.
    assert_eq!(subscription.commit()?, Position(head));
    assert_eq!(temp.store.consumer_checkpoint(name)?, Some(Position(head)));
    drop(subscription);
    append(&temp.store, "test.wanted", 1)?;
    let mut resumed = temp
        .store
        .subscribe(SubscribeFrom::Checkpoint(name.to_owned()), filter)?;
    assert_eq!(resumed.committed(), Position(head));
    assert_eq!(drain(&mut resumed)?, vec![head + 1]);
    Ok(())
}

#[test]
fn a_consumer_killed_before_asking_for_more_gets_the_event_again() -> TestResult {
    // At least once: an event handed out is stored as processed only once
    // the consumer asks for the one after it (or commits).
    let temp = temp_store()?;
    append(&temp.store, "test.event", 3)?;
    let from = || SubscribeFrom::Checkpoint("careful".to_owned());
    let mut subscription = temp.store.subscribe(from(), LogFilter::default())?;
    assert_eq!(
        subscription
            .next_event(Duration::ZERO)?
            .map(|e| e.position.0),
        Some(1)
    );
    assert_eq!(
        subscription
            .next_event(Duration::ZERO)?
            .map(|e| e.position.0),
        Some(2)
    );
    // "Killed" here: nothing was committed, 1 and 2 come again.
    drop(subscription);
    let mut again = temp.store.subscribe(from(), LogFilter::default())?;
    assert_eq!(
        again.next_event(Duration::ZERO)?.map(|e| e.position.0),
        Some(1)
    );
    // An explicit commit covers what was handed out, not what is buffered.
    assert_eq!(again.commit()?, Position(1));
    drop(again);
    let mut third = temp.store.subscribe(from(), LogFilter::default())?;
    assert_eq!(drain(&mut third)?, vec![2, 3]);
    // Asking past the end stored everything.
    assert_eq!(
        temp.store.consumer_checkpoint("careful")?,
        Some(Position(3))
    );
    Ok(())
}

#[test]
fn checkpoints_only_move_forward_and_never_past_the_head() -> TestResult {
    let temp = temp_store()?;
    append(&temp.store, "test.event", 10)?;
    let store = &temp.store;
    assert_eq!(store.consumer_checkpoint("c")?, None);
    assert_eq!(
        store.commit_consumer_checkpoint("c", Position(5))?,
        Position(5)
    );
    // Behind the stored position: left as it is.
    assert_eq!(
        store.commit_consumer_checkpoint("c", Position(3))?,
        Position(5)
    );
    assert_eq!(store.consumer_checkpoint("c")?, Some(Position(5)));
    // Past the head: refused, nothing stored.
    let error = store
        .commit_consumer_checkpoint("c", Position(11))
        .unwrap_err();
    assert!(
        matches!(error, EventStoreError::InvalidConsumer { .. }),
        "{error}"
    );
    assert!(
        error.to_string().contains("past the log's last event"),
        "{error}"
    );
    assert_eq!(store.consumer_checkpoint("c")?, Some(Position(5)));
    // Names: empty, too long, control characters.
    for name in [String::new(), "x".repeat(257), "a\nb".to_owned()] {
        let error = store.consumer_checkpoint(&name).unwrap_err();
        assert_eq!(error.kind(), "invalid_consumer", "{name:?}: {error}");
        let error = store
            .subscribe(
                SubscribeFrom::Checkpoint(name.clone()),
                LogFilter::default(),
            )
            .unwrap_err();
        assert_eq!(error.kind(), "invalid_consumer", "{name:?}: {error}");
    }
    // Even a client writing SQL cannot move one back: a trigger refuses.
    let tamperer = temp.tamperer()?;
    let refused = tamperer.execute(
        "UPDATE consumer_checkpoints SET position = 1 WHERE name = 'c'",
        [],
    );
    assert!(
        refused
            .unwrap_err()
            .to_string()
            .contains("only moves forward")
    );
    // A stored position the log does not have is an integrity error, not
    // a silent skip of events.
    tamperer.execute(
        "UPDATE consumer_checkpoints SET position = 99 WHERE name = 'c'",
        [],
    )?;
    let error = store
        .subscribe(
            SubscribeFrom::Checkpoint("c".to_owned()),
            LogFilter::default(),
        )
        .unwrap_err();
    assert!(error.is_integrity(), "{error}");
    assert!(
        error.to_string().contains("past the log's last event"),
        "{error}"
    );
    Ok(())
}

#[test]
fn the_log_is_filtered_by_correlation_id() -> TestResult {
    let temp = temp_store()?;
    let one = uuid::Uuid::new_v4();
    let two = uuid::Uuid::new_v4();
    let mut events = Vec::new();
    for n in 0..30 {
        let correlation = match n % 3 {
            0 => Some(one),
            1 => Some(two),
            _ => None,
        };
        events.push(new_event("test.event", &json!({ "n": n })).correlated(correlation));
    }
    temp.store
        .append(StreamId::System, ExpectedVersion::Any, &events)?;
    let found: Vec<_> = temp
        .store
        .query(LogFilter {
            correlation: Some(one),
            ..LogFilter::default()
        })
        .collect::<Result<_, _>>()?;
    assert_eq!(found.len(), 10);
    assert!(
        found
            .iter()
            .all(|envelope| envelope.correlation_id == Some(one))
    );
    assert_eq!(
        found
            .iter()
            .map(|envelope| envelope.position.0)
            .collect::<Vec<_>>(),
        (0..10).map(|n| n * 3 + 1).collect::<Vec<_>>()
    );
    // The partial index serves it (no scan of the whole log).
    let plan: String = temp.tamperer()?.query_row(
        "EXPLAIN QUERY PLAN SELECT position FROM events WHERE position > 0 AND correlation_id = ?1 \
         ORDER BY position LIMIT 10",
        [one.as_bytes().to_vec()],
        |row| row.get(3),
    )?;
    assert!(plan.contains("events_by_correlation"), "{plan}");
    Ok(())
}

#[test]
fn a_version_3_store_migrates_to_checkpoints_and_the_correlation_index() -> TestResult {
    let temp = temp_store()?;
    append(&temp.store, "test.event", 5)?;
    let path = temp.path();
    {
        // As a v3 file looks: no checkpoint table, no index.
        let tamperer = temp.tamperer()?;
        tamperer.execute_batch(sandlog_tests::AS_SCHEMA_4)?;
        tamperer.execute_batch(
            "DROP TRIGGER consumer_checkpoints_move_forward; DROP TABLE consumer_checkpoints; \
             DROP INDEX events_by_correlation; PRAGMA user_version = 3;",
        )?;
    }
    drop(temp.store);
    let store = EventStore::open(&path, OpenOptions::default())?;
    assert_eq!(
        store.commit_consumer_checkpoint("m", Position(5))?,
        Position(5)
    );
    assert_eq!(store.verify()?.events, 5);
    Ok(())
}

// ---------------------------------------------------------------------
// Two processes.

/// Events the appender writes in each phase (issue 16: 10,000).
const EVENTS: u64 = 10_000;

/// Longest the test waits for a child's next line before failing (a stuck
/// follower must fail the test, not hang it).
const LINE_WAIT: Duration = Duration::from_secs(60);

/// A child process whose stdout lines arrive on a channel.
struct Running {
    child: Child,
    lines: Receiver<String>,
}

impl Running {
    fn spawn(arguments: &[&str], database: &Path) -> TestResult<Running> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_subscribe-child"))
            .arg(arguments.first().copied().unwrap_or_default())
            .arg(database)
            .args(arguments.get(1..).unwrap_or_default())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (sender, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Running { child, lines })
    }

    fn line(&mut self) -> TestResult<String> {
        match self.lines.recv_timeout(LINE_WAIT) {
            Ok(line) => Ok(line),
            Err(RecvTimeoutError::Timeout) => {
                Err(format!("child printed nothing for {LINE_WAIT:?}").into())
            }
            Err(RecvTimeoutError::Disconnected) => {
                let status = self.child.wait()?;
                Err(format!("child ended ({status}) before printing what was expected").into())
            }
        }
    }

    /// A follower's next `event POS`.
    fn event(&mut self) -> TestResult<u64> {
        let line = self.line()?;
        let position = line
            .strip_prefix("event ")
            .ok_or_else(|| format!("expected `event POS`, got {line:?}"))?;
        Ok(position.parse()?)
    }

    /// A follower's first line, `from POS`: where its checkpoint was.
    fn start(&mut self) -> TestResult<u64> {
        let line = self.line()?;
        let position = line
            .strip_prefix("from ")
            .ok_or_else(|| format!("expected `from POS`, got {line:?}"))?;
        Ok(position.parse()?)
    }

    fn kill(mut self) -> TestResult {
        // SIGKILL: no destructor, no last commit.
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }

    /// SIGKILLs a follower and returns the positions it printed that the
    /// test had not read yet (still in the pipe): it runs on between the
    /// test's decision and the signal, and may store a checkpoint past
    /// what the test has read, though never past what it printed.
    fn kill_and_drain(mut self) -> TestResult<Vec<u64>> {
        self.child.kill()?;
        self.child.wait()?;
        let mut rest = Vec::new();
        // The reader thread ends at the pipe's end, which the kill closed.
        while let Ok(line) = self.lines.recv_timeout(LINE_WAIT) {
            let position = line
                .strip_prefix("event ")
                .ok_or_else(|| format!("expected `event POS`, got {line:?}"))?;
            rest.push(position.parse()?);
        }
        Ok(rest)
    }

    fn finish_appender(mut self, last: u64) -> TestResult {
        assert_eq!(self.line()?, format!("appended {last}"));
        assert_eq!(self.line()?, "done");
        assert!(self.child.wait()?.success());
        Ok(())
    }
}

/// Issue 16's acceptance: one process appends 10,000 events while another
/// follows from position 0; the follower receives every position exactly
/// once, in order. Then, while 10,000 more are appended, a follower is
/// SIGKILLed at points spread over its run and restarted from its
/// checkpoint each time: every restart begins at or before the first
/// position its predecessor had not printed, never after the last one it
/// stored, and the union covers every position in order.
#[test]
fn a_follower_in_another_process_gets_every_event_once_and_resumes_after_sigkill() -> TestResult {
    let dir = tempfile::tempdir()?;
    let database = dir.path().join("sandlog.db");
    drop(EventStore::open(&database, OpenOptions::default())?);

    // Live, exactly once, in order.
    let mut follower = Running::spawn(&["follow", "live"], &database)?;
    assert_eq!(follower.start()?, 0);
    let appender = Running::spawn(&["append", &EVENTS.to_string()], &database)?;
    for expected in 1..=EVENTS {
        assert_eq!(follower.event()?, expected);
    }
    appender.finish_appender(EVENTS)?;
    // Nothing more, and nothing twice.
    std::thread::sleep(sandlog_sqlite::SUBSCRIBE_POLL * 3);
    assert!(
        follower.lines.try_recv().is_err(),
        "the follower printed past the log's end"
    );
    follower.kill()?;

    // Killed and resumed while the log grows.
    let total = EVENTS * 2;
    let appender = Running::spawn(&["append", &EVENTS.to_string()], &database)?;
    let store = EventStore::open(&database, OpenOptions::default())?;
    let name = "resumed";
    // Kill after this many events of each run, then let the last run end
    // the log.
    let kill_after = [1, 2_500, 4_000, 3_333, 7];
    let mut printed: Vec<u64> = Vec::new();
    let mut last_stored = 0;
    let mut redelivered = 0u64;
    for run in 0..=kill_after.len() {
        let mut follower = Running::spawn(&["follow", name], &database)?;
        let from = follower.start()?;
        let printed_last = printed.last().copied().unwrap_or(0);
        // At least once: not after the first position not yet printed...
        assert!(
            from <= printed_last,
            "run {run} resumed after {from}, past {printed_last}"
        );
        // ...and the checkpoint never moves back.
        assert!(
            from >= last_stored,
            "run {run}: checkpoint {from} < {last_stored}"
        );
        // What is delivered again is at most one page (the subscription
        // stores its progress each time it reads the log).
        assert!(printed_last - from <= PAGE_EVENTS as u64);
        redelivered += printed_last - from;
        last_stored = from;
        let budget = kill_after.get(run).copied();
        let mut expected = from + 1;
        let mut record = |position: u64| {
            assert_eq!(position, expected, "run {run}: out of order or a gap");
            if position > printed.last().copied().unwrap_or(0) {
                printed.push(position);
            }
            expected += 1;
        };
        loop {
            let position = follower.event()?;
            record(position);
            let done_in_run = position - from;
            if budget == Some(done_in_run) || (budget.is_none() && position == total) {
                break;
            }
        }
        for position in follower.kill_and_drain()? {
            record(position);
        }
        // Where the killed follower got: never past what it printed.
        let stored = store
            .consumer_checkpoint(name)?
            .map_or(0, |position| position.0);
        let printed_last = printed.last().copied().unwrap_or(0);
        assert!(
            stored <= printed_last,
            "run {run}: stored {stored} past printed {printed_last}"
        );
        assert!(stored >= last_stored);
    }
    appender.finish_appender(total)?;
    assert_eq!(printed, (1..=total).collect::<Vec<_>>());
    println!(
        "subscription: {total} positions over {} runs, {redelivered} delivered again after kills",
        kill_after.len() + 1
    );
    Ok(())
}
