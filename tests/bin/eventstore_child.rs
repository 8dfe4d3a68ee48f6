//! A writer process for the multi-process eventstore test (`it::eventstore`).
//!
//! Usage: `eventstore-child DB RACE_STREAM SHARED_STREAM N_SHARED N_OWN`
//!
//! Opens the store at `DB` (default options: `synchronous=FULL`, the default
//! busy timeout), prints `ready`, and waits for one line on stdin so that
//! every child starts appending at the same moment. Then it:
//!
//! 1. appends one event to `RACE_STREAM` expecting `NoStream` (of several
//!    children exactly one can win; the others must see a conflict),
//! 2. appends `N_SHARED` events to `SHARED_STREAM`, each with
//!    `Exact(version just read)` after a millisecond's "decision",
//!    retrying on a version conflict (the very first attempt uses the
//!    version read before the start line, so every child but the first to
//!    append must conflict at least once), and
//! 3. interleaved with those, appends `N_OWN` events to a fresh session
//!    stream of its own with `Exact`, where a conflict would be a bug.
//!
//! It prints one line per outcome, which the test parses:
//!
//! * `ack EVENT_ID STREAM POSITION`: an append returned this envelope;
//! * `conflict STREAM EXPECTED ACTUAL`: a `VersionConflict`, with EXPECTED
//!   `no-stream`, `any` or `exact:N` and ACTUAL `none` or `N`;
//! * `done` at the end.
//!
//! Any other error ends the process with a non-zero status.

use std::error::Error;
use std::io::{BufRead, Write};
use std::path::PathBuf;

use sandlog_core::{EventId, NewEvent, SessionId, StreamId, StreamVersion};
use sandlog_eventstore::{EventStoreError, ExpectedVersion};
use sandlog_sqlite::{EventStore, OpenOptions};

/// Most conflicts one shared append may meet before the child gives up:
/// with a handful of writers each conflict means another writer made
/// progress, so hitting this means something is stuck, not busy.
const RETRIES_MAX: u32 = 10_000;

/// Time between reading the shared stream's version and appending: a
/// command handler's read-decide-append takes a moment, and that moment is
/// the window in which another writer can get in first.
const DECIDE_PAUSE: std::time::Duration = std::time::Duration::from_millis(1);

struct Arguments {
    database: PathBuf,
    race_stream: StreamId,
    shared_stream: StreamId,
    n_shared: u64,
    n_own: u64,
}

fn parse_arguments() -> Result<Arguments, Box<dyn Error>> {
    let mut arguments = std::env::args_os().skip(1);
    let mut next = |name: &str| {
        arguments
            .next()
            .ok_or_else(|| format!("missing argument {name}"))
    };
    let database = PathBuf::from(next("DB")?);
    let race_stream = StreamId::parse(&next("RACE_STREAM")?.to_string_lossy())?;
    let shared_stream = StreamId::parse(&next("SHARED_STREAM")?.to_string_lossy())?;
    let n_shared = next("N_SHARED")?.to_string_lossy().parse()?;
    let n_own = next("N_OWN")?.to_string_lossy().parse()?;
    Ok(Arguments {
        database,
        race_stream,
        shared_stream,
        n_shared,
        n_own,
    })
}

fn event(kind: &str, n: u64) -> NewEvent {
    NewEvent {
        event_id: EventId::now(),
        kind: kind.to_owned(),
        schema: 1,
        actor: format!("api:child-{}", std::process::id()),
        correlation_id: None,
        causation_id: None,
        payload: format!(r#"{{"n":{n},"pid":{}}}"#, std::process::id()).into_bytes(),
    }
}

fn expected_text(expected: ExpectedVersion) -> String {
    match expected {
        ExpectedVersion::Any => "any".to_owned(),
        ExpectedVersion::NoStream => "no-stream".to_owned(),
        ExpectedVersion::Exact(version) => format!("exact:{version}"),
    }
}

fn expectation(version: Option<StreamVersion>) -> ExpectedVersion {
    version.map_or(ExpectedVersion::NoStream, ExpectedVersion::Exact)
}

/// What one append attempt came to.
enum Attempt {
    Acknowledged,
    Conflict,
}

fn attempt(
    store: &EventStore,
    out: &mut impl Write,
    stream: StreamId,
    expected: ExpectedVersion,
    event: &NewEvent,
) -> Result<Attempt, Box<dyn Error>> {
    match store.append(stream, expected, std::slice::from_ref(event)) {
        Ok(envelopes) => {
            for envelope in envelopes {
                writeln!(
                    out,
                    "ack {} {} {}",
                    envelope.event_id, envelope.stream, envelope.position
                )?;
            }
            Ok(Attempt::Acknowledged)
        }
        Err(EventStoreError::VersionConflict {
            stream,
            expected,
            actual,
        }) => {
            let actual = actual.map_or("none".to_owned(), |version| version.to_string());
            writeln!(
                out,
                "conflict {stream} {} {actual}",
                expected_text(expected)
            )?;
            Ok(Attempt::Conflict)
        }
        Err(error) => Err(error.into()),
    }
}

fn run() -> Result<(), Box<dyn Error>> {
    let arguments = parse_arguments()?;
    let store = EventStore::open(&arguments.database, OpenOptions::default())?;
    let own_stream = StreamId::Session(SessionId::new_v4());
    // Read before the start line, and used for the first shared append: by
    // then it is stale for every child but the first to append, so those
    // must conflict whatever the scheduling.
    let mut read_before_start = Some(store.stream_version(arguments.shared_stream)?);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    writeln!(out, "ready")?;
    out.flush()?;
    let mut go = String::new();
    std::io::stdin().lock().read_line(&mut go)?;

    let race_event = event("race.entered", 0);
    attempt(
        &store,
        &mut out,
        arguments.race_stream,
        ExpectedVersion::NoStream,
        &race_event,
    )?;

    let mut own_version = None;
    for n in 0..arguments.n_shared.max(arguments.n_own) {
        if n < arguments.n_shared {
            let shared_event = event("shared.appended", n);
            let mut conflicts = 0;
            loop {
                let version = match read_before_start.take() {
                    Some(version) => version,
                    None => {
                        let version = store.stream_version(arguments.shared_stream)?;
                        std::thread::sleep(DECIDE_PAUSE);
                        version
                    }
                };
                match attempt(
                    &store,
                    &mut out,
                    arguments.shared_stream,
                    expectation(version),
                    &shared_event,
                )? {
                    Attempt::Acknowledged => break,
                    Attempt::Conflict => {
                        conflicts += 1;
                        if conflicts >= RETRIES_MAX {
                            return Err(format!("{RETRIES_MAX} conflicts in a row").into());
                        }
                    }
                }
            }
        }
        if n < arguments.n_own {
            let own_event = event("own.appended", n);
            match attempt(
                &store,
                &mut out,
                own_stream,
                expectation(own_version),
                &own_event,
            )? {
                Attempt::Acknowledged => own_version = Some(own_version.unwrap_or_default().next()),
                Attempt::Conflict => {
                    return Err(format!(
                        "conflict on {own_stream}, which only this process writes"
                    )
                    .into());
                }
            }
        }
    }
    writeln!(out, "done")?;
    out.flush()?;
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    run()
}
